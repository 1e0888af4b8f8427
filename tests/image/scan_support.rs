//! Shared helpers for the scan tests: fixtures, NVIDIA's tools, temp dirs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fatbin")
}

pub fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// Temp dirs and the skip rule (`require`: the value, or SKIP locally and a
/// failure under CI) come from the shared support module.
pub use crate::support::{require, tempdir};

/// Python's site-packages, where NVIDIA's wheels put their files.
pub fn site_packages() -> Vec<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import site, sysconfig; print(sysconfig.get_paths()['purelib']); print('\\n'.join(site.getsitepackages()))",
        ])
        .output();
    let Ok(out) = out else { return Vec::new() };
    let mut v: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .collect();
    v.dedup();
    v
}

/// The first existing file among `site-packages/<rel>` for each candidate.
fn in_site(rels: &[&str]) -> Option<PathBuf> {
    for sp in site_packages() {
        for rel in rels {
            let p = sp.join(rel);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// cuobjdump: $CUOBJDUMP, then PATH, then the nvidia-cuda-cuobjdump wheel
/// (nvidia/cu13/bin for CUDA 13 wheels, nvidia/cuda_cuobjdump/bin for 12).
pub fn cuobjdump() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUOBJDUMP") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("cuobjdump");
            if p.is_file() {
                return Some(p);
            }
        }
    }
    in_site(&[
        "nvidia/cu13/bin/cuobjdump",
        "nvidia/cuda_cuobjdump/bin/cuobjdump",
    ])
}

/// A real NVIDIA library with device code: $GPU_GUARD_REAL_LIB, else
/// libcurand from the nvidia-curand wheel.
pub fn real_library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GPU_GUARD_REAL_LIB") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    in_site(&[
        "nvidia/cu13/lib/libcurand.so.10",
        "nvidia/curand/lib/libcurand.so.10",
    ])
}

pub fn gpu_guard() -> PathBuf {
    PathBuf::from(crate::support::gpu_guard())
}
