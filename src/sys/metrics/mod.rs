//! Decision counters for Prometheus, in node_exporter's textfile format
//! (`[metrics] textfile`; docs/decision-records.md, "Metrics").
//!
//! Many containers start at once, each in its own gpu-guard process, so
//! the counts live in a state file beside the textfile and every update
//! is a read-modify-write under an flock(2) on a lock file:
//!
//! - `.NAME.lock`: locked with LOCK_NB, retried for at most [`LOCK_WAIT`];
//!   a start never waits longer. Past that the decision is appended to
//!   `.NAME.pending` instead ([`pending`]), and the next holder of the lock
//!   counts it: every process that held the lock looks for pending lines
//!   again after it let go, and one that left a line waits for the lock
//!   once more, so a line never waits for a later start.
//! - `.NAME.state`: the counts, one line each ([`State`]).
//! - `NAME`: rendered whole from the state and replaced atomically (a
//!   temporary name in the same directory, then rename), as node_exporter's
//!   collector/textfile.go expects: it reads only `*.prom` files, so the
//!   hidden state, lock and temporary files are never read, and a reader
//!   sees the old file or the new one, never half of one. No timestamps
//!   (node_exporter skips a file that has them).
//! - `.NAME.dropped`: one byte per decision that could be neither counted
//!   nor appended (the pending file full or never the same twice); its
//!   size is `gpu_guard_metrics_dropped_total`.
//!
//! Labels are few and bounded: the verdict (`would_refuse` for what
//! `mode = "audit"` or `"warn"` let start and enforce would refuse), the
//! check of the first error finding (or `none`), the entry point, the mode;
//! the host's driver and CUDA versions. Never a container id, an image or
//! anything a container chooses. Every file is opened without following a symlink, in a
//! directory that others cannot write (or the write is refused).

use crate::core::decision::{Check, Decision};
use crate::core::policy::{MetricsConfig, Mode};
use crate::sys::logging::{self, Fallback, Syslog};
use nix::fcntl::{Flock, FlockArg, OFlag};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod pending;
mod state;

pub use state::{check_label, escape, Histogram, State, MODES, VERDICTS};

/// The longest a decision waits for the state lock.
pub const LOCK_WAIT: Duration = Duration::from_millis(2);
/// The pause between two tries of a lock.
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
    /// The `verdict` label (core::decision `Decision::outcome`).
    pub verdict: &'static str,
    /// The check of the decision's first error finding, or `none`.
    pub check: &'static str,
    pub entry: Entry,
    /// The mode the decision was made under.
    pub mode: Mode,
    pub seconds: f64,
    /// The driver and CUDA versions, when the decision had host facts.
    pub host: Option<(String, String)>,
}

/// What [`record`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    Written,
    /// The lock stayed busy: left in the pending file for its holder.
    Pending,
    /// Neither: counted as dropped.
    Dropped,
}

/// The files beside the textfile.
struct Files {
    textfile: PathBuf,
    state: PathBuf,
    lock: PathBuf,
    pending: PathBuf,
    folding: PathBuf,
    dropped: PathBuf,
}

impl Files {
    /// The textfile, and its state, lock and pending files in `state_dir`
    /// (named for the textfile), or beside it (hidden) when `state_dir` is
    /// None. The state directory is created (0755) when missing, and must
    /// be private (crate::sys::fsutil::check_private_dir).
    fn new(textfile: &Path, state_dir: Option<&Path>) -> Result<Files, MetricsError> {
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
        let beside = |suffix: &str| match state_dir {
            Some(d) => d.join(format!("{name}.{suffix}")),
            None => dir.join(format!(".{name}.{suffix}")),
        };
        if let Some(d) = state_dir {
            if !d.is_dir() {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(d)
                    .map_err(io_err("state directory", d))?;
            }
            crate::sys::fsutil::check_private_dir(d).map_err(io_err("state directory", d))?;
        }
        Ok(Files {
            textfile: textfile.to_path_buf(),
            state: beside("state"),
            lock: beside("lock"),
            pending: beside("pending"),
            folding: beside("folding"),
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

/// Takes the lock, trying for at most `wait`; None when it stayed busy.
fn lock(path: &Path, wait: Duration) -> Result<Option<Flock<File>>, MetricsError> {
    let mut file = open_nofollow(path, true, false).map_err(io_err("lock file", path))?;
    let deadline = Instant::now() + wait;
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

/// The state file's bytes (empty when there is none yet), and what was
/// left of it: a file larger than [`MAX_STATE_BYTES`] (ours never is) is
/// read up to its last whole line within the bound, and said so.
fn read_state(path: &Path) -> Result<(Vec<u8>, Option<String>), MetricsError> {
    let f = match open_nofollow(path, false, false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), None)),
        Err(e) => return Err(io_err("state file", path)(e)),
    };
    let m = f.metadata().map_err(io_err("state file", path))?;
    if !m.is_file() {
        return Err(MetricsError::Path {
            path: path.to_path_buf(),
            why: "the state file is not a regular file".into(),
        });
    }
    let mut bytes = Vec::new();
    f.take(MAX_STATE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err("state file", path))?;
    if bytes.len() as u64 <= MAX_STATE_BYTES {
        return Ok((bytes, None));
    }
    let keep = bytes[..MAX_STATE_BYTES as usize]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    bytes.truncate(keep);
    let why = format!(
        "the state file {} is larger than {MAX_STATE_BYTES} bytes: the lines past them were dropped",
        path.display()
    );
    Ok((bytes, Some(why)))
}

/// When this process's entry point started: the decision time runs from here.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Marks the start of an entry point (the hooks and the wrapper call it
/// first thing).
pub fn mark_start() {
    STARTED.get_or_init(Instant::now);
}

impl Sample {
    /// `d`, decided by `entry` under `mode`, timed from [`mark_start`].
    pub fn of(d: &Decision, entry: Entry, mode: Mode) -> Sample {
        Sample {
            verdict: d.outcome(mode),
            check: d.errors().next().map_or("none", |f| Check::as_str(f.check)),
            entry,
            mode,
            seconds: STARTED.get().map_or(0.0, |t| t.elapsed().as_secs_f64()),
            host: d.host_versions.clone(),
        }
    }
}

/// Counts decision `d` of `entry`, made under `mode`, as `[metrics]` says
/// (`cfg`; None or an empty textfile: off). A failure is logged (syslog,
/// else `fallback`), never returned: a metrics failure changes no decision.
pub fn count(
    cfg: Option<&MetricsConfig>,
    d: &Decision,
    (entry, mode): (Entry, Mode),
    syslog: &Syslog,
    fallback: Fallback,
) {
    let Some(cfg) = cfg.filter(|c| !c.textfile.is_empty()) else {
        return;
    };
    let state_dir = Some(Path::new(&cfg.state_dir)).filter(|d| !d.as_os_str().is_empty());
    let sample = Sample::of(d, entry, mode);
    match record_noting(Path::new(&cfg.textfile), state_dir, &sample) {
        Ok((_, damage)) => {
            if let Some(why) = damage {
                let msg = format!("metrics: {why}");
                logging::stood_aside(&msg, syslog, fallback);
            }
        }
        Err(e) => logging::stood_aside(&format!("metrics not updated: {e}"), syslog, fallback),
    }
}

/// Counts one decision in the textfile at `textfile`. Never waits more
/// than [`LOCK_WAIT`] for another process's update (twice, when pending
/// lines must be waited for).
pub fn record(
    textfile: &Path,
    state_dir: Option<&Path>,
    sample: &Sample,
) -> Result<Recorded, MetricsError> {
    record_noting(textfile, state_dir, sample).map(|(r, _)| r)
}

/// [`record`], and what was wrong with the state it read, if anything
/// (lines dropped): counting goes on, and the caller says so.
pub fn record_noting(
    textfile: &Path,
    state_dir: Option<&Path>,
    sample: &Sample,
) -> Result<(Recorded, Option<String>), MetricsError> {
    let files = Files::new(textfile, state_dir)?;
    let line = State::sample_line(sample);
    let mut damage = None;
    let done = match lock(&files.lock, LOCK_WAIT)? {
        Some(held) => {
            damage = update(&files, Some(&line))?;
            drop(held);
            Recorded::Written
        }
        None => match pending::append(&files.pending, &line) {
            Ok(()) => Recorded::Pending,
            Err(_) => {
                let mut f = open_nofollow(&files.dropped, true, true)
                    .map_err(io_err("drop counter", &files.dropped))?;
                f.write_all(b".")
                    .map_err(io_err("drop counter", &files.dropped))?;
                return Ok((Recorded::Dropped, None));
            }
        },
    };
    let later = fold_left(&files, done == Recorded::Pending)?;
    Ok((done, damage.or(later)))
}

/// Rounds of [`fold_left`]: each folds what an appender still writing
/// during the previous one left behind.
const FOLD_ROUNDS: usize = 3;

/// Counts lines appended while the lock was held (this one's own too).
/// Whoever lets go of the lock, or leaves a line, looks again: a holder
/// for a few rounds while lines remain, and an appender (`waited`) for up
/// to [`LOCK_WAIT`], so the last process to finish sees every line. With
/// one round and no wait, 40 hooks 8 at a time on two loaded cores left
/// lines for a later start (tests/decide/host_tuning.rs).
fn fold_left(files: &Files, waited: bool) -> Result<Option<String>, MetricsError> {
    let mut wait = if waited { LOCK_WAIT } else { Duration::ZERO };
    let mut damage = None;
    for _ in 0..FOLD_ROUNDS {
        if !pending::waiting(&files.pending, &files.folding) {
            break;
        }
        // Busy: its holder looks again once it lets go.
        let Some(held) = lock(&files.lock, wait)? else {
            break;
        };
        damage = damage.or(update(files, None)?);
        drop(held);
        wait = Duration::ZERO;
    }
    Ok(damage)
}

/// Under the lock: the state, with the pending lines and `line` counted,
/// written back, then the textfile rendered from it. The folding file of
/// the pending lines is removed only once the state that counts them is
/// written (a failed write keeps them for the next holder). Returns what
/// was wrong with the state read (lines dropped), if anything.
fn update(files: &Files, line: Option<&str>) -> Result<Option<String>, MetricsError> {
    let (bytes, cut) = read_state(&files.state)?;
    let mut state = State::from_bytes(&bytes);
    let damage = match (cut, state.bad_lines) {
        (Some(why), _) => Some(why),
        (None, 0) => None,
        (None, n) => Some(format!(
            "{n} damaged lines of the state file {} were dropped",
            files.state.display()
        )),
    };
    let folded = pending::take(&files.pending, &files.folding, &mut state)
        .map_err(io_err("pending file", &files.pending))?;
    if let Some(l) = line {
        state.add_line(l.trim_end());
    }
    let dropped = fs::symlink_metadata(&files.dropped).map_or(0, |m| m.len());
    // The state first: the textfile never shows counts the state lacks.
    crate::sys::fsutil::write_with_mode(&files.state, state.to_text().as_bytes(), 0o600, false)
        .map_err(io_err("state file", &files.state))?;
    if let Some(id) = folded {
        pending::done(&files.folding, id).map_err(io_err("pending file", &files.folding))?;
    }
    crate::sys::fsutil::write_with_mode(
        &files.textfile,
        state.render(dropped).as_bytes(),
        0o644,
        false,
    )
    .map_err(io_err("textfile", &files.textfile))?;
    Ok(damage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::decision::{Check, Verdict};

    fn sample(v: Verdict, check: Option<Check>, entry: Entry, secs: f64) -> Sample {
        let verdict = match v {
            Verdict::Allow => "allow",
            Verdict::Refuse => "refuse",
            Verdict::Skip => "skip",
        };
        Sample {
            verdict,
            check: check.map_or("none", Check::as_str),
            entry,
            mode: Mode::Enforce,
            seconds: secs,
            host: Some(("535.104.05".into(), "12.2".into())),
        }
    }

    #[test]
    fn threads_racing_for_the_lock_lose_no_decision() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempdir("metrics-race");
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        let tf = d.join("gpu-guard.prom");
        // flock(2) locks belong to the open file, so threads that each
        // open the lock file exclude one another as processes do.
        std::thread::scope(|sc| {
            for t in 0..8 {
                let tf = &tf;
                sc.spawn(move || {
                    for i in 0..25 {
                        let v = if (t + i) % 2 == 0 {
                            Verdict::Allow
                        } else {
                            Verdict::Refuse
                        };
                        record(tf, None, &sample(v, None, Entry::Runtime, 0.001)).unwrap();
                    }
                });
            }
        });
        // Whatever is still pending is counted by the next update.
        record(
            &tf,
            None,
            &sample(Verdict::Skip, None, Entry::Runtime, 0.001),
        )
        .unwrap();
        let s = State::from_text(&fs::read_to_string(d.join(".gpu-guard.prom.state")).unwrap());
        let n: u64 = s.decisions.values().sum();
        let dropped = fs::metadata(d.join(".gpu-guard.prom.dropped")).map_or(0, |m| m.len());
        assert_eq!((n, dropped), (201, 0), "{s:?}");
        assert_eq!(s.seconds["runtime"].counts.iter().sum::<u64>(), 201);
        fs::remove_dir_all(d).unwrap();
    }

    use crate::sys::test_dirs::tempdir;

    #[test]
    fn record_updates_the_textfile_and_waits_never_long() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempdir("metrics-record");
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        let tf = d.join("gpu-guard.prom");
        let s = sample(Verdict::Skip, None, Entry::Precreate, 0.001);
        assert_eq!(record(&tf, None, &s).unwrap(), Recorded::Written);
        assert_eq!(record(&tf, None, &s).unwrap(), Recorded::Written);
        let text = fs::read_to_string(&tf).unwrap();
        assert!(
            text.contains("entry=\"precreate\",mode=\"enforce\"} 2\n"),
            "{text}"
        );
        assert_eq!(fs::metadata(&tf).unwrap().mode() & 0o777, 0o644);
        // Someone holds the lock: left pending within the wait, and
        // counted by the next update.
        let lock_path = d.join(".gpu-guard.prom.lock");
        let held = Flock::lock(
            open_nofollow(&lock_path, true, false).unwrap(),
            FlockArg::LockExclusiveNonblock,
        )
        .unwrap();
        let t = Instant::now();
        assert_eq!(record(&tf, None, &s).unwrap(), Recorded::Pending);
        // Two waits of LOCK_WAIT and an append; the bound only catches a
        // hang (bench-tuning.sh measures the cost).
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        assert!(d.join(".gpu-guard.prom.pending").exists());
        drop(held);
        assert_eq!(record(&tf, None, &s).unwrap(), Recorded::Written);
        let text = fs::read_to_string(&tf).unwrap();
        assert!(
            text.contains("entry=\"precreate\",mode=\"enforce\"} 4\n"),
            "{text}"
        );
        assert!(
            text.contains("gpu_guard_metrics_dropped_total 0\n"),
            "{text}"
        );
        assert!(!d.join(".gpu-guard.prom.pending").exists());
        // The pending file full: dropped, and counted as such.
        let held = Flock::lock(
            open_nofollow(&lock_path, true, false).unwrap(),
            FlockArg::LockExclusiveNonblock,
        )
        .unwrap();
        let full = fs::File::create(d.join(".gpu-guard.prom.pending")).unwrap();
        full.set_len(pending::MAX_PENDING_BYTES).unwrap();
        assert_eq!(record(&tf, None, &s).unwrap(), Recorded::Dropped);
        drop(held);
        fs::remove_file(d.join(".gpu-guard.prom.pending")).unwrap();
        record(&tf, None, &s).unwrap();
        let text = fs::read_to_string(&tf).unwrap();
        assert!(
            text.contains("entry=\"precreate\",mode=\"enforce\"} 5\n"),
            "{text}"
        );
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
        assert!(record(&tf, None, &s)
            .unwrap_err()
            .to_string()
            .contains("writable by everyone"));
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        fs::remove_file(d.join(".gpu-guard.prom.state")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join(".gpu-guard.prom.state")).unwrap();
        assert!(record(&tf, None, &s).is_err());
        fs::remove_dir_all(d).unwrap();
    }
}
