//! `gpu-guard-node-agent`: the DaemonSet's main container
//! (packaging/kubernetes/daemonset.yaml, docs/operator.md). Every option
//! is also read from an environment variable (`ENV` below).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use gpu_guard::install::Engine;
use gpu_guard_node_agent::kube::ApiSettings;
use gpu_guard_node_agent::labels::{self, Labeller};
use gpu_guard_node_agent::reconcile::{Reconciler, RestartMode, Settings};
use gpu_guard_node_agent::report::{self, Metrics};
use gpu_guard_node_agent::run::Agent;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum EngineArg {
    Containerd,
    Crio,
    Docker,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum RestartArg {
    Systemd,
    None,
}

#[derive(Debug, Parser)]
#[command(
    name = "gpu-guard-node-agent",
    version,
    about = "Keeps gpu-guard registered with this node's container engine, labels the node for node-feature-discovery, and unregisters gpu-guard when its DaemonSet is deleted",
    after_help = "Each option is also read from an environment variable when it is not given: ENGINE, HOST_ROOT, BIN_DIR, CONFIG_PATH, SET_DEFAULT, STATE_DIR, RESTART_MODE, RESTART_UNIT, RESTART_COMMAND, INTERVAL_MS, RESYNC_SECONDS, LABELS_FILE, LABELS_INTERVAL_SECONDS, METRICS_TEXTFILE, STATUS_FILE, API_SERVER, API_TOKEN_FILE, API_CA_FILE, POD_NAMESPACE (--namespace), DAEMONSET_NAME (--daemonset).\n\nExit status: 0 stopped by a signal (after uninstalling when the DaemonSet was deleted); 1 the uninstall failed; 2 bad usage. `ready`: 0 this node's engine runs gpu-guard now, else 1."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// The engine to keep gpu-guard registered with
    #[arg(long, value_enum, default_value = "containerd")]
    engine: EngineArg,
    /// The host's root filesystem, mounted in the container
    #[arg(long, default_value = "/host")]
    host_root: PathBuf,
    /// Host directory of gpu-guard and gpu-guard-runtime
    #[arg(long, default_value = "/opt/gpu-guard/bin")]
    bin_dir: PathBuf,
    /// The engine's config (host path); default: found as `gpu-guard install` finds it (k3s's and RKE2's templates included)
    #[arg(long, value_parser = nonempty_path)]
    config_path: Option<PathBuf>,
    /// Make gpu-guard the engine's default runtime
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    set_default: bool,
    /// gpu-guard's state directory (host path)
    #[arg(long, default_value = "/var/lib/gpu-guard")]
    state_dir: PathBuf,
    /// How the engine is restarted after its configuration changed: systemd (systemctl restart in the host's namespaces) or none (the node stays not Ready until the admin restarts it)
    #[arg(long, value_enum, default_value = "systemd")]
    restart_mode: RestartArg,
    /// The systemd unit to restart (default: the engine's; k3s, k3s-agent, rke2-server or rke2-agent on k3s and RKE2)
    #[arg(long)]
    restart_unit: Option<String>,
    /// The command that restarts the unit (the unit is its last argument)
    #[arg(
        long,
        default_value = "nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl restart"
    )]
    restart_command: String,
    /// Milliseconds between rounds (watched files are polled this often)
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=600_000))]
    interval_ms: u64,
    /// Seconds between full re-plans, whatever the watched files say
    #[arg(long, default_value_t = 60)]
    resync_seconds: u64,
    /// The NFD feature file to keep the node labels in (host path); empty: no labeller
    #[arg(long, default_value = labels_default())]
    labels_file: String,
    /// Seconds between label refreshes, whatever the driver and GPUs say
    #[arg(long, default_value_t = 300)]
    labels_interval_seconds: u64,
    /// node_exporter textfile for the agent's metrics (host path); empty: off
    #[arg(
        long,
        default_value = "/var/lib/gpu-guard/metrics/gpu-guard-node-agent.prom"
    )]
    metrics_textfile: String,
    /// The status file the readiness probe reads (in the container)
    #[arg(long, default_value = "/tmp/gpu-guard-node-agent.status")]
    status_file: PathBuf,
    /// The API server (default: from KUBERNETES_SERVICE_HOST and _PORT); without one, a SIGTERM never uninstalls
    #[arg(long)]
    api_server: Option<String>,
    #[arg(
        long,
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    api_token_file: PathBuf,
    #[arg(
        long,
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    )]
    api_ca_file: PathBuf,
    /// This pod's namespace (the downward API's metadata.namespace)
    #[arg(long, default_value = "gpu-guard")]
    namespace: String,
    /// This pod's DaemonSet
    #[arg(long, default_value = "gpu-guard-installer")]
    daemonset: String,
}

/// The environment variable each option is also read from (the DaemonSet
/// sets them as env, as NVIDIA's toolkit container takes its settings): a
/// variable counts when its option is not on the command line.
const ENV: &[(&str, &str)] = &[
    ("ENGINE", "--engine"),
    ("HOST_ROOT", "--host-root"),
    ("BIN_DIR", "--bin-dir"),
    ("CONFIG_PATH", "--config-path"),
    ("SET_DEFAULT", "--set-default"),
    ("STATE_DIR", "--state-dir"),
    ("RESTART_MODE", "--restart-mode"),
    ("RESTART_UNIT", "--restart-unit"),
    ("RESTART_COMMAND", "--restart-command"),
    ("INTERVAL_MS", "--interval-ms"),
    ("RESYNC_SECONDS", "--resync-seconds"),
    ("LABELS_FILE", "--labels-file"),
    ("LABELS_INTERVAL_SECONDS", "--labels-interval-seconds"),
    ("METRICS_TEXTFILE", "--metrics-textfile"),
    ("STATUS_FILE", "--status-file"),
    ("API_SERVER", "--api-server"),
    ("API_TOKEN_FILE", "--api-token-file"),
    ("API_CA_FILE", "--api-ca-file"),
    ("POD_NAMESPACE", "--namespace"),
    ("DAEMONSET_NAME", "--daemonset"),
];

/// The command line with the options the environment sets added.
fn args_with_env() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let given = |flag: &str| {
        args.iter().any(|a| {
            let a = a.to_string_lossy();
            a == flag || a.starts_with(&format!("{flag}="))
        })
    };
    let mut extra = Vec::new();
    for (var, flag) in ENV {
        if let Some(v) = std::env::var_os(var) {
            if !given(flag) {
                let mut a = std::ffi::OsString::from(format!("{flag}="));
                a.push(v);
                extra.push(a);
            }
        }
    }
    let at = args.len().min(1);
    args.splice(at..at, extra);
    args
}

fn labels_default() -> &'static str {
    gpu_guard::fleet::labels::FEATURES_FILE
}

/// The API server as a pod sees it (the kubelet's service env).
fn in_cluster_server() -> Option<String> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
    // An IPv6 service address needs brackets in a URL.
    let host = match host.contains(':') {
        true => format!("[{host}]"),
        false => host,
    };
    Some(format!("https://{host}:{port}"))
}

fn nonempty_path(s: &str) -> Result<PathBuf, String> {
    match s.is_empty() {
        true => Err("empty".into()),
        false => Ok(PathBuf::from(s)),
    }
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The readiness probe: exit 0 when this node's engine runs gpu-guard now
    Ready {
        /// Seconds after which the agent's last report is stale
        #[arg(long, default_value_t = 120)]
        max_age: u64,
    },
}

fn main() {
    let cli = Cli::parse_from(args_with_env());
    if let Some(Cmd::Ready { max_age }) = cli.cmd {
        std::process::exit(report::ready(&cli.status_file, max_age));
    }
    std::process::exit(agent(cli).run());
}

fn agent(cli: Cli) -> Agent {
    let engine = match cli.engine {
        EngineArg::Containerd => Engine::Containerd,
        EngineArg::Crio => Engine::Crio,
        EngineArg::Docker => Engine::Docker,
    };
    let settings = Settings {
        engine,
        host_root: cli.host_root.clone(),
        bin_dir: cli.bin_dir.clone(),
        state_dir: cli.state_dir.clone(),
        config_path: cli.config_path.clone(),
        set_default: cli.set_default,
        chain_runtime: None,
        restart_mode: match cli.restart_mode {
            RestartArg::Systemd => RestartMode::Systemd,
            RestartArg::None => RestartMode::None,
        },
        restart_command: cli
            .restart_command
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        restart_unit: cli
            .restart_unit
            .clone()
            .unwrap_or_else(|| engine.name().to_string()),
        resync: Duration::from_secs(cli.resync_seconds),
    };
    let labeller = (!cli.labels_file.is_empty()).then(|| {
        Labeller::new(labels::Settings {
            host_root: cli.host_root.clone(),
            binary: cli.bin_dir.join("gpu-guard"),
            file: PathBuf::from(&cli.labels_file),
            interval: Duration::from_secs(cli.labels_interval_seconds),
        })
    });
    // An empty --api-server: none (outside a cluster).
    let server = match cli.api_server.clone() {
        Some(s) if s.is_empty() => None,
        Some(s) => Some(s),
        None => in_cluster_server(),
    };
    let api = server.map(|server| ApiSettings {
        server,
        token_file: cli.api_token_file.clone(),
        ca_file: cli.api_ca_file.clone(),
        namespace: cli.namespace.clone(),
        daemonset: cli.daemonset.clone(),
        timeout: Duration::from_secs(10),
    });
    let metrics_file = (!cli.metrics_textfile.is_empty()).then(|| {
        cli.host_root
            .join(cli.metrics_textfile.trim_start_matches('/'))
    });
    Agent {
        reconciler: Reconciler::new(settings),
        labeller,
        api,
        status_file: cli.status_file.clone(),
        metrics: Metrics {
            file: metrics_file,
            engine: engine.name().to_string(),
            ..Metrics::default()
        },
        interval: Duration::from_millis(cli.interval_ms),
        api_warning: None,
    }
}
