//! What the agent tells: a line per action on stderr (the pod's log), the
//! status file the readiness probe reads (`gpu-guard-node-agent ready`),
//! and counters in node_exporter's textfile format (the same collector as
//! gpu-guard's decision metrics: a `.prom` file replaced atomically).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The status file: whether this node's engine runs gpu-guard now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub ready: bool,
    pub reason: String,
    /// Unix seconds of the last round (a stale file is not Ready).
    pub time: u64,
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One log line, with the time (RFC 3339, as the runtime log writes it).
pub fn log(line: &str) {
    let t = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    eprintln!("{t} gpu-guard-node-agent: {line}");
}

pub fn write_status(path: &Path, status: &Status) -> std::io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let text = serde_json::to_string(status).unwrap_or_default();
    gpu_guard::sys::fsutil::replace_file(path, text.as_bytes(), 0o644)
}

/// The readiness probe: 0 when the status says ready and is at most
/// `max_age` seconds old; else 1 with the reason on stderr.
pub fn ready(path: &Path, max_age: u64) -> i32 {
    let status: Status = match std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
    {
        Some(s) => s,
        None => {
            eprintln!("not ready: no status yet ({})", path.display());
            return 1;
        }
    };
    let age = now().saturating_sub(status.time);
    if age > max_age {
        eprintln!("not ready: the agent last reported {age} s ago");
        return 1;
    }
    if !status.ready {
        eprintln!("not ready: {}", status.reason);
        return 1;
    }
    println!("ready: {}", status.reason);
    0
}

/// The agent's counters.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub file: Option<PathBuf>,
    pub engine: String,
    pub reconciles_applied: u64,
    pub reconciles_unchanged: u64,
    pub reconcile_errors: u64,
    pub files_changed: u64,
    pub restarts: u64,
    pub label_writes: u64,
    pub label_errors: u64,
    pub effective: bool,
    pub restart_pending: bool,
    pub last_reconcile: u64,
}

impl Metrics {
    pub fn render(&self) -> String {
        let e = &self.engine;
        let b = |v: bool| u8::from(v);
        format!(
            "# HELP gpu_guard_agent_reconciles_total Reconcile rounds of the node agent, by what they did.\n\
             # TYPE gpu_guard_agent_reconciles_total counter\n\
             gpu_guard_agent_reconciles_total{{engine=\"{e}\",result=\"applied\"}} {}\n\
             gpu_guard_agent_reconciles_total{{engine=\"{e}\",result=\"unchanged\"}} {}\n\
             gpu_guard_agent_reconciles_total{{engine=\"{e}\",result=\"error\"}} {}\n\
             # HELP gpu_guard_agent_files_changed_total Files the node agent's re-applied installs changed.\n\
             # TYPE gpu_guard_agent_files_changed_total counter\n\
             gpu_guard_agent_files_changed_total{{engine=\"{e}\"}} {}\n\
             # HELP gpu_guard_agent_engine_restarts_total Engine restarts by the node agent.\n\
             # TYPE gpu_guard_agent_engine_restarts_total counter\n\
             gpu_guard_agent_engine_restarts_total{{engine=\"{e}\"}} {}\n\
             # HELP gpu_guard_agent_label_writes_total Writes of the NFD feature file, and failures.\n\
             # TYPE gpu_guard_agent_label_writes_total counter\n\
             gpu_guard_agent_label_writes_total{{result=\"written\"}} {}\n\
             gpu_guard_agent_label_writes_total{{result=\"error\"}} {}\n\
             # HELP gpu_guard_agent_effective 1 when the node's engine runs gpu-guard now.\n\
             # TYPE gpu_guard_agent_effective gauge\n\
             gpu_guard_agent_effective{{engine=\"{e}\"}} {}\n\
             # HELP gpu_guard_agent_restart_pending 1 while the engine has not been restarted since its configuration changed.\n\
             # TYPE gpu_guard_agent_restart_pending gauge\n\
             gpu_guard_agent_restart_pending{{engine=\"{e}\"}} {}\n\
             # HELP gpu_guard_agent_last_reconcile_timestamp_seconds When the last reconcile round ran.\n\
             # TYPE gpu_guard_agent_last_reconcile_timestamp_seconds gauge\n\
             gpu_guard_agent_last_reconcile_timestamp_seconds{{engine=\"{e}\"}} {}\n",
            self.reconciles_applied,
            self.reconciles_unchanged,
            self.reconcile_errors,
            self.files_changed,
            self.restarts,
            self.label_writes,
            self.label_errors,
            b(self.effective),
            b(self.restart_pending),
            self.last_reconcile,
        )
    }

    /// Writes the textfile (when one is set); a failure is logged once by
    /// the caller and never stops the agent.
    pub fn write(&self) -> std::io::Result<()> {
        let Some(f) = &self.file else { return Ok(()) };
        if let Some(d) = f.parent() {
            std::fs::create_dir_all(d)?;
        }
        gpu_guard::sys::fsutil::replace_file(f, self.render().as_bytes(), 0o644)
    }
}
