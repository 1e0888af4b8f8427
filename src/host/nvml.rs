//! The NVML probe through `nvml-wrapper`: the driver, CUDA driver version and
//! every GPU, with only the calls the host facts need.
//!
//! nvml-wrapper 0.13 loads the library with libloading and resolves each
//! symbol lazily (nvml-wrapper-sys `NvmlLib::from_library` keeps a `Result`
//! per symbol): a missing library fails `init` with `LibloadingError`, a
//! missing symbol fails only the call that needs it with `FailedToLoadSymbol`.
//! The one exception is `Drop for Nvml`, which calls `nvmlShutdown` through an
//! `expect`: any library we load must export it (ours is checked up front).

use std::ffi::OsStr;
use std::path::Path;

use nvml_wrapper::enum_wrappers::device::Brand;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use crate::core::facts::{Gpu, HostFacts, MigDevice};
use crate::core::health::NvmlHealth;
use crate::host::nvml_error::describe;
use crate::host::nvml_health;

/// The library name the dynamic loader resolves when `host.nvml_library` is
/// empty: the soname the NVIDIA driver installs (nvml-wrapper's default too).
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

#[derive(Debug, thiserror::Error)]
pub enum NvmlProbeError {
    /// The library could not be loaded: NVML is not installed (or the path is wrong).
    #[error("cannot load {library}: {}", load_reason(library, source))]
    Load {
        library: String,
        #[source]
        source: NvmlError,
    },
    /// The library loaded but lacks an NVML entry point.
    #[error("{library} is not a usable NVML library: {}", describe(source))]
    NotNvml {
        library: String,
        #[source]
        source: NvmlError,
    },
    /// nvmlInit failed (driver not loaded, version mismatch, no permission, ...).
    #[error("NVML could not start: {}", describe(source))]
    Init {
        #[source]
        source: NvmlError,
    },
    /// A call after init failed.
    #[error("NVML failed reading {what}: {}", describe(source))]
    Query {
        what: String,
        #[source]
        source: NvmlError,
    },
}

/// [`describe`], without the library's name that dlopen's message repeats
/// (`libnvidia-ml.so.1: cannot open shared object file: ...`).
fn load_reason(library: &str, e: &NvmlError) -> String {
    let text = describe(e);
    match text
        .strip_prefix(library)
        .and_then(|t| t.strip_prefix(": "))
    {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

impl NvmlProbeError {
    /// The NVML error underneath.
    pub fn nvml_error(&self) -> &NvmlError {
        match self {
            NvmlProbeError::Load { source, .. }
            | NvmlProbeError::NotNvml { source, .. }
            | NvmlProbeError::Init { source }
            | NvmlProbeError::Query { source, .. } => source,
        }
    }
}

/// A GPU NVML could not talk to: NVML_ERROR_GPU_IS_LOST ("the GPU has fallen
/// off the bus or is otherwise inaccessible", nvml.h).
#[derive(Clone, Debug, PartialEq)]
pub struct LostGpu {
    pub index: u32,
    /// What failed, e.g. "nvmlDeviceGetHandleByIndex: device fell off the bus ...".
    pub detail: String,
}

/// What NVML said. Lost GPUs stay in `facts.gpus` (index only) so that a
/// container asking for "all" GPUs still sees them and is refused.
#[derive(Clone, Debug, PartialEq)]
pub struct NvmlFacts {
    pub facts: HostFacts,
    pub lost: Vec<LostGpu>,
}

/// Per-GPU outcome: a lost GPU is a finding, not a failed probe.
enum GpuError {
    Lost(String),
    Other(NvmlProbeError),
}

fn gpu_err(what: &str, e: NvmlError) -> GpuError {
    if matches!(e, NvmlError::GpuLost) {
        GpuError::Lost(format!("{what}: {}", describe(&e)))
    } else {
        GpuError::Other(NvmlProbeError::Query {
            what: what.to_string(),
            source: e,
        })
    }
}

/// Optional fields: NOT_SUPPORTED (and anything but a lost GPU) is "unknown".
fn optional<T>(r: Result<T, NvmlError>, what: &str) -> Result<Option<T>, GpuError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::GpuLost) => Err(gpu_err(what, NvmlError::GpuLost)),
        Err(_) => Ok(None),
    }
}

/// The lowercase brand names of the host facts JSON (docs/interfaces.md) for nvmlBrandType_t.
pub fn brand_name(b: &Brand) -> &'static str {
    match b {
        Brand::Unknown => "unknown",
        Brand::Quadro => "quadro",
        Brand::Tesla => "tesla",
        Brand::NVS => "nvs",
        Brand::GRID => "grid",
        Brand::GeForce => "geforce",
        Brand::Titan => "titan",
        Brand::VApps => "vapps",
        Brand::VPC => "vpc",
        Brand::VCS => "vcs",
        Brand::VWS => "vws",
        // NVML_BRAND_NVIDIA_VGAMING == NVML_BRAND_NVIDIA_CLOUD_GAMING (nvml.h).
        Brand::CloudGaming | Brand::VGaming => "cloudgaming",
        Brand::QuadroRTX => "quadrortx",
        Brand::NvidiaRTX => "nvidiartx",
        Brand::Nvidia => "nvidia",
        Brand::GeForceRTX => "geforcertx",
        Brand::TitanRTX => "titanrtx",
    }
}

/// Loads NVML (the given path, else [`DEFAULT_LIBRARY`] through the dynamic
/// loader's search) and reads the host facts.
pub fn probe(library: Option<&Path>) -> Result<NvmlFacts, NvmlProbeError> {
    let lib_os: &OsStr = match library {
        Some(p) => p.as_os_str(),
        None => OsStr::new(DEFAULT_LIBRARY),
    };
    let lib_name = lib_os.to_string_lossy().into_owned();
    let nvml = match Nvml::builder().lib_path(lib_os).init() {
        Ok(n) => n,
        Err(e @ NvmlError::LibloadingError(_)) => {
            return Err(NvmlProbeError::Load {
                library: lib_name,
                source: e,
            })
        }
        Err(e @ NvmlError::FailedToLoadSymbol(_)) => {
            return Err(NvmlProbeError::NotNvml {
                library: lib_name,
                source: e,
            })
        }
        Err(source) => return Err(NvmlProbeError::Init { source }),
    };
    // Drop for Nvml calls nvmlShutdown unchecked (it panics when the symbol
    // is missing): refuse such a library before anything can drop `nvml`.
    if let Err(e) = nvml.lib().nvmlShutdown.as_ref() {
        let source = NvmlError::FailedToLoadSymbol(e.to_string());
        std::mem::forget(nvml);
        return Err(NvmlProbeError::NotNvml {
            library: lib_name,
            source,
        });
    }
    read_facts(&nvml)
}

fn read_facts(nvml: &Nvml) -> Result<NvmlFacts, NvmlProbeError> {
    let q = |what: &str| {
        let what = what.to_string();
        move |source| NvmlProbeError::Query { what, source }
    };
    let driver = nvml
        .sys_driver_version()
        .map_err(q("nvmlSystemGetDriverVersion"))?;
    // nvml.h: NVML_CUDA_DRIVER_VERSION_MAJOR(v) = v / 1000,
    // NVML_CUDA_DRIVER_VERSION_MINOR(v) = (v % 1000) / 10 (12040 -> 12.4,
    // 12100 -> 12.10). The call fails when libcuda.so.1 is missing; the CUDA
    // version is then unknown rather than the probe failed.
    let cuda = nvml.sys_cuda_driver_version().ok().map(|v| {
        format!(
            "{}.{}",
            nvml_wrapper::cuda_driver_version_major(v),
            nvml_wrapper::cuda_driver_version_minor(v)
        )
    });
    let count = nvml.device_count().map_err(q("nvmlDeviceGetCount_v2"))?;
    let mut gpus = Vec::with_capacity(count as usize);
    let mut lost = Vec::new();
    for index in 0..count {
        match read_gpu(nvml, index) {
            Ok(g) => gpus.push(g),
            Err(GpuError::Lost(detail)) => {
                lost.push(LostGpu { index, detail });
                gpus.push(Gpu {
                    index,
                    brand: "unknown".into(),
                    health: Some(crate::core::health::judge(&NvmlHealth {
                        lost: true,
                        ..NvmlHealth::default()
                    })),
                    ..Gpu::default()
                });
            }
            Err(GpuError::Other(e)) => return Err(e),
        }
    }
    let lost_index: Vec<u32> = lost.iter().map(|l| l.index).collect();
    nvml_health::fill_p2p(nvml, &mut gpus, &lost_index);
    Ok(NvmlFacts {
        facts: HostFacts {
            driver_version: Some(driver),
            cuda_driver_version: cuda,
            gpus,
            ..Default::default()
        },
        lost,
    })
}

fn read_gpu(nvml: &Nvml, index: u32) -> Result<Gpu, GpuError> {
    let dev = nvml
        .device_by_index(index)
        .map_err(|e| gpu_err("nvmlDeviceGetHandleByIndex_v2", e))?;
    let uuid = dev.uuid().map_err(|e| gpu_err("nvmlDeviceGetUUID", e))?;
    let name = dev.name().map_err(|e| gpu_err("nvmlDeviceGetName", e))?;
    // An enum value newer than nvml-wrapper knows is "unknown", not a failure.
    let brand = optional(dev.brand(), "nvmlDeviceGetBrand")?
        .map(|b| brand_name(&b))
        .unwrap_or("unknown");
    let cc = optional(
        dev.cuda_compute_capability(),
        "nvmlDeviceGetCudaComputeCapability",
    )?
    .map(|c| format!("{}.{}", c.major, c.minor));
    let memory_mib =
        optional(dev.memory_info(), "nvmlDeviceGetMemoryInfo_v2")?.map(|m| m.total / (1 << 20));
    let pci_bus_id = optional(dev.pci_info(), "nvmlDeviceGetPciInfo_v3")?.map(|p| p.bus_id);
    let minor_number = optional(dev.minor_number(), "nvmlDeviceGetMinorNumber")?;
    let mig_devices = read_migs(&dev)?;
    let health = nvml_health::read(&dev).map_err(|l| GpuError::Lost(l.0))?;
    Ok(Gpu {
        index,
        uuid,
        name,
        brand: brand.to_string(),
        compute_capability: cc,
        memory_mib,
        pci_bus_id,
        mig_devices,
        minor_number,
        health: Some(crate::core::health::judge(&health)),
        ..Gpu::default()
    })
}

/// MIG devices as NVIDIA's go-nvlib walks them (pkg/nvlib/device/device.go,
/// `VisitMigDevices`): MIG mode NOT_SUPPORTED means not MIG capable; slots
/// 0..nvmlDeviceGetMaxMigDeviceCount answering NOT_FOUND or INVALID_ARGUMENT
/// are empty.
fn read_migs(dev: &nvml_wrapper::Device) -> Result<Vec<MigDevice>, GpuError> {
    let mode = match dev.mig_mode() {
        Ok(m) => m,
        Err(NvmlError::NotSupported) | Err(NvmlError::FailedToLoadSymbol(_)) => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(gpu_err("nvmlDeviceGetMigMode", e)),
    };
    // NVML_DEVICE_MIG_ENABLE = 1 (nvml.h).
    if mode.current != 1 {
        return Ok(Vec::new());
    }
    let max = dev
        .mig_device_count()
        .map_err(|e| gpu_err("nvmlDeviceGetMaxMigDeviceCount", e))?;
    let mut out = Vec::new();
    for slot in 0..max {
        match dev.mig_device_by_index(slot) {
            Ok(m) => out.push(MigDevice {
                uuid: m
                    .uuid()
                    .map_err(|e| gpu_err("nvmlDeviceGetUUID (MIG device)", e))?,
            }),
            Err(NvmlError::NotFound) | Err(NvmlError::InvalidArg) => continue,
            Err(e) => return Err(gpu_err("nvmlDeviceGetMigDeviceHandleByIndex", e)),
        }
    }
    Ok(out)
}

/// The GPU Operator's driver root: its driver container's root filesystem,
/// where NVML and the driver libraries are on nodes whose host has no
/// driver installed. NVIDIA's toolkit reads the driver there through its
/// driver-root setting (nvidia-container-toolkit config.toml,
/// `[nvidia-container-cli] root`, which the GPU Operator sets to this path;
/// `nvidia-ctk cdi generate --driver-root`).
pub const OPERATOR_DRIVER_ROOT: &str = "/run/nvidia/driver";

/// Where a driver installs libnvidia-ml.so.1 (Debian/Ubuntu multiarch,
/// RHEL's lib64, others' lib), relative to a root.
const LIBRARY_DIRS: [&str; 5] = [
    "usr/lib/x86_64-linux-gnu",
    "lib/x86_64-linux-gnu",
    "usr/lib64",
    "lib64",
    "usr/lib",
];

/// The NVML library to load when `host.nvml_library` is empty, on the
/// host whose root is `root`: `None` (the loader's own search) when the
/// host has libnvidia-ml.so.1 in its library directories, else the one in
/// the GPU Operator's driver root when it is there, else `None`.
pub fn default_library(root: &Path) -> Option<std::path::PathBuf> {
    let find = |base: &Path| {
        LIBRARY_DIRS
            .iter()
            .map(|d| base.join(d).join(DEFAULT_LIBRARY))
            .find(|p| p.exists())
    };
    if find(root).is_some() {
        return None;
    }
    find(&root.join(OPERATOR_DRIVER_ROOT.trim_start_matches('/')))
}

/// The version in a libnvidia-ml file name (`libnvidia-ml.so.550.90.07`),
/// following the symlink chain from `path`: the driver installs
/// `libnvidia-ml.so.1 -> libnvidia-ml.so.<driver version>`. Used to show the
/// library's side of a driver/library version mismatch, when nvmlInit fails
/// and NVML cannot say its own version.
pub fn library_version_from_path(path: &Path) -> Option<String> {
    let mut cur = path.to_path_buf();
    // A short chain; a loop of links ends here too.
    for _ in 0..8 {
        if let Some(v) = version_in_name(&cur) {
            return Some(v);
        }
        let target = std::fs::read_link(&cur).ok()?;
        cur = match cur.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    None
}

fn version_in_name(p: &Path) -> Option<String> {
    let name = p.file_name()?.to_str()?;
    let v = name.strip_prefix("libnvidia-ml.so.")?;
    let ok = v.contains('.') && v.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    ok.then(|| v.to_string())
}

/// Where the dynamic loader finds `name` (`libnvidia-ml.so.1`), for the
/// mismatch diagnosis: dlopen it, and ask dladdr for the file that holds
/// nvmlInit_v2. None when it cannot be loaded.
pub fn loaded_library_path(name: &str) -> Option<std::path::PathBuf> {
    use std::ffi::{CStr, CString};
    let c_name = CString::new(name).ok()?;
    // SAFETY: dlopen/dlsym/dladdr/dlclose are called with valid C strings
    // and the handle they return; RTLD_LAZY runs no code but the library's
    // constructors, which NVML's loading already ran in this process.
    unsafe {
        let h = libc::dlopen(c_name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if h.is_null() {
            return None;
        }
        let sym = libc::dlsym(h, c"nvmlInit_v2".as_ptr());
        let mut info: libc::Dl_info = std::mem::zeroed();
        let found =
            !sym.is_null() && libc::dladdr(sym, &mut info) != 0 && !info.dli_fname.is_null();
        let path = found.then(|| {
            std::path::PathBuf::from(
                CStr::from_ptr(info.dli_fname)
                    .to_string_lossy()
                    .into_owned(),
            )
        });
        libc::dlclose(h);
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_from_symlink_chain() {
        let d = std::env::temp_dir().join(format!("gg-nvml-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("libnvidia-ml.so.550.90.07"), b"").unwrap();
        std::os::unix::fs::symlink("libnvidia-ml.so.550.90.07", d.join("libnvidia-ml.so.1"))
            .unwrap();
        std::os::unix::fs::symlink("libnvidia-ml.so.1", d.join("libnvidia-ml.so")).unwrap();
        assert_eq!(
            library_version_from_path(&d.join("libnvidia-ml.so")).as_deref(),
            Some("550.90.07")
        );
        std::fs::write(d.join("other.so"), b"").unwrap();
        assert_eq!(library_version_from_path(&d.join("other.so")), None);
        // A loop of links ends.
        std::os::unix::fs::symlink("loop-b", d.join("loop-a")).unwrap();
        std::os::unix::fs::symlink("loop-a", d.join("loop-b")).unwrap();
        assert_eq!(library_version_from_path(&d.join("loop-a")), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn missing_library_is_a_load_error() {
        let e = probe(Some(Path::new("/nonexistent/libnvidia-ml.so.1"))).unwrap_err();
        assert!(matches!(e, NvmlProbeError::Load { .. }), "{e}");
        assert!(
            e.to_string().contains("/nonexistent/libnvidia-ml.so.1"),
            "{e}"
        );
    }

    #[test]
    fn brands_are_design_names() {
        for b in [
            Brand::Unknown,
            Brand::Tesla,
            Brand::GeForceRTX,
            Brand::VGaming,
            Brand::Nvidia,
        ] {
            assert!(
                crate::core::facts::BRANDS.contains(&brand_name(&b)),
                "{b:?}"
            );
        }
        assert_eq!(brand_name(&Brand::VGaming), "cloudgaming");
    }
}
