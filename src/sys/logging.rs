//! Decision logging: one syslog line per notable decision (ident `gpu-guard`,
//! facility daemon), through the `log` facade. The logger is set up only when
//! there is something to log, so the common skip path never opens /dev/log.
//!
//! Without a syslog socket the line goes to the entry point's fallback:
//! - hooks: stderr (runc and podman keep a hook's stderr and show it only
//!   when the hook fails);
//! - the runtime wrapper: the runtime's `--log` file as a JSON line, never
//!   stderr. During `create` the runtime's stderr is the container's own
//!   stderr stream (containerd's shim hands runc the container's stdio), so a
//!   line there would end up in the user's `docker logs`.

use crate::core::decision::{Decision, Severity, Verdict};
pub use crate::core::policy::Syslog;
use crate::core::report;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, OnceLock};

/// Where log lines go when syslog is off or unreachable.
#[derive(Clone, Debug)]
pub enum Fallback {
    Stderr,
    /// Append logrus-style JSON lines to this runtime log (None: drop).
    RuntimeLog(Option<PathBuf>),
}

static INIT: Once = Once::new();
static SYSLOG_UP: AtomicBool = AtomicBool::new(false);
static FALLBACK: OnceLock<Fallback> = OnceLock::new();

struct FallbackLogger;

impl log::Log for FallbackLogger {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        let level = record.level().as_str().to_ascii_lowercase();
        match FALLBACK.get() {
            Some(Fallback::RuntimeLog(Some(path))) => {
                let line = serde_json::json!({
                    "level": if level == "warn" { "warning".to_string() } else { level },
                    "msg": format!("gpu-guard: {}", record.args()),
                    "time": crate::commands::runtime::rfc3339_now(),
                });
                if let (Ok(mut f), Ok(mut bytes)) = (
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path),
                    serde_json::to_vec(&line),
                ) {
                    bytes.push(b'\n');
                    let _ = f.write_all(&bytes);
                }
            }
            Some(Fallback::RuntimeLog(None)) => {}
            _ => eprintln!("gpu-guard: {level}: {}", record.args()),
        }
    }
    fn flush(&self) {}
}

static FALLBACK_LOGGER: FallbackLogger = FallbackLogger;

/// Sets up the logger once: syslog when asked for and reachable, else the fallback.
pub fn init(syslog: &Syslog, fallback: Fallback) {
    INIT.call_once(|| {
        if *syslog != Syslog::Off {
            // Ident fixed to `gpu-guard` whatever argv[0] is (the wrapper
            // runs as gpu-guard-runtime), so one syslog filter finds all.
            let formatter = syslog::Formatter3164 {
                facility: syslog::Facility::LOG_DAEMON,
                hostname: None,
                process: "gpu-guard".into(),
                pid: std::process::id(),
            };
            let logger = match syslog {
                Syslog::Socket(path) => syslog::unix_custom(formatter, path),
                _ => syslog::unix(formatter),
            };
            if let Ok(logger) = logger {
                if log::set_boxed_logger(Box::new(syslog::BasicLogger::new(logger))).is_ok() {
                    log::set_max_level(log::LevelFilter::Info);
                    SYSLOG_UP.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
        let _ = FALLBACK.set(fallback);
        if log::set_logger(&FALLBACK_LOGGER).is_ok() {
            log::set_max_level(log::LevelFilter::Info);
        }
    });
}

/// Logs a decision unless it is a plain skip. Every string in the line has
/// been escaped by [`report::log_line`]. Without syslog, a refusal that goes
/// to stderr anyway is not logged there twice.
pub fn record(d: &Decision, syslog: &Syslog, fallback: Fallback) {
    if !d.is_notable() {
        return;
    }
    let to_stderr = matches!(fallback, Fallback::Stderr);
    init(syslog, fallback);
    if d.verdict == Verdict::Refuse && to_stderr && !SYSLOG_UP.load(Ordering::Relaxed) {
        return;
    }
    let line = report::log_line(d);
    match d.verdict {
        Verdict::Refuse => log::error!("{line}"),
        _ if d.findings.iter().any(|f| f.severity >= Severity::Warning) => log::warn!("{line}"),
        _ => log::info!("{line}"),
    }
}

/// Logs why gpu-guard stood aside (e.g. unparseable config.json in the wrapper).
pub fn stood_aside(why: &str, syslog: &Syslog, fallback: Fallback) {
    init(syslog, fallback);
    log::warn!("{}", crate::core::sanitize::one_line(why));
}
