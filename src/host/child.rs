//! The uncached NVML probe in a child process.
//!
//! Why a process and not a thread: a GPU that fell off the bus can leave an
//! NVIDIA ioctl in uninterruptible sleep (D state). A thread stuck there
//! cannot be killed, and both process exit and execve(2) must first kill
//! every other thread of the process: the hook could not exit and the
//! runtime wrapper could not exec the real runtime until the ioctl returns,
//! whatever the probe deadline said. libnvidia-container forks for NVML for
//! the same reason. So the process that serves a container start never
//! loads libnvidia-ml at all; it runs this binary again:
//!
//! ```text
//! /proc/self/exe __probe --nvml-library=L --proc-nvidia=P --dev=D --sys=S
//!                        [--boot-id=F] [--modules=F] [--devices=F]
//! ```
//!
//! (`std::process::Command`: posix_spawn or fork+exec, never a fork that
//! goes on running Rust code beside the parent's threads.) The child gets
//! the parent's [`ProbePaths`] and `host.nvml_library` as arguments, reads
//! no config and no test-only variables, runs the same uncached probe the
//! parent would otherwise run on a thread (NVML, else /proc, with every diagnosis),
//! and prints one [`Answer`] as a single JSON line on stdout. `/proc/self/exe`
//! is the running binary even when its file was replaced by an upgrade.
//!
//! The parent waits for that line with poll(2) until `host.probe_timeout_ms`
//! (counted from before the spawn). At the deadline it sends SIGKILL and
//! returns at once, WITHOUT waitpid: a child in D state dies only when its
//! ioctl returns, and waiting would be the hang this module exists to avoid.
//! The stuck thread is in another process, so the hook exits and the
//! wrapper's execve goes ahead. The abandoned child stays a zombie-to-be of
//! this process (of the real runtime, after the wrapper's execve; pids do
//! not change across execve) and is reaped by whoever inherits it when this
//! process exits, init or the engine's subreaper (containerd-shim, conmon),
//! once the kernel lets it die.
//!
//! Limitation: descriptors the engine hands the wrapper without
//! close-on-exec (they must reach the real runtime) are inherited by the
//! child too, and a hung child holds them until it dies. gpu-guard's own
//! descriptors are all close-on-exec; the child's stdin and stderr are
//! /dev/null and its stdout is the answer pipe.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde::{Deserialize, Serialize};

use super::ProbePaths;
use crate::core::facts::{HostFacts, HostProblem, HostProblemKind, HostReport};

/// The hidden subcommand that runs the probe (src/commands/cli.rs).
pub const SUBCOMMAND: &str = "__probe";
/// Tags the answer line: output from anything else is not an answer.
pub const FORMAT: &str = "gpu-guard probe answer v1";
/// An answer is a few KiB even for 8 GPUs with MIG devices.
const MAX_ANSWER: usize = 1 << 20;
/// How long the parent waits to reap a child that has answered (or closed
/// its stdout without answering) before leaving it, killed.
const REAP_GRACE: Duration = Duration::from_millis(100);

/// An uncached probe's report, and whether it may be cached: only a clean
/// NVML answer is (never a failure, a lost GPU or the /proc fallback).
#[derive(Clone, Debug)]
pub struct Uncached {
    pub report: HostReport,
    pub cacheable: bool,
}

/// What the child prints: one line of JSON.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    format: String,
    source: String,
    facts: Option<HostFacts>,
    problems: Vec<WireProblem>,
    cacheable: bool,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireProblem {
    kind: WireKind,
    message: String,
    fix: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireKind {
    NoDriver,
    ProbeFailed,
    GpuLost { index: u32 },
    Degraded,
}

impl Answer {
    fn from_uncached(u: &Uncached) -> Answer {
        Answer {
            format: FORMAT.to_string(),
            source: u.report.source.clone(),
            facts: u.report.facts.clone(),
            problems: u
                .report
                .problems
                .iter()
                .map(|p| WireProblem {
                    kind: match p.kind {
                        HostProblemKind::NoDriver => WireKind::NoDriver,
                        // The child reads no facts file: never sent.
                        HostProblemKind::ProbeFailed | HostProblemKind::Untrusted => {
                            WireKind::ProbeFailed
                        }
                        HostProblemKind::GpuLost { index } => WireKind::GpuLost { index },
                        HostProblemKind::Degraded => WireKind::Degraded,
                    },
                    message: p.message.clone(),
                    fix: p.fix.clone(),
                })
                .collect(),
            cacheable: u.cacheable,
        }
    }

    fn into_uncached(self) -> Uncached {
        Uncached {
            report: HostReport {
                facts: self.facts,
                problems: self
                    .problems
                    .into_iter()
                    .map(|p| HostProblem {
                        kind: match p.kind {
                            WireKind::NoDriver => HostProblemKind::NoDriver,
                            WireKind::ProbeFailed => HostProblemKind::ProbeFailed,
                            WireKind::GpuLost { index } => HostProblemKind::GpuLost { index },
                            WireKind::Degraded => HostProblemKind::Degraded,
                        },
                        message: p.message,
                        fix: p.fix,
                    })
                    .collect(),
                source: self.source,
            },
            cacheable: self.cacheable,
        }
    }
}

/// Why the child gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("did not answer within {0} ms")]
    TimedOut(u64),
    #[error("cannot start the probe process {}: {source}", exe.display())]
    Spawn {
        exe: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the probe process's answer: {0}")]
    Read(#[source] io::Error),
    #[error("the probe process wrote more than {MAX_ANSWER} bytes")]
    TooLong,
    #[error("the probe process {status} without an answer")]
    NoAnswer { status: String },
}

/// The child's command line after the binary: [`SUBCOMMAND`] and the
/// parent's library and paths. `--flag=value` keeps a value that starts
/// with `-` a value.
pub fn args(library: &str, paths: &ProbePaths) -> Vec<OsString> {
    let flag = |name: &str, value: &std::ffi::OsStr| {
        let mut a = OsString::from(format!("--{name}="));
        a.push(value);
        a
    };
    let mut out = vec![
        OsString::from(SUBCOMMAND),
        flag("nvml-library", library.as_ref()),
        flag("proc-nvidia", paths.proc_nvidia.as_os_str()),
        flag("dev", paths.dev.as_os_str()),
        flag("sys", paths.sys.as_os_str()),
    ];
    for (name, p) in [
        ("boot-id", &paths.boot_id),
        ("modules", &paths.modules),
        ("devices", &paths.devices),
    ] {
        if let Some(p) = p {
            out.push(flag(name, p.as_os_str()));
        }
    }
    out
}

/// Parent side: runs `exe __probe ...` and waits for its answer at most
/// `timeout_ms` (see the module comment for what happens at the deadline).
pub fn run(
    exe: &Path,
    library: &str,
    paths: &ProbePaths,
    timeout_ms: u64,
) -> Result<Uncached, ChildError> {
    // None: a deadline too far away to represent, i.e. none.
    let deadline = Instant::now().checked_add(Duration::from_millis(timeout_ms));
    let mut child = Command::new(exe)
        .arg0("gpu-guard")
        .args(args(library, paths))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| ChildError::Spawn {
            exe: exe.to_path_buf(),
            source,
        })?;
    let Some(mut stdout) = child.stdout.take() else {
        abandon(child);
        return Err(ChildError::Read(io::Error::other("no stdout pipe")));
    };
    let read = read_answer(&mut stdout, deadline);
    drop(stdout);
    let bytes = match read {
        Ok(b) => b,
        Err(e) => {
            abandon(child);
            return Err(match e {
                ReadEnd::TimedOut => ChildError::TimedOut(timeout_ms),
                ReadEnd::TooLong => ChildError::TooLong,
                ReadEnd::Io(e) => ChildError::Read(e),
            });
        }
    };
    let status = reap(child);
    match parse_answer(&bytes) {
        Some(a) => Ok(a.into_uncached()),
        None => Err(ChildError::NoAnswer {
            status: match status {
                Some(s) => describe_status(s),
                None => "closed its output".to_string(),
            },
        }),
    }
}

enum ReadEnd {
    TimedOut,
    TooLong,
    Io(io::Error),
}

/// Reads the child's stdout to EOF, never past `deadline`.
fn read_answer(out: &mut ChildStdout, deadline: Option<Instant>) -> Result<Vec<u8>, ReadEnd> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ReadEnd::TimedOut);
                }
                // Rounded up: waking before the deadline only loops again.
                let ms = left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128);
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(out.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(ReadEnd::Io(e.into())),
        }
        // Readable or hung up: this read does not block.
        match out.read(&mut chunk) {
            Ok(0) => return Ok(buf),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > MAX_ANSWER {
                    return Err(ReadEnd::TooLong);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadEnd::Io(e)),
        }
    }
}

/// The answer: the last non-empty line that is one (a library that
/// printed to stdout before it cannot hide or fake-prefix it).
fn parse_answer(bytes: &[u8]) -> Option<Answer> {
    let line = bytes
        .split(|&b| b == b'\n')
        .rev()
        .find(|l| !l.iter().all(u8::is_ascii_whitespace))?;
    let a: Answer = serde_json::from_slice(line).ok()?;
    (a.format == FORMAT).then_some(a)
}

/// SIGKILL, and no wait: see the module comment. Dropping a `Child` does
/// not wait for it.
fn abandon(mut child: Child) {
    let _ = child.kill();
    drop(child);
}

/// The exit status of a child that closed its stdout, which exits next;
/// one still running after [`REAP_GRACE`] (stuck in nvmlShutdown, say) is
/// abandoned.
fn reap(mut child: Child) -> Option<ExitStatus> {
    let until = Instant::now() + REAP_GRACE;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < until => {
                std::thread::sleep(Duration::from_micros(200));
            }
            _ => {
                abandon(child);
                return None;
            }
        }
    }
}

fn describe_status(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => format!("ended ({s})"),
    }
}

/// Child side (`gpu-guard __probe`): the uncached probe, printed as one
/// JSON line on stdout. Returns the exit status (0 answered, 2 could not
/// write the answer).
pub fn serve(library: &str, paths: &ProbePaths) -> i32 {
    let u = super::uncached(library, paths);
    let line = match serde_json::to_string(&Answer::from_uncached(&u)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("gpu-guard: cannot encode the probe answer: {e}");
            return 2;
        }
    };
    // On a line of its own, whatever a library printed before it.
    let mut out = io::stdout().lock();
    match writeln!(out, "\n{line}").and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::facts::Gpu;

    fn paths() -> ProbePaths {
        ProbePaths {
            proc_nvidia: PathBuf::from("-odd/proc"),
            dev: PathBuf::from("/d ev"),
            boot_id: None,
            modules: Some(PathBuf::from("/m")),
            devices: None,
            sys: PathBuf::from("/sys"),
            probe_exe: PathBuf::from("/unused"),
            host_root: PathBuf::from("/unused-root"),
        }
    }

    #[test]
    fn args_carry_the_paths_as_values() {
        let a = args("", &paths());
        let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert_eq!(
            a,
            [
                "__probe",
                "--nvml-library=",
                "--proc-nvidia=-odd/proc",
                "--dev=/d ev",
                "--sys=/sys",
                "--modules=/m"
            ]
        );
    }

    #[test]
    fn answer_round_trips_every_problem_kind() {
        let mut report = HostReport::from_facts(
            HostFacts {
                driver_version: Some("550.54.14".into()),
                cuda_driver_version: Some("12.4".into()),
                gpus: vec![Gpu {
                    index: 0,
                    name: "X".into(),
                    ..Gpu::default()
                }],
                ..Default::default()
            },
            "NVML (lib)",
        );
        for kind in [
            HostProblemKind::NoDriver,
            HostProblemKind::ProbeFailed,
            HostProblemKind::GpuLost { index: 3 },
            HostProblemKind::Degraded,
        ] {
            report.problems.push(HostProblem {
                kind,
                message: "m".into(),
                fix: None,
            });
        }
        let u = Uncached {
            report,
            cacheable: true,
        };
        let line = serde_json::to_string(&Answer::from_uncached(&u)).unwrap();
        assert!(!line.contains('\n'));
        let text = format!("noise from a library\n{line}\n\n");
        let back = parse_answer(text.as_bytes()).unwrap().into_uncached();
        assert_eq!(back.report.facts, u.report.facts);
        assert_eq!(back.report.problems, u.report.problems);
        assert_eq!(back.report.source, u.report.source);
        assert!(back.cacheable);
    }

    #[test]
    fn anything_else_is_no_answer() {
        assert!(parse_answer(b"").is_none());
        assert!(parse_answer(b"running 0 tests\n").is_none());
        let foreign =
            r#"{"format":"other","source":"","facts":null,"problems":[],"cacheable":false}"#;
        assert!(parse_answer(foreign.as_bytes()).is_none());
    }

    #[test]
    fn a_program_that_is_not_gpu_guard_gives_no_answer() {
        let r = run(Path::new("/bin/true"), "", &paths(), 5000);
        assert!(matches!(r, Err(ChildError::NoAnswer { .. })), "{r:?}");
        let e = r.unwrap_err().to_string();
        assert!(e.contains("exited with status 0"), "{e}");
        let r = run(Path::new("/nonexistent/gpu-guard"), "", &paths(), 5000);
        assert!(matches!(r, Err(ChildError::Spawn { .. })), "{r:?}");
    }

    #[test]
    fn a_silent_child_is_cut_at_the_deadline_and_not_waited_for() {
        // A script that ignores SIGTERM and never answers stands in for a
        // hung probe.
        let dir = std::env::temp_dir().join(format!("gg-child-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("hang.sh");
        std::fs::write(&script, "#!/bin/sh\ntrap '' TERM\nexec sleep 30\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let start = Instant::now();
        let r = run(&script, "", &paths(), 200);
        let took = start.elapsed();
        assert!(matches!(r, Err(ChildError::TimedOut(200))), "{r:?}");
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
