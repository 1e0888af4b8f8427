//! The host probe: what driver and GPUs this host has, fast enough to pay on
//! every container start.
//!
//! Order (see [`probe`]): the facts file when configured; else the cache;
//! else NVML under a deadline; else /proc/driver/nvidia. Every fault becomes
//! a [`HostProblem`] a person can act on; nothing here panics or blocks past
//! `host.probe_timeout_ms` (plus the few small /proc reads of the cache key).
//!
//! NVML (and the /proc fallback after it) runs in a child process, this
//! binary again with a hidden subcommand ([`child`]): libnvidia-ml is never
//! loaded into the process that serves a container start, so a GPU that
//! hangs the driver in an uninterruptible ioctl cannot keep the hook from
//! exiting or the runtime wrapper from exec'ing the real runtime.
//!
//! Call [`probe`] only for GPU containers: a non-GPU container must never
//! wait for NVML.

pub mod cache;
pub mod cdi;
pub mod child;
pub mod device_nodes;
pub mod devnodes;
pub mod facts_file;
pub mod kernel;
pub mod kfd;
pub mod nvidia_config;
pub mod nvml;
pub mod nvml_error;
pub mod nvml_health;
pub mod procfs;
pub mod topology;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::core::facts::{HostFacts, HostProblem, HostProblemKind, HostReport, HostSource};
use crate::core::policy::HostConfig;
use crate::host::facts_file::ConfiguredFactsFile;

/// TEST ONLY overrides of the host paths the probe reads, for end-to-end
/// tests of the binary with fake trees: `/proc/driver/nvidia`, `/dev`, the
/// boot id file, /proc/modules and /proc/devices. Only a binary built with
/// the `test-hooks` cargo feature reads them; a release build ignores them,
/// so nothing in a container host's environment can redirect the probe.
#[cfg(feature = "test-hooks")]
pub const ENV_PROC_NVIDIA: &str = "GPU_GUARD_PROC_NVIDIA";
#[cfg(feature = "test-hooks")]
pub const ENV_DEV_DIR: &str = "GPU_GUARD_DEV_DIR";
#[cfg(feature = "test-hooks")]
pub const ENV_BOOT_ID_FILE: &str = "GPU_GUARD_BOOT_ID_FILE";
#[cfg(feature = "test-hooks")]
pub const ENV_PROC_MODULES: &str = "GPU_GUARD_PROC_MODULES";
#[cfg(feature = "test-hooks")]
pub const ENV_PROC_DEVICES: &str = "GPU_GUARD_PROC_DEVICES";
/// TEST ONLY: the root the AMD facts (KFD topology, amdgpu) are read under.
#[cfg(feature = "test-hooks")]
pub const ENV_HOST_ROOT: &str = "GPU_GUARD_HOST_ROOT";
/// TEST ONLY: the root [`nvml::default_library`] searches (the host's
/// library directories and the GPU Operator's driver root under it).
#[cfg(feature = "test-hooks")]
pub const ENV_LIBRARY_ROOT: &str = "GPU_GUARD_LIBRARY_ROOT";

/// The NVML library the probe loads: `host.nvml_library`, else the host's
/// own (the loader's search), else the GPU Operator's driver root's.
fn nvml_library(configured: &str) -> String {
    if !configured.is_empty() {
        return configured.to_string();
    }
    #[cfg(feature = "test-hooks")]
    let root = std::env::var_os(ENV_LIBRARY_ROOT)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    #[cfg(not(feature = "test-hooks"))]
    let root = PathBuf::from("/");
    nvml::default_library(&root)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}
#[cfg(feature = "test-hooks")]
pub const ENV_SYS_DIR: &str = "GPU_GUARD_SYS_DIR";

/// The host paths the probe reads, and the binary it runs NVML in; tests
/// point them at fake trees and at the gpu-guard binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbePaths {
    /// `/proc/driver/nvidia`
    pub proc_nvidia: PathBuf,
    /// `/dev` (for `nvidiactl`, `nvidia-uvm`, `nvidiaN`)
    pub dev: PathBuf,
    /// None: `/proc/sys/kernel/random/boot_id`, read through procfs;
    /// Some: a test's stand-in file. Likewise the two below.
    pub boot_id: Option<PathBuf>,
    /// None: `/proc/modules`.
    pub modules: Option<PathBuf>,
    /// None: `/proc/devices`.
    pub devices: Option<PathBuf>,
    /// `/sys`: each GPU's NUMA node and local CPUs (topology.rs).
    pub sys: PathBuf,
    /// The gpu-guard binary the uncached probe runs in ([`child`]):
    /// [`SELF_EXE`] in gpu-guard itself. A program that links the library
    /// (a test) names a gpu-guard binary here.
    pub probe_exe: PathBuf,
    /// The root the AMD facts are read under (`sys/class/kfd`,
    /// `sys/module/amdgpu`, [`kfd`]): `/`, or `--host-root`.
    pub host_root: PathBuf,
}

/// This process's own binary, still the same file after an upgrade replaced
/// it on disk.
pub const SELF_EXE: &str = "/proc/self/exe";

impl ProbePaths {
    /// The real host paths.
    pub fn system() -> ProbePaths {
        ProbePaths {
            proc_nvidia: PathBuf::from("/proc/driver/nvidia"),
            dev: PathBuf::from("/dev"),
            boot_id: None,
            modules: None,
            devices: None,
            sys: PathBuf::from("/sys"),
            probe_exe: PathBuf::from(SELF_EXE),
            host_root: PathBuf::from("/"),
        }
    }

    /// The paths of a host whose root filesystem is mounted at `root`
    /// (`gpu-guard host --host-root`): its /proc, /dev and /sys there.
    pub fn under_root(root: &Path) -> ProbePaths {
        let at = |p: &str| root.join(p);
        ProbePaths {
            proc_nvidia: at("proc/driver/nvidia"),
            dev: at("dev"),
            boot_id: Some(at("proc/sys/kernel/random/boot_id")),
            modules: Some(at("proc/modules")),
            devices: Some(at("proc/devices")),
            sys: at("sys"),
            probe_exe: PathBuf::from(SELF_EXE),
            host_root: root.to_path_buf(),
        }
    }

    /// The real host paths. A build with the `test-hooks` feature lets the
    /// test-only variables ([`ENV_PROC_NVIDIA`] and the others) replace them.
    pub fn from_env() -> ProbePaths {
        #[cfg(feature = "test-hooks")]
        {
            let mut p = ProbePaths::system();
            let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
            if let Some(v) = var(ENV_PROC_NVIDIA) {
                p.proc_nvidia = PathBuf::from(v);
            }
            if let Some(v) = var(ENV_DEV_DIR) {
                p.dev = PathBuf::from(v);
            }
            p.boot_id = var(ENV_BOOT_ID_FILE).map(PathBuf::from);
            p.modules = var(ENV_PROC_MODULES).map(PathBuf::from);
            p.devices = var(ENV_PROC_DEVICES).map(PathBuf::from);
            if let Some(v) = var(ENV_HOST_ROOT) {
                p.host_root = PathBuf::from(v);
            }
            if let Some(v) = var(ENV_SYS_DIR) {
                p.sys = PathBuf::from(v);
            }
            p
        }
        #[cfg(not(feature = "test-hooks"))]
        ProbePaths::system()
    }
}

/// The host as gpu-guard sees it: facts file if configured, else the cache,
/// else NVML under the deadline, else /proc. Never panics; never blocks past
/// `cfg.probe_timeout_ms` (+ small slack).
pub fn probe(cfg: &HostConfig) -> HostReport {
    probe_with(cfg, &ProbePaths::from_env())
}

/// The probe a GPU container start makes under `cfg`: [`probe`] with the
/// cache's lifetime shortened to `[health] max_age_s` while health is
/// checked, so a GPU that fails after the last probe is seen within that
/// time (core::health::HealthConfig::cache_ttl_s).
pub fn probe_for(cfg: &crate::core::policy::Config) -> HostReport {
    probe_for_with(cfg, &ProbePaths::from_env())
}

/// [`probe_for`] with explicit host paths.
pub fn probe_for_with(cfg: &crate::core::policy::Config, paths: &ProbePaths) -> HostReport {
    let mut host = cfg.host.clone();
    host.cache_ttl_s = cfg.health.cache_ttl_s(host.cache_ttl_s);
    probe_with(&host, paths)
}

/// [`probe`] with explicit host paths (tests drive the /proc fallback and the
/// no-driver case with fake trees).
pub fn probe_with(cfg: &HostConfig, paths: &ProbePaths) -> HostReport {
    if !cfg.facts_file.is_empty() {
        return ConfiguredFactsFile(PathBuf::from(&cfg.facts_file)).report();
    }
    // The driver side of the cache key, read once; also reused to show the
    // loaded kernel module when NVML hangs.
    let version = procfs::read_version(&paths.proc_nvidia);
    let version_text = match &version {
        Ok(v) => v.clone(),
        Err(_) => None,
    };
    let cache = cache_setup(cfg, paths, &version);
    if let Some((path, key)) = &cache {
        match cache::load(path, key, cfg.cache_ttl_s, cache::now_unix_ms()) {
            Ok(hit) => {
                let mut r = HostReport::from_facts(
                    hit.facts,
                    format!(
                        "cache {} (from {}, {} s old)",
                        path.display(),
                        hit.source,
                        hit.age_ms / 1000
                    ),
                );
                merge_amd(&mut r, paths);
                return r;
            }
            Err(miss) => log::debug!("host facts cache not used: {miss}"),
        }
    }

    // The only place NVML is reached from the serving process: through a
    // child, cut at the deadline (child.rs).
    let outcome = child::run(
        &paths.probe_exe,
        &nvml_library(&cfg.nvml_library),
        paths,
        cfg.probe_timeout_ms,
    );
    let mut report = match outcome {
        Ok(mut u) => {
            if let (true, Some((path, key)), Some(facts)) = (u.cacheable, &cache, &u.report.facts) {
                match cache::store(path, key, facts, &u.report.source, cache::now_unix_ms()) {
                    Ok(()) => {}
                    // A directory others can write is a finding a person
                    // must see: every start pays for NVML until it is fixed.
                    Err(e @ cache::CacheError::UnsafeDir(_)) => {
                        log::warn!("host facts not cached: {e}");
                        u.report.problems.push(HostProblem {
                            kind: HostProblemKind::Degraded,
                            message: format!("host facts not cached: {e}"),
                            fix: Some(format!(
                                "make the directory of host.cache_file ({}) owned by root and not writable by group or others, or point host.cache_file elsewhere",
                                path.display()
                            )),
                        });
                    }
                    // An unwritable cache costs speed, not correctness.
                    Err(e) => log::debug!("host facts not cached: {e}"),
                }
            }
            u.report
        }
        Err(e) => deadline_failure(cfg, &e, version_text.as_deref()),
    };
    merge_amd(&mut report, paths);
    report
}

/// Adds the AMD GPUs and the amdgpu driver ([`kfd`]) to established
/// facts. Read afresh on every probe, never cached: a few small sysfs
/// reads, and the cache key knows nothing of amdgpu.
fn merge_amd(report: &mut HostReport, paths: &ProbePaths) {
    let Some(facts) = report.facts.as_mut() else {
        return;
    };
    let mut amd = kfd::read(&paths.host_root);
    facts.amdgpu_driver_version = amd.driver_version;
    // Their NUMA node and local CPUs, as for NVIDIA's (topology.rs).
    for g in &mut amd.gpus {
        let Some(bus) = g.pci_bus_id.as_deref() else {
            continue;
        };
        if let Some((node, cpus)) = topology::read_device(&paths.sys, bus) {
            g.numa_node = Some(node);
            g.local_cpus = cpus;
        }
    }
    facts.gpus.extend(amd.gpus);
    for message in amd.problems {
        report.problems.push(HostProblem {
            kind: HostProblemKind::Degraded,
            message,
            fix: Some(
                "check the amdgpu driver (`dmesg | grep -i amdgpu`); gpu-guard reads the KFD topology as root".into(),
            ),
        });
    }
}

/// The cache path and key, or None when the cache is off or its key cannot
/// be established (then a stale file could not be told from a fresh one).
fn cache_setup(
    cfg: &HostConfig,
    paths: &ProbePaths,
    version: &Result<Option<String>, procfs::ProcError>,
) -> Option<(PathBuf, cache::CacheKey)> {
    if cfg.cache_file.is_empty() || cfg.cache_ttl_s == 0 {
        return None;
    }
    let driver = match version {
        Ok(Some(text)) => text.clone(),
        Ok(None) => "none".to_string(),
        Err(e) => {
            log::debug!("host facts cache off: {e}");
            return None;
        }
    };
    let boot_id = match kernel::boot_id(paths.boot_id.as_deref()) {
        Ok(b) => b,
        Err(e) => {
            log::debug!("host facts cache off: no boot id: {e}");
            return None;
        }
    };
    Some((
        PathBuf::from(&cfg.cache_file),
        cache::CacheKey {
            driver,
            boot_id,
            nvml_library: cfg.nvml_library.clone(),
        },
    ))
}

/// A probe that did not finish (timeout, or the probe process failed).
fn deadline_failure(
    cfg: &HostConfig,
    e: &child::ChildError,
    version_text: Option<&str>,
) -> HostReport {
    let lib = library_label(&cfg.nvml_library);
    let module = version_text
        .and_then(procfs::kernel_module_version)
        .map(|v| format!(" (kernel module {v} is loaded)"))
        .unwrap_or_default();
    let message = match e {
        child::ChildError::TimedOut(ms) => format!(
            "NVML did not answer within {ms} ms: {lib} hung{module}; a GPU or the driver is not responding"
        ),
        other => format!("NVML probe failed: {other}"),
    };
    HostReport::failed(
        format!("NVML ({lib})"),
        HostProblem {
            kind: HostProblemKind::ProbeFailed,
            message,
            fix: Some(
                "run `nvidia-smi` and look for Xid errors with `dmesg | grep -i xid`; a hung GPU needs a reset (`nvidia-smi -r`) or a reboot"
                    .into(),
            ),
        },
    )
}

fn library_label(configured: &str) -> String {
    if configured.is_empty() {
        nvml::DEFAULT_LIBRARY.to_string()
    } else {
        configured.to_string()
    }
}

use child::Uncached;

/// The uncached probe: NVML, else /proc. Runs only in the probe child
/// ([`child::serve`]); the serving process never calls it.
fn uncached(configured_lib: &str, paths: &ProbePaths) -> Uncached {
    let lib = library_label(configured_lib);
    let lib_path = (!configured_lib.is_empty()).then(|| Path::new(configured_lib));
    let source = format!("NVML ({lib})");
    let mut u = match nvml::probe(lib_path) {
        Ok(n) => {
            let mut report = HostReport::from_facts(n.facts, source);
            let cacheable = n.lost.is_empty();
            if !n.lost.is_empty() {
                lost_gpu_problems(&mut report, &n.lost, paths);
            }
            Uncached { report, cacheable }
        }
        Err(e) => Uncached {
            report: nvml_failure(&lib, lib_path, &e, paths),
            cacheable: false,
        },
    };
    // Bus ids are known now (a lost GPU's from /proc): where sysfs puts
    // each GPU. Cached with the rest: a device's node does not change.
    if let Some(f) = u.report.facts.as_mut() {
        topology::fill(f, &paths.sys);
    }
    u
}

/// Names the lost GPUs. NVML cannot describe a GPU it lost, but /proc still
/// lists it: the /proc GPUs whose bus ids NVML did not report are the lost
/// ones, and when the count matches they are named by model and bus id.
fn lost_gpu_problems(report: &mut HostReport, lost: &[nvml::LostGpu], paths: &ProbePaths) {
    let proc_gpus = procfs::read_gpus(&paths.proc_nvidia).unwrap_or_default();
    let Some(facts) = report.facts.as_mut() else {
        return;
    };
    let seen: Vec<&str> = facts
        .gpus
        .iter()
        .filter_map(|g| g.pci_bus_id.as_deref())
        .collect();
    let missing: Vec<&procfs::ProcGpu> = proc_gpus
        .iter()
        .filter(|p| p.pci_bus_id.as_deref().is_some_and(|b| !seen.contains(&b)))
        .collect();
    let named = missing.len() == lost.len();
    for (i, l) in lost.iter().enumerate() {
        let mut who = format!("GPU {}", l.index);
        if named {
            let p = missing[i];
            if let Some(g) = facts.gpus.iter_mut().find(|g| g.index == l.index) {
                g.name = p.model.clone().unwrap_or_default();
                g.uuid = p.uuid.clone().unwrap_or_default();
                g.pci_bus_id = p.pci_bus_id.clone();
                g.minor_number = p.minor;
            }
            let mut parts = Vec::new();
            if let Some(m) = &p.model {
                parts.push(m.clone());
            }
            if let Some(b) = &p.pci_bus_id {
                parts.push(format!("bus {b}"));
            }
            if let Some(u) = &p.uuid {
                parts.push(u.clone());
            }
            if !parts.is_empty() {
                who.push_str(&format!(" ({})", parts.join(", ")));
            }
        }
        report.problems.push(HostProblem {
            kind: HostProblemKind::GpuLost { index: l.index },
            message: format!(
                "{who} is lost: it fell off the bus or stopped answering ({})",
                l.detail
            ),
            fix: Some(format!(
                "look for Xid 79 (\"GPU has fallen off the bus\") and other Xid errors with `dmesg | grep -i xid`; drain this node and reset GPU {} (`nvidia-smi -r -i {}`) or reboot; check its power and seating if it recurs",
                l.index, l.index
            )),
        });
    }
}

/// NVML failed before giving facts: a version mismatch, NVML missing (then
/// /proc), the kernel module missing, or another init failure.
fn nvml_failure(
    lib: &str,
    lib_path: Option<&Path>,
    e: &nvml::NvmlProbeError,
    paths: &ProbePaths,
) -> HostReport {
    use nvml_wrapper::error::NvmlError;
    let source = format!("NVML ({lib})");
    match (e, e.nvml_error()) {
        (nvml::NvmlProbeError::Init { .. }, NvmlError::LibRmVersionMismatch) => {
            version_mismatch(lib, lib_path, paths)
        }
        (nvml::NvmlProbeError::Load { .. }, _)
        | (nvml::NvmlProbeError::NotNvml { .. }, _)
        | (nvml::NvmlProbeError::Init { .. }, NvmlError::DriverNotLoaded) => {
            proc_fallback(&e.to_string(), paths)
        }
        (_, NvmlError::GpuLost) => HostReport::failed(
            source,
            HostProblem {
                kind: HostProblemKind::ProbeFailed,
                message: format!("NVML reports a lost GPU and cannot go on: {e}"),
                fix: Some(
                    "look for Xid 79 (\"GPU has fallen off the bus\") with `dmesg | grep -i xid`; reset the GPU (`nvidia-smi -r`) or reboot"
                        .into(),
                ),
            },
        ),
        (_, NvmlError::NoPermission) => HostReport::failed(
            source,
            HostProblem {
                kind: HostProblemKind::ProbeFailed,
                message: format!("NVML has no permission to talk to the driver: {e}"),
                fix: Some(
                    "run gpu-guard as root (OCI hooks and runtimes run as root), or check the permissions of /dev/nvidiactl"
                        .into(),
                ),
            },
        ),
        _ => HostReport::failed(
            source,
            HostProblem {
                kind: HostProblemKind::ProbeFailed,
                message: format!("NVML probe failed: {e}"),
                fix: Some(
                    "run `nvidia-smi` to see the driver's own error, and look for Xid errors with `dmesg | grep -i xid`"
                        .into(),
                ),
            },
        ),
    }
}

/// NVML_ERROR_LIB_RM_VERSION_MISMATCH: the user-space driver was upgraded
/// and the old kernel module is still loaded (nvidia-smi: "Failed to
/// initialize NVML: Driver/library version mismatch").
fn version_mismatch(lib: &str, lib_path: Option<&Path>, paths: &ProbePaths) -> HostReport {
    let module = procfs::read_version(&paths.proc_nvidia)
        .ok()
        .flatten()
        .and_then(|t| procfs::kernel_module_version(&t))
        .unwrap_or_else(|| "unknown".into());
    let file = match lib_path {
        Some(p) => Some(p.to_path_buf()),
        None => nvml::loaded_library_path(nvml::DEFAULT_LIBRARY),
    };
    let library = file
        .as_deref()
        .and_then(nvml::library_version_from_path)
        .unwrap_or_else(|| "unknown".into());
    HostReport::failed(
        format!("NVML ({lib})"),
        HostProblem {
            kind: HostProblemKind::ProbeFailed,
            message: format!(
                "NVIDIA driver/library version mismatch: the loaded kernel module is {module} but libnvidia-ml is {library} ({lib})"
            ),
            fix: Some(format!(
                "kernel module {module}, libnvidia-ml {library}: reboot, or reinstall the driver matching the loaded module"
            )),
        },
    )
}

/// NVML is unusable: read what /proc says, or report that there is no driver.
fn proc_fallback(nvml_error: &str, paths: &ProbePaths) -> HostReport {
    let version_path = paths.proc_nvidia.join("version");
    match procfs::read_version(&paths.proc_nvidia) {
        Ok(Some(text)) => match procfs::read_gpus(&paths.proc_nvidia) {
            Ok(_) if procfs::kernel_module_version(&text).is_none() => HostReport::failed(
                procfs_source(paths),
                HostProblem {
                    kind: HostProblemKind::ProbeFailed,
                    message: format!(
                        "NVML not available ({nvml_error}) and {} names no driver version",
                        version_path.display()
                    ),
                    fix: Some(
                        "install the NVIDIA driver's NVML library (libnvidia-ml.so.1)".into(),
                    ),
                },
            ),
            Ok(gpus) => {
                let facts = procfs::facts(&text, &gpus);
                let mut message = format!(
                    "NVML not available: {nvml_error}; compute capability unknown, arch requirements cannot be judged"
                );
                if let (Some(d), Some(c)) = (&facts.driver_version, &facts.cuda_driver_version) {
                    let _ = write!(message, "; CUDA {c} inferred from driver branch {d}");
                }
                let mut r = HostReport::from_facts(facts, procfs_source(paths));
                r.problems.push(HostProblem {
                    kind: HostProblemKind::Degraded,
                    message,
                    fix: Some(
                        "install the NVIDIA driver's NVML library (libnvidia-ml.so.1, matching the loaded kernel module) or set host.nvml_library to it"
                            .into(),
                    ),
                });
                r
            }
            Err(e) => HostReport::failed(
                procfs_source(paths),
                HostProblem {
                    kind: HostProblemKind::ProbeFailed,
                    message: format!("NVML not available ({nvml_error}) and {e}"),
                    fix: Some(
                        "install the NVIDIA driver's NVML library (libnvidia-ml.so.1)".into(),
                    ),
                },
            ),
        },
        Ok(None) => no_driver(nvml_error, &version_path, paths),
        Err(e) => HostReport::failed(
            procfs_source(paths),
            HostProblem {
                kind: HostProblemKind::ProbeFailed,
                message: format!("NVML not available ({nvml_error}) and {e}"),
                fix: Some("install the NVIDIA driver's NVML library (libnvidia-ml.so.1)".into()),
            },
        ),
    }
}

/// Neither NVML nor /proc/driver/nvidia: says what the kernel shows of the
/// module (/proc/modules, /proc/devices) and whether /dev/nvidiactl exists.
fn no_driver(nvml_error: &str, version_path: &Path, paths: &ProbePaths) -> HostReport {
    let ctl = paths.dev.join("nvidiactl");
    let ctl_state = if ctl.exists() { "present" } else { "missing" };
    let kernel_side = kernel::describe(paths.modules.as_deref(), paths.devices.as_deref());
    HostReport {
        facts: Some(HostFacts::default()),
        problems: vec![HostProblem {
            kind: HostProblemKind::NoDriver,
            message: format!(
                "no NVIDIA driver on this host: {nvml_error}; {} is missing; {kernel_side}; {} is {ctl_state}",
                version_path.display(),
                ctl.display()
            ),
            fix: Some(
                "install the NVIDIA driver and load its kernel module (`modprobe nvidia`, check `dmesg`), or run GPU containers on a GPU host"
                    .into(),
            ),
        }],
        source: "no driver".into(),
    }
}

fn procfs_source(paths: &ProbePaths) -> String {
    paths.proc_nvidia.display().to_string()
}

/// The host's NVIDIA device nodes at fault (core::device_nodes): every
/// GPU's node, /dev/nvidiactl and /dev/nvidia-uvm under `dev`, each as
/// (is an error, message, fix), for `gpu-guard host` and `doctor`. Nothing
/// without a driver. A container start judges only the nodes it will use,
/// against its user (pipeline/local.rs).
pub fn device_node_problems(
    facts: &HostFacts,
    dev: &Path,
    devices: Option<&Path>,
    group_file: &Path,
) -> Vec<(bool, String, String)> {
    if facts.driver_version.is_none() {
        return Vec::new();
    }
    let names = devnodes::nvidia_names(&facts.gpus);
    let nodes = devnodes::read(dev, devices, &names, group_file);
    crate::core::device_nodes::host_problems(&nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::facts::Gpu;

    #[test]
    fn device_nodes_checked_only_with_a_driver() {
        let dev = std::env::temp_dir().join(format!("gg-dev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dev);
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("nvidiactl"), b"").unwrap();
        let gpu = |i: u32, minor| Gpu {
            index: i,
            minor_number: Some(minor),
            ..Gpu::default()
        };
        let facts = HostFacts {
            driver_version: Some("550.54.14".into()),
            cuda_driver_version: None,
            gpus: vec![gpu(0, 0), gpu(1, 3)],
            ..Default::default()
        };
        let none = dev.join("none");
        let p = device_node_problems(&facts, &dev, Some(&none), &none);
        let text: Vec<&str> = p.iter().map(|(_, m, _)| m.as_str()).collect();
        assert_eq!(p.len(), 4, "{text:?}");
        assert!(
            p[0].0 && text[0].contains("nvidiactl is a regular file"),
            "{text:?}"
        );
        assert!(
            !p[1].0 && text[1].contains("nvidia-uvm is missing"),
            "{text:?}"
        );
        assert!(text[3].contains("nvidia3"), "{text:?}");
        assert!(device_node_problems(&HostFacts::default(), &none, None, &none).is_empty());
        std::fs::remove_dir_all(&dev).unwrap();
    }
}
