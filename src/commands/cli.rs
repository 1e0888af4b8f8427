//! The command line, defined once: `main` parses it and the man page
//! (`gpu-guard man`, packaged as gpu-guard(1)) is generated from it.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "gpu-guard",
    // `0.1.0 (commit 1ea0b3b5c2d1, built 2026-12-01)`, from build.rs.
    version = env!("GPU_GUARD_VERSION_LINE"),
    about = "Refuses GPU containers that cannot work on this host; starts the rest tuned and locked down",
    long_about = "gpu-guard runs beside the NVIDIA container toolkit as an OCI hook and as an OCI \
runtime wrapper. It detects GPU containers, checks what the image declares \
(NVIDIA_REQUIRE_*, CUDA_VERSION, compiled GPU code) against the host driver and GPUs, \
refuses a mismatch with a diagnosis a person can act on, and applies host policy: \
tuning environment variables, dropped capabilities and no_new_privileges."
)]
pub struct Cli {
    /// Config file (default: $GPU_GUARD_CONFIG, then /etc/gpu-guard/config.toml)
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Describe one container, decide as the hook would, change nothing
    Check(CheckArgs),
    /// OCI hook entry points (prestart, createRuntime, precreate)
    Hook(HookArgs),
    /// OCI runtime wrapper: decide and edit on create/run, then exec the real runtime
    Runtime(RuntimeArgs),
    /// Show this host's driver and GPUs
    Host(HostArgs),
    /// List the CUDA code (SASS and PTX) compiled into ELF files
    Scan(ScanArgs),
    /// Register gpu-guard with a container engine
    Install(InstallArgs),
    /// Undo `gpu-guard install`
    Uninstall(UninstallArgs),
    /// Check what this node needs (config, host facts, each engine's registration, chains, hooks, CDI, state directories) and print each problem with its fix
    Doctor(DoctorArgs),
    /// Serve the Kubernetes mutating admission webhook (runs gpu-guard-admission)
    Admission(AdmissionArgs),
    /// Print the gpu-guard(1) man page (roff)
    #[command(hide = true)]
    Man,
    /// INTERNAL: the uncached NVML probe, run by gpu-guard itself in a child
    /// process (src/host/child.rs); prints one JSON answer line
    #[command(name = "__probe", hide = true)]
    Probe(ProbeChildArgs),
}

/// The parent's `host.nvml_library` and probe paths, passed explicitly: the
/// probe child reads no config and no environment overrides.
#[derive(Debug, Args)]
pub struct ProbeChildArgs {
    /// host.nvml_library as configured ("" for libnvidia-ml.so.1)
    #[arg(long, value_name = "LIB", default_value = "")]
    pub nvml_library: String,
    /// /proc/driver/nvidia
    #[arg(long, value_name = "DIR")]
    pub proc_nvidia: PathBuf,
    /// /dev
    #[arg(long, value_name = "DIR")]
    pub dev: PathBuf,
    /// /sys (each GPU's NUMA node and local CPUs)
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sys: PathBuf,
    /// The boot id file (default: the kernel's)
    #[arg(long, value_name = "FILE")]
    pub boot_id: Option<PathBuf>,
    /// /proc/modules stand-in
    #[arg(long, value_name = "FILE")]
    pub modules: Option<PathBuf>,
    /// /proc/devices stand-in
    #[arg(long, value_name = "FILE")]
    pub devices: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
A GPU request in the environment (NVIDIA_VISIBLE_DEVICES, a legacy image's CUDA_VERSION) \
makes a GPU container only when something attaches GPUs: NVIDIA's hook in the spec, NVIDIA's \
runtime, CDI devices or /dev/nvidia* nodes (config detect.env_requests). With --bundle or --spec \
that is read from the spec. With --env alone there is no spec, and the container is judged as \
if run with GPUs attached, as `docker run --gpus` would.

Exit status: 0 the container would start (on every host given; with --any, on \
at least one); 1 it is refused (on some host; with several, also when not judged as a GPU \
container there: a skip is not runs); 2 bad usage or \
unreadable input. Nodes of --nodes without GPU Feature Discovery labels are refused (\"no GPU \
facts\"). --affinity exits 0 when the affinity is exact and admits a node; without --nodes it is \
over node labels only and exact for every labelled node, or stricter and exits 1; when no node \
with any labels could run the container it says so and exits 1. Fleets are judged for \
placement: a host is allowed only where no finding predicts the container fails (also a \
warning under severity = \"warn\"); --strict judges one host the same way.

The runtime wrapper chains per engine (runtime.engines.ENGINE.path) and tells the engines apart \
by the runtime root they pass it; --engine decides as that engine's wrapper. Without it the \
global runtime.path is used, and when engines chain other runtimes an info finding names them. \
A chained runtime that does not exist is a config error: the wrapper could start no container. \
Under mode = \"audit\" the answer is what enforce would do (exit 1 for a refusal), and says so.")]
pub struct CheckArgs {
    /// Bundle directory; reads DIR/config.json
    #[arg(long, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
    /// An OCI config.json
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// A container image to judge, read without unpacking: an OCI image layout directory, a docker-archive tar (`docker save`) or an OCI archive tar, as a path or in skopeo's spelling (`oci:DIR[:REF]`, `oci-archive:FILE[:REF]`, `docker-archive:FILE[:REPO:TAG|:@N]`; `./oci:x` is the file `oci:x`); a registry image `docker://HOST[:PORT]/REPO[:TAG|@DIGEST]` (streamed, never written to disk) or `docker-daemon:NAME[:TAG]` (the local docker's). Judged as started with all GPUs (`--gpus all`) unless --env NVIDIA_VISIBLE_DEVICES=... (or the image) says otherwise
    #[arg(long, value_name = "IMAGE", conflicts_with_all = ["bundle", "spec"])]
    pub image: Option<PathBuf>,
    /// With --image docker://: push what was found as an attestation (an OCI artifact whose subject is the image), which later reads use instead of the layers
    #[arg(long, requires = "image")]
    pub attest: bool,
    /// With --image docker://: the registry speaks plain HTTP
    #[arg(long, requires = "image")]
    pub plain_http: bool,
    /// With --image docker://: a PEM file of CAs to trust for the registry, besides the system's
    #[arg(long, value_name = "FILE", requires = "image")]
    pub registry_ca: Option<PathBuf>,
    /// With --image docker:// or docker-daemon:: the most reading the image may take, in seconds (default 600): connections, token requests, manifests, attestations and layers together. A registry that stops answering fails sooner: 15 s to connect, 30 s to answer or between bytes
    #[arg(long, value_name = "SECONDS", requires = "image", value_parser = clap::value_parser!(u64).range(1..))]
    pub read_timeout: Option<u64>,
    /// With --image: the platform to pick from a multi-platform index (default linux/amd64)
    #[arg(long, value_name = "OS/ARCH[/VARIANT]", requires = "image")]
    pub platform: Option<String>,
    /// Container environment entry; repeatable; adds to or overrides the spec's (or image's) env.
    /// Without a spec or image, the container is judged as run with GPUs attached
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<OsString>,
    /// Host facts JSON file (default: probe this host); repeatable: one decision per host
    #[arg(long, value_name = "FILE")]
    pub host: Vec<PathBuf>,
    /// Judge on every *.json host facts file in DIR (sorted by name)
    #[arg(long, value_name = "DIR")]
    pub hosts: Option<PathBuf>,
    /// Judge on Kubernetes nodes: `kubectl get nodes -o json` or `-o yaml` output, `-` for stdin; facts from GPU Feature Discovery and gpu-guard.io labels
    #[arg(long, value_name = "FILE")]
    pub nodes: Option<PathBuf>,
    /// With several hosts: exit 0 when allowed on at least one (default: on every one)
    #[arg(long)]
    pub any: bool,
    /// Print a Kubernetes nodeAffinity admitting the nodes where the container is allowed: over node labels, exact for labelled nodes; with --nodes, patched by name to be exact on them (YAML; JSON with --json)
    #[arg(long)]
    pub affinity: bool,
    /// Print the decision as JSON
    #[arg(long)]
    pub json: bool,
    /// With several hosts: print each row's NOTE whole. Without it a note is cut to fit only when stdout is a terminal; piped, it is never cut
    #[arg(long, conflicts_with_all = ["json", "affinity"])]
    pub wide: bool,
    /// Exit 1 also when the container would start but a finding predicts it fails there (no kernel image for a GPU, a GPU library the loader cannot open, a driver too old for its CUDA runtime), as a warning under severity = "warn" or mode = "warn"; a PTX JIT is not a failure. Fleets (several hosts, --nodes, --affinity) always judge this way
    #[arg(long)]
    pub strict: bool,
    /// With --nodes or --affinity: the pod asks for N GPUs (its nvidia.com/gpu limit); a node labelled with fewer healthy GPUs (gpu-guard.io/gpu.healthy) is not chosen. Default 1
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub gpu_count: Option<u32>,
    /// Decide as this entry point would: the wrapper edits, the prestart hook only verifies
    #[arg(long, value_enum, default_value_t = CheckStage::Runtime)]
    pub stage: CheckStage,
    /// Decide as the wrapper invoked by this engine would: it execs that engine's chain (runtime.engines.ENGINE.path, else runtime.path), and for containerd and crio the spec's CRI facts (namespace, pod, image) select security exceptions (not with --stage prestart: the hook believes none). Default: the global runtime.path, and no CRI facts believed
    #[arg(long, value_enum, value_name = "ENGINE")]
    pub engine: Option<Engine>,
    /// With several hosts (--host repeated, --hosts, --nodes): the NVIDIA container toolkit config those hosts run (accept-nvidia-visible-devices-*). Default: NVIDIA's defaults; this host's file is never used for other hosts
    #[arg(long, value_name = "FILE")]
    pub nvidia_config: Option<PathBuf>,
}

/// `gpu-guard admission`: parsed here for the help and man page, served by
/// gpu-guard-admission (commands/network.rs).
#[derive(Debug, Args)]
#[command(
    after_help = "POST /mutate takes an admission.k8s.io/v1 AdmissionReview; GET /healthz answers ok. \
Registry settings are the config's [admission] keys. Exit status: 2 for bad usage, config or TLS files."
)]
pub struct AdmissionArgs {
    /// Address to listen on (e.g. 0.0.0.0:8443)
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: String,
    /// PEM certificate chain served to the API server
    #[arg(long, value_name = "FILE")]
    pub tls_cert: PathBuf,
    /// PEM private key of the certificate (both files are loaded again when they change)
    #[arg(long, value_name = "FILE")]
    pub tls_key: PathBuf,
    /// Also serve GET /metrics and /healthz over plain HTTP on this address (e.g. 0.0.0.0:9090)
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckStage {
    /// As the runtime wrapper and the podman precreate hook: edits are applied
    Runtime,
    /// As the prestart hook: nothing can be edited, so policy is verified
    Prestart,
}

impl CheckStage {
    /// The stage the core decides at.
    pub fn stage(self) -> crate::core::security::SpecAccess {
        match self {
            CheckStage::Runtime => crate::core::security::SpecAccess::Edit,
            CheckStage::Prestart => crate::core::security::SpecAccess::Verify,
        }
    }
}

#[derive(Debug, Args)]
pub struct HookArgs {
    /// prestart, createRuntime (OCI State on stdin) or precreate (config JSON on stdin, edited on stdout)
    #[arg(value_enum)]
    pub stage: HookStage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HookStage {
    Prestart,
    #[value(
        name = "createRuntime",
        alias = "create-runtime",
        alias = "createruntime"
    )]
    CreateRuntime,
    Precreate,
}

#[derive(Debug, Args)]
#[command(after_help = RUNTIME_AFTER_HELP)]
pub struct RuntimeArgs {
    /// The real runtime's arguments, passed through unchanged
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 the driver and GPUs are known (warnings may be printed); \
1 facts were printed but the host cannot run GPU containers (no NVIDIA driver and no AMD \
GPU, or a GPU is lost); 2 no facts could be established (the probe failed), or bad usage or config."
)]
pub struct HostArgs {
    /// Print the host facts JSON
    #[arg(long)]
    pub json: bool,
    /// Print gpu-guard.io/ node labels (node-feature-discovery feature-file lines)
    #[arg(long, conflicts_with = "json")]
    pub node_labels: bool,
    /// With --node-labels: write them, atomically, to NFD's features.d/gpu-guard
    #[arg(long, requires = "node_labels")]
    pub write: bool,
    /// With --write: the file to write instead of /etc/kubernetes/node-feature-discovery/features.d/gpu-guard
    #[arg(long, value_name = "PATH", requires = "write")]
    pub output: Option<PathBuf>,
    /// The host's root filesystem when run in a container with it mounted (a DaemonSet): its /proc, /dev and /sys are read there (no facts cache)
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub host_root: PathBuf,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 every file was read; 1 some file's device code could not be \
read (its error is listed); 2 bad usage, or a PATH that cannot be opened.\n\
With --rootfs, each PATH is a container root filesystem: the libraries of the config's \
kernel_image.libraries are checked against the GPUs of --host as a container start would, \
and the kernel-image findings are printed (exit 1 if one is an error).\n\
With --rootfs --libraries, each rootfs's GPU libraries are resolved as glibc's loader will \
resolve them at start (exit 1 if a finding is an error under [libraries] severity)."
)]
pub struct ScanArgs {
    /// ELF files or directories (walked)
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// Treat each PATH as a container rootfs and print the kernel-image findings (needs --host)
    #[arg(long)]
    pub rootfs: bool,
    /// Host facts JSON file giving the GPUs and driver to judge against (with --rootfs)
    #[arg(long, value_name = "FILE", requires = "rootfs")]
    pub host: Option<PathBuf>,
    /// With --rootfs: resolve the rootfs's GPU libraries as the loader will in a GPU container (driver libraries injected, ldconfig rerun) and print the resolution tree like lddtree, the missing libraries and the CUDA runtimes; with --host also the findings
    #[arg(long, requires = "rootfs")]
    pub libraries: bool,
    /// With --libraries: the container's environment entry (NVIDIA_DRIVER_CAPABILITIES, LD_LIBRARY_PATH); repeatable
    #[arg(long = "env", value_name = "KEY=VALUE", requires = "libraries")]
    pub env: Vec<String>,
}

/// The engines `install`, `uninstall`, `doctor` and `check --engine` name:
/// core's own type, spelt on the command line as in config keys.
pub use crate::core::runtime_engines::Engine;

impl ValueEnum for Engine {
    fn value_variants<'a>() -> &'a [Self] {
        &Engine::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

#[derive(Debug, Args)]
#[command(after_help = "\
The engine's merged configuration (containerd's imports and conf.d drop-ins, CRI-O's \
crio.conf.d, podman's containers.conf.d) is checked before anything is written: gpu-guard must \
be the runtime the engine really uses. --config is gpu-guard's own config (global option); the \
engine's file is --config-path.

Exit status: 0 done, or nothing to change (with --check: the engine runs gpu-guard as \
installed); 1 the engine would still not run gpu-guard (each reason and the file responsible \
are printed), or with --check drift or not installed; 2 bad usage, or a config that cannot be \
read or edited (left untouched).")]
pub struct InstallArgs {
    #[arg(value_enum)]
    pub engine: Engine,
    /// Print a unified diff and change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Make gpu-guard the engine's default runtime
    #[arg(long, visible_alias = "set-as-default")]
    pub set_default: bool,
    /// The runtime gpu-guard-runtime execs for this engine: `nvidia` (the NVIDIA runtime the engine registers), `amd` (AMD's amd-container-runtime) or an absolute host path. Default: the engine's default runtime when it is NVIDIA's or AMD's, else runc
    #[arg(long, value_name = "nvidia|amd|PATH")]
    pub chain_runtime: Option<String>,
    /// Change nothing: report whether the engine's effective configuration still runs gpu-guard as installed, and the command that repairs it
    #[arg(long, conflicts_with_all = ["dry_run", "set_default", "chain_runtime"])]
    pub check: bool,
    #[command(flatten)]
    pub paths: EnginePaths,
    /// Host directory holding gpu-guard and gpu-guard-runtime, as the engine will run them (default: this binary's directory)
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
}

/// Where the engine's files and gpu-guard's records are.
#[derive(Debug, Args)]
pub struct EnginePaths {
    /// The engine's config file (for crio the drop-in file, for podman the hooks directory)
    #[arg(long, value_name = "P")]
    pub config_path: Option<PathBuf>,
    /// The host's root filesystem when run in a container with it mounted (a DaemonSet); all other paths are host paths
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub host_root: PathBuf,
    /// Where gpu-guard records what install changed and keeps backups (host path)
    #[arg(long, value_name = "DIR", default_value = crate::install::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 done, or nothing to change; 2 bad usage, or a config \
that cannot be read or edited (left untouched)."
)]
pub struct UninstallArgs {
    #[arg(value_enum)]
    pub engine: Engine,
    /// Print a unified diff and change nothing
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub paths: EnginePaths,
    /// Accepted for scripts that pass install's options to uninstall; unused
    #[arg(long, value_name = "DIR", hide = true)]
    pub bin_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Checks, each with a stable name: config (valid and trusted, drop-ins included), config.mode, \
host.nvml (answered within host.probe_timeout_ms), host.driver, host.gpus, host.device-nodes, \
engine.ENGINE (its effective registration, or present but not registered), chain.ENGINE (the \
runtime its wrapper execs exists, is executable and is what install chained; for an engine with \
no install recorded, its runtime.engines.ENGINE.path when the config sets one), chain \
(runtime.path, when set, whatever is installed), hooks.ENGINE and \
hooks (hook files valid and calling gpu-guard), cdi, dirs.host-cache, dirs.scan-cache, dirs.state \
(the private-directory rule).

Exit status: 0 nothing would break or bypass containers (warnings may be printed); 1 a check \
is an error; 2 bad usage, or an invalid config (reported as the config check; the other checks \
still run with the built-in defaults).")]
pub struct DoctorArgs {
    /// Print the checks as one JSON object: {"status", "checks": [{"name", "status", "message", "fix"}], "summary"}
    #[arg(long)]
    pub json: bool,
    /// The host's root filesystem when run in a container with it mounted (a DaemonSet); all other paths are host paths
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub host_root: PathBuf,
    /// Where `gpu-guard install` recorded what it changed (host path)
    #[arg(long, value_name = "DIR", default_value = crate::install::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
}

/// What the wrapper is, for `gpu-guard runtime --help`: its arguments
/// are runc's, so this is the only flag it reads itself.
const RUNTIME_AFTER_HELP: &str = "\
Engines register it as an OCI runtime (`gpu-guard install ENGINE`) and call it with runc's \
command line. On create, run and restore it decides for the bundle's container and writes its \
edits into config.json; on exec it holds the process to the container's profile; then it execs \
the real runtime (runtime.engines.ENGINE.path, else runtime.path, else runc or crun on PATH) \
with the arguments unchanged. Every other subcommand, `--version` included (dockerd asks it for \
`docker info`), is passed through untouched.

Only `--help` or `-h` as the first argument is gpu-guard's own; runc's help is \
`gpu-guard runtime help` (passed through).

Exit status: the real runtime's; 1 the container is refused (the diagnosis on stderr and in the \
--log file the engine passed); 127 no real runtime to exec.";

/// `gpu-guard runtime --help` (`-h`), or `gpu-guard-runtime --help`
/// under `bin` as invoked: the runtime subcommand's help, rendered from
/// the same definition as the man page.
pub fn runtime_help(bin: &str) -> String {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let Some(sub) = cmd.find_subcommand_mut("runtime") else {
        return String::new();
    };
    let mut sub = sub.clone().bin_name(bin);
    sub.render_long_help().to_string()
}

/// Renders gpu-guard(1) from the definition above, with the sections a
/// definition cannot hold ([`crate::commands::man_page`]).
pub fn man_page() -> std::io::Result<Vec<u8>> {
    crate::commands::man_page::render(<Cli as clap::CommandFactory>::command())
}
