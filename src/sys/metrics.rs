//! Decision counters for Prometheus, in node_exporter's textfile format
//! (`[metrics] textfile`; README, "Metrics").
//!
//! Many containers start at once, each in its own gpu-guard process, so
//! the counts live in a state file beside the textfile and every update
//! is a read-modify-write under an flock(2) on a lock file:
//!
//! - `.NAME.lock`: locked with LOCK_NB, retried for at most [`LOCK_WAIT`];
//!   a start never waits longer. Past that the update is skipped and one
//!   byte is appended to `.NAME.dropped` (O_APPEND, no lock), whose size is
//!   `gpu_guard_metrics_dropped_total`.
//! - `.NAME.state`: the counts, one line each ([`State`]).
//! - `NAME`: rendered whole from the state and replaced atomically (a
//!   temporary name in the same directory, then rename), as node_exporter's
//!   collector/textfile.go expects: it reads only `*.prom` files, so the
//!   hidden state, lock and temporary files are never read, and a reader
//!   sees the old file or the new one, never half of one. No timestamps
//!   (node_exporter skips a file that has them).
//!
//! Labels are few and bounded: the verdict, the check of the first error
//! finding (or `none`), the entry point; the host's driver and CUDA
//! versions. Never a container id, an image or anything a container
//! chooses. Every file is opened without following a symlink, in a
//! directory that others cannot write (or the write is refused).

use crate::core::decision::{Check, Decision, Verdict};
use crate::sys::logging::{self, Fallback, Syslog};
use nix::fcntl::{Flock, FlockArg, OFlag};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The longest a decision waits for the state lock.
pub const LOCK_WAIT: Duration = Duration::from_millis(5);
/// The pause between two tries of the lock.
const LOCK_RETRY: Duration = Duration::from_micros(250);
/// The state file is a few KiB; more is not ours.
const MAX_STATE_BYTES: u64 = 256 << 10;
/// The histogram's upper bounds, in seconds: a start with a warm cache
/// takes a few milliseconds, a cold NVML probe up to its deadline.
pub const BUCKETS: [f64; 7] = [0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("metrics textfile {path}: {why}")]
    Path { path: PathBuf, why: String },
    #[error("metrics {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Which entry point decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Entry {
    /// The runtime wrapper (create, run, exec).
    Runtime,
    Prestart,
    Precreate,
}

impl Entry {
    pub fn as_str(self) -> &'static str {
        match self {
            Entry::Runtime => "runtime",
            Entry::Prestart => "prestart",
            Entry::Precreate => "precreate",
        }
    }

    fn parse(s: &str) -> Option<Entry> {
        [Entry::Runtime, Entry::Prestart, Entry::Precreate]
            .into_iter()
            .find(|e| e.as_str() == s)
    }
}

/// One decision, as the metrics count it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub verdict: Verdict,
    /// The check of the decision's first error finding.
    pub check: Option<Check>,
    pub entry: Entry,
    pub seconds: f64,
    /// The driver and CUDA versions, when the decision had host facts.
    pub host: Option<(String, String)>,
}

/// What [`record`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    Written,
    /// The lock stayed busy: counted as dropped.
    Dropped,
}

/// The counts kept between decisions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    /// (verdict, check, entry) → decisions.
    pub decisions: BTreeMap<(String, String, String), u64>,
    /// entry → histogram.
    pub seconds: BTreeMap<String, Histogram>,
    /// (driver, cuda), the last seen.
    pub host: Option<(String, String)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket of [`BUCKETS`] (not cumulative), then +Inf.
    pub counts: [u64; BUCKETS.len() + 1],
    pub sum: f64,
}

fn verdict_str(v: Verdict) -> &'static str {
    match v {
        Verdict::Allow => "allow",
        Verdict::Refuse => "refuse",
        Verdict::Skip => "skip",
    }
}

const VERDICTS: [&str; 3] = ["allow", "refuse", "skip"];
const CHECKS: [&str; 9] = [
    "none",
    "requirement",
    "device",
    "host",
    "kernel-image",
    "tuning",
    "security",
    "config",
    "compat",
];

/// A host version as a label value: the characters versions use, at most
/// 64 of them (NVML's strings are short; anything else is not a version).
fn version_label(s: &str) -> String {
    let v: String = s
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
        .take(64)
        .collect();
    if v.is_empty() {
        "unknown".into()
    } else {
        v
    }
}

impl State {
    /// Adds one decision.
    pub fn add(&mut self, s: &Sample) {
        let check = s.check.map_or("none", Check::as_str);
        let key = (
            verdict_str(s.verdict).to_string(),
            check.to_string(),
            s.entry.as_str().to_string(),
        );
        *self.decisions.entry(key).or_default() += 1;
        let h = self.seconds.entry(s.entry.as_str().into()).or_default();
        let secs = if s.seconds.is_finite() && s.seconds > 0.0 {
            s.seconds
        } else {
            0.0
        };
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        h.counts[i] += 1;
        h.sum += secs;
        if let Some((d, c)) = &s.host {
            self.host = Some((version_label(d), version_label(c)));
        }
    }

    /// The state file's text: a header, then `d VERDICT CHECK ENTRY N`,
    /// `h ENTRY SUM N...` and `host DRIVER CUDA` lines.
    pub fn to_text(&self) -> String {
        let mut out = String::from("gpu-guard-metrics 1\n");
        for ((v, c, e), n) in &self.decisions {
            let _ = writeln!(out, "d {v} {c} {e} {n}");
        }
        for (e, h) in &self.seconds {
            let counts: Vec<String> = h.counts.iter().map(u64::to_string).collect();
            let _ = writeln!(out, "h {e} {:?} {}", h.sum, counts.join(" "));
        }
        if let Some((d, c)) = &self.host {
            let _ = writeln!(out, "host {d} {c}");
        }
        out
    }

    /// Reads a state file's text. A line that is not one this version
    /// writes (or names a label value outside the known sets) is dropped,
    /// so a damaged file costs its bad lines, never a label it invents.
    pub fn from_text(text: &str) -> State {
        let mut s = State::default();
        let mut lines = text.lines();
        if lines.next() != Some("gpu-guard-metrics 1") {
            return s;
        }
        for line in lines {
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["d", v, c, e, n] if VERDICTS.contains(v) && CHECKS.contains(c) => {
                    if let (Some(e), Ok(n)) = (Entry::parse(e), n.parse::<u64>()) {
                        s.decisions
                            .insert((v.to_string(), c.to_string(), e.as_str().into()), n);
                    }
                }
                ["h", e, sum, counts @ ..] if counts.len() == BUCKETS.len() + 1 => {
                    let (Some(e), Ok(sum)) = (Entry::parse(e), sum.parse::<f64>()) else {
                        continue;
                    };
                    let mut h = Histogram {
                        sum: if sum.is_finite() { sum } else { 0.0 },
                        ..Default::default()
                    };
                    let parsed: Option<Vec<u64>> = counts.iter().map(|c| c.parse().ok()).collect();
                    let Some(parsed) = parsed else {
                        continue;
                    };
                    h.counts.copy_from_slice(&parsed);
                    s.seconds.insert(e.as_str().into(), h);
                }
                ["host", d, c] => s.host = Some((version_label(d), version_label(c))),
                _ => {}
            }
        }
        s
    }

    /// The textfile: the exposition format node_exporter reads.
    pub fn render(&self, dropped: u64) -> String {
        let mut o = String::new();
        o.push_str("# HELP gpu_guard_decisions_total Container decisions of gpu-guard's hooks and runtime wrapper.\n");
        o.push_str("# TYPE gpu_guard_decisions_total counter\n");
        for ((v, c, e), n) in &self.decisions {
            let _ = writeln!(
                o,
                "gpu_guard_decisions_total{{verdict=\"{}\",check=\"{}\",entry=\"{}\"}} {n}",
                escape(v),
                escape(c),
                escape(e)
            );
        }
        o.push_str(
            "# HELP gpu_guard_decision_seconds Time from an entry point's start to its decision.\n",
        );
        o.push_str("# TYPE gpu_guard_decision_seconds histogram\n");
        for (e, h) in &self.seconds {
            let e = escape(e);
            let mut cumulative = 0;
            for (i, n) in h.counts.iter().enumerate() {
                cumulative += n;
                let le = BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
                let _ = writeln!(
                    o,
                    "gpu_guard_decision_seconds_bucket{{entry=\"{e}\",le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                o,
                "gpu_guard_decision_seconds_sum{{entry=\"{e}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                o,
                "gpu_guard_decision_seconds_count{{entry=\"{e}\"}} {cumulative}"
            );
        }
        if let Some((d, c)) = &self.host {
            o.push_str("# HELP gpu_guard_host_info The NVIDIA driver and CUDA version the last decision with host facts saw.\n");
            o.push_str("# TYPE gpu_guard_host_info gauge\n");
            let _ = writeln!(
                o,
                "gpu_guard_host_info{{driver=\"{}\",cuda=\"{}\"}} 1",
                escape(d),
                escape(c)
            );
        }
        o.push_str("# HELP gpu_guard_metrics_dropped_total Metric updates skipped because the state lock stayed busy.\n");
        o.push_str("# TYPE gpu_guard_metrics_dropped_total counter\n");
        let _ = writeln!(o, "gpu_guard_metrics_dropped_total {dropped}");
        o
    }
}

/// A label value as the exposition format writes it: backslash, double
/// quote and line feed escaped (prometheus/docs exposition_formats.md).
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The files beside the textfile.
struct Files {
    textfile: PathBuf,
    state: PathBuf,
    lock: PathBuf,
    dropped: PathBuf,
}

impl Files {
    fn new(textfile: &Path) -> Result<Files, MetricsError> {
        let bad = |why: &str| MetricsError::Path {
            path: textfile.to_path_buf(),
            why: why.into(),
        };
        let name = textfile
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| bad("no file name"))?;
        let dir = textfile.parent().ok_or_else(|| bad("no directory"))?;
        let m = fs::symlink_metadata(dir).map_err(|e| bad(&format!("directory: {e}")))?;
        if !m.is_dir() {
            return Err(bad("its directory is not a directory"));
        }
        // Others could replace the state between our read and our rename.
        if m.mode() & 0o002 != 0 {
            return Err(bad(&format!(
                "its directory {} is writable by everyone (mode {:04o}); fix: chmod o-w {}",
                dir.display(),
                m.mode() & 0o7777,
                dir.display()
            )));
        }
        let beside = |suffix: &str| dir.join(format!(".{name}.{suffix}"));
        Ok(Files {
            textfile: textfile.to_path_buf(),
            state: beside("state"),
            lock: beside("lock"),
            dropped: beside("dropped"),
        })
    }
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MetricsError {
    let path = path.to_path_buf();
    move |source| MetricsError::Io { what, path, source }
}

fn open_nofollow(path: &Path, create: bool, append: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(!append)
        .write(create)
        .append(append)
        .create(create)
        .mode(0o600)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)
}

/// Takes the lock, trying for at most [`LOCK_WAIT`]; None when it stayed busy.
fn lock(path: &Path) -> Result<Option<Flock<File>>, MetricsError> {
    let mut file = open_nofollow(path, true, false).map_err(io_err("lock file", path))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => return Ok(Some(l)),
            Err((f, nix::errno::Errno::EWOULDBLOCK)) => {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                file = f;
                std::thread::sleep(LOCK_RETRY);
            }
            Err((_, e)) => return Err(io_err("lock file", path)(e.into())),
        }
    }
}

/// The state file's text; empty when there is none yet.
fn read_state(path: &Path) -> Result<String, MetricsError> {
    let f = match open_nofollow(path, false, false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(io_err("state file", path)(e)),
    };
    let m = f.metadata().map_err(io_err("state file", path))?;
    if !m.is_file() {
        return Err(MetricsError::Path {
            path: path.to_path_buf(),
            why: "the state file is not a regular file".into(),
        });
    }
    let mut text = String::new();
    f.take(MAX_STATE_BYTES)
        .read_to_string(&mut text)
        .map_err(io_err("state file", path))?;
    Ok(text)
}

/// When this process's entry point started: the decision time runs from here.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Marks the start of an entry point (the hooks and the wrapper call it
/// first thing).
pub fn mark_start() {
    STARTED.get_or_init(Instant::now);
}

impl Sample {
    /// `d`, decided by `entry`, timed from [`mark_start`].
    pub fn of(d: &Decision, entry: Entry) -> Sample {
        Sample {
            verdict: d.verdict,
            check: d.errors().next().map(|f| f.check),
            entry,
            seconds: STARTED.get().map_or(0.0, |t| t.elapsed().as_secs_f64()),
            host: d.host_versions.clone(),
        }
    }
}

/// Counts decision `d` of `entry` in `textfile` (`metrics.textfile`; empty:
/// off). A failure is logged (syslog, else `fallback`), never returned: a
/// metrics failure changes no decision.
pub fn count(textfile: &str, d: &Decision, entry: Entry, syslog: &Syslog, fallback: Fallback) {
    if textfile.is_empty() {
        return;
    }
    if let Err(e) = record(Path::new(textfile), &Sample::of(d, entry)) {
        logging::stood_aside(&format!("metrics not updated: {e}"), syslog, fallback);
    }
}

/// Counts one decision in the textfile at `textfile`. Never waits more
/// than [`LOCK_WAIT`] for another process's update.
pub fn record(textfile: &Path, sample: &Sample) -> Result<Recorded, MetricsError> {
    let files = Files::new(textfile)?;
    let Some(_held) = lock(&files.lock)? else {
        let mut f = open_nofollow(&files.dropped, true, true)
            .map_err(io_err("drop counter", &files.dropped))?;
        f.write_all(b".")
            .map_err(io_err("drop counter", &files.dropped))?;
        return Ok(Recorded::Dropped);
    };
    let mut state = State::from_text(&read_state(&files.state)?);
    state.add(sample);
    let dropped = fs::symlink_metadata(&files.dropped).map_or(0, |m| m.len());
    // The state first: the textfile never shows counts the state lacks.
    crate::sys::fsutil::write_with_mode(&files.state, state.to_text().as_bytes(), 0o600, false)
        .map_err(io_err("state file", &files.state))?;
    crate::sys::fsutil::write_with_mode(
        &files.textfile,
        state.render(dropped).as_bytes(),
        0o644,
        false,
    )
    .map_err(io_err("textfile", &files.textfile))?;
    Ok(Recorded::Written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(v: Verdict, check: Option<Check>, entry: Entry, secs: f64) -> Sample {
        Sample {
            verdict: v,
            check,
            entry,
            seconds: secs,
            host: Some(("535.104.05".into(), "12.2".into())),
        }
    }

    #[test]
    fn state_round_trips_and_renders() {
        let mut s = State::default();
        s.add(&sample(Verdict::Allow, None, Entry::Prestart, 0.002));
        s.add(&sample(Verdict::Allow, None, Entry::Prestart, 0.02));
        s.add(&sample(
            Verdict::Refuse,
            Some(Check::Requirement),
            Entry::Runtime,
            7.0,
        ));
        let again = State::from_text(&s.to_text());
        assert_eq!(again, s);
        let text = s.render(3);
        assert!(text.contains(
            "gpu_guard_decisions_total{verdict=\"allow\",check=\"none\",entry=\"prestart\"} 2\n"
        ));
        assert!(text.contains(
            "gpu_guard_decisions_total{verdict=\"refuse\",check=\"requirement\",entry=\"runtime\"} 1\n"
        ));
        assert!(
            text.contains("gpu_guard_decision_seconds_bucket{entry=\"prestart\",le=\"0.005\"} 1\n")
        );
        assert!(
            text.contains("gpu_guard_decision_seconds_bucket{entry=\"prestart\",le=\"0.05\"} 2\n")
        );
        assert!(text.contains("gpu_guard_decision_seconds_bucket{entry=\"runtime\",le=\"5\"} 0\n"));
        assert!(
            text.contains("gpu_guard_decision_seconds_bucket{entry=\"runtime\",le=\"+Inf\"} 1\n")
        );
        assert!(text.contains("gpu_guard_decision_seconds_count{entry=\"prestart\"} 2\n"));
        assert!(text.contains("gpu_guard_host_info{driver=\"535.104.05\",cuda=\"12.2\"} 1\n"));
        assert!(text.contains("gpu_guard_metrics_dropped_total 3\n"));
        assert!(!text.contains("container"), "no high-cardinality label");
    }

    #[test]
    fn a_damaged_state_keeps_only_what_it_can_vouch_for() {
        let text = "gpu-guard-metrics 1\nd allow none runtime 5\nd allow none runtime x\nd allow \"evil runtime 1\nd allow none nosuch 1\nh runtime 1.5 1 2\nhost 535\"}\\n x\n";
        let s = State::from_text(text);
        assert_eq!(s.decisions.len(), 1);
        assert!(s.seconds.is_empty());
        assert_eq!(s.host, Some(("535n".into(), "x".into())));
        assert_eq!(
            State::from_text("garbage\nd allow none runtime 5\n"),
            State::default()
        );
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gg-metrics-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn record_updates_the_textfile_and_drops_when_locked() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempdir("record");
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        let tf = d.join("gpu-guard.prom");
        let s = sample(Verdict::Skip, None, Entry::Precreate, 0.001);
        assert_eq!(record(&tf, &s).unwrap(), Recorded::Written);
        assert_eq!(record(&tf, &s).unwrap(), Recorded::Written);
        let text = fs::read_to_string(&tf).unwrap();
        assert!(text.contains("entry=\"precreate\"} 2\n"), "{text}");
        assert_eq!(fs::metadata(&tf).unwrap().mode() & 0o777, 0o644);
        // Someone holds the lock: dropped within the wait, and counted.
        let held = Flock::lock(
            open_nofollow(&d.join(".gpu-guard.prom.lock"), true, false).unwrap(),
            FlockArg::LockExclusiveNonblock,
        )
        .unwrap();
        let t = Instant::now();
        assert_eq!(record(&tf, &s).unwrap(), Recorded::Dropped);
        assert!(t.elapsed() < LOCK_WAIT * 4, "{:?}", t.elapsed());
        drop(held);
        record(&tf, &s).unwrap();
        let text = fs::read_to_string(&tf).unwrap();
        assert!(text.contains("entry=\"precreate\"} 3\n"), "{text}");
        assert!(
            text.contains("gpu_guard_metrics_dropped_total 1\n"),
            "{text}"
        );
        // Only the textfile ends in .prom.
        let proms: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".prom"))
            .collect();
        assert_eq!(proms.len(), 1);
        // A world-writable directory, a symlinked state: refused.
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(record(&tf, &s)
            .unwrap_err()
            .to_string()
            .contains("writable by everyone"));
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        fs::remove_file(d.join(".gpu-guard.prom.state")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join(".gpu-guard.prom.state")).unwrap();
        assert!(record(&tf, &s).is_err());
        fs::remove_dir_all(d).unwrap();
    }
}
