//! The NVIDIA kernel driver's /proc interface: the fallback when NVML cannot
//! be used, the cache key, and the kernel module's side of a driver/library
//! mismatch.
//!
//! NVIDIA driver README, "Using the /proc File System Interface":
//! `/proc/driver/nvidia/version` lists the installed driver revision, and
//! `/proc/driver/nvidia/gpus/domain:bus:device.function/information` the
//! model, UUID, bus location and device minor of each GPU ("some of the
//! information is only available when the GPUs have been initialized": an
//! uninitialised GPU shows `GPU-????????-...` as its UUID).
//!
//! These files are the NVIDIA driver's, not the kernel's: the procfs crate
//! has no parser for /proc/driver/nvidia, so they are read here by hand
//! (bounded reads). The kernel's own files (boot id, /proc/modules,
//! /proc/devices) go through procfs in [`super::kernel`].

use std::io;
use std::path::{Path, PathBuf};

use crate::core::facts::{Gpu, HostFacts};

/// /proc/driver/nvidia/version is two short lines; anything larger is not it.
const MAX_VERSION_FILE: u64 = 64 << 10;
/// An `information` file is about 500 bytes.
const MAX_INFORMATION_FILE: u64 = 64 << 10;
/// More GPU directories than any machine has; a hostile tree cannot make us
/// read without end.
const MAX_GPUS: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} lists more than {MAX_GPUS} GPUs", path.display())]
    TooMany { path: PathBuf },
}

/// The content of `<proc_nvidia>/version`, or `None` when the file does not
/// exist (no NVIDIA kernel module loaded).
pub fn read_version(proc_nvidia: &Path) -> Result<Option<String>, ProcError> {
    let path = proc_nvidia.join("version");
    match crate::sys::fsutil::read_limited(&path, MAX_VERSION_FILE) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ProcError::Read { path, source }),
    }
}

/// The kernel module version from the version file's `NVRM version:` line.
///
/// Seen forms: `NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu ...`
/// and `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build ...`.
/// The first token made of digits and dots, with at least one dot, is the version.
pub fn kernel_module_version(text: &str) -> Option<String> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|t| {
            t.contains('.')
                && t.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                && !t.starts_with('.')
                && !t.ends_with('.')
        })
        .map(str::to_string)
}

/// One GPU as `/proc/driver/nvidia/gpus/*/information` describes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcGpu {
    /// NVML's form: `00000000:3B:00.0`.
    pub pci_bus_id: Option<String>,
    pub model: Option<String>,
    /// None while the GPU is uninitialised (`GPU-????????-...`).
    pub uuid: Option<String>,
    pub minor: Option<u32>,
}

/// Parses one `information` file (`Key:   value` lines).
pub fn parse_information(text: &str) -> ProcGpu {
    let mut g = ProcGpu::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k.trim() {
            "Model" if !v.is_empty() => g.model = Some(v.to_string()),
            "GPU UUID" if !v.is_empty() && !v.contains('?') => g.uuid = Some(v.to_string()),
            "Bus Location" => g.pci_bus_id = nvml_bus_id(v),
            "Device Minor" => g.minor = v.parse().ok(),
            _ => {}
        }
    }
    g
}

/// `0000:3b:00.0` (the /proc spelling) to `00000000:3B:00.0`, NVML's
/// nvmlPciInfo_t.busId spelling ("%08X:%02X:%02X.0"), so both sources agree.
pub fn nvml_bus_id(s: &str) -> Option<String> {
    let mut parts = s.trim().split(':');
    let (dom, bus, devfn) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (dev, func) = devfn.split_once('.')?;
    let dom = u32::from_str_radix(dom, 16).ok()?;
    let bus = u32::from_str_radix(bus, 16).ok()?;
    let dev = u32::from_str_radix(dev, 16).ok()?;
    let func = u32::from_str_radix(func, 16).ok()?;
    Some(format!("{dom:08X}:{bus:02X}:{dev:02X}.{func:X}"))
}

/// Every GPU under `<proc_nvidia>/gpus`, sorted by bus id. NVML numbers
/// GPUs in PCI bus order too (nvidia-smi's default order), so the position
/// is the index the fallback reports. A missing `gpus` directory means no GPU.
pub fn read_gpus(proc_nvidia: &Path) -> Result<Vec<ProcGpu>, ProcError> {
    let dir = proc_nvidia.join("gpus");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(ProcError::Read { path: dir, source }),
    };
    let mut gpus = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ProcError::Read {
            path: dir.clone(),
            source,
        })?;
        if gpus.len() == MAX_GPUS {
            return Err(ProcError::TooMany { path: dir });
        }
        let path = entry.path().join("information");
        let text =
            crate::sys::fsutil::read_limited(&path, MAX_INFORMATION_FILE).map_err(|source| {
                ProcError::Read {
                    path: path.clone(),
                    source,
                }
            })?;
        let mut g = parse_information(&String::from_utf8_lossy(&text));
        if g.pci_bus_id.is_none() {
            // The directory is named by the bus location.
            g.pci_bus_id = nvml_bus_id(&entry.file_name().to_string_lossy());
        }
        gpus.push(g);
    }
    gpus.sort_by(|a, b| a.pci_bus_id.cmp(&b.pci_bus_id));
    Ok(gpus)
}

/// The highest CUDA version each driver branch supports, which is what
/// nvmlSystemGetCudaDriverVersion reports for every driver of that branch.
/// Source: CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver
/// Versions".
const BRANCH_CUDA: &[(u32, &str)] = &[
    (410, "10.0"),
    (418, "10.1"),
    (440, "10.2"),
    (450, "11.0"),
    (455, "11.1"),
    (460, "11.2"),
    (465, "11.3"),
    (470, "11.4"),
    (495, "11.5"),
    (510, "11.6"),
    (515, "11.7"),
    (520, "11.8"),
    (525, "12.0"),
    (530, "12.1"),
    (535, "12.2"),
    (545, "12.3"),
    (550, "12.4"),
    (555, "12.5"),
    (560, "12.6"),
    (565, "12.7"),
    (570, "12.8"),
    (575, "12.9"),
    (580, "13.0"),
    (590, "13.1"),
    (595, "13.2"),
    (610, "13.3"),
];

/// The CUDA version a driver version's branch supports, when the branch is known.
pub fn cuda_for_driver(driver: &str) -> Option<&'static str> {
    let branch: u32 = driver.split('.').next()?.parse().ok()?;
    BRANCH_CUDA
        .iter()
        .find(|(b, _)| *b == branch)
        .map(|(_, c)| *c)
}

/// Host facts from /proc alone: no compute capability, brand or memory
/// (only NVML knows them).
pub fn facts(version_text: &str, gpus: &[ProcGpu]) -> HostFacts {
    let driver = kernel_module_version(version_text);
    HostFacts {
        cuda_driver_version: driver
            .as_deref()
            .and_then(cuda_for_driver)
            .map(str::to_string),
        driver_version: driver,
        gpus: gpus
            .iter()
            .enumerate()
            .map(|(i, g)| Gpu {
                index: i as u32,
                uuid: g.uuid.clone().unwrap_or_default(),
                name: g.model.clone().unwrap_or_default(),
                brand: "unknown".into(),
                compute_capability: None,
                memory_mib: None,
                pci_bus_id: g.pci_bus_id.clone(),
                mig_devices: Vec::new(),
                minor_number: g.minor,
                ..Gpu::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_version_from_both_flavours() {
        let cases = [
            ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", Some("535.129.03")),
            ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Feb 22 01:25:25 UTC 2024\nGCC version:  gcc version 12.2.0\n", Some("550.54.14")),
            ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  540.4.0  Release Build\n", Some("540.4.0")),
            ("NVRM version: NVIDIA UNIX x86 Kernel Module  169.12  Thu Feb 14 17:53:07 PST 2008\n", Some("169.12")),
            ("GCC version: 12.2.0\n", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(kernel_module_version(text).as_deref(), want, "{text:?}");
        }
    }

    #[test]
    fn information_file() {
        let text = "Model:           NVIDIA H100 80GB HBM3\nIRQ:             10\nGPU UUID:        GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b\nVideo BIOS:      96.00.99.00.01\nBus Type:        PCIe\nDMA Size:        52 bits\nDMA Mask:        0xfffffffffffff\nBus Location:    0000:62:00.0\nDevice Minor:    5\nGPU Firmware:    535.129.03\nGPU Excluded:    No\n";
        let g = parse_information(text);
        assert_eq!(g.model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(
            g.uuid.as_deref(),
            Some("GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b")
        );
        assert_eq!(g.pci_bus_id.as_deref(), Some("00000000:62:00.0"));
        assert_eq!(g.minor, Some(5));
        let un = parse_information(
            "Model: Tesla T4\nGPU UUID: GPU-????????-????-????-????-????????????\nBus Location: 0000:3b:00.0\n",
        );
        assert_eq!(un.uuid, None);
        assert_eq!(un.pci_bus_id.as_deref(), Some("00000000:3B:00.0"));
        assert_eq!(un.minor, None);
    }

    #[test]
    fn bus_ids() {
        assert_eq!(
            nvml_bus_id("0000:af:00.0").as_deref(),
            Some("00000000:AF:00.0")
        );
        assert_eq!(
            nvml_bus_id("00000000:07:00.0").as_deref(),
            Some("00000000:07:00.0")
        );
        for bad in ["", "07:00.0", "0000:zz:00.0", "0000:07:00", "a:b:c:d.0"] {
            assert_eq!(nvml_bus_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn cuda_by_branch() {
        assert_eq!(cuda_for_driver("535.104.05"), Some("12.2"));
        assert_eq!(cuda_for_driver("550.54.14"), Some("12.4"));
        assert_eq!(cuda_for_driver("580.65.06"), Some("13.0"));
        assert_eq!(cuda_for_driver("999.1"), None);
        assert_eq!(cuda_for_driver("x"), None);
    }

    #[test]
    fn facts_from_tree() {
        let d = std::env::temp_dir().join(format!("gg-procfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for (bus, model, minor) in [
            ("0000:af:00.0", "NVIDIA A10", 1),
            ("0000:3b:00.0", "Tesla T4", 0),
        ] {
            let g = d.join("gpus").join(bus);
            std::fs::create_dir_all(&g).unwrap();
            std::fs::write(
                g.join("information"),
                format!("Model: {model}\nGPU UUID: GPU-{minor}\nBus Location: {bus}\nDevice Minor: {minor}\n"),
            )
            .unwrap();
        }
        std::fs::write(
            d.join("version"),
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu\n",
        )
        .unwrap();
        let text = read_version(&d).unwrap().unwrap();
        let gpus = read_gpus(&d).unwrap();
        let f = facts(&text, &gpus);
        assert_eq!(f.driver_version.as_deref(), Some("535.129.03"));
        assert_eq!(f.cuda_driver_version.as_deref(), Some("12.2"));
        assert_eq!(f.gpus.len(), 2);
        assert_eq!(f.gpus[0].name, "Tesla T4");
        assert_eq!(f.gpus[0].index, 0);
        assert_eq!(f.gpus[1].pci_bus_id.as_deref(), Some("00000000:AF:00.0"));
        assert_eq!(f.gpus[1].compute_capability, None);
        assert_eq!(f.gpus[1].minor_number, Some(1));
        assert_eq!(read_version(&d.join("nope")).unwrap(), None);
        assert!(read_gpus(&d.join("nope")).unwrap().is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
