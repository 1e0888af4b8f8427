//! Which of the host's AMD GPUs a container gets: the one function that
//! says so ([`amd_gpus`]), which every judgement of AMD GPUs (code
//! objects, ROCm, health, vendor, placement) takes its GPUs from.
//!
//! The rule here: a container with AMD signals (core::detect: `/dev/kfd`
//! or render nodes in its spec, CDI devices of kind `amd.com/gpu`, or
//! `AMD_VISIBLE_DEVICES` where GPUs count as attached) gets
//! 1. the GPUs its CDI devices and `AMD_VISIBLE_DEVICES` name, where they
//!    name some: they are what the orchestrator chose, and the nodes the
//!    CDI runtime or AMD's runtime injects are those GPUs';
//! 2. else the GPUs of the DRM render nodes it gets, matched by device
//!    number: `/dev/kfd` opens no GPU by itself, ROCR-Runtime's libhsakmt
//!    opens `/dev/dri/renderD<drm_render_minor>` of each KFD node and
//!    leaves out a GPU whose render node the process cannot open
//!    (libhsakmt/src/topology.c, `drm_render_minor`; amdgpu's KFD sets it
//!    from the DRM render minor, linux drivers/gpu/drm/amd/amdkfd/
//!    kfd_topology.c). `docker run --device=/dev/kfd
//!    --device=/dev/dri/renderD129` gets the GPU whose render minor is
//!    129. A render node that is no AMD GPU's on this host (another
//!    vendor's, such as an integrated GPU's in `--device=/dev/dri`, or one
//!    the host lacks) is named in `unknown`;
//! 3. else, `/dev/kfd` alone or a rule for every render node, all of the
//!    host's AMD GPUs (`docker run --device=/dev/kfd --device=/dev/dri`
//!    passes every render node, and so all of them match).
//!
//! - `AMD_VISIBLE_DEVICES` is read as AMD's container runtime reads it
//!   (ROCm/container-toolkit, `internal/amdgpu`: `all`, `none`/`void`,
//!   comma-separated indices, `a-b` ranges, or GPU UUIDs); indices number
//!   the AMD GPUs from 0 in KFD node order, as the host facts do.
//! - A CDI device `amd.com/gpu=N` is the spec's device `N`: `amd-ctk cdi
//!   generate` numbers the GPUs in the order of
//!   `/sys/module/amdgpu/drivers/pci:amdgpu/<bus id>` as Go's
//!   `filepath.Glob` lists them, sorted by name, so by PCI bus id
//!   (internal/amdgpu `GetAMDGPUs`, internal/cdi `GenerateSpec`), and
//!   `amd.com/gpu=all` is every GPU. Any other name is not a device that
//!   tool writes, and is named as one the host does not have.

use crate::core::container::Container;
use crate::core::detect::{Detection, DeviceRef, RenderNode};
use crate::core::facts::{Gpu, HostFacts};
use std::collections::HashSet;

/// The most names of one `AMD_VISIBLE_DEVICES` read, and the widest range.
const MAX_NAMES: usize = 1024;

pub use crate::core::detect::amd_env_request as env_request;

/// How the container named a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// `AMD_VISIBLE_DEVICES`.
    Env,
    /// A CDI device (`amd.com/gpu=7`).
    Cdi,
    /// A DRM render node in its spec, by number.
    RenderNode,
}

/// A GPU the container names that the host does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdUnknown {
    /// What named it: `AMD_VISIBLE_DEVICES`, the CDI device as written, or
    /// the render node as the spec gives it (`/dev/dri/r1 (c 226:131)`).
    pub via: String,
    pub name: String,
    pub how: Named,
}

/// The AMD GPUs a container gets, and the names it asked for that the
/// host does not have.
#[derive(Debug, Default)]
pub struct AmdVisible<'a> {
    pub gpus: Vec<&'a Gpu>,
    pub unknown: Vec<AmdUnknown>,
}

impl<'a> AmdVisible<'a> {
    fn add(&mut self, found: impl IntoIterator<Item = &'a Gpu>) {
        for g in found {
            if !self.gpus.iter().any(|x| std::ptr::eq(*x, g)) {
                self.gpus.push(g);
            }
        }
    }
}

/// The host's AMD GPUs `c` gets (none without AMD signals).
pub fn amd_gpus<'a>(c: &Container, det: &Detection, facts: &'a HostFacts) -> AmdVisible<'a> {
    let mut out = AmdVisible::default();
    if det.amd_signals.is_empty() {
        return out;
    }
    let amd: Vec<&Gpu> = facts.gpus.iter().filter(|g| g.is_amd()).collect();
    let env = env_request(c);
    if !det.amd_cdi.is_empty() || env.is_some_and(|v| v != "all") {
        cdi_gpus(&det.amd_cdi, &amd, &mut out);
        if let Some(list) = env {
            env_gpus(list, &amd, &mut out);
        }
        return out;
    }
    let nodes = &det.amd_nodes;
    if env.is_none() && !nodes.all_render && !nodes.render.is_empty() {
        render_gpus(&nodes.render, &amd, &mut out);
    } else {
        out.gpus = amd;
    }
    out
}

/// The minor of a GPU's render node (`/dev/dri/renderD128`: 128).
pub fn render_minor(g: &Gpu) -> Option<u32> {
    let m = g.render_node.as_deref()?.strip_prefix("/dev/dri/renderD")?;
    (!m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
        .then(|| m.parse().ok())
        .flatten()
}

/// The GPUs of the render nodes `nodes`, in KFD order, and the nodes that
/// are no AMD GPU's. Host facts that give no GPU a render node (a facts
/// file written without them) cannot say which: then every GPU.
fn render_gpus<'a>(nodes: &[RenderNode], amd: &[&'a Gpu], out: &mut AmdVisible<'a>) {
    let minors: Vec<Option<u32>> = amd.iter().map(|g| render_minor(g)).collect();
    if minors.iter().all(Option::is_none) {
        out.add(amd.iter().copied());
        return;
    }
    let given: HashSet<u32> = nodes.iter().map(|n| n.minor).collect();
    out.add(
        amd.iter()
            .zip(&minors)
            .filter(|(_, m)| m.is_some_and(|m| given.contains(&m)))
            .map(|(g, _)| *g),
    );
    let known: HashSet<u32> = minors.into_iter().flatten().collect();
    for n in nodes
        .iter()
        .filter(|n| !known.contains(&n.minor))
        .take(MAX_NAMES)
    {
        out.unknown.push(AmdUnknown {
            via: n.shown.clone(),
            name: format!("/dev/dri/renderD{}", n.minor),
            how: Named::RenderNode,
        });
    }
}

/// The GPUs of AMD CDI devices, in amd-ctk's numbering.
fn cdi_gpus<'a>(devices: &[DeviceRef], amd: &[&'a Gpu], out: &mut AmdVisible<'a>) {
    let mut by_bus: Vec<&Gpu> = amd.to_vec();
    // amd-ctk's order is the PCI bus ids'; without them, KFD's.
    if by_bus.iter().all(|g| g.pci_bus_id.is_some()) {
        by_bus.sort_by(|a, b| a.pci_bus_id.cmp(&b.pci_bus_id));
    }
    for d in devices.iter().take(MAX_NAMES) {
        if d.name == "all" {
            out.add(amd.iter().copied());
            continue;
        }
        let n = (d.name.bytes().all(|b| b.is_ascii_digit()))
            .then(|| d.name.parse::<usize>().ok())
            .flatten();
        match n.and_then(|n| by_bus.get(n)) {
            Some(g) => out.add([*g]),
            None => out.unknown.push(AmdUnknown {
                via: d.written.clone().unwrap_or_else(|| d.name.clone()),
                name: d.name.clone(),
                how: Named::Cdi,
            }),
        }
    }
}

/// The GPUs `AMD_VISIBLE_DEVICES` names.
fn env_gpus<'a>(list: &str, amd: &[&'a Gpu], out: &mut AmdVisible<'a>) {
    for name in list
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .take(MAX_NAMES)
    {
        if name == "all" {
            out.add(amd.iter().copied());
            continue;
        }
        let found: Vec<&Gpu> = match range(name) {
            Some((a, b)) => amd
                .iter()
                .copied()
                .filter(|g| g.index >= a && g.index <= b)
                .collect(),
            None => amd
                .iter()
                .copied()
                .filter(|g| !g.uuid.is_empty() && g.uuid.eq_ignore_ascii_case(name))
                .collect(),
        };
        if found.is_empty() {
            out.unknown.push(AmdUnknown {
                via: "AMD_VISIBLE_DEVICES".into(),
                name: name.to_string(),
                how: Named::Env,
            });
        }
        out.add(found);
    }
}

/// An index (`2`) or range (`0-3`) as inclusive bounds.
fn range(name: &str) -> Option<(u32, u32)> {
    let num = |s: &str| -> Option<u32> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    };
    match name.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (num(a)?, num(b)?);
            (a <= b && b - a < MAX_NAMES as u32).then_some((a, b))
        }
        None => num(name).map(|n| (n, n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::Env;
    use crate::core::detect::Signal;
    use crate::core::facts::Vendor;

    fn host() -> HostFacts {
        let gpu = |index: u32, vendor: Vendor, uuid: &str| Gpu {
            index,
            vendor,
            uuid: uuid.into(),
            ..Gpu::default()
        };
        HostFacts {
            gpus: vec![
                gpu(0, Vendor::Nvidia, "GPU-nv"),
                gpu(0, Vendor::Amd, "GPU-aaaa"),
                gpu(1, Vendor::Amd, "GPU-bbbb"),
                gpu(2, Vendor::Amd, "GPU-cccc"),
            ],
            ..HostFacts::default()
        }
    }

    fn with(env: &[(&str, &str)]) -> (Container, Detection) {
        let mut e = Env::default();
        for (k, v) in env {
            e.set(k, v);
        }
        let c = Container {
            env: e,
            ..Container::default()
        };
        let mut det = Detection::default();
        det.amd_signals.push(Signal::DeviceNode("/dev/kfd".into()));
        (c, det)
    }

    #[test]
    fn all_amd_gpus_or_those_named() {
        let h = host();
        let uuids = |v: &AmdVisible| v.gpus.iter().map(|g| g.uuid.clone()).collect::<Vec<_>>();
        let (c, det) = with(&[]);
        assert_eq!(
            uuids(&amd_gpus(&c, &det, &h)),
            ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
        );
        let (c, det) = with(&[("AMD_VISIBLE_DEVICES", "2,0-1,GPU-BBBB,7")]);
        let v = amd_gpus(&c, &det, &h);
        assert_eq!(uuids(&v), ["GPU-cccc", "GPU-aaaa", "GPU-bbbb"]);
        let names: Vec<&str> = v.unknown.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["7"]);
        // No AMD signal: none, whatever the env says.
        let (c, _) = with(&[("AMD_VISIBLE_DEVICES", "all")]);
        assert!(amd_gpus(&c, &Detection::default(), &h).gpus.is_empty());
        // CDI devices: amd-ctk numbers GPUs by PCI bus id, not KFD order.
        let mut h = host();
        for (g, bus) in h.gpus[1..]
            .iter_mut()
            .zip(["0000:c1:00.0", "0000:0c:00.0", "0000:22:00.0"])
        {
            g.pci_bus_id = Some(bus.into());
        }
        let (c, mut det) = with(&[]);
        for name in ["0", "9", "x"] {
            det.amd_cdi.push(DeviceRef {
                name: name.into(),
                via: "cdi.k8s.io/a".into(),
                written: Some(format!("amd.com/gpu={name}")),
            });
        }
        let v = amd_gpus(&c, &det, &h);
        assert_eq!(uuids(&v), ["GPU-bbbb"]);
        let via: Vec<&str> = v.unknown.iter().map(|u| u.via.as_str()).collect();
        assert_eq!(via, ["amd.com/gpu=9", "amd.com/gpu=x"]);
        assert!(v.unknown.iter().all(|u| u.how == Named::Cdi));
        det.amd_cdi[1].name = "all".into();
        assert_eq!(amd_gpus(&c, &det, &h).gpus.len(), 3);
        assert_eq!(range("3-1"), None);
        assert_eq!(range("0-99999999"), None);
    }

    #[test]
    fn render_nodes_select_by_their_minor() {
        let mut h = host();
        for (g, minor) in h.gpus[1..].iter_mut().zip([128, 136, 144]) {
            g.render_node = Some(format!("/dev/dri/renderD{minor}"));
        }
        let uuids = |v: &AmdVisible| v.gpus.iter().map(|g| g.uuid.clone()).collect::<Vec<_>>();
        let node = |minor: u32| RenderNode {
            minor,
            shown: format!("/dev/r{minor} (c 226:{minor})"),
        };
        let (c, mut det) = with(&[]);
        det.amd_nodes.render = vec![node(144), node(128), node(131)];
        let v = amd_gpus(&c, &det, &h);
        assert_eq!(uuids(&v), ["GPU-aaaa", "GPU-cccc"], "KFD order");
        assert_eq!(v.unknown.len(), 1);
        assert_eq!(v.unknown[0].how, Named::RenderNode);
        assert_eq!(v.unknown[0].name, "/dev/dri/renderD131");
        assert_eq!(v.unknown[0].via, "/dev/r131 (c 226:131)");
        // A rule for every render node: every GPU.
        det.amd_nodes.all_render = true;
        assert_eq!(amd_gpus(&c, &det, &h).gpus.len(), 3);
        det.amd_nodes.all_render = false;
        // AMD_VISIBLE_DEVICES that selects decides, as CDI devices do.
        let (c2, _) = with(&[("AMD_VISIBLE_DEVICES", "1")]);
        assert_eq!(uuids(&amd_gpus(&c2, &det, &h)), ["GPU-bbbb"]);
        // Facts without render nodes cannot map them: every GPU.
        let bare = host();
        let v = amd_gpus(&c, &det, &bare);
        assert_eq!(v.gpus.len(), 3);
        assert!(v.unknown.is_empty());
        // A hostile render_node in a facts file names no minor.
        h.gpus[1].render_node = Some("/dev/dri/renderD1x".into());
        assert_eq!(render_minor(&h.gpus[1]), None);
        assert_eq!(render_minor(&h.gpus[3]), Some(144));
    }
}
