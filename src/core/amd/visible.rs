//! Which of the host's AMD GPUs a container gets: the one function that
//! says so ([`amd_gpus`]), so that a finer rule (render nodes mapped to
//! KFD nodes through `drm_render_minor`) changes it in one place.
//!
//! The rule here: a container with AMD signals (core::detect: `/dev/kfd`
//! or render nodes in its spec, CDI devices of kind `amd.com/gpu`, or
//! `AMD_VISIBLE_DEVICES` where GPUs count as attached) gets the GPUs its
//! CDI devices and `AMD_VISIBLE_DEVICES` name, else all of the host's AMD
//! GPUs (`/dev/kfd` opens every GPU the render nodes allow, and
//! `docker run --device=/dev/kfd --device=/dev/dri` passes them all).
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
use crate::core::detect::{Detection, DeviceRef};
use crate::core::facts::{Gpu, HostFacts};

/// The most names of one `AMD_VISIBLE_DEVICES` read, and the widest range.
const MAX_NAMES: usize = 1024;

pub use crate::core::detect::amd_env_request as env_request;

/// A GPU the container names that the host does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdUnknown {
    /// What named it: `AMD_VISIBLE_DEVICES`, or the CDI device as written.
    pub via: String,
    pub name: String,
    /// It is a CDI device (`amd.com/gpu=7`).
    pub cdi: bool,
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
    if det.amd_cdi.is_empty() && env.map_or(true, |v| v == "all") {
        out.gpus = amd;
        return out;
    }
    cdi_gpus(&det.amd_cdi, &amd, &mut out);
    if let Some(list) = env {
        env_gpus(list, &amd, &mut out);
    }
    out
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
                cdi: true,
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
                cdi: false,
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
        assert!(v.unknown.iter().all(|u| u.cdi));
        det.amd_cdi[1].name = "all".into();
        assert_eq!(amd_gpus(&c, &det, &h).gpus.len(), 3);
        assert_eq!(range("3-1"), None);
        assert_eq!(range("0-99999999"), None);
    }
}
