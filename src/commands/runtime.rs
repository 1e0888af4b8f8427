//! `gpu-guard runtime ARGS...` / `gpu-guard-runtime ARGS...`: an OCI runtime
//! wrapper for docker, containerd and CRI-O.
//!
//! On `create` and `run` it decides before the container exists — the only
//! moment env, capabilities and noNewPrivileges can still change (runc sends
//! them to init before any hook runs, libcontainer/process_linux.go) — then
//! execs the real runtime with the argv unchanged. Every other subcommand is
//! exec'd byte for byte. A refusal is written as one logrus-style JSON line to
//! the `--log` file: containerd's shim reports the last `"level":"error"` line
//! as `OCI runtime create failed: <msg>` (shared/research/oci-integration.md),
//! which is what `docker run` prints.

use crate::commands::pipeline::{self, HostChoice};
use crate::config::{self, ConfigError};
use crate::core::decision::Verdict;
use crate::core::policy::Config;
use crate::core::report;
use crate::core::security::Stage;
use crate::oci::spec_file;
use crate::sys::logging;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// What we understood of a runtime command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Invocation {
    /// `--log FILE` (global).
    pub log: Option<PathBuf>,
    /// The subcommand (`create`, `run`, `state`, ...), if any.
    pub command: Option<String>,
    /// `--bundle`/`-b` of create/run; None means the working directory.
    pub bundle: Option<PathBuf>,
    /// The container id (first positional after the subcommand's flags).
    pub id: Option<String>,
    /// `--process`/`-p` of exec: the process.json to run.
    pub process: Option<PathBuf>,
    /// Global `--root`, kept to ask the real runtime about a container.
    pub root: Option<OsString>,
}

/// runc's global flags that take a value (runc main.go). urfave/cli and Go's
/// flag package accept one or two dashes and `--flag=value`.
const GLOBAL_VALUE_FLAGS: &[&str] = &["log", "log-format", "root", "criu", "rootless"];
/// create/run flags that take a value (runc create.go, run.go, utils_linux.go).
const CREATE_VALUE_FLAGS: &[&str] = &[
    "bundle",
    "b",
    "console-socket",
    "pid-file",
    "preserve-fds",
    "pidfd-socket",
];

/// exec flags that take a value (runc exec.go).
const EXEC_VALUE_FLAGS: &[&str] = &[
    "console-socket",
    "cwd",
    "env",
    "e",
    "user",
    "u",
    "additional-gids",
    "g",
    "process",
    "p",
    "pid-file",
    "process-label",
    "apparmor",
    "cap",
    "c",
    "preserve-fds",
    "cgroup",
];

/// Splits `--name=value` / `-name value` forms. Returns (name, inline value).
fn flag_name(arg: &OsStr) -> Option<(String, Option<OsString>)> {
    let bytes = arg.as_bytes();
    if bytes.len() < 2 || bytes[0] != b'-' || bytes == b"--" {
        return None;
    }
    let body = if bytes.starts_with(b"--") {
        &bytes[2..]
    } else {
        &bytes[1..]
    };
    match body.iter().position(|b| *b == b'=') {
        Some(eq) => Some((
            String::from_utf8_lossy(&body[..eq]).into_owned(),
            Some(OsStr::from_bytes(&body[eq + 1..]).to_os_string()),
        )),
        None => Some((String::from_utf8_lossy(body).into_owned(), None)),
    }
}

/// The flag at `args[*i]`, with its value when it takes one (inline
/// `--flag=value` or the next argument); advances `*i` past what it used.
/// None when `args[*i]` is not a flag.
fn take_flag(
    args: &[OsString],
    i: &mut usize,
    value_flags: &[&str],
) -> Option<(String, Option<OsString>)> {
    let (name, inline) = flag_name(args.get(*i)?)?;
    let value = if inline.is_none() && value_flags.contains(&name.as_str()) {
        *i += 1;
        args.get(*i).cloned()
    } else {
        inline
    };
    *i += 1;
    Some((name, value))
}

/// Reads the parts of the argv we need; never fails (unknown shapes are
/// simply passed through).
pub fn parse(args: &[OsString]) -> Invocation {
    let mut inv = Invocation::default();
    let mut i = 0;
    while let Some((name, value)) = take_flag(args, &mut i, GLOBAL_VALUE_FLAGS) {
        match name.as_str() {
            "log" => inv.log = value.map(PathBuf::from),
            "root" => inv.root = value,
            _ => {}
        }
    }
    let Some(cmd) = args.get(i) else { return inv };
    let cmd = cmd.to_string_lossy().into_owned();
    i += 1;
    let value_flags = match cmd.as_str() {
        "create" | "run" => CREATE_VALUE_FLAGS,
        "exec" => EXEC_VALUE_FLAGS,
        _ => {
            inv.command = Some(cmd);
            return inv;
        }
    };
    while i < args.len() {
        match take_flag(args, &mut i, value_flags) {
            Some((name, value)) => match name.as_str() {
                "bundle" | "b" if cmd != "exec" => inv.bundle = value.map(PathBuf::from),
                "process" | "p" if cmd == "exec" => inv.process = value.map(PathBuf::from),
                _ => {}
            },
            None if args[i] == "--" => i += 1,
            None => {
                // The id; after it everything belongs to the process (exec ID CMD...).
                inv.id = Some(args[i].to_string_lossy().into_owned());
                break;
            }
        }
    }
    inv.command = Some(cmd);
    inv
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no OCI runtime found: set runtime.path in the gpu-guard config, or put runc or crun on PATH")]
    NotFound,
    #[error("cannot exec {path}: {source}")]
    Exec {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The real runtime: `runtime.path`, else the first `runc`, then `crun`, on
/// PATH that is not gpu-guard itself (a host may have linked us as runc).
pub fn find_real_runtime(configured: &str) -> Result<PathBuf, RuntimeError> {
    if !configured.is_empty() {
        return Ok(PathBuf::from(configured));
    }
    let me = std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok());
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    for name in ["runc", "crun"] {
        for dir in std::env::split_paths(&path) {
            let cand = dir.join(name);
            if !is_executable(&cand) {
                continue;
            }
            let canon = cand.canonicalize().ok();
            if canon.is_some() && canon == me {
                continue;
            }
            return Ok(cand);
        }
    }
    Err(RuntimeError::NotFound)
}

/// Replaces this process with the real runtime, argv unchanged.
fn exec_real(real: &Path, args: &[OsString]) -> i32 {
    let err = std::process::Command::new(real).args(args).exec();
    eprintln!(
        "gpu-guard-runtime: {}",
        RuntimeError::Exec {
            path: real.to_path_buf(),
            source: err
        }
    );
    // 127: the convention for "command could not be run".
    127
}

/// RFC 3339 UTC timestamp without a date crate (Howard Hinnant's
/// civil_from_days).
pub fn rfc3339_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_nanos()
    )
}

/// Appends the refusal as one JSON line to the runtime log.
fn write_log_line(log: &Path, msg: &str) -> std::io::Result<()> {
    let line = serde_json::json!({ "level": "error", "msg": msg, "time": rfc3339_now() });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    f.write_all(&bytes)
}

pub fn main(config_flag: Option<&Path>, args: Vec<OsString>) -> i32 {
    let cfg: Result<Config, ConfigError> = config::load(config_flag);
    let configured = cfg
        .as_ref()
        .map(|c| c.runtime.path.clone())
        .unwrap_or_default();
    let real = match find_real_runtime(&configured) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpu-guard-runtime: {e}");
            return 127;
        }
    };
    let inv = parse(&args);
    match inv.command.as_deref() {
        Some("create") | Some("run") => guard_create(&cfg, &inv, &real, &args),
        Some("exec") => guard_exec(&cfg, &inv, &real, &args),
        _ => exec_real(&real, &args),
    }
}

/// The bundle of a running container, from `<runtime> [--root R] state ID`
/// (runtime-spec "state": every runtime reports `bundle`).
fn container_bundle(real: &Path, inv: &Invocation) -> Option<PathBuf> {
    let id = inv.id.as_ref()?;
    let mut cmd = std::process::Command::new(real);
    if let Some(root) = &inv.root {
        cmd.arg("--root").arg(root);
    }
    let out = cmd
        .arg("state")
        .arg(id)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v.get("bundle")?.as_str().map(PathBuf::from)
}

/// The log fallback for decisions: the runtime's --log file, never stderr.
fn log_fallback(inv: &Invocation) -> logging::Fallback {
    logging::Fallback::RuntimeLog(inv.log.clone())
}

/// Reports a refusal: JSON line in --log (what containerd shows), and stderr.
fn refuse(inv: &Invocation, decision: &crate::core::decision::Decision) -> i32 {
    let line = report::refusal_line(decision);
    if let Some(log) = &inv.log {
        if let Err(e) = write_log_line(log, &line) {
            eprintln!("gpu-guard-runtime: cannot write {}: {e}", log.display());
        }
    }
    eprint!("{}", report::refusal(decision));
    1
}

/// Reports that edits could not be written; the process must not start
/// without the policy it was decided under.
fn edit_failed(inv: &Invocation, e: &dyn std::fmt::Display) -> i32 {
    let msg = format!("gpu-guard could not apply its edits: {e}");
    if let Some(log) = &inv.log {
        let _ = write_log_line(log, &msg);
    }
    eprintln!("gpu-guard-runtime: {msg}");
    1
}

fn guard_create(
    cfg: &Result<Config, ConfigError>,
    inv: &Invocation,
    real: &Path,
    args: &[OsString],
) -> i32 {
    let bundle = match &inv.bundle {
        Some(b) => b.clone(),
        None => match std::env::current_dir() {
            Ok(d) => d,
            Err(_) => return exec_real(real, args),
        },
    };
    let spec_path = bundle.join("config.json");
    let mut spec = match spec_file::load(&spec_path, Some(&bundle)) {
        Ok(s) => s,
        Err(e) => {
            // The real runtime reports its own, better error about the bundle.
            logging::stood_aside(
                &format!(
                    "standing aside for container {}: {e}; the real runtime will report it",
                    inv.id
                        .as_deref()
                        .map(crate::core::sanitize::esc)
                        .unwrap_or_else(|| "-".into())
                ),
                &pipeline::syslog_target(cfg),
                // The real runtime fails on this bundle anyway, so stderr
                // cannot leak into a running container's output.
                match &inv.log {
                    Some(l) => logging::Fallback::RuntimeLog(Some(l.clone())),
                    None => logging::Fallback::Stderr,
                },
            );
            return exec_real(real, args);
        }
    };
    spec.container.id = inv.id.clone();
    let decision = pipeline::assess(cfg, &spec.container, Stage::Edit, HostChoice::FromConfig);
    logging::record(&decision, &pipeline::syslog_target(cfg), log_fallback(inv));
    if decision.verdict == Verdict::Refuse {
        return refuse(inv, &decision);
    }
    if spec_file::apply(&mut spec.json, &decision.edits) {
        if let Err(e) = spec_file::write(&spec.path, &spec.json) {
            return edit_failed(inv, &e);
        }
    }
    exec_real(real, args)
}

/// `exec --process P.json ID`: `docker exec` builds a fresh process with
/// docker's default capabilities and its own noNewPrivileges (moby
/// daemon/exec_linux.go), and runc applies them as given, so without this an
/// exec'd shell in a GPU container would get back what the policy dropped.
/// The argv stays byte-identical; the process file is edited in place. Only
/// the security policy applies here (the container was already admitted).
fn guard_exec(
    cfg: &Result<Config, ConfigError>,
    inv: &Invocation,
    real: &Path,
    args: &[OsString],
) -> i32 {
    let (Some(path), Ok(cfg)) = (&inv.process, cfg) else {
        return exec_real(real, args);
    };
    if cfg.mode == crate::core::policy::Mode::Off {
        return exec_real(real, args);
    }
    let bytes = match crate::sys::fsutil::read_limited(path, spec_file::MAX_SPEC_BYTES) {
        Ok(b) => b,
        Err(_) => return exec_real(real, args),
    };
    let Ok(process) = crate::oci::spec::parse_spec_bytes(&bytes) else {
        return exec_real(real, args);
    };
    let mut wrapped = serde_json::json!({ "process": process });
    let Ok(mut c) = crate::core::container::Container::from_spec(&wrapped, None) else {
        return exec_real(real, args);
    };
    c.id = inv.id.clone();
    // Whether the container is a GPU container is in its bundle's config.json
    // (docker --gpus puts NVIDIA_VISIBLE_DEVICES in the OCI spec, not in the
    // env it gives exec'd processes).
    let gpu = container_bundle(real, inv)
        .and_then(|b| spec_file::load(&b.join("config.json"), Some(&b)).ok())
        .map(|s| crate::core::detect::classify(&s.container).gpu)
        .unwrap_or(false)
        || crate::core::detect::classify(&c).gpu;
    if !gpu && cfg.security.apply_to != crate::core::policy::ApplyTo::All {
        return exec_real(real, args);
    }
    let decision = crate::core::decide::security_only(&c, gpu, cfg, Stage::Edit);
    logging::record(&decision, &cfg.log.target(), log_fallback(inv));
    if decision.verdict == Verdict::Refuse {
        return refuse(inv, &decision);
    }
    if spec_file::apply(&mut wrapped, &decision.edits) {
        let process = wrapped.get("process").cloned().unwrap_or_default();
        if let Err(e) = spec_file::write(path, &process) {
            return edit_failed(inv, &e);
        }
    }
    exec_real(real, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_containerd_shim_argv() {
        let inv = parse(&os(&[
            "--root",
            "/run/containerd/runc/moby",
            "--log",
            "/b/log.json",
            "--log-format",
            "json",
            "--systemd-cgroup",
            "create",
            "--bundle",
            "/b",
            "--pid-file",
            "/b/init.pid",
            "--console-socket",
            "/tmp/s",
            "--no-pivot",
            "abc123",
        ]));
        assert_eq!(inv.command.as_deref(), Some("create"));
        assert_eq!(inv.log.as_deref(), Some(Path::new("/b/log.json")));
        assert_eq!(inv.bundle.as_deref(), Some(Path::new("/b")));
        assert_eq!(inv.id.as_deref(), Some("abc123"));
    }

    #[test]
    fn parses_equals_and_short_forms() {
        let inv = parse(&os(&[
            "--root=/r",
            "--log=/l",
            "--debug",
            "run",
            "-b",
            "/x",
            "--detach",
            "id1",
        ]));
        assert_eq!(inv.command.as_deref(), Some("run"));
        assert_eq!(inv.log.as_deref(), Some(Path::new("/l")));
        assert_eq!(inv.bundle.as_deref(), Some(Path::new("/x")));
        assert_eq!(inv.id.as_deref(), Some("id1"));
        let inv = parse(&os(&["-root", "/r", "create", "--bundle=/y", "id2"]));
        assert_eq!(inv.bundle.as_deref(), Some(Path::new("/y")));
        assert_eq!(inv.id.as_deref(), Some("id2"));
        // CRI-O's conmon: --root=R, no --log
        let inv = parse(&os(&[
            "--root=/run/runc",
            "create",
            "--bundle",
            "/z",
            "--pid-file",
            "/p",
            "id3",
        ]));
        assert_eq!(inv.log, None);
        assert_eq!(inv.id.as_deref(), Some("id3"));
    }

    #[test]
    fn other_commands_and_no_bundle() {
        let inv = parse(&os(&["--root", "/r", "state", "abc"]));
        assert_eq!(inv.command.as_deref(), Some("state"));
        assert_eq!(inv.bundle, None);
        let inv = parse(&os(&["create", "abc"]));
        assert_eq!(inv.bundle, None);
        assert_eq!(inv.id.as_deref(), Some("abc"));
        assert_eq!(parse(&[]).command, None);
    }

    #[test]
    fn parses_exec() {
        let inv = parse(&os(&[
            "--root",
            "/r",
            "--log",
            "/l",
            "exec",
            "--process",
            "/tmp/p.json",
            "--detach",
            "--pid-file",
            "/x",
            "id9",
        ]));
        assert_eq!(inv.command.as_deref(), Some("exec"));
        assert_eq!(inv.process.as_deref(), Some(Path::new("/tmp/p.json")));
        assert_eq!(inv.id.as_deref(), Some("id9"));
        let inv = parse(&os(&["exec", "-t", "id8", "sh", "-c", "--process=/evil"]));
        assert_eq!(inv.id.as_deref(), Some("id8"));
        assert_eq!(inv.process, None);
    }

    #[test]
    fn timestamp_shape() {
        let t = rfc3339_now();
        assert_eq!(t.len(), 30, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
        assert!(t.starts_with("20"), "{t}");
    }
}
