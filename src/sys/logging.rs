//! Decision logging: one syslog line per notable decision (ident `gpu-guard`,
//! facility daemon), through the `log` facade, in the one key=value format
//! of core::logfmt ([`report::log_line`]) whatever the mode. The logger is
//! set up only when there is something to log, so the common skip path
//! never opens /dev/log.
//!
//! Without a syslog socket the line goes to the entry point's fallback:
//! - hooks: stderr (runc and podman keep a hook's stderr and show it only
//!   when the hook fails);
//! - the runtime wrapper: the runtime's `--log` file as a JSON line, never
//!   stderr. During `create` the runtime's stderr is the container's own
//!   stderr stream (containerd's shim hands runc the container's stdio), so a
//!   line there would end up in the user's `docker logs`.

use crate::core::decision::{Decision, Severity};
use crate::core::policy::Mode;
pub use crate::core::policy::Syslog;
use crate::core::report;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, OnceLock};

/// Where log lines go when syslog is off or unreachable.
#[derive(Clone, Debug)]
pub enum Fallback {
    Stderr,
    /// Append logrus-style JSON lines to this runtime log (None: drop).
    RuntimeLog(Option<PathBuf>),
}

/// One logrus-style line of a runtime's `--log` file, fields in logrus's
/// order: `{"level":"error","msg":"...","time":"<RFC 3339>"}`.
#[derive(serde::Serialize)]
struct RuntimeLogLine<'a> {
    level: &'a str,
    msg: &'a str,
    time: String,
}

/// Appends one logrus-style JSON line to the runtime's `--log` file (created
/// when missing), in a single write. containerd's shim reports the last
/// `"level":"error"` line as `OCI runtime create failed: <msg>`.
pub fn append_runtime_log(path: &Path, level: &str, msg: &str) -> std::io::Result<()> {
    let line = RuntimeLogLine {
        level,
        msg,
        time: super::time::rfc3339_now(),
    };
    let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(&bytes)
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
                // logrus spells the warning level `warning`.
                let level = if level == "warn" { "warning" } else { &level };
                let msg = format!("gpu-guard: {}", record.args());
                let _ = append_runtime_log(path, level, &msg);
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

/// Logs a decision made under `mode` unless it is a plain skip, at its
/// level ([`report::log_level`]): a refusal as an error, what audit or
/// warn let start and enforce would refuse (or what audit would edit) as a
/// warning. Every string in the line has been escaped by
/// [`report::log_line`]. Without syslog, a refusal that goes to stderr
/// anyway is not logged there twice.
pub fn record(d: &Decision, mode: Mode, syslog: &Syslog, fallback: Fallback) {
    if !d.is_notable() {
        return;
    }
    let to_stderr = matches!(fallback, Fallback::Stderr);
    init(syslog, fallback);
    let level = report::log_level(d, mode);
    if d.outcome(mode) == "refuse" && to_stderr && !SYSLOG_UP.load(Ordering::Relaxed) {
        return;
    }
    let line = report::log_line(d, mode);
    match level {
        Severity::Error => log::error!("{line}"),
        Severity::Warning => log::warn!("{line}"),
        Severity::Info => log::info!("{line}"),
    }
}

/// The logrus level word of a record's level (`--log` lines).
pub fn runtime_level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

/// Logs why gpu-guard stood aside (e.g. unparseable config.json in the
/// wrapper), as a record of core::logfmt's format: `event=stood_aside
/// msg="..."`.
pub fn stood_aside(why: &str, syslog: &Syslog, fallback: Fallback) {
    init(syslog, fallback);
    let line = crate::core::logfmt::Line::new()
        .field("event", "stood_aside")
        .field("msg", why)
        .finish();
    log::warn!("{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_log_line_is_logrus_shaped() {
        let dir = std::env::temp_dir().join(format!("gg-logging-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.json");
        std::fs::write(&path, "{\"level\":\"info\",\"msg\":\"earlier\"}\n").unwrap();
        append_runtime_log(&path, "error", "refused: \"x\"\nnext").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let last = text.lines().last().unwrap();
        assert!(text.ends_with('\n') && text.lines().count() == 2, "{text}");
        let prefix = r#"{"level":"error","msg":"refused: \"x\"\nnext","time":""#;
        assert!(last.starts_with(prefix), "{last}");
        let v: serde_json::Value = serde_json::from_str(last).unwrap();
        assert!(v["time"].as_str().unwrap().ends_with('Z'));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
