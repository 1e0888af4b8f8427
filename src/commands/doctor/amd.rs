//! doctor's checks of an AMD host: the amdgpu kernel module, the GPUs KFD
//! lists, and the device nodes ROCm opens (`/dev/kfd`, each GPU's
//! `/dev/dri/renderD<minor>`), read under `--host-root` as `gpu-guard host`
//! reads them (host::kfd) and judged by core::amd::nodes. Run only where
//! the host has AMD GPUs (KFD GPU nodes, or AMD GPUs in the facts file) or
//! a `/dev/kfd` node: an NVIDIA-only node gets none of them.

use super::{Check, Node};
use crate::core::facts::{Gpu, HostFacts, Vendor};
use crate::host::kfd::{self, AmdHost};
use std::path::{Path, PathBuf};

/// What the AMD checks read of the node.
pub struct AmdNode {
    host: AmdHost,
    /// The GPUs judged: KFD's, else the facts file's AMD GPUs.
    gpus: Vec<Gpu>,
    dev: PathBuf,
    devices: Option<PathBuf>,
    group: PathBuf,
    kfd_node: bool,
}

impl AmdNode {
    /// Reads the node's amdgpu driver, KFD topology and `/dev/kfd`; the
    /// facts (a facts file) may add AMD GPUs KFD does not show.
    pub fn read(node: &Node, facts: Option<&HostFacts>) -> AmdNode {
        let paths = crate::host::ProbePaths::from_env();
        let (root, dev, devices, group) = if node.host_root != Path::new("/") {
            (
                node.host_root.clone(),
                node.fs(Path::new("/dev")),
                Some(node.fs(Path::new("/proc/devices"))),
                node.fs(Path::new("/etc/group")),
            )
        } else {
            (
                paths.host_root,
                paths.dev,
                paths.devices,
                PathBuf::from("/etc/group"),
            )
        };
        let host = kfd::read(&root);
        let mut gpus = host.gpus.clone();
        if gpus.is_empty() {
            gpus = facts
                .map(|f| {
                    f.gpus
                        .iter()
                        .filter(|g| g.vendor == Vendor::Amd)
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
        }
        let kfd_node = std::fs::symlink_metadata(dev.join("kfd")).is_ok();
        AmdNode {
            host,
            gpus,
            dev,
            devices,
            group,
            kfd_node,
        }
    }

    /// Whether this is an AMD host at all.
    pub fn present(&self) -> bool {
        !self.gpus.is_empty() || self.kfd_node
    }

    /// Whether the host has AMD GPUs.
    pub fn has_gpus(&self) -> bool {
        !self.gpus.is_empty()
    }

    /// The checks: `host.amd.driver`, `host.amd.gpus`, `host.amd.device-nodes`.
    pub fn checks(&self) -> Vec<Check> {
        if !self.present() {
            return Vec::new();
        }
        vec![self.driver(), self.gpus_check(), self.device_nodes()]
    }

    fn driver(&self) -> Check {
        match &self.host.driver_version {
            Some(v) => Check::ok(
                "host.amd.driver",
                format!("amdgpu driver {v} is loaded (/sys/module/amdgpu)"),
            ),
            None => Check::error(
                "host.amd.driver",
                "the amdgpu kernel module is not loaded (no /sys/module/amdgpu): ROCm containers find no GPU",
                "load it (`modprobe amdgpu`) or install AMD's driver (`amdgpu-install --usecase=dkms`); `dmesg | grep -i amdgpu` says why it did not load",
            ),
        }
    }

    fn gpus_check(&self) -> Check {
        let problems = self.host.problems.join("; ");
        if self.gpus.is_empty() {
            let why = if problems.is_empty() {
                String::new()
            } else {
                format!(" ({problems})")
            };
            return Check::error(
                "host.amd.gpus",
                format!("/dev/kfd exists but KFD lists no GPU (/sys/class/kfd/kfd/topology/nodes){why}: every AMD GPU container is refused"),
                "check `dmesg | grep -i -e amdgpu -e kfd` (a GPU the driver does not support, or one passed through to a VM, is not KFD's)",
            );
        }
        let each: Vec<String> = self
            .gpus
            .iter()
            .take(8)
            .map(|g| {
                let target = g.target_id.as_deref().unwrap_or("unknown target");
                format!("{}: {} ({target})", g.index, g.name)
            })
            .collect();
        let n = self.gpus.len();
        let more = n.saturating_sub(8);
        let line = format!(
            "{n} AMD GPU{}: {}{}",
            if n == 1 { "" } else { "s" },
            each.join(", "),
            if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            }
        );
        if problems.is_empty() {
            Check::ok("host.amd.gpus", line)
        } else {
            Check::warning(
                "host.amd.gpus",
                format!("{line}; {problems}"),
                "check the amdgpu driver (`dmesg | grep -i amdgpu`); gpu-guard reads the KFD topology as root",
            )
        }
    }

    fn device_nodes(&self) -> Check {
        let renders: Vec<String> = self
            .gpus
            .iter()
            .filter_map(|g| g.render_node.clone())
            .collect();
        let nodes = crate::host::devnodes::read_amd(
            &self.dev,
            self.devices.as_deref(),
            &renders,
            &self.group,
        );
        let problems = crate::core::amd::nodes::host_problems(&nodes);
        if problems.is_empty() {
            let names: Vec<&str> = nodes.iter().map(|n| n.path.as_str()).collect();
            return Check::ok(
                "host.amd.device-nodes",
                format!(
                    "{} are character devices of amdkfd's and DRM's majors that group render or video can open",
                    names.join(", ")
                ),
            );
        }
        let msg: Vec<&str> = problems.iter().map(|(_, m, _)| m.as_str()).collect();
        let mut fixes: Vec<&str> = problems.iter().map(|(_, _, f)| f.as_str()).collect();
        fixes.dedup();
        if problems.iter().any(|(e, _, _)| *e) {
            Check::error("host.amd.device-nodes", msg.join("; "), fixes.join("; "))
        } else {
            Check::warning("host.amd.device-nodes", msg.join("; "), fixes.join("; "))
        }
    }
}
