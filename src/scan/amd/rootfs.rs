//! The AMD side of a container's rootfs, read through the hostile-rootfs
//! resolver ([`Root`]): the Tensile files beside rocBLAS/hipBLASLt, and the
//! ROCm release the image ships.

use super::tensile;
use crate::core::amd::code::{
    hip_of_torch_version_py, newest_rocm_dir, rocm_version_of_hip, rocm_version_of_info,
};
use crate::core::amd::{AmdCode, AmdLibrary, RocmSource, RocmUserSpace, Tensile};
use crate::scan::rootfs::{self, Root};
use std::io::Read;

/// The most bytes read of a version file.
const MAX_VERSION_FILE: u64 = 64 << 10;
/// Python installations looked at for a ROCm PyTorch wheel.
const PYTHON_BASES: &[&str] = &[
    "usr/lib",
    "usr/local/lib",
    "opt/conda/lib",
    "opt/venv/lib",
    "opt/python/lib",
];
/// The most conda environments and python directories looked at.
const MAX_PYTHON_DIRS: usize = 64;

/// The AMD libraries of a scan: each judged library that has AMD code
/// objects or is rocBLAS/hipBLASLt (with its Tensile directory's
/// processors), in scan order.
pub fn libraries(root: &Root, judged: Vec<(String, Vec<AmdCode>)>) -> Vec<AmdLibrary> {
    judged
        .into_iter()
        .filter_map(|(path, code)| {
            let tensile = tensile::dir_of(&path).and_then(|dir| {
                let entries = root.read_dir(&dir).ok()?;
                let names: Vec<String> = entries
                    .iter()
                    .filter(|e| !e.is_dir)
                    .map(|e| e.name.to_string_lossy().into_owned())
                    .collect();
                Some(Tensile {
                    processors: tensile::processors(names.iter().map(String::as_str)),
                    dir,
                })
            });
            (!code.is_empty() || tensile.is_some()).then_some(AmdLibrary {
                path,
                code,
                tensile,
            })
        })
        .collect()
}

/// A small file's text, or None.
fn read_small(root: &Root, rel: &str) -> Option<String> {
    let found = root.find(rel).ok()?;
    let file = rootfs::open_regular(&found).ok()?;
    let mut buf = Vec::new();
    file.take(MAX_VERSION_FILE).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The ROCm release of the image: `opt/rocm/.info/version`, else the
/// newest `opt/rocm-X.Y.Z` (its `.info/version`, else its name), else the
/// HIP runtime of a ROCm PyTorch wheel (`torch/version.py`'s `hip`).
pub fn rocm_of_root(root: &Root) -> Option<RocmUserSpace> {
    let info = |dir: &str| {
        let path = format!("{dir}/.info/version");
        let v = rocm_version_of_info(&read_small(root, &path)?)?;
        Some(RocmUserSpace {
            version: v,
            source: RocmSource::InfoVersion,
            path,
        })
    };
    if let Some(r) = info("opt/rocm") {
        return Some(r);
    }
    let names = root
        .read_dir("opt")
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.is_dir)
        .filter_map(|e| Some(e.name.to_str()?.to_string()));
    if let Some((v, name)) = newest_rocm_dir(names) {
        let dir = format!("opt/{name}");
        return info(&dir).or(Some(RocmUserSpace {
            version: v,
            source: RocmSource::OptDirectory,
            path: dir,
        }));
    }
    torch_hip(root)
}

/// The HIP version a ROCm PyTorch wheel was built with.
fn torch_hip(root: &Root) -> Option<RocmUserSpace> {
    let mut bases: Vec<String> = PYTHON_BASES.iter().map(|b| b.to_string()).collect();
    for e in root
        .read_dir("opt/conda/envs")
        .unwrap_or_default()
        .iter()
        .take(MAX_PYTHON_DIRS)
    {
        if e.is_dir {
            if let Some(n) = e.name.to_str() {
                bases.push(format!("opt/conda/envs/{n}/lib"));
            }
        }
    }
    for base in bases {
        let pythons = root.read_dir(&base).unwrap_or_default();
        for py in pythons.iter().take(MAX_PYTHON_DIRS) {
            let Some(py) = py.name.to_str().filter(|n| n.starts_with("python3")) else {
                continue;
            };
            for pk in ["site-packages", "dist-packages"] {
                let path = format!("{base}/{py}/{pk}/torch/version.py");
                let Some(text) = read_small(root, &path) else {
                    continue;
                };
                if let Some(v) =
                    hip_of_torch_version_py(&text).and_then(|h| rocm_version_of_hip(&h))
                {
                    return Some(RocmUserSpace {
                        version: v,
                        source: RocmSource::HipRuntime,
                        path,
                    });
                }
            }
        }
    }
    None
}
