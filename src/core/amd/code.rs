//! What a scan found for AMD GPUs: the code objects of a library's
//! offload bundles, the per-chip Tensile files beside rocBLAS and
//! hipBLASLt, and the ROCm user space the image ships.

use super::target::{Feature, TargetId};
use serde::{Deserialize, Serialize};

/// One AMD code object a library carries (one bundle entry, or a bare
/// code object file).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AmdCode {
    /// The target ID as the bundle entry names it (`gfx90a:xnack-`), kept
    /// as written; [`AmdCode::target`] is None when the HIP runtime could
    /// not parse it (it then never loads).
    pub arch: String,
    /// The entry sat in a compressed (`CCOB`) bundle.
    pub compressed: bool,
    /// The code object version of its ELF (`EI_ABIVERSION` 2, 3, 4 are v4,
    /// v5, v6), when its header was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_object_version: Option<u8>,
}

impl AmdCode {
    pub fn target(&self) -> Option<TargetId> {
        TargetId::parse(&self.arch)
    }
}

/// The per-chip Tensile kernels of rocBLAS or hipBLASLt
/// (`.../library/TensileLibrary*_gfxNNN*`): the library loads only on a
/// processor that has its files ("Cannot read TensileLibrary.dat: Illegal
/// seek for GPU arch : gfx1103" otherwise).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tensile {
    /// The directory the files are in, relative to the rootfs.
    pub dir: String,
    /// The processors there are files for, sorted.
    pub processors: Vec<String>,
}

/// A library's AMD side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmdLibrary {
    /// The path inside the rootfs, as matched.
    pub path: String,
    /// Distinct code objects, sorted.
    #[serde(default)]
    pub code: Vec<AmdCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensile: Option<Tensile>,
}

impl AmdLibrary {
    /// Every target the library can run on: its code objects and its
    /// Tensile processors (which take any feature setting).
    pub fn targets(&self) -> Vec<TargetId> {
        let mut out: Vec<TargetId> = self.code.iter().filter_map(AmdCode::target).collect();
        out.sort();
        out.dedup();
        out
    }

    /// The Tensile processors as targets.
    pub fn tensile_targets(&self) -> Vec<TargetId> {
        self.tensile
            .iter()
            .flat_map(|t| t.processors.iter())
            .map(|p| TargetId::new(p, Feature::Any, Feature::Any))
            .collect()
    }
}

/// Where the image's ROCm version was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RocmSource {
    /// `/opt/rocm*/.info/version` (ROCm's packages write it).
    InfoVersion,
    /// An `/opt/rocm-X.Y.Z` directory name.
    OptDirectory,
    /// The HIP runtime a pip wheel ships (`torch/version.py`'s `hip`, or a
    /// `libamdhip64.so.X.Y.Z` name).
    HipRuntime,
}

/// The ROCm user space an image ships.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RocmUserSpace {
    /// `major.minor[.patch]` (`6.4.0`).
    pub version: String,
    pub source: RocmSource,
    /// The file or directory it was read from, relative to the rootfs.
    pub path: String,
}

/// The ROCm version in a `.info/version` file (`6.4.0-47`, `7.1.1`): the
/// leading `X.Y[.Z]`. None for anything else.
pub fn rocm_version_of_info(text: &str) -> Option<String> {
    let first = text.lines().next()?.trim();
    let v = first.split(['-', '+', ' ']).next()?;
    plain_version(v, 2, 3)
}

/// The newest of `names` (directory names under `/opt`) that is a ROCm
/// release directory (`rocm-6.2.4`), compared numerically: (version, name).
pub fn newest_rocm_dir(names: impl IntoIterator<Item = String>) -> Option<(String, String)> {
    names
        .into_iter()
        .filter_map(|name| {
            let v = rocm_version_of_dir(&name)?;
            let key: Vec<u64> = v.split('.').map(|x| x.parse().unwrap_or(0)).collect();
            Some((key, v, name))
        })
        .max()
        .map(|(_, v, name)| (v, name))
}

/// The version in an `/opt/rocm-X.Y.Z` directory name.
pub fn rocm_version_of_dir(name: &str) -> Option<String> {
    plain_version(name.strip_prefix("rocm-")?, 2, 3)
}

/// The ROCm release of a HIP version (`6.4.43484-fd6a5e4c5` in
/// `torch/version.py`): HIP's major.minor is its ROCm release's (HIP_VERSION
/// is ROCm major*10^7 + minor*10^5 + build, hip/hip_version.h).
pub fn rocm_version_of_hip(hip: &str) -> Option<String> {
    let v = hip.trim().split(['-', '+', ' ']).next()?;
    let mut parts = v.split('.');
    let (a, b) = (parts.next()?, parts.next()?);
    plain_version(&format!("{a}.{b}"), 2, 2)
}

/// The `hip = '...'` value of a `torch/version.py`.
pub fn hip_of_torch_version_py(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        // `hip = '...'`, or annotated: `hip: Optional[str] = '...'`.
        let rest = l.trim().strip_prefix("hip")?;
        if !rest.starts_with([' ', ':', '=']) {
            return None;
        }
        let v = rest.split_once('=')?.1.trim();
        let v = v.trim_matches(|c| c == '\'' || c == '"');
        (!v.is_empty() && v != "None" && v.len() < 64).then(|| v.to_string())
    })
}

/// `X.Y` or `X.Y.Z` of small decimal numbers, `min`..=`max` parts.
fn plain_version(v: &str, min: usize, max: usize) -> Option<String> {
    let parts: Vec<&str> = v.split('.').collect();
    let ok = (min..=max).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    ok.then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocm_versions_from_the_places_images_keep_them() {
        assert_eq!(rocm_version_of_info("6.4.0-47\n").as_deref(), Some("6.4.0"));
        assert_eq!(rocm_version_of_info("7.1.1").as_deref(), Some("7.1.1"));
        assert_eq!(rocm_version_of_info("garbage"), None);
        assert_eq!(rocm_version_of_info(""), None);
        assert_eq!(rocm_version_of_dir("rocm-6.3.2").as_deref(), Some("6.3.2"));
        assert_eq!(rocm_version_of_dir("rocm"), None);
        assert_eq!(rocm_version_of_dir("rocm-x"), None);
        assert_eq!(
            rocm_version_of_hip("6.4.43484-fd6a5e4c5").as_deref(),
            Some("6.4")
        );
        assert_eq!(rocm_version_of_hip("5.7.31921"), Some("5.7".into()));
        let py = "__version__ = '2.7.1+rocm6.4'\ndebug = False\ncuda: Optional[str] = None\nhip: Optional[str] = '6.4.43484-fd6a5e4c5'\n";
        assert_eq!(
            hip_of_torch_version_py(py).as_deref(),
            Some("6.4.43484-fd6a5e4c5")
        );
        assert_eq!(hip_of_torch_version_py("hip = None\n"), None);
        let py_old = "hip = '5.7.31921-d1770ee1b'\n";
        assert_eq!(
            hip_of_torch_version_py(py_old).as_deref(),
            Some("5.7.31921-d1770ee1b")
        );
    }

    #[test]
    fn library_targets() {
        let lib = AmdLibrary {
            path: "lib/librocblas.so.4".into(),
            code: vec![
                AmdCode {
                    arch: "gfx90a:xnack-".into(),
                    compressed: true,
                    code_object_version: Some(5),
                },
                AmdCode {
                    arch: "gfx906:xnack-:sramecc+".into(),
                    compressed: false,
                    code_object_version: None,
                },
            ],
            tensile: Some(Tensile {
                dir: "lib/rocblas/library".into(),
                processors: vec!["gfx942".into()],
            }),
        };
        let t: Vec<String> = lib.targets().iter().map(|t| t.to_string()).collect();
        assert_eq!(t, ["gfx90a:xnack-"]);
        assert_eq!(lib.tensile_targets()[0].to_string(), "gfx942");
    }
}
