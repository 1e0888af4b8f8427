//! CUDA forward compatibility: may the image's compat `libcuda.so` drive this
//! host's GPUs? Pure: the note is read by `crate::scan::compat_lib`.
//!
//! The compat package (`cuda-compat-X-Y`, `/usr/local/cuda/compat/`) ships a
//! user-mode driver newer than the host's kernel driver. It works only on the
//! driver branches and GPU brands that NVIDIA qualified, and says which in
//! the ELF note `.note.cuda.fwd_compatibility` (owner `NVIDIA Corporation`,
//! type 0), a JSON descriptor such as
//! `{"format":1,"CUDA version":"12.9","driver":[535,550,560,565,570,575],"device":[1,2,7,8,9,10,11,12,13,14]}`.
//! `driver` lists driver branches (majors), `device` NVML brand codes.
//! Tegra (Orin) libraries carry only `{"format":1,"CUDA version":"13.2"}`.
//!
//! What goes wrong outside those lists (cuda.h, `CUresult`):
//! - a GPU whose brand is not listed: `CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE`
//!   = 804, "forward compatibility was attempted on non supported HW";
//! - a kernel driver branch that is not listed:
//!   `CUDA_ERROR_SYSTEM_DRIVER_MISMATCH` = 803 when the compat library is
//!   loaded anyway (LD_LIBRARY_PATH, legacy mount mode); NVIDIA's hook does
//!   not enable it, and the container then gets the host's own CUDA.
//!
//! When NVIDIA's toolkit enables the compat library: the `enable-cuda-compat`
//! hook, nvidia-container-toolkit `cmd/nvidia-cdi-hook/cudacompat/cudacompat.go`
//! (`getContainerForwardCompatDir`, `useCompatLibraries`) and
//! `cmd/nvidia-cdi-hook/cudacompat/cuda-elf-header.go` (`UseCompat`), read at
//! commit d34b3046 (2026-08-21):
//! - exactly one regular file `compat/libcuda.so.*.*`, else no-op;
//! - with a readable note and a host driver version: the host branch must be
//!   listed in `driver` and the compat library's full version must be
//!   greater than the host's (`compatDriverVersion.Compare(hostDriverVersion) > 0`),
//!   so a newer build of the same branch is used too (intra-branch upgrades,
//!   CUDA Compatibility FAQ);
//! - without a note (or with one that fails to parse): the host driver major
//!   must be below the compat library's major (the pre-v1.20 rule);
//! - the brand (`device`) is never checked: this is why GeForce users meet 804.

use crate::core::facts::Gpu;
use crate::core::sanitize::esc;
use crate::core::version::Version;

/// The owner name of the note (`readelf -n` shows it; the hook compares it
/// after trimming NULs).
pub const NOTE_OWNER: &str = "NVIDIA Corporation";
/// The note type of the descriptor.
pub const NOTE_TYPE: u32 = 0;
/// The section that holds the note.
pub const NOTE_SECTION: &str = ".note.cuda.fwd_compatibility";

/// `CUDA_ERROR_SYSTEM_DRIVER_MISMATCH` (cuda.h).
const CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: u32 = 803;
/// `CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE` (cuda.h).
const CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: u32 = 804;

/// The brand names of host facts (`facts::BRANDS`) and their
/// `nvmlBrandType_t` codes, from nvml.h (NVIDIA/go-nvml `gen/nvml/nvml.h`,
/// NVML 13.3.29): NVML_BRAND_UNKNOWN 0, QUADRO 1, TESLA 2, NVS 3, GRID 4,
/// GEFORCE 5, TITAN 6, NVIDIA_VAPPS 7, NVIDIA_VPC 8, NVIDIA_VCS 9,
/// NVIDIA_VWS 10, NVIDIA_CLOUD_GAMING 11 (VGAMING is an alias),
/// QUADRO_RTX 12, NVIDIA_RTX 13, NVIDIA 14, GEFORCE_RTX 15 and TITAN_RTX 16
/// (both marked "Unused" there).
const NVML_BRANDS: &[(&str, u32)] = &[
    ("unknown", 0),
    ("quadro", 1),
    ("tesla", 2),
    ("nvs", 3),
    ("grid", 4),
    ("geforce", 5),
    ("titan", 6),
    ("vapps", 7),
    ("vpc", 8),
    ("vcs", 9),
    ("vws", 10),
    ("cloudgaming", 11),
    ("quadrortx", 12),
    ("nvidiartx", 13),
    ("nvidia", 14),
    ("geforcertx", 15),
    ("titanrtx", 16),
];

/// The NVML brand code of a host-facts brand name (`tesla` → 2); None for a
/// name not in [`NVML_BRANDS`].
fn brand_code(brand: &str) -> Option<u32> {
    NVML_BRANDS
        .iter()
        .find(|(name, _)| *name == brand)
        .map(|&(_, code)| code)
}

/// The host-facts brand name of an NVML brand code (2 → `tesla`).
pub fn brand_name(code: u32) -> Option<&'static str> {
    NVML_BRANDS
        .iter()
        .find(|&&(_, c)| c == code)
        .map(|&(name, _)| name)
}

/// The note's descriptor, as the hook unmarshals it (`compatElfHeader`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompatNote {
    /// `format` (1 in every library seen).
    pub format: Option<i64>,
    /// `CUDA version`: the CUDA version this library provides, as written.
    pub cuda_version: Option<String>,
    /// `driver`: host driver branches that may use the library. None when
    /// absent (Tegra) or null.
    pub driver: Option<Vec<i64>>,
    /// `device`: NVML brand codes that may use the library.
    pub device: Option<Vec<i64>>,
}

/// Where NVIDIA's hook looks for the compat library in the container's
/// root (its `--cuda-compat-container-root` default).
pub const COMPAT_DIR: &str = "usr/local/cuda/compat";

/// The most `libcuda.so.*.*` entries examined in one compat directory.
pub const MAX_LIBS: usize = 16;

/// One compat library found in the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompatLib {
    /// Its path in the root, without a leading `/` (`usr/local/cuda/compat/libcuda.so.575.57.08`).
    /// Comes from the image: escape before printing.
    pub path: String,
    /// The driver version from the name suffix (`575.57.08`), unparsed. From the image.
    pub version: String,
    /// The note, or why it could not be read: a missing or malformed note is
    /// an error string (a warning for the decision). The string holds no
    /// image bytes.
    pub note: Result<CompatNote, String>,
}

/// What was found in a root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompatScan {
    /// Candidates in name order (at most [`MAX_LIBS`]).
    pub libs: Vec<CompatLib>,
    /// More candidates than [`MAX_LIBS`] were present.
    pub truncated: bool,
    /// The compat directory exists but could not be listed (no image bytes).
    pub error: Option<String>,
}

/// The most entries kept from one list (real lists have about ten).
const MAX_LIST: usize = 4096;

impl CompatNote {
    /// Parses the descriptor bytes (NULs around it already trimmed or not).
    /// Follows Go's encoding/json into the hook's struct: keys match without
    /// regard to ASCII case, unknown keys are ignored, null leaves a field
    /// unset, a wrong type is an error (a number where the version string
    /// goes, `535.5` in `driver`). The error text holds no image bytes.
    pub fn from_json(desc: &[u8]) -> Result<CompatNote, String> {
        let start = desc.iter().position(|&b| b != 0).unwrap_or(desc.len());
        let end = desc.iter().rposition(|&b| b != 0).map_or(start, |i| i + 1);
        let desc = &desc[start..end];
        if desc.is_empty() {
            return Err("the note's JSON descriptor is empty".into());
        }
        let value: serde_json::Value = serde_json::from_slice(desc)
            .map_err(|e| format!("the note's descriptor is not valid JSON ({e})"))?;
        let serde_json::Value::Object(map) = value else {
            return Err("the note's descriptor is not a JSON object".into());
        };
        let mut note = CompatNote::default();
        for (key, v) in &map {
            let key = key.to_ascii_lowercase();
            if v.is_null() {
                continue;
            }
            match key.as_str() {
                "format" => {
                    note.format = Some(v.as_i64().ok_or("`format` is not an integer")?);
                }
                "cuda version" => {
                    let s = v.as_str().ok_or("`CUDA version` is not a string")?;
                    note.cuda_version = Some(s.to_string());
                }
                "driver" => note.driver = Some(int_list(v, "driver")?),
                "device" => note.device = Some(int_list(v, "device")?),
                _ => {}
            }
        }
        Ok(note)
    }

    /// Does the note list driver branches at all? (Tegra libraries do not.)
    pub fn has_driver_list(&self) -> bool {
        self.driver.as_ref().is_some_and(|d| !d.is_empty())
    }

    /// Is the driver branch `major` listed?
    pub fn lists_branch(&self, major: u64) -> bool {
        self.driver
            .as_ref()
            .is_some_and(|d| d.iter().any(|&b| b >= 0 && b as u64 == major))
    }

    /// Is the NVML brand code listed?
    fn lists_brand(&self, code: u32) -> bool {
        self.device
            .as_ref()
            .is_some_and(|d| d.iter().any(|&c| c == i64::from(code)))
    }
}

fn int_list(v: &serde_json::Value, name: &str) -> Result<Vec<i64>, String> {
    let arr = v
        .as_array()
        .ok_or_else(|| format!("`{name}` is not a list"))?;
    if arr.len() > MAX_LIST {
        return Err(format!(
            "`{name}` has {} entries, more than {MAX_LIST}",
            arr.len()
        ));
    }
    arr.iter()
        .map(|x| {
            x.as_i64()
                .ok_or_else(|| format!("`{name}` holds something other than integers"))
        })
        .collect()
}

/// Would NVIDIA's `enable-cuda-compat` hook put the compat directory on the
/// container's library path, given the note? (`UseCompat` in
/// cuda-elf-header.go: the host branch is listed in `driver` and the compat
/// library is newer than the host driver.) Without a driver list (Tegra
/// notes) a discrete-GPU host never qualifies.
#[cfg(test)]
fn forward_compat_applies(host_driver: &Version, compat_lib: &Version, note: &CompatNote) -> bool {
    note.lists_branch(host_driver.major()) && compat_lib > host_driver
}

/// The hook's rule when the library has no readable note (`useCompatLibraries`
/// fallback): the host driver major is below the library's.
pub fn forward_compat_applies_without_note(host_driver: &Version, compat_lib: &Version) -> bool {
    host_driver.major() < compat_lib.major()
}

/// Why forward compatibility fails on a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incompatibility {
    /// The GPU's brand is not in `device`: CUDA error 804.
    BrandNotListed {
        /// The GPU's NVML brand code.
        brand_code: u32,
    },
    /// The host driver branch is not in `driver`: the hook leaves the compat
    /// library out; loaded anyway, CUDA error 803.
    BranchNotListed {
        /// The host driver major.
        branch: u64,
    },
}

impl Incompatibility {
    /// The CUDA driver error an application meets.
    pub fn cuda_error(&self) -> u32 {
        match self {
            Incompatibility::BrandNotListed { .. } => CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
            Incompatibility::BranchNotListed { .. } => CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        }
    }
}

/// The verdict on one GPU. Every message is one line; strings that came from
/// the image (the CUDA version in the note) are escaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompatVerdict {
    /// The compat library is used and supports this GPU and branch (info).
    Works { message: String },
    /// The compat library is used (or needed) but cannot work here.
    Incompatible {
        reason: Incompatibility,
        message: String,
    },
    /// The host driver is at least as new as the compat library: the hook
    /// leaves it out and the host's own libcuda is used.
    NotApplicable { message: String },
    /// The note lists no driver branches (a Tegra/Orin library): NVIDIA's
    /// hook does not use it on a discrete-GPU host (on Tegra it compares
    /// CUDA versions instead), so nothing can be judged for this GPU.
    NoDriverList { message: String },
    /// The GPU's brand is not known (facts from /proc, or a name outside
    /// `NVML_BRANDS`): whether the brand is supported cannot be said.
    UnknownBrand { message: String },
}

impl CompatVerdict {
    pub fn message(&self) -> &str {
        match self {
            CompatVerdict::Works { message }
            | CompatVerdict::Incompatible { message, .. }
            | CompatVerdict::NotApplicable { message }
            | CompatVerdict::NoDriverList { message }
            | CompatVerdict::UnknownBrand { message } => message,
        }
    }
}

fn list_text(list: &Option<Vec<i64>>) -> String {
    match list {
        Some(l) if !l.is_empty() => l
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        _ => "none".to_string(),
    }
}

fn listed_brands(note: &CompatNote) -> String {
    match &note.device {
        Some(l) if !l.is_empty() => l
            .iter()
            .map(|&c| {
                u32::try_from(c)
                    .ok()
                    .and_then(brand_name)
                    .map_or_else(|| c.to_string(), str::to_string)
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => "none".to_string(),
    }
}

/// Judges one GPU against the image's compat library: `host_driver` is the
/// host's driver version (`575.51.03`), `compat_lib` the version in the
/// library's file name (`libcuda.so.575.57.08`).
///
/// Order: a note without a driver list cannot be judged on a discrete GPU;
/// a host driver at least as new as the library makes it irrelevant; then
/// the branch list, then the brand list (what the driver itself checks).
pub fn judge_gpu(
    gpu: &Gpu,
    host_driver: &Version,
    note: &CompatNote,
    compat_lib: &Version,
) -> CompatVerdict {
    let lib = format!("compat libcuda {}", esc(compat_lib.as_str()));
    let cuda = note.cuda_version.as_deref().map_or_else(
        || "a newer CUDA".to_string(),
        |v| format!("CUDA {}", esc(v)),
    );
    let branch = host_driver.major();
    let who = format!("{} (brand {})", esc(&gpu.describe()), esc(&gpu.brand));

    if !note.has_driver_list() {
        return CompatVerdict::NoDriverList {
            message: format!(
                "the image's {lib} ({cuda}) lists no driver branches (a Tegra/Orin library): NVIDIA's hook does not use it with a discrete GPU, so forward compatibility cannot be judged for {who} on driver {host_driver}"
            ),
        };
    }
    if compat_lib <= host_driver {
        return CompatVerdict::NotApplicable {
            message: format!(
                "the image's {lib} is not used: the host driver {host_driver} is as new or newer and supports its CUDA natively"
            ),
        };
    }
    if !note.lists_branch(branch) {
        return CompatVerdict::Incompatible {
            reason: Incompatibility::BranchNotListed { branch },
            message: format!(
                "forward compatibility does not support driver branch {branch} on {who}: the image's {lib} ({cuda}) lists branches {}; NVIDIA's hook leaves it out, and loaded anyway it fails with CUDA error 803 (system driver mismatch); fix: a driver branch that supports {cuda} natively, or one of the listed branches",
                list_text(&note.driver)
            ),
        };
    }
    let Some(code) = brand_code(&gpu.brand).filter(|&c| c != 0) else {
        return CompatVerdict::UnknownBrand {
            message: format!(
                "cannot tell whether {who} supports forward compatibility through the image's {lib} ({cuda}) on branch {branch}: its brand is unknown; the library supports brands {}",
                listed_brands(note)
            ),
        };
    };
    if !note.lists_brand(code) {
        return CompatVerdict::Incompatible {
            reason: Incompatibility::BrandNotListed { brand_code: code },
            message: format!(
                "{who} cannot use the image's {lib} ({cuda}) on driver {host_driver} (branch {branch}): forward compatibility needs a data-center GPU (the library supports brands {}); CUDA fails with error 804 (forward compatibility was attempted on non supported HW); fix: a driver branch that supports {cuda} natively, or a data-center GPU",
                listed_brands(note)
            ),
        };
    }
    CompatVerdict::Works {
        message: format!("{who} runs through forward compatibility ({lib} on branch {branch})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DGPU_12_9: &str = r#"{"format":1,"CUDA version":"12.9","driver":[535,550,560,565,570,575],"device":[1,2,7,8,9,10,11,12,13,14]}"#;

    fn gpu(brand: &str) -> Gpu {
        Gpu {
            index: 0,
            name: "NVIDIA A100-SXM4-80GB".into(),
            brand: brand.into(),
            compute_capability: Some("8.0".into()),
            ..Gpu::default()
        }
    }

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn brand_table_covers_facts_brands() {
        for b in crate::core::facts::BRANDS {
            assert!(brand_code(b).is_some(), "{b}");
        }
        assert_eq!(NVML_BRANDS.len(), crate::core::facts::BRANDS.len());
        assert_eq!(brand_code("tesla"), Some(2));
        assert_eq!(brand_code("geforce"), Some(5));
        assert_eq!(brand_code("titanrtx"), Some(16));
        assert_eq!(brand_name(14), Some("nvidia"));
        assert_eq!(brand_code("Tesla"), None);
    }

    #[test]
    fn parses_real_descriptors() {
        let n = CompatNote::from_json(DGPU_12_9.as_bytes()).unwrap();
        assert_eq!(n.format, Some(1));
        assert_eq!(n.cuda_version.as_deref(), Some("12.9"));
        assert_eq!(n.driver, Some(vec![535, 550, 560, 565, 570, 575]));
        assert_eq!(n.device, Some(vec![1, 2, 7, 8, 9, 10, 11, 12, 13, 14]));
        // Tegra, with the NULs of its padding.
        let n = CompatNote::from_json(b"{\"format\":1,\"CUDA version\":\"13.2\"}\0\0\0").unwrap();
        assert_eq!(n.cuda_version.as_deref(), Some("13.2"));
        assert!(!n.has_driver_list());
        // Go matches keys case-insensitively (the hook's tag is "CUDA Version").
        let n = CompatNote::from_json(br#"{"CUDA Version":"13.0","DRIVER":[580]}"#).unwrap();
        assert_eq!(n.cuda_version.as_deref(), Some("13.0"));
        assert!(n.lists_branch(580));
    }

    #[test]
    fn rejects_bad_descriptors() {
        for bad in [
            &b""[..],
            b"\0\0",
            b"{\"format\":1,\"CUDA version\":\"13.2\",}",
            b"[1,2]",
            b"{\"CUDA version\":12.9}",
            b"{\"driver\":[535.5]}",
            b"{\"driver\":\"535\"}",
            b"{\"format\":\"1\"}",
        ] {
            assert!(CompatNote::from_json(bad).is_err(), "{bad:?}");
        }
        let big = format!("{{\"driver\":[{}1]}}", "1,".repeat(MAX_LIST));
        assert!(CompatNote::from_json(big.as_bytes()).is_err());
    }

    #[test]
    fn hook_rule() {
        let n = CompatNote::from_json(DGPU_12_9.as_bytes()).unwrap();
        assert!(forward_compat_applies(
            &v("535.104.05"),
            &v("575.57.08"),
            &n
        ));
        // Same branch, newer build: used (compat version > host version).
        assert!(forward_compat_applies(&v("575.51.03"), &v("575.57.08"), &n));
        assert!(!forward_compat_applies(
            &v("575.57.08"),
            &v("575.57.08"),
            &n
        ));
        assert!(!forward_compat_applies(
            &v("580.65.06"),
            &v("575.57.08"),
            &n
        ));
        // Branch not listed.
        assert!(!forward_compat_applies(
            &v("545.23.06"),
            &v("575.57.08"),
            &n
        ));
        // Leading zeros compare as numbers.
        assert!(forward_compat_applies(
            &v("575.57.008"),
            &v("575.57.09"),
            &n
        ));
        let tegra = CompatNote::from_json(br#"{"format":1,"CUDA version":"13.2"}"#).unwrap();
        assert!(!forward_compat_applies(&v("535.104.05"), &v("1.1"), &tegra));
        assert!(forward_compat_applies_without_note(
            &v("535.104.05"),
            &v("575.57.08")
        ));
        assert!(!forward_compat_applies_without_note(
            &v("575.1"),
            &v("575.57.08")
        ));
    }

    #[test]
    fn verdicts() {
        let n = CompatNote::from_json(DGPU_12_9.as_bytes()).unwrap();
        let lib = v("575.57.08");
        let host = v("535.104.05");

        let w = judge_gpu(&gpu("tesla"), &host, &n, &lib);
        assert!(matches!(w, CompatVerdict::Works { .. }), "{w:?}");
        assert!(w.message().contains(
            "runs through forward compatibility (compat libcuda 575.57.08 on branch 535)"
        ));

        let g = judge_gpu(&gpu("geforce"), &host, &n, &lib);
        let CompatVerdict::Incompatible { reason, message } = &g else {
            panic!("{g:?}")
        };
        assert_eq!(reason, &Incompatibility::BrandNotListed { brand_code: 5 });
        assert_eq!(reason.cuda_error(), 804);
        for part in [
            "GPU 0",
            "brand geforce",
            "branch 535",
            "575.57.08",
            "forward compatibility needs a data-center GPU",
            "a driver branch that supports CUDA 12.9 natively, or a data-center GPU",
            "error 804",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
        assert!(!message.contains('\n'));
        // GeForce RTX and Titan are left out too.
        for b in ["geforcertx", "titan", "titanrtx"] {
            assert!(matches!(
                judge_gpu(&gpu(b), &host, &n, &lib),
                CompatVerdict::Incompatible { .. }
            ));
        }

        let b = judge_gpu(&gpu("tesla"), &v("545.23.06"), &n, &lib);
        let CompatVerdict::Incompatible { reason, message } = &b else {
            panic!("{b:?}")
        };
        assert_eq!(reason, &Incompatibility::BranchNotListed { branch: 545 });
        assert_eq!(reason.cuda_error(), 803);
        assert!(
            message.contains("535, 550, 560, 565, 570, 575"),
            "{message}"
        );
        assert!(message.contains("branch 545"), "{message}");

        let na = judge_gpu(&gpu("geforce"), &v("580.65.06"), &n, &lib);
        assert!(matches!(na, CompatVerdict::NotApplicable { .. }), "{na:?}");

        let u = judge_gpu(&gpu("unknown"), &host, &n, &lib);
        assert!(matches!(u, CompatVerdict::UnknownBrand { .. }), "{u:?}");
        let u = judge_gpu(&gpu("martian\n"), &host, &n, &lib);
        assert!(matches!(u, CompatVerdict::UnknownBrand { .. }), "{u:?}");
        assert!(!u.message().contains('\n'));

        let tegra = CompatNote::from_json(br#"{"format":1,"CUDA version":"13.2"}"#).unwrap();
        let t = judge_gpu(&gpu("tesla"), &host, &tegra, &v("1.1"));
        assert!(matches!(t, CompatVerdict::NoDriverList { .. }), "{t:?}");
        assert!(t.message().contains("CUDA 13.2"));
    }

    #[test]
    fn image_strings_are_escaped() {
        let n = CompatNote {
            cuda_version: Some("12.9\n\u{1b}[31mforged".into()),
            driver: Some(vec![535]),
            device: Some(vec![2]),
            format: None,
        };
        let m = judge_gpu(&gpu("geforce"), &v("535.1"), &n, &v("575.57.08"));
        assert!(!m.message().contains('\n'));
        assert!(!m.message().contains('\u{1b}'));
        assert!(m.message().contains("\\x0a"));
    }
}
