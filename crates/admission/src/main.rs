//! `gpu-guard-admission`: gpu-guard's network side. `gpu-guard admission
//! ...` execs it (the container-start binary links no HTTP or TLS).
//!
//! `gpu-guard-admission [--config FILE] admission --listen ADDR:PORT
//! --tls-cert FILE --tls-key FILE` serves the Kubernetes mutating
//! admission webhook (docs/kubernetes.md).

use clap::{Args, Parser, Subcommand};
use gpu_guard_admission::cache::{Cache, CacheSettings};
use gpu_guard_admission::certs::Reloading;
use gpu_guard_admission::metrics::Metrics;
use gpu_guard_admission::reads::{ReadSettings, Reads};
use gpu_guard_admission::review::Reviewer;
use gpu_guard_admission::server::{self, Shared};
use gpu_guard_admission::webhook::RegistryJudge;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "gpu-guard-admission",
    version,
    about = "gpu-guard's registry reads and Kubernetes admission webhook"
)]
struct Cli {
    /// Config file (default: $GPU_GUARD_CONFIG, then /etc/gpu-guard/config.toml)
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the mutating admission webhook (POST /mutate, GET /healthz) over TLS
    Admission(AdmissionArgs),
    /// `gpu-guard check --image docker://...`: judge a registry image
    Check(gpu_guard::commands::cli::CheckArgs),
}

#[derive(Args)]
struct AdmissionArgs {
    /// Address to listen on
    #[arg(long, value_name = "ADDR:PORT")]
    listen: String,
    /// PEM certificate chain
    #[arg(long, value_name = "FILE")]
    tls_cert: PathBuf,
    /// PEM private key
    #[arg(long, value_name = "FILE")]
    tls_key: PathBuf,
    /// Also serve GET /metrics and /healthz over plain HTTP here
    #[arg(long, value_name = "ADDR:PORT")]
    metrics_listen: Option<String>,
}

/// How often the certificate files are looked at.
const CERT_CHECK: Duration = Duration::from_secs(2);

/// Log lines on stderr (the pod's log), one per event.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!(
                "gpu-guard admission: {}: {}",
                r.level().as_str().to_lowercase(),
                r.args()
            );
        }
    }
    fn flush(&self) {}
}

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!(
        "gpu-guard: error: {}",
        gpu_guard::core::sanitize::one_line(&msg.to_string())
    );
    2
}

/// Settings that cannot work, refused at start.
fn check_settings(a: &gpu_guard::core::admission::AdmissionConfig) -> Result<(), String> {
    if a.read_timeout_ms == 0 {
        return Err("[admission] read_timeout_ms must be above 0".into());
    }
    let c = &a.runtime_class;
    // A RuntimeClass name is a DNS-1123 subdomain (core/v1 PodSpec.runtimeClassName).
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if !c.is_empty() && (c.len() > 253 || !c.split('.').all(label_ok)) {
        return Err(format!(
            "[admission] runtime_class {:?} is not a valid RuntimeClass name (a DNS-1123 subdomain)",
            gpu_guard::core::sanitize::esc(c)
        ));
    }
    Ok(())
}

fn admission(config: Option<&std::path::Path>, a: &AdmissionArgs) -> i32 {
    let mut cfg = match gpu_guard::config::load(config) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    // It places pods on other nodes: NVIDIA's toolkit settings are NVIDIA's
    // defaults there, never the file of the host it runs on (as `check`
    // judges fleets: src/commands/fleet_report.rs).
    cfg.detect.nvidia = Default::default();
    let adm = cfg.admission.clone();
    if let Err(e) = check_settings(&adm) {
        return fail(e);
    }
    let certs = match Reloading::new(&a.tls_cert, &a.tls_key) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let tls = match certs.server_config() {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let judge = match RegistryJudge::new(cfg) {
        Ok(j) => Arc::new(j),
        Err(e) => return fail(e),
    };
    let metrics = Arc::new(Metrics::default());
    let cache = Arc::new(Cache::new(CacheSettings::from_config(&adm)));
    let reads = Arc::new(Reads::new(
        judge,
        cache,
        ReadSettings::from_config(&adm),
        metrics.clone(),
    ));
    let reviewer = Arc::new(Reviewer::new(reads, &adm, metrics.clone()));
    let shared = Shared::new(reviewer, metrics.clone(), adm.max_body_bytes);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Blocking reads are bounded by max_reads and background_reads;
        // placements and the rest need few threads.
        .max_blocking_threads(64)
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    rt.block_on(async {
        let listener = match server::bind(&a.listen).await {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
        let plain = match &a.metrics_listen {
            Some(m) => match server::bind(m).await {
                Ok(l) => Some(l),
                Err(e) => return fail(e),
            },
            None => None,
        };
        log::info!(
            "serving on {} (POST /mutate, GET /healthz, GET /metrics)",
            a.listen
        );
        tokio::spawn(certs.watch(CERT_CHECK, metrics));
        if let Some(l) = plain {
            tokio::spawn(server::serve_metrics(l, shared.clone()));
        }
        // Kubernetes stops a pod with SIGTERM.
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => return fail(format!("cannot watch SIGTERM: {e}")),
            };
        tokio::select! {
            _ = server::serve(listener, tls, shared) => 0,
            _ = tokio::signal::ctrl_c() => 0,
            _ = term.recv() => 0,
        }
    })
}

fn main() {
    let _ = log::set_logger(&StderrLog).map(|()| log::set_max_level(log::LevelFilter::Info));
    let cli = Cli::parse();
    let code = match &cli.command {
        Command::Admission(a) => admission(cli.config.as_deref(), a),
        Command::Check(a) => gpu_guard_admission::check::main(cli.config.as_deref(), a),
    };
    std::process::exit(code);
}
