//! The host policy: gpu-guard's configuration as values. Reading the file
//! is [`crate::config`]'s job; this module only holds the types and their
//! defaults ([`crate::core::policy_check`] holds the checks serde cannot
//! make).
//!
//! `Config::default()` equals the shipped `config/config.toml` (a test in
//! [`crate::config`] holds them together). Unknown keys are errors that name
//! the key, so a typo never silently weakens the policy.

use serde::{Deserialize, Serialize};

pub use crate::core::enforcement::Enforcement;
pub use crate::core::gpu_health::HealthConfig;
pub use crate::core::tuning_config::{
    Limit, Memlock, NcclP2p, NumaMode, ShmSize, TuningConfig, TuningRule,
};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The top-level `mode`: what the whole decision does. Not an
/// [`Enforcement`]: it also says whether edits are applied (`warn` still
/// applies them, `audit` decides as enforce and changes nothing, `off`
/// does nothing at all).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Refuse on errors, apply edits.
    Enforce,
    /// Log what enforce would refuse, start the container anyway, still apply edits.
    Warn,
    /// Decide as enforce would and log it (what would be refused, what
    /// would be edited); the entry points refuse nothing and change
    /// nothing: the first step of a rollout (docs/operator.md, "Rolling out").
    Audit,
    /// Do nothing at all.
    Off,
}

impl Mode {
    /// Whether a decision's verdict is enforce's: refused on errors.
    /// Under `audit` it is, so `check` and the logs say what enforce would
    /// do; the entry points then do not act on it.
    pub fn refuses(self) -> bool {
        matches!(self, Mode::Enforce | Mode::Audit)
    }

    /// The mode's name as config.toml spells it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Warn => "warn",
            Mode::Audit => "audit",
            Mode::Off => "off",
        }
    }
}

/// `host.on_probe_failure`, `security.privileged`: refuse the container,
/// or let it start (with a warning). Not an [`Enforcement`]: there is no
/// "off" that would skip the check, and `allow` is what the key is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    Refuse,
    Allow,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApplyTo {
    Gpu,
    All,
}

/// When an env request for GPUs (`NVIDIA_VISIBLE_DEVICES`, a legacy
/// `CUDA_VERSION`, device-list volume mounts) makes a GPU container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnvRequests {
    /// Only when something will attach GPUs: NVIDIA's hook, NVIDIA's
    /// runtime chained by the wrapper, CDI devices or `/dev/nvidia*` nodes.
    WhenAttached,
    /// Always, as if NVIDIA's runtime ran every container.
    Always,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectConfig {
    pub env_requests: EnvRequests,
    /// CDI kinds (`vendor/class`) that name NVIDIA GPUs, besides the
    /// built-in `nvidia.com/gpu`, `nvidia.com/mig` and `runtime.nvidia.com/gpu`.
    pub cdi_kinds: Vec<String>,
    /// NVIDIA's container toolkit config, read for [`NvidiaDeviceSettings`];
    /// `""`: NVIDIA's defaults.
    pub nvidia_config: String,
    /// What NVIDIA's toolkit on this host honours, from `nvidia_config`
    /// (filled when the config is loaded, not a key of gpu-guard's own).
    #[serde(skip)]
    pub nvidia: NvidiaDeviceSettings,
    /// The character-device majors this host's kernel registered
    /// (`/proc/devices`): which dynamic majors are GPU drivers'
    /// (core::device_table; filled when the config is loaded).
    #[serde(skip)]
    pub majors: crate::core::device_table::HostMajors,
}

/// The two settings of NVIDIA's toolkit that decide which device requests
/// it acts on (`/etc/nvidia-container-runtime/config.toml`, top level;
/// nvidia-container-toolkit api/config/v1/config.go, `Config` and
/// `GetDefault`; internal/config/image/cuda_image.go, `VisibleDevices`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvidiaDeviceSettings {
    /// `accept-nvidia-visible-devices-as-volume-mounts` (default false):
    /// the device list of `/dev/null` mounts under
    /// `/var/run/nvidia-container-devices/` is honoured, and then wins
    /// over the env.
    pub accept_volume_mounts: bool,
    /// `accept-nvidia-visible-devices-envvar-when-unprivileged` (default
    /// true): `NVIDIA_VISIBLE_DEVICES` is honoured in a container without
    /// `CAP_SYS_ADMIN` in its bounding set.
    pub accept_envvar_unprivileged: bool,
}

impl Default for NvidiaDeviceSettings {
    fn default() -> Self {
        NvidiaDeviceSettings {
            accept_volume_mounts: false,
            accept_envvar_unprivileged: true,
        }
    }
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            env_requests: EnvRequests::WhenAttached,
            // The k8s device plugin's cdi-annotations / cdi-cri strategies
            // (NVIDIA/k8s-device-plugin: cdi.WithVendor("k8s.device-plugin.nvidia.com")).
            cdi_kinds: vec!["k8s.device-plugin.nvidia.com/gpu".into()],
            nvidia_config: "/etc/nvidia-container-runtime/config.toml".into(),
            nvidia: NvidiaDeviceSettings::default(),
            majors: Default::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub mode: Mode,
    pub host: HostConfig,
    pub detect: DetectConfig,
    pub requirements: RequirementsConfig,
    pub tuning: TuningConfig,
    pub security: SecurityConfig,
    pub runtime: RuntimeConfig,
    pub kernel_image: KernelImageConfig,
    pub compat: CompatConfig,
    pub libraries: LibrariesConfig,
    pub health: HealthConfig,
    pub log: LogConfig,
    pub metrics: MetricsConfig,
    pub admission: super::admission::AdmissionConfig,
}

/// `[libraries]`: the libraries scan of a container's rootfs
/// (core::libraries): what its findings do, its cache and its budgets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LibrariesConfig {
    /// `warn` (default): warnings; `enforce`: refuse a container whose
    /// libraries will not load or whose CUDA runtime the driver cannot run;
    /// `off`: no scan.
    #[serde(with = "crate::core::enforcement::spelling::off_warn_enforce")]
    pub severity: Enforcement,
    /// An unfinished scan under `enforce`: `warn` or `refuse`.
    #[serde(with = "crate::core::enforcement::spelling::warn_enforce")]
    pub on_incomplete: Enforcement,
    /// Results kept by the identity of every file they read; empty: none.
    pub cache_dir: String,
    /// Directories walked per container.
    pub max_dirs: u64,
    /// ELF files parsed per container.
    pub max_files: u64,
    /// Bytes read per container (headers and dynamic sections, not sizes).
    pub max_bytes: u64,
    /// Bytes read from any one file: past this it is not judged.
    pub max_file_bytes: u64,
    pub time_budget_ms: u64,
}

impl Default for LibrariesConfig {
    fn default() -> LibrariesConfig {
        LibrariesConfig {
            severity: Enforcement::Warn,
            on_incomplete: Enforcement::Warn,
            cache_dir: "/run/gpu-guard/libraries".into(),
            max_dirs: 100_000,
            max_files: 20_000,
            max_bytes: 256 << 20,
            max_file_bytes: 4 << 20,
            time_budget_ms: 2_000,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    pub facts_file: String,
    pub nvml_library: String,
    pub probe_timeout_ms: u64,
    pub on_probe_failure: OnFailure,
    pub cache_file: String,
    pub cache_ttl_s: u64,
    /// The CDI spec directories, in CDI's order of precedence (a device
    /// defined in a later directory overrides the earlier one): checked for
    /// stale NVIDIA specs when a container asks for CDI devices. Empty: no check.
    pub cdi_spec_dirs: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequirementsConfig {
    pub honor_disable_require: bool,
    /// CUDA minor-version compatibility for `cuda>=X.Y` factors that fail
    /// only on the minor version (`core::compat_check`).
    pub minor_version_compatibility: MinorVersionCompat,
}

/// `requirements.minor_version_compatibility`. Not an [`Enforcement`]:
/// `allow` admits what the requirement check refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MinorVersionCompat {
    /// A failing `cuda>=X.Y` refuses, as NVIDIA's check does.
    Off,
    /// Refuses as `off`, plus a finding saying whether `allow` would admit.
    Warn,
    /// Admits when every condition holds (same major, driver at least the
    /// family minimum, all scanned GPU code runs as SASS), with a warning.
    Allow,
}

/// `[compat]`: CUDA forward compatibility.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompatConfig {
    /// A requirement met only through a forward-compatibility alternative
    /// while the image ships no compat library: `refuse` or `warn`.
    #[serde(with = "crate::core::enforcement::spelling::warn_enforce")]
    pub missing_library: Enforcement,
}

impl Default for CompatConfig {
    fn default() -> Self {
        CompatConfig {
            missing_library: Enforcement::Warn,
        }
    }
}

/// `[metrics]`: decision counters for Prometheus' node_exporter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// The `*.prom` file node_exporter's textfile collector reads; empty: off.
    pub textfile: String,
    /// Where the counts and the lock live between decisions (a tmpfs, so
    /// that an update costs no disk flush and counts restart at boot);
    /// empty: beside the textfile.
    pub state_dir: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            textfile: String::new(),
            state_dir: "/run/gpu-guard/metrics".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecurityConfig {
    pub apply_to: ApplyTo,
    pub no_new_privileges: bool,
    /// The default security profile (core::profiles): a built-in name or
    /// one of `profiles`.
    pub profile: String,
    /// An explicit allowlist; when set it replaces the profile's list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    pub privileged: OnFailure,
    /// The built-in `restricted` profile refuses uid 0.
    pub restricted_refuse_root: bool,
    /// Admin-defined profiles, `[security.profiles.NAME]`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub profiles: BTreeMap<String, ProfileDef>,
    /// `[[security.exceptions]]`, first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exceptions: Vec<Exception>,
}

/// `[security.profiles.NAME]`: an admin-defined profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileDef {
    pub capabilities: Vec<String>,
    /// Forces no_new_privileges for containers under this profile.
    pub no_new_privileges: bool,
    /// Refuses containers under this profile that run as uid 0.
    pub refuse_root: bool,
}

/// `[[security.exceptions]]`: containers selected by facts their CRI
/// runtime records (core::profiles::CriFacts) get another profile, or may
/// run privileged. Selectors are globs (`*`, `?`); every one given must match.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Exception {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// The profile the selected containers get instead of the default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Selected containers may be privileged (left untouched, a warning).
    pub allow_privileged: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    pub path: String,
    /// Per-engine chains and the runtime roots that tell the engines apart.
    pub engines: crate::core::runtime_engines::Engines,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KernelImageConfig {
    /// `off`, `warn` or `enforce` (refuse).
    #[serde(with = "crate::core::enforcement::spelling::off_warn_enforce")]
    pub severity: Enforcement,
    /// Globs relative to the rootfs (`*`, `?`, `[..]`, `{a,b}`, `**`).
    pub libraries: Vec<String>,
    /// Empty: no cache.
    pub cache_dir: String,
    /// Distinct library files parsed per container (cache hits are free).
    pub max_files: u64,
    /// Bytes read from the libraries (ELF and fatbin headers) per
    /// container, not their sizes: a sparse 1 TiB file costs what is read.
    pub max_bytes: u64,
    /// Bytes read from any one library: past this it is not judged.
    pub max_file_bytes: u64,
    /// Fatbin entry headers read per container.
    pub max_entries: u64,
    pub time_budget_ms: u64,
    /// What a scan that stopped on a budget before judging every matched
    /// library does under `severity = "enforce"`: `warn` (a warning naming
    /// the libraries not judged; the container starts) or `refuse` (an
    /// error, as for a library without code for a visible GPU). Under
    /// `severity = "warn"` always a warning.
    #[serde(with = "crate::core::enforcement::spelling::warn_enforce")]
    pub on_incomplete: Enforcement,
}

/// Where Python packages live in images: distro Python (dist-packages on
/// Debian/Ubuntu, as in NGC images), pip in /usr/local, conda (pytorch/pytorch
/// images) and conda environments.
const PY: &str = "{usr,usr/local,opt/conda,opt/conda/envs/*}/lib/python3*/{site,dist}-packages";

/// The shipped `kernel_image.libraries`: the libraries that hold the GPU
/// code of the common frameworks. Kept in the same order as config.toml.
pub fn default_kernel_image_libraries() -> Vec<String> {
    vec![
        // PyTorch: libtorch_cuda.so (and the 1.10-1.12 split libtorch_cuda_cu/_cpp).
        format!("{PY}/torch/lib/libtorch_cuda*.so"),
        // TensorFlow: kernels in libtensorflow_cc / _framework, older in _pywrap.
        format!("{PY}/tensorflow/{{libtensorflow_cc.so.2,libtensorflow_framework.so.2,python/_pywrap_tensorflow_internal.so}}"),
        // JAX/XLA: the CUDA plugin wheels (jax-cuda12-plugin, jax-cuda12-pjrt) and older jaxlib.
        format!("{PY}/{{jaxlib/cuda,jax_cuda1*_plugin,jax_plugins/xla_cuda1*}}/*.so"),
        // CuPy: its precompiled CUB and Thrust kernels (cupy.cuda.cub, cupy.cuda.thrust).
        format!("{PY}/cupy/cuda/{{cub,thrust}}*.so"),
        // cuDNN and cuBLAS from pip wheels (nvidia-cudnn-cu12, nvidia-cublas, cu13 layout).
        format!("{PY}/nvidia/{{cublas,cudnn,cu1*}}/lib/lib{{cublas,cudnn}}*.so.*"),
        // cuDNN and cuBLAS from distro packages and CUDA images (nvidia/cuda, NGC).
        "usr/lib/{x86_64,aarch64}-linux-gnu/lib{cublas,cudnn}*.so.*".into(),
        "usr/local/cuda*/{lib64,targets/*/lib}/lib{cublas,cudnn}*.so.*".into(),
        "opt/conda/lib/lib{cublas,cudnn}*.so.*".into(),
        // AMD (HIP code objects, scan::amd): PyTorch's ROCm wheels (libtorch_hip,
        // and rocBLAS/hipBLASLt with their Tensile files beside them).
        format!("{PY}/torch/lib/lib{{torch_hip,rocblas,hipblaslt}}*.so"),
        // ROCm's libraries in ROCm images (rocm/pytorch, rocm/dev-*) and distro packages.
        "opt/rocm*/lib/lib{rocblas,hipblaslt,rocsparse,rocrand,hiprand,rocfft,rocsolver,MIOpen,rccl}.so.*"
            .into(),
        "usr/lib/{x86_64,aarch64}-linux-gnu/lib{rocblas,hipblaslt,rocsparse,rocrand,rocfft,rocsolver}.so.*"
            .into(),
    ]
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub syslog: bool,
    /// Empty: the system's socket (/dev/log, then /var/run/syslog).
    pub syslog_socket: String,
}

/// Where decisions are logged besides stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Syslog {
    Off,
    System,
    Socket(PathBuf),
}

impl LogConfig {
    pub fn target(&self) -> Syslog {
        match (self.syslog, self.syslog_socket.is_empty()) {
            (false, _) => Syslog::Off,
            (true, true) => Syslog::System,
            (true, false) => Syslog::Socket(self.syslog_socket.clone().into()),
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::Enforce,
            host: HostConfig::default(),
            detect: DetectConfig::default(),
            requirements: RequirementsConfig::default(),
            tuning: TuningConfig::default(),
            security: SecurityConfig::default(),
            runtime: RuntimeConfig::default(),
            kernel_image: KernelImageConfig::default(),
            compat: CompatConfig::default(),
            libraries: LibrariesConfig::default(),
            health: HealthConfig::default(),
            log: LogConfig::default(),
            metrics: MetricsConfig::default(),
            admission: super::admission::AdmissionConfig::default(),
        }
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            facts_file: String::new(),
            nvml_library: String::new(),
            probe_timeout_ms: 5000,
            on_probe_failure: OnFailure::Refuse,
            cache_file: "/run/gpu-guard/host-facts.json".into(),
            cache_ttl_s: 300,
            // CDI's default spec directories (container-device-interface
            // pkg/cdi/spec-dirs.go DefaultSpecDirs): static, then dynamic.
            cdi_spec_dirs: vec!["/etc/cdi".into(), "/var/run/cdi".into()],
        }
    }
}

impl Default for RequirementsConfig {
    fn default() -> Self {
        RequirementsConfig {
            honor_disable_require: true,
            minor_version_compatibility: MinorVersionCompat::Off,
        }
    }
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            apply_to: ApplyTo::Gpu,
            no_new_privileges: true,
            profile: "gpu-guard".into(),
            capabilities: None,
            privileged: OnFailure::Refuse,
            restricted_refuse_root: true,
            profiles: BTreeMap::new(),
            exceptions: Vec::new(),
        }
    }
}

impl Default for KernelImageConfig {
    fn default() -> Self {
        KernelImageConfig {
            severity: Enforcement::Warn,
            libraries: default_kernel_image_libraries(),
            cache_dir: "/run/gpu-guard/scan".into(),
            max_files: 64,
            max_bytes: 256 << 20,
            max_file_bytes: 64 << 20,
            max_entries: 1_000_000,
            time_budget_ms: 2000,
            on_incomplete: Enforcement::Warn,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            syslog: true,
            syslog_socket: String::new(),
        }
    }
}

impl Config {
    /// The engine that invoked the runtime wrapper, from its `--root`.
    pub fn engine_for_root(
        &self,
        root: &std::path::Path,
    ) -> Option<crate::core::runtime_engines::Engine> {
        self.runtime.engines.engine_for_root(root)
    }

    /// The runtime the wrapper execs for `engine` (`None`: not known):
    /// `runtime.engines.ENGINE.path`, else `runtime.path`; `""`: PATH search.
    pub fn chained_runtime(&self, engine: Option<crate::core::runtime_engines::Engine>) -> &str {
        crate::core::runtime_engines::chained_runtime(
            &self.runtime.path,
            &self.runtime.engines,
            engine,
        )
    }
}
