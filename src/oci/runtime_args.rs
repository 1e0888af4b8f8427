//! The parts of an OCI runtime's command line that the wrapper needs: the
//! global `--log` and `--root`, the subcommand, create/run's `--bundle`,
//! exec's `--process` and the container id. Modelled on runc's flags
//! (urfave/cli); crun and youki accept the same ones. Unknown shapes are not
//! errors: the argv is always passed through unchanged.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// What we understood of a runtime command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Invocation {
    /// `--log FILE` (global).
    pub log: Option<PathBuf>,
    /// The subcommand (`create`, `run`, `state`, ...), if any.
    pub command: Option<String>,
    /// `--bundle`/`-b` of create/run; None means the working directory.
    pub bundle: Option<PathBuf>,
    /// crun's `--config`/`-f` of create/run: the spec file to read instead
    /// of `config.json` (relative to the bundle: crun changes into the
    /// bundle before it loads it).
    pub config: Option<PathBuf>,
    /// The container id (first positional after the subcommand's flags).
    pub id: Option<String>,
    /// `--process`/`-p` of exec: the process.json to run.
    pub process: Option<PathBuf>,
    /// Global `--root`, kept to ask the real runtime about a container.
    pub root: Option<OsString>,
    /// exec's flags that change the process's privileges (without
    /// `--process`, runc exec.go getProcess applies them on top of the
    /// bundle's `process`; with it, it ignores them).
    pub exec: ExecFlags,
}

/// runc exec's privilege flags (exec.go).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ExecFlags {
    /// `--cap`/`-c`, each added to the bounding, effective, permitted (and
    /// ambient) sets.
    pub caps: Vec<String>,
    /// `--no-new-privs[=BOOL]`: Some when given (Go strconv.ParseBool; an
    /// unparseable value is kept as false: runc refuses it anyway).
    pub no_new_privs: Option<bool>,
    /// `--process-label`: the SELinux label.
    pub process_label: Option<String>,
    /// `--apparmor`: the AppArmor profile.
    pub apparmor: Option<String>,
    /// `--user`/`-u`.
    pub user: Option<String>,
}

impl ExecFlags {
    /// True when a flag changes privileges.
    pub fn any(&self) -> bool {
        !self.caps.is_empty()
            || self.no_new_privs.is_some()
            || self.process_label.is_some()
            || self.apparmor.is_some()
    }
}

/// Global flags that take a value: runc's (main.go: log, log-format, root,
/// criu, rootless) and crun's (cgroup-manager, log-level). urfave/cli and
/// Go's flag package accept one or two dashes and `--flag=value`.
const GLOBAL_VALUE_FLAGS: &[&str] = &[
    "log",
    "log-format",
    "root",
    "criu",
    "rootless",
    "cgroup-manager",
    "log-level",
];

/// Subcommands of runc, crun and youki. The first positional argument that
/// is one of them is the subcommand: a global flag we do not know may take
/// a value (`--cgroup-manager systemd`), which must not hide `create`.
const SUBCOMMANDS: &[&str] = &[
    "checkpoint",
    "create",
    "delete",
    "events",
    "exec",
    "features",
    "help",
    "info",
    "init",
    "kill",
    "list",
    "mounts",
    "pause",
    "ps",
    "restore",
    "resume",
    "run",
    "spec",
    "start",
    "state",
    "update",
];

/// create/run flags that take a value (runc create.go, run.go,
/// utils_linux.go; crun's --config).
const CREATE_VALUE_FLAGS: &[&str] = &[
    "bundle",
    "b",
    "console-socket",
    "pid-file",
    "preserve-fds",
    "pidfd-socket",
    "config",
    "f",
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
    "pidfd-socket",
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

/// Go's strconv.ParseBool, as urfave/cli reads `--flag=value` of a BoolFlag.
fn parse_bool(v: &OsStr) -> Option<bool> {
    match v.to_str()? {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Reads the parts of the argv we need; never fails (unknown shapes are
/// simply passed through).
///
/// The subcommand is the first positional argument that names one (global
/// flags with values are skipped, and so is a positional that names none:
/// the value of a global flag we do not know). As NVIDIA's runtime does
/// (nvidia-container-toolkit internal/oci/args.go GetBundleDirFromArgs),
/// create/run's `--bundle`/`-bundle`/`-b`, with `=` or a space, is taken
/// wherever it appears after the subcommand.
pub fn parse(args: &[OsString]) -> Invocation {
    let mut inv = Invocation::default();
    let mut i = 0;
    let mut first_positional: Option<usize> = None;
    let cmd = loop {
        if i >= args.len() {
            // No known subcommand: keep the first positional as before.
            if let Some(p) = first_positional {
                inv.command = Some(args[p].to_string_lossy().into_owned());
            }
            return inv;
        }
        if args[i] == "--" {
            i += 1;
            continue;
        }
        if let Some((name, value)) = take_flag(args, &mut i, GLOBAL_VALUE_FLAGS) {
            match name.as_str() {
                "log" => inv.log = value.map(PathBuf::from),
                "root" => inv.root = value,
                _ => {}
            }
            continue;
        }
        let word = args[i].to_string_lossy().into_owned();
        first_positional.get_or_insert(i);
        i += 1;
        if SUBCOMMANDS.contains(&word.as_str()) {
            break word;
        }
    };
    let value_flags = match cmd.as_str() {
        "create" | "run" => CREATE_VALUE_FLAGS,
        "exec" => EXEC_VALUE_FLAGS,
        "delete" => &[][..],
        _ => {
            inv.command = Some(cmd);
            return inv;
        }
    };
    let exec = cmd == "exec";
    while i < args.len() {
        match take_flag(args, &mut i, value_flags) {
            Some((name, value)) => match name.as_str() {
                "bundle" | "b" if !exec => inv.bundle = value.map(PathBuf::from),
                "config" | "f" if !exec => inv.config = value.map(PathBuf::from),
                "process" | "p" if exec => inv.process = value.map(PathBuf::from),
                "cap" | "c" if exec => {
                    if let Some(v) = value {
                        inv.exec.caps.push(v.to_string_lossy().into_owned());
                    }
                }
                "no-new-privs" if exec => {
                    inv.exec.no_new_privs =
                        Some(value.as_deref().map(parse_bool).unwrap_or(Some(true)) == Some(true))
                }
                "process-label" if exec => {
                    inv.exec.process_label = value.map(|v| v.to_string_lossy().into_owned())
                }
                "apparmor" if exec => {
                    inv.exec.apparmor = value.map(|v| v.to_string_lossy().into_owned())
                }
                "user" | "u" if exec => {
                    inv.exec.user = value.map(|v| v.to_string_lossy().into_owned())
                }
                _ => {}
            },
            None if args[i] == "--" => i += 1,
            None => {
                if inv.id.is_none() {
                    inv.id = Some(args[i].to_string_lossy().into_owned());
                }
                // exec ID CMD...: everything after the id is the process's.
                if exec {
                    break;
                }
                i += 1;
            }
        }
    }
    inv.command = Some(cmd);
    inv
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
}
