//! Each GPU's NUMA node and local CPUs, from sysfs (under `--host-root` or
//! the test hook's stand-in, [`super::ProbePaths::sys`]):
//!
//! - `bus/pci/devices/<bus id>/numa_node`: the node, `-1` when the kernel
//!   knows none (drivers/pci/pci-sysfs.c `numa_node_show`);
//! - `bus/pci/devices/<bus id>/local_cpulist`: the CPUs of that node in
//!   cpulist syntax (pci-sysfs.c `local_cpulist_show`);
//! - `devices/system/cpu/online` and `devices/system/node/has_memory`: the
//!   CPUs and memory nodes a cpuset may name (pinning, core::tuning::numa).
//!
//! The kernel spells a bus id `0000:3b:00.0` (lowercase, a 4-digit
//! domain: drivers/pci/probe.c `pci_setup_device`, "%04x:%02x:%02x.%d");
//! NVML spells it `00000000:3B:00.0` (nvml.h NVML_DEVICE_PCI_BUS_ID_FMT).

use std::path::Path;

use crate::core::cpulist::CpuList;
use crate::core::facts::HostFacts;

/// sysfs attribute files are one page at most.
const MAX_ATTR: u64 = 64 << 10;

/// NVML's (or /proc's, or the kernel's own) spelling of a PCI address as
/// the kernel names its sysfs directory; None when it is not one (nothing
/// but hex digits reaches a path).
pub fn kernel_bus_id(id: &str) -> Option<String> {
    let mut parts = id.trim().split(':');
    let (domain, bus, rest) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (dev, func) = rest.split_once('.')?;
    let hex = |s: &str, max_len: usize| {
        (!s.is_empty() && s.len() <= max_len && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
    };
    let domain = hex(domain, 8)?;
    let bus = hex(bus, 2)?;
    let dev = hex(dev, 2).filter(|d| *d < 32)?;
    let func = hex(func, 1).filter(|f| *f < 8)?;
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func}"))
}

fn attr(path: &Path) -> Option<String> {
    crate::sys::fsutil::read_to_string_limited(path, MAX_ATTR).ok()
}

/// The NUMA node and local CPUs of the PCI device at `bus_id`; None when
/// sysfs has no such device. The node is None for `-1`, the CPUs None when
/// `local_cpulist` is missing or not a cpulist.
pub fn read_device(sys: &Path, bus_id: &str) -> Option<(Option<u32>, Option<String>)> {
    let dir = sys.join("bus/pci/devices").join(kernel_bus_id(bus_id)?);
    let node_text = attr(&dir.join("numa_node"))?;
    let node = node_text
        .trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok());
    let cpus = attr(&dir.join("local_cpulist"))
        .and_then(|t| CpuList::parse(&t).ok())
        .map(|l| l.to_string());
    Some((node, cpus))
}

/// Fills `numa_node` and `local_cpus` of every GPU with a bus id sysfs
/// knows; the others stay unknown (absent from the facts).
pub fn fill(facts: &mut HostFacts, sys: &Path) {
    for g in &mut facts.gpus {
        let Some(bus) = g.pci_bus_id.as_deref() else {
            continue;
        };
        if let Some((node, cpus)) = read_device(sys, bus) {
            g.numa_node = Some(node);
            g.local_cpus = cpus;
        }
    }
}

/// What a cpuset may name on this host: the CPUs online and the nodes
/// with memory (None: unknown, e.g. a kernel without NUMA).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpusetLimits {
    pub online_cpus: Option<CpuList>,
    pub memory_nodes: Option<CpuList>,
}

pub fn cpuset_limits(sys: &Path) -> CpusetLimits {
    let list = |rel: &str| attr(&sys.join(rel)).and_then(|t| CpuList::parse(&t).ok());
    CpusetLimits {
        online_cpus: list("devices/system/cpu/online"),
        memory_nodes: list("devices/system/node/has_memory"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_as_the_kernel_spells_them() {
        for (nvml, kernel) in [
            ("00000000:3B:00.0", Some("0000:3b:00.0")),
            ("0000:3b:00.0", Some("0000:3b:00.0")),
            ("00010000:C1:1F.7", Some("10000:c1:1f.7")),
            ("3B:00.0", None),
            ("0000:3b:00.8", None),
            ("0000:3b:20.0", None),
            ("0000:../00.0", None),
            ("00000000:3B:00.0:1", None),
        ] {
            assert_eq!(kernel_bus_id(nvml).as_deref(), kernel, "{nvml}");
        }
    }

    #[test]
    fn reads_a_sysfs_tree() {
        let d = std::env::temp_dir().join(format!("gg-topo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let dev = d.join("bus/pci/devices/0000:3b:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("numa_node"), "1\n").unwrap();
        std::fs::write(dev.join("local_cpulist"), "16-31,48-63\n").unwrap();
        let other = d.join("bus/pci/devices/0000:07:00.0");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("numa_node"), "-1\n").unwrap();
        std::fs::write(other.join("local_cpulist"), "0-63\n").unwrap();
        let mut f = HostFacts {
            driver_version: Some("550.54.14".into()),
            cuda_driver_version: None,
            gpus: ["00000000:3B:00.0", "00000000:07:00.0", "00000000:99:00.0"]
                .iter()
                .enumerate()
                .map(|(i, b)| crate::core::facts::Gpu {
                    index: i as u32,
                    pci_bus_id: Some(b.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..HostFacts::default()
        };
        fill(&mut f, &d);
        assert_eq!(f.gpus[0].numa_node, Some(Some(1)));
        assert_eq!(f.gpus[0].local_cpus.as_deref(), Some("16-31,48-63"));
        assert_eq!(f.gpus[1].numa_node, Some(None));
        assert_eq!(f.gpus[2].numa_node, None);
        assert_eq!(f.gpus[2].local_cpus, None);
        std::fs::create_dir_all(d.join("devices/system/cpu")).unwrap();
        std::fs::write(d.join("devices/system/cpu/online"), "0-63\n").unwrap();
        let l = cpuset_limits(&d);
        assert_eq!(l.online_cpus.unwrap().to_string(), "0-63");
        assert_eq!(l.memory_nodes, None);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
