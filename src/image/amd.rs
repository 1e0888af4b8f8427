//! The AMD side of `check --image`, from the final tree: the Tensile files
//! beside rocBLAS/hipBLASLt and the image's ROCm release (the small version
//! files are read as their layer streams by; see [`is_version_file`]).
//! The same answers as [`crate::scan::amd::rootfs`] gives for a rootfs.

use super::{ContentRef, ImageError, Kind, Tree};
use crate::core::amd::code::{
    hip_of_torch_version_py, newest_rocm_dir, rocm_version_of_hip, rocm_version_of_info,
};
use crate::core::amd::{AmdCode, AmdLibrary, RocmSource, RocmUserSpace, Tensile};
use crate::scan::amd::tensile;
use std::collections::HashMap;
use std::io::{self, Read};

/// The most bytes kept of a version file.
const MAX_TEXT: u64 = 64 << 10;

/// Is `path` (as a layer names it) a file the ROCm version may be read
/// from: `opt/rocm*/.info/version`, or a PyTorch wheel's `torch/version.py`?
pub fn is_version_file(path: &str) -> bool {
    if let Some(rest) = path.strip_prefix("opt/rocm") {
        return rest.ends_with("/.info/version") && rest.matches('/').count() == 2;
    }
    path.ends_with("-packages/torch/version.py")
}

/// A small file's text (None for a file over [`MAX_TEXT`]).
pub fn read_text(r: &mut dyn Read, size: u64) -> io::Result<Option<String>> {
    if size > MAX_TEXT {
        return Ok(None);
    }
    let mut buf = Vec::new();
    r.take(MAX_TEXT).read_to_end(&mut buf)?;
    Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
}

/// The text of the final file at `path` (symlinks followed in the image).
fn text<'t>(tree: &Tree, texts: &'t HashMap<ContentRef, String>, path: &str) -> Option<&'t str> {
    let real = tree.resolve(path).ok()?;
    let node = tree.get(&real)?;
    (node.kind == Kind::File).then_some(())?;
    texts.get(&node.content?).map(String::as_str)
}

/// The AMD libraries (with their Tensile processors) and the ROCm release.
pub fn finish(
    tree: &Tree,
    judged: Vec<(String, Vec<AmdCode>)>,
    texts: &HashMap<ContentRef, String>,
) -> Result<(Vec<AmdLibrary>, Option<RocmUserSpace>), ImageError> {
    let mut libs = Vec::new();
    for (path, code) in judged {
        let tensile = tensile::dir_of(&path).and_then(|dir| {
            let real = tree.resolve(&dir).ok()?;
            let prefix = format!("{real}/");
            let names: Vec<&str> = tree
                .under(&prefix)
                .filter(|(p, n)| n.kind == Kind::File && !p[prefix.len()..].contains('/'))
                .map(|(p, _)| &p[prefix.len()..])
                .collect();
            Some(Tensile {
                processors: tensile::processors(names),
                dir,
            })
        });
        if !code.is_empty() || tensile.is_some() {
            libs.push(AmdLibrary {
                path,
                code,
                tensile,
            });
        }
    }
    Ok((libs, rocm(tree, texts)))
}

/// As [`crate::scan::amd::rootfs::rocm_of_root`].
fn rocm(tree: &Tree, texts: &HashMap<ContentRef, String>) -> Option<RocmUserSpace> {
    let info = |dir: &str| {
        let path = format!("{dir}/.info/version");
        let v = rocm_version_of_info(text(tree, texts, &path)?)?;
        Some(RocmUserSpace {
            version: v,
            source: RocmSource::InfoVersion,
            path,
        })
    };
    if let Some(r) = info("opt/rocm") {
        return Some(r);
    }
    let names = tree
        .under("opt/rocm-")
        .filter(|(p, n)| n.kind == Kind::Dir && p.matches('/').count() == 1)
        .filter_map(|(p, _)| Some(p.strip_prefix("opt/")?.to_string()));
    if let Some((v, name)) = newest_rocm_dir(names) {
        let dir = format!("opt/{name}");
        return info(&dir).or(Some(RocmUserSpace {
            version: v,
            source: RocmSource::OptDirectory,
            path: dir,
        }));
    }
    tree.files()
        .filter(|p| p.ends_with("-packages/torch/version.py"))
        .find_map(|p| {
            let v = rocm_version_of_hip(&hip_of_torch_version_py(text(tree, texts, p)?)?)?;
            Some(RocmUserSpace {
                version: v,
                source: RocmSource::HipRuntime,
                path: p.to_string(),
            })
        })
}
