//! Decision logging: one syslog line per notable decision (ident `gpu-guard`,
//! facility daemon), through the `log` facade. Without a syslog socket the
//! line goes to stderr. The logger is set up only when there is something to
//! log, so the common skip path never opens /dev/log.

use crate::decision::{Decision, Verdict};
use crate::report;
use std::sync::Once;

static INIT: Once = Once::new();
static SYSLOG_UP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes to stderr with a `gpu-guard:` prefix; used when syslog is off or
/// unreachable.
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        eprintln!(
            "gpu-guard: {}: {}",
            record.level().as_str().to_ascii_lowercase(),
            record.args()
        );
    }
    fn flush(&self) {}
}

static STDERR: StderrLogger = StderrLogger;

/// Sets up the logger once: syslog when asked for and reachable, else stderr.
pub fn init(use_syslog: bool) {
    INIT.call_once(|| {
        if use_syslog {
            // Ident fixed to `gpu-guard` whatever argv[0] is (the wrapper
            // runs as gpu-guard-runtime), so one syslog filter finds all.
            let formatter = syslog::Formatter3164 {
                facility: syslog::Facility::LOG_DAEMON,
                hostname: None,
                process: "gpu-guard".into(),
                pid: std::process::id(),
            };
            if let Ok(logger) = syslog::unix(formatter) {
                if log::set_boxed_logger(Box::new(syslog::BasicLogger::new(logger))).is_ok() {
                    log::set_max_level(log::LevelFilter::Info);
                    SYSLOG_UP.store(true, std::sync::atomic::Ordering::Relaxed);
                    return;
                }
            }
        }
        if log::set_logger(&STDERR).is_ok() {
            log::set_max_level(log::LevelFilter::Info);
        }
    });
}

/// Logs a decision unless it is a plain skip. Every string in the line has
/// been escaped by [`report::log_line`]. Without syslog a refusal is not
/// logged again: its full diagnosis goes to stderr already.
pub fn record(d: &Decision, use_syslog: bool) {
    if !d.is_notable() {
        return;
    }
    init(use_syslog);
    if d.verdict == Verdict::Refuse && !SYSLOG_UP.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let line = report::log_line(d);
    match d.verdict {
        Verdict::Refuse => log::error!("{line}"),
        _ if d.has_errors() => log::warn!("{line}"),
        _ if d
            .findings
            .iter()
            .any(|f| f.severity == crate::decision::Severity::Warning) =>
        {
            log::warn!("{line}")
        }
        _ => log::info!("{line}"),
    }
}

/// Logs why gpu-guard stood aside (e.g. unparseable config.json in the wrapper).
pub fn stood_aside(why: &str, use_syslog: bool) {
    init(use_syslog);
    log::warn!("{}", crate::sanitize::one_line(why));
}
