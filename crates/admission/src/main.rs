//! `gpu-guard-admission`: gpu-guard's network side. `gpu-guard admission
//! ...` execs it (the container-start binary links no HTTP or TLS).
//!
//! `gpu-guard-admission [--config FILE] admission --listen ADDR:PORT
//! --tls-cert FILE --tls-key FILE` serves the Kubernetes mutating
//! admission webhook (README, "Admission").

use clap::{Args, Parser, Subcommand};
use gpu_guard_admission::judge::Cache;
use gpu_guard_admission::review::Reviewer;
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
}

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

fn admission(config: Option<&std::path::Path>, a: &AdmissionArgs) -> i32 {
    let mut cfg = match gpu_guard::config::load(config) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    // It places pods on other nodes: NVIDIA's toolkit settings are NVIDIA's
    // defaults there, never the file of the host it runs on (as `check`
    // judges fleets: src/commands/fleet_report.rs).
    cfg.detect.nvidia = Default::default();
    let tls = match gpu_guard_admission::server::tls_config(&a.tls_cert, &a.tls_key) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let adm = cfg.admission.clone();
    let judge = match RegistryJudge::new(cfg) {
        Ok(j) => Arc::new(j),
        Err(e) => return fail(e),
    };
    let reviewer = Arc::new(Reviewer {
        judge,
        cache: Arc::new(Cache::new(
            adm.cache_entries,
            Duration::from_secs(adm.tag_cache_s),
        )),
        on_unreadable: adm.on_unreadable,
        read_timeout: Duration::from_millis(adm.read_timeout_ms),
    });
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    rt.block_on(async {
        let listener = match gpu_guard_admission::server::bind(&a.listen).await {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
        log::info!("serving on {} (POST /mutate, GET /healthz)", a.listen);
        // Kubernetes stops a pod with SIGTERM.
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => return fail(format!("cannot watch SIGTERM: {e}")),
        };
        tokio::select! {
            _ = gpu_guard_admission::server::serve(listener, tls, reviewer, adm.max_body_bytes) => 0,
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
