//! AMD GPUs from the KFD topology, without ROCm on the host: what
//! `/sys/class/kfd/kfd/topology/nodes/<N>/properties` (and `mem_banks/`)
//! and `/sys/module/amdgpu` say, under `--host-root`. Every read is of a
//! small file, bounded; a node that cannot be read is a problem line, never
//! a hang or a guess.
//!
//! - Node properties are `name value` lines (linux
//!   drivers/gpu/drm/amd/amdkfd/kfd_topology.c, `node_show`; ROCR-Runtime
//!   libhsakmt topology.c parses them with `%s %llu`). GPU nodes have
//!   `simd_count > 0`; CPU nodes 0. `local_mem_size` is always 0 there: the
//!   VRAM is the sum of the frame-buffer banks (`mem_banks/<i>/properties`,
//!   `heap_type` 1 public or 2 private, `size_in_bytes`).
//! - The processor is `gfx_target_version` (core::amd::target), the PCI bus
//!   id `domain` and `location_id` (`pci_dev_id`: bus << 8 | devfn), the
//!   render node `/dev/dri/renderD<drm_render_minor>`, the UUID as ROCR
//!   writes it (`GPU-` and `unique_id` in 16 hex digits, amd_gpu_agent.cpp).
//! - SRAM ECC is the capability bit HSA_CAP_SRAM_EDCSUPPORTED 0x04000000
//!   (include/uapi/linux/kfd_sysfs.h); ROCR takes it as the agent's
//!   `sramecc` mode. XNACK is the kernel's process mode
//!   (kfd_process.c, `kfd_process_xnack_mode`): off on GFX10 and later, off
//!   when the GPU's `noretry` is set, else on; gfx90a, gfx94x and gfx950
//!   switch it per process (KFD_SUPPORT_XNACK_PER_PROCESS), so `HSA_XNACK` in
//!   the container decides there (core::amd::fit).
//! - AMD GPUs are numbered in node order from 0, as ROCR enumerates its GPU
//!   agents (the HIP device index, `HIP_VISIBLE_DEVICES`).

use crate::core::amd::target::processor_of_gfx_version;
use crate::core::amd::Feature;
use crate::core::facts::{Gpu, Vendor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The KFD topology nodes, relative to the host root.
pub const TOPOLOGY_NODES: &str = "sys/class/kfd/kfd/topology/nodes";
/// The most topology nodes, and memory banks per node, read.
const MAX_NODES: usize = 1024;
const MAX_BANKS: usize = 64;
/// The most bytes of one sysfs file read (a properties file is under 2 KiB).
const MAX_FILE: u64 = 64 << 10;

/// What the host's amdgpu driver and KFD say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AmdHost {
    pub gpus: Vec<Gpu>,
    /// `/sys/module/amdgpu/version`; `in-tree <release>` for an amdgpu
    /// module without a version of its own; None without amdgpu.
    pub driver_version: Option<String>,
    /// Nodes or files that could not be read, one line each.
    pub problems: Vec<String>,
}

fn read_text(path: &Path) -> Option<String> {
    let bytes = crate::sys::fsutil::read_limited(path, MAX_FILE).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// `name value` lines, as libhsakmt reads them (values decimal u64).
pub fn parse_properties(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (k, v) = (it.next()?, it.next()?);
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// The amdgpu driver's version under `root`.
pub fn driver_version(root: &Path) -> Option<String> {
    let module = root.join("sys/module/amdgpu");
    if let Some(v) = read_text(&module.join("version")) {
        let v = v.trim();
        if !v.is_empty() && v.len() < 64 {
            return Some(v.to_string());
        }
    }
    if !module.is_dir() {
        return None;
    }
    // Built into the kernel's own tree: no module version, the kernel's.
    let release = read_text(&root.join("proc/sys/kernel/osrelease"))
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty() && r.len() < 64)
        .unwrap_or_else(|| "unknown".into());
    Some(format!("in-tree {release}"))
}

/// The `noretry` module parameter (-1: the driver's per-chip default).
fn noretry_param(root: &Path) -> i64 {
    read_text(&root.join("sys/module/amdgpu/parameters/noretry"))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(-1)
}

pub use crate::core::amd::target::{target_of, xnack_per_process, HSA_CAP_SRAM_EDCSUPPORTED};

/// The node numbers under the topology directory, in order.
fn node_numbers(dir: &Path) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut nodes: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .take(MAX_NODES)
        .collect();
    nodes.sort_unstable();
    nodes
}

/// Reads the AMD GPUs and the amdgpu driver under `root` (`/` on the host).
pub fn read(root: &Path) -> AmdHost {
    let mut host = AmdHost {
        driver_version: driver_version(root),
        ..AmdHost::default()
    };
    let dir = root.join(TOPOLOGY_NODES);
    let param = noretry_param(root);
    for n in node_numbers(&dir) {
        let node = dir.join(n.to_string());
        let Some(text) = read_text(&node.join("properties")) else {
            host.problems.push(format!(
                "cannot read KFD topology node {n} ({})",
                node.join("properties").display()
            ));
            continue;
        };
        let p = parse_properties(&text);
        if p.get("simd_count").copied().unwrap_or(0) == 0 {
            continue; // a CPU node
        }
        let index = host.gpus.len() as u32;
        match gpu_of(root, &node, n, &p, param, index) {
            Ok(g) => host.gpus.push(g),
            Err(why) => host.problems.push(format!("KFD topology node {n}: {why}")),
        }
    }
    host
}

/// One GPU node's facts.
fn gpu_of(
    root: &Path,
    node: &Path,
    n: u32,
    p: &BTreeMap<String, u64>,
    noretry_param: i64,
    index: u32,
) -> Result<Gpu, String> {
    let get = |k: &str| p.get(k).copied().unwrap_or(0);
    let version = get("gfx_target_version") as u32;
    let processor = processor_of_gfx_version(version)
        .ok_or_else(|| format!("gfx_target_version {version} names no processor"))?;
    let major = version / 10000;
    let target = target_of(&processor, major, get("capability"), noretry_param);
    let (loc, domain) = (get("location_id"), get("domain"));
    let bus_id = format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        domain,
        (loc >> 8) & 0xff,
        (loc >> 3) & 0x1f,
        loc & 7
    );
    let minor = get("drm_render_minor");
    let simd_per_cu = get("simd_per_cu");
    let unique = get("unique_id");
    Ok(Gpu {
        index,
        uuid: if unique == 0 {
            String::new()
        } else {
            format!("GPU-{unique:016x}")
        },
        name: product_name(root, node, &bus_id, get("device_id"), &processor),
        brand: "unknown".into(),
        memory_mib: vram_mib(node),
        pci_bus_id: Some(bus_id),
        vendor: Vendor::Amd,
        xnack_per_process: xnack_per_process(&processor) && target.xnack != Feature::Any,
        target_id: Some(target.to_string()),
        render_node: (minor > 0).then(|| format!("/dev/dri/renderD{minor}")),
        compute_units: (simd_per_cu > 0).then(|| (get("simd_count") / simd_per_cu) as u32),
        kfd_node: Some(n),
        ..Gpu::default()
    })
}

/// The frame buffer of a GPU node, in MiB: its public and private banks.
fn vram_mib(node: &Path) -> Option<u64> {
    let banks = node.join("mem_banks");
    let mut total = 0u64;
    let mut any = false;
    for b in node_numbers(&banks).into_iter().take(MAX_BANKS) {
        let Some(text) = read_text(&banks.join(b.to_string()).join("properties")) else {
            continue;
        };
        let p = parse_properties(&text);
        // HSA_MEM_HEAP_TYPE_FB_PUBLIC 1, FB_PRIVATE 2 (kfd_topology.h).
        if matches!(p.get("heap_type"), Some(1) | Some(2)) {
            total = total.saturating_add(p.get("size_in_bytes").copied().unwrap_or(0));
            any = true;
        }
    }
    any.then_some(total >> 20)
}

/// The product name: the board's FRU name (`product_name`, amdgpu on
/// Instinct), else libdrm's `amdgpu.ids` entry for the device and revision
/// (what ROCm's tools print), else KFD's ASIC name, else the processor.
fn product_name(root: &Path, node: &Path, bus_id: &str, device: u64, processor: &str) -> String {
    let pci = root.join("sys/bus/pci/devices").join(bus_id);
    let clean = |s: String| {
        let t = s.trim().to_string();
        (!t.is_empty() && t.len() <= 128 && !t.chars().any(char::is_control)).then_some(t)
    };
    if let Some(n) = read_text(&pci.join("product_name")).and_then(clean) {
        return n;
    }
    let revision = read_text(&pci.join("revision"))
        .and_then(|r| u64::from_str_radix(r.trim().trim_start_matches("0x"), 16).ok());
    if let (Some(rev), Some(ids)) = (revision, amdgpu_ids(root)) {
        if let Some(n) = ids_lookup(&ids, device, rev) {
            return n;
        }
    }
    match read_text(&node.join("name")).and_then(clean) {
        Some(asic) if asic != "ip discovery" => format!("AMD {asic} ({processor})"),
        _ => format!("AMD {processor}"),
    }
}

fn amdgpu_ids(root: &Path) -> Option<String> {
    let paths: [PathBuf; 2] = [
        root.join("usr/share/libdrm/amdgpu.ids"),
        root.join("opt/amdgpu/share/libdrm/amdgpu.ids"),
    ];
    paths.iter().find_map(|p| {
        let b = crate::sys::fsutil::read_limited(p, 1 << 20).ok()?;
        Some(String::from_utf8_lossy(&b).into_owned())
    })
}

/// A line `device_id,\trevision_id,\tname` of libdrm's amdgpu.ids (hex ids).
fn ids_lookup(ids: &str, device: u64, revision: u64) -> Option<String> {
    ids.lines().find_map(|l| {
        if l.starts_with('#') {
            return None;
        }
        let mut f = l.splitn(3, ',');
        let d = u64::from_str_radix(f.next()?.trim(), 16).ok()?;
        let r = u64::from_str_radix(f.next()?.trim(), 16).ok()?;
        let name = f.next()?.trim();
        (d == device && r == revision && !name.is_empty() && name.len() <= 128)
            .then(|| name.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_ids_follow_the_kernel_and_rocr() {
        // (processor, major, capability, noretry param, target)
        let cases: &[(&str, u32, u64, i64, &str)] = &[
            ("gfx90a", 9, 0x0400_0000, -1, "gfx90a:sramecc+:xnack-"),
            ("gfx90a", 9, 0, 0, "gfx90a:sramecc-:xnack+"),
            ("gfx942", 9, 0x0400_0000, -1, "gfx942:sramecc+:xnack-"),
            ("gfx908", 9, 0x0400_0000, 1, "gfx908:sramecc+:xnack-"),
            ("gfx900", 9, 0, -1, "gfx900:xnack-"),
            ("gfx90c", 9, 0, -1, "gfx90c:xnack+"),
            ("gfx1010", 10, 0, 0, "gfx1010:xnack-"),
            ("gfx1100", 11, 0x0400_0000, 0, "gfx1100"),
            ("gfx1030", 10, 0, -1, "gfx1030"),
        ];
        for (p, major, cap, nr, want) in cases {
            assert_eq!(target_of(p, *major, *cap, *nr).to_string(), *want, "{p}");
        }
        assert!(xnack_per_process("gfx942"));
        assert!(!xnack_per_process("gfx908"));
    }

    #[test]
    fn properties_and_ids_files() {
        let p = parse_properties(
            "cpu_cores_count 0\nsimd_count 416\ngfx_target_version 90010\nbad\nx y\n",
        );
        assert_eq!(p.get("simd_count"), Some(&416));
        assert_eq!(p.get("gfx_target_version"), Some(&90010));
        assert!(!p.contains_key("x"));
        let ids = "# comment\n740F,\t02,\tAMD Instinct MI210\n744C,\tC8,\tAMD Radeon RX 7900 XTX\n";
        assert_eq!(
            ids_lookup(ids, 0x740f, 2).as_deref(),
            Some("AMD Instinct MI210")
        );
        assert_eq!(
            ids_lookup(ids, 0x744c, 0xc8).as_deref(),
            Some("AMD Radeon RX 7900 XTX")
        );
        assert_eq!(ids_lookup(ids, 0x744c, 0xc0), None);
    }
}
