//! The kernel's own /proc files the probe reads, through the procfs crate:
//! the boot id (the cache key), /proc/modules and /proc/devices (what the
//! no-driver diagnosis says about the NVIDIA kernel module).
//!
//! /proc/driver/nvidia belongs to the NVIDIA driver and procfs does not
//! parse it; [`super::procfs`] reads it by hand.
//!
//! Each reader takes an optional path: None reads the kernel's file, a path
//! reads a test's stand-in ([`super::ProbePaths`]).

use std::path::{Path, PathBuf};

use procfs::Current;

/// The kernel module NVML needs: /dev/nvidiactl and /dev/nvidiaN are its.
pub const NVIDIA_MODULE: &str = "nvidia";

const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("cannot read {}: {}", path.display(), reason(source))]
    Read {
        path: PathBuf,
        #[source]
        source: procfs::ProcError,
    },
    #[error("{} is empty", path.display())]
    Empty { path: PathBuf },
}

/// Why a /proc file could not be read, without the procfs crate's own
/// wording (`File not found: PATH`, `Unexpected IO error(...)`), which
/// repeats the path and names the crate's internals.
fn reason(e: &procfs::ProcError) -> String {
    use procfs::ProcError as P;
    match e {
        P::NotFound(_) => "it does not exist".to_string(),
        P::PermissionDenied(_) => "permission denied".to_string(),
        P::Incomplete(_) => "its content is incomplete".to_string(),
        P::Io(inner, _) => inner.to_string(),
        P::Other(s) => s.clone(),
        P::InternalError(_) => "its content is not in the format the kernel documents".to_string(),
    }
}

fn read<T: Current>(over: Option<&Path>) -> Result<T, KernelError> {
    match over {
        Some(p) => T::from_file(p),
        None => T::current(),
    }
    .map_err(|source| KernelError::Read {
        path: over.map_or_else(|| PathBuf::from(T::PATH), Path::to_path_buf),
        source,
    })
}

/// The boot id (a UUID the kernel draws at boot): a cache entry never
/// outlives a reboot, even when the clock is stepped back.
pub fn boot_id(over: Option<&Path>) -> Result<String, KernelError> {
    let path = over.map_or_else(|| PathBuf::from(BOOT_ID), Path::to_path_buf);
    let id = match over {
        None => procfs::sys::kernel::random::boot_id(),
        Some(p) => {
            crate::sys::fsutil::read_to_string_limited(p, 4096).map_err(procfs::ProcError::from)
        }
    }
    .map_err(|source| KernelError::Read {
        path: path.clone(),
        source,
    })?;
    let id = id.trim();
    if id.is_empty() {
        return Err(KernelError::Empty { path });
    }
    Ok(id.to_string())
}

/// Whether the `nvidia` kernel module is loaded, per /proc/modules.
pub fn nvidia_module_loaded(over: Option<&Path>) -> Result<bool, KernelError> {
    let modules: procfs::KernelModules = read(over)?;
    Ok(modules.0.contains_key(NVIDIA_MODULE))
}

/// The NVIDIA character devices /proc/devices lists, as `name (major)`:
/// `nvidia-frontend (195)` once the module is loaded, `nvidia-uvm (N)`
/// with a dynamic major once nvidia-uvm is.
pub fn nvidia_char_devices(over: Option<&Path>) -> Result<Vec<String>, KernelError> {
    let devices: procfs::Devices = read(over)?;
    Ok(devices
        .char_devices
        .iter()
        .filter(|d| d.name.starts_with("nvidia"))
        .map(|d| format!("{} ({})", d.name, d.major))
        .collect())
}

/// Every character device /proc/devices lists, as (name, major): which
/// majors are GPU drivers' (core::device_table).
pub fn char_majors(over: Option<&Path>) -> Result<Vec<(String, u32)>, KernelError> {
    let devices: procfs::Devices = read(over)?;
    Ok(devices
        .char_devices
        .into_iter()
        .map(|d| (d.name, d.major))
        .collect())
}

/// One clause for a diagnosis: is the kernel module loaded, and which
/// NVIDIA character devices exist. Unreadable files are said as such.
pub fn describe(modules: Option<&Path>, devices: Option<&Path>) -> String {
    let module = match nvidia_module_loaded(modules) {
        Ok(true) => format!("kernel module {NVIDIA_MODULE} is loaded"),
        Ok(false) => format!("kernel module {NVIDIA_MODULE} is not loaded"),
        Err(e) => format!("whether kernel module {NVIDIA_MODULE} is loaded is unknown ({e})"),
    };
    let devs = match nvidia_char_devices(devices) {
        Ok(d) if d.is_empty() => "no NVIDIA character devices registered".to_string(),
        Ok(d) => format!("NVIDIA character devices: {}", d.join(", ")),
        Err(e) => format!("NVIDIA character devices unknown ({e})"),
    };
    format!("{module}; {devs}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str, text: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gg-kernel-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn reads_stand_ins() {
        let modules = tmp(
            "modules",
            "nvidia_uvm 1437696 0 - Live 0x0000000000000000 (POE)\nnvidia 56532992 2 nvidia_uvm, Live 0x0000000000000000 (POE)\n",
        );
        let none = tmp("modules-none", "loop 32768 0 - Live 0x0000000000000000\n");
        let devices = tmp(
            "devices",
            "Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n\nBlock devices:\n  7 loop\n",
        );
        let boot = tmp("boot_id", "11111111-2222-3333-4444-555555555555\n");
        let empty = tmp("boot_id-empty", "\n");
        assert!(nvidia_module_loaded(Some(&modules)).unwrap());
        assert!(!nvidia_module_loaded(Some(&none)).unwrap());
        assert_eq!(
            nvidia_char_devices(Some(&devices)).unwrap(),
            ["nvidia-frontend (195)", "nvidia-uvm (508)"]
        );
        assert_eq!(
            boot_id(Some(&boot)).unwrap(),
            "11111111-2222-3333-4444-555555555555"
        );
        assert!(matches!(
            boot_id(Some(&empty)),
            Err(KernelError::Empty { .. })
        ));
        let text = describe(Some(&none), Some(&devices));
        assert!(
            text.contains("kernel module nvidia is not loaded"),
            "{text}"
        );
        assert!(text.contains("nvidia-frontend (195)"), "{text}");
        let missing = boot.with_file_name("absent");
        let text = describe(Some(&missing), Some(&missing));
        assert!(text.contains("is unknown"), "{text}");
        assert!(text.contains("absent"), "{text}");
        std::fs::remove_dir_all(boot.parent().unwrap()).unwrap();
    }
}
