//! The attached form that is a device: a GPU node the container gets, by
//! its number (core::device_table), through `linux.devices`, a bind mount
//! or a device cgroup rule (core::device_access); and, as before numbers
//! were read, any `/dev/nvidia*` path. A node of NVIDIA's GPU class names
//! the GPU with that minor number (`minor:N`, resolved against the host's
//! `minor_number`s); the shared nodes name none; a rule for every minor
//! names every GPU. AMD's nodes are recorded in `amd_signals`, and which
//! they are in [`AmdNodes`]: `/dev/kfd` opens no GPU by itself (amdkfd
//! gives a process the GPUs whose render node it may open: ROCR-Runtime
//! libhsakmt `hsaKmtOpenKFD` then opens `/dev/dri/renderD<drm_render_minor>`
//! per KFD node and leaves out a GPU whose node it cannot open), so the
//! render nodes, by minor, say which GPUs the container gets.

use super::{Detection, Signal};
use crate::core::container::{Container, DeviceNode, MountSource};
use crate::core::device_access::{node_source, rule_grants};
use crate::core::device_table::{class_of, DeviceClass, HostMajors, Role, Vendor};
use std::collections::HashSet;

/// A DRM render node the container gets, by number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderNode {
    /// Its minor: the AMD GPU whose KFD node has this `drm_render_minor`.
    pub minor: u32,
    /// How the spec gives it, for messages (`/dev/dri/r1 (c 226:129)`).
    pub shown: String,
}

/// AMD's nodes a container gets, beside the signals.
#[derive(Clone, Debug, Default)]
pub struct AmdNodes {
    /// The render nodes, each minor once, in the order first given.
    pub render: Vec<RenderNode>,
    /// A device cgroup rule gives every render node (`c 226:* rwm`).
    pub all_render: bool,
    /// `/dev/kfd` (amdkfd's major), by node, mount or rule.
    pub kfd: bool,
    /// Minors in `render`: a spec of 100,000 nodes must not cost
    /// 100,000² comparisons.
    minors: HashSet<u32>,
}

impl AmdNodes {
    fn add(&mut self, class: &DeviceClass, minor: Option<u32>, shown: String) {
        match (class.role, minor) {
            (Role::Compute, _) => self.kfd = true,
            (Role::Render, None) => self.all_render = true,
            (Role::Render, Some(m)) if self.minors.insert(m) => {
                self.render.push(RenderNode { minor: m, shown });
            }
            _ => {}
        }
    }
}

/// amdkfd's node (linux drivers/gpu/drm/amd/amdkfd/kfd_chardev.c,
/// `kfd_device_name`).
const KFD_PATH: &str = "/dev/kfd";

/// Whether judging `c`'s device signals reads the host's majors: it has
/// nodes in `linux.devices`, a bind mount of a host character device, or
/// device cgroup rules and a way to make or reach nodes
/// ([`crate::core::device_access::rule_grants`]). Any other container is
/// judged without them, so its start does not read `/proc/devices`.
pub fn reads_host_majors(c: &Container) -> bool {
    !c.devices.is_empty()
        || !c.device_nodes.is_empty()
        || c.mounts
            .iter()
            .any(|m| matches!(m.host, Some(MountSource::CharDevice { .. })))
        || (!c.device_rules.is_empty() && crate::core::device_access::node_source(c).is_some())
}

/// Every device signal of `c` on a host with `majors`.
pub(super) fn signals(c: &Container, majors: &HostMajors, d: &mut Detection) {
    node_signals(c, majors, d);
    mount_signals(c, majors, d);
    rule_signals(c, majors, d);
}

/// The class of a character device number, if a GPU vendor's.
fn char_class(
    kind: &str,
    major: i64,
    minor: i64,
    majors: &HostMajors,
) -> Option<&'static DeviceClass> {
    if !matches!(kind, "c" | "u") {
        return None;
    }
    class_of(
        u32::try_from(major).ok()?,
        u32::try_from(minor).ok()?,
        majors,
    )
}

/// Records a GPU vendor's node: NVIDIA's make a GPU container (its GPU
/// class names the GPU by minor), AMD's are noted.
struct Node<'a> {
    class: &'static DeviceClass,
    major: u32,
    minor: u32,
    path: &'a str,
}

fn record(d: &mut Detection, node: Node, signal: Signal, via: &str) {
    let Node {
        class,
        major,
        minor,
        path,
    } = node;
    if class.vendor != Vendor::Nvidia {
        d.amd_signals.push(signal);
        let shown = format!("{path} (c {major}:{minor})");
        d.amd_nodes.add(class, Some(minor), shown);
        return;
    }
    d.gpu = true;
    d.signals.push(signal);
    if class.role == Role::Gpu {
        // A renamed node is shown with its number: `/dev/g0 (c 195:0)`.
        let canonical = format!("/dev/nvidia{minor}");
        let written = (path != canonical).then(|| format!("{path} (c {major}:{minor})"));
        d.add(&format!("minor:{minor}"), via, written.as_deref());
    }
}

/// `/dev/nvidiaN` names the GPU with minor number N; nvidiactl,
/// nvidia-uvm, nvidia-caps/* are shared control nodes that name no GPU.
fn add_minor_by_name(d: &mut Detection, path: &str, via: &str) {
    let Some(node) = path.strip_prefix("/dev/nvidia") else {
        return;
    };
    if !node.is_empty() && node.bytes().all(|b| b.is_ascii_digit()) {
        d.add(&format!("minor:{node}"), via, None);
    }
}

/// Nodes in `linux.devices`: by number; a `/dev/nvidia*` path whose
/// numbers name no GPU device (or a view built without numbers) still
/// counts, by name, and so does `/dev/kfd`: amdkfd's major is dynamic,
/// and a host (or a `check` run elsewhere) without amdkfd registered
/// cannot tell it by number.
fn node_signals(c: &Container, majors: &HostMajors, d: &mut Detection) {
    let by_name = |d: &mut Detection, path: &str| {
        if path.starts_with("/dev/nvidia") {
            d.gpu = true;
            d.signals.push(Signal::DeviceNode(path.to_string()));
            add_minor_by_name(d, path, "linux.devices");
        } else if path == KFD_PATH {
            d.amd_signals.push(Signal::DeviceNode(path.to_string()));
            d.amd_nodes.kfd = true;
        }
    };
    if c.device_nodes.is_empty() {
        for path in &c.devices {
            by_name(d, path);
        }
        return;
    }
    for n in &c.device_nodes {
        match char_class(&n.kind, n.major, n.minor, majors) {
            Some(class) => {
                let signal = Signal::DeviceNode(describe_node(n, class));
                let node = Node {
                    class,
                    major: n.major as u32,
                    minor: n.minor as u32,
                    path: &n.path,
                };
                record(d, node, signal, "linux.devices");
            }
            None => by_name(d, &n.path),
        }
    }
}

fn describe_node(n: &DeviceNode, class: &DeviceClass) -> String {
    format!(
        "{} (c {}:{}, {} {})",
        n.path,
        n.major,
        n.minor,
        class.vendor.name(),
        class.nodes
    )
}

/// GPU devices bind-mounted: the host's node by number when the caller
/// looked at it (`Mount::host`), else a `/dev/nvidia*` source or
/// destination (`-v /dev/nvidia0:/dev/nvidia0`): the container has the
/// node as surely as through `linux.devices`.
fn mount_signals(c: &Container, majors: &HostMajors, d: &mut Detection) {
    for m in &c.mounts {
        let shown = if m.destination.is_empty() {
            &m.source
        } else {
            &m.destination
        };
        if let Some(MountSource::CharDevice { major, minor }) = m.host {
            if let Some(class) = class_of(major, minor, majors) {
                let signal = Signal::DeviceMount(format!(
                    "{shown} (host node {} c {major}:{minor}, {} {})",
                    m.source,
                    class.vendor.name(),
                    class.nodes
                ));
                let node = Node {
                    class,
                    major,
                    minor,
                    path: shown,
                };
                record(d, node, signal, "mounts");
                continue;
            }
        }
        let path = if m.destination.starts_with("/dev/nvidia") {
            &m.destination
        } else if m.source.starts_with("/dev/nvidia") {
            &m.source
        } else {
            continue;
        };
        d.gpu = true;
        d.signals.push(Signal::DeviceMount(path.clone()));
        add_minor_by_name(d, path, "mounts");
    }
}

/// Device cgroup rules that let the container open GPU nodes it can
/// create or reach.
fn rule_signals(c: &Container, majors: &HostMajors, d: &mut Detection) {
    let grants = rule_grants(c, majors);
    let Some(source) = grants.first().and(node_source(c)) else {
        return;
    };
    for g in grants {
        let signal = Signal::DeviceRule(format!("{} with {source}", g.describe()));
        if g.class.vendor != Vendor::Nvidia {
            let shown = format!("device cgroup rule c {}:{}", g.major, g.minor.unwrap_or(0));
            d.amd_nodes.add(g.class, g.minor, shown);
            d.amd_signals.push(signal);
            continue;
        }
        d.gpu = true;
        d.signals.push(signal);
        if g.class.role != Role::Gpu {
            continue;
        }
        match g.minor {
            Some(m) => {
                let written = format!("c {}:{m}", g.major);
                d.add(
                    &format!("minor:{m}"),
                    "linux.resources.devices",
                    Some(&written),
                );
            }
            None => d.request.all = true,
        }
    }
}
