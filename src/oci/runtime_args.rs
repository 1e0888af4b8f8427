//! The parts of an OCI runtime's command line that the wrapper needs: the
//! global `--log` and `--root`, the subcommand, create/run/restore's
//! `--bundle`, exec's `--process` and privilege flags, and the container
//! id. Modelled on runc's flags (urfave/cli over Go's flag package: one or
//! two dashes, `--flag=value` or `--flag value`, the last of several wins);
//! crun and youki accept the same ones. Unknown shapes are not errors: the
//! argv is always passed through unchanged.
//!
//! An empty value is read as runc reads it: runc tests each of these string
//! flags with `!= ""` (exec.go getProcess for `--process`, `--apparmor`,
//! `--process-label`, `--user`; utils_linux.go setupSpec for `--bundle`),
//! so `--process=`, `-p ''` or an empty last `--process` means no process
//! file, and runc builds the process from the bundle and the other flags.

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
    /// `--bundle`/`-b` of create/run/restore; None (or empty) means the
    /// working directory.
    pub bundle: Option<PathBuf>,
    /// crun's `--config`/`-f` of create/run: the spec file to read instead
    /// of `config.json` (relative to the bundle: crun changes into the
    /// bundle before it loads it).
    pub config: Option<PathBuf>,
    /// The container id (first positional after the subcommand's flags).
    pub id: Option<String>,
    /// `--process`/`-p` of exec: the process.json to run (None: absent or
    /// empty, so runc runs the bundle's process with the flags on top).
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
    /// `--user`/`-u`: `UID[:GID]`.
    pub user: Option<String>,
}

impl ExecFlags {
    /// The uid `--user` sets, as runc reads it (exec.go getProcess: the part
    /// before the first `:` through strconv.Atoi, then `uint32(uid)`, which
    /// wraps: `-u 4294967296` is uid 0). None when there is no `--user`, or
    /// runc cannot read it (runc then refuses the exec itself).
    pub fn uid(&self) -> Option<u32> {
        let user = self.user.as_deref()?;
        let uid = user.split_once(':').map_or(user, |(u, _)| u);
        // Go's Atoi: an optional sign and decimal digits within int64.
        let n: i64 = uid.parse().ok()?;
        Some(n as u32)
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

/// restore flags that take a value (runc restore.go).
const RESTORE_VALUE_FLAGS: &[&str] = &[
    "console-socket",
    "image-path",
    "work-path",
    "manage-cgroups-mode",
    "bundle",
    "b",
    "pid-file",
    "empty-ns",
    "lsm-profile",
    "lsm-mount-context",
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

/// A value as runc's `!= ""` tests read it: empty is absent.
fn non_empty(value: Option<OsString>) -> Option<OsString> {
    value.filter(|v| !v.is_empty())
}

fn text(value: Option<OsString>) -> Option<String> {
    non_empty(value).map(|v| v.to_string_lossy().into_owned())
}

/// Records one flag of the subcommand (`exec`: exec's own flags; else
/// create/run/restore's). A later flag of the same name replaces an
/// earlier one, as Go's flag package sets it again; `--cap` adds.
fn record_flag(inv: &mut Invocation, exec: bool, name: &str, value: Option<OsString>) {
    match name {
        "bundle" | "b" if !exec => inv.bundle = non_empty(value).map(PathBuf::from),
        "config" | "f" if !exec => inv.config = value.map(PathBuf::from),
        "process" | "p" if exec => inv.process = non_empty(value).map(PathBuf::from),
        "cap" | "c" if exec => {
            if let Some(v) = value {
                inv.exec.caps.push(v.to_string_lossy().into_owned());
            }
        }
        "no-new-privs" if exec => {
            inv.exec.no_new_privs =
                Some(value.as_deref().map(parse_bool).unwrap_or(Some(true)) == Some(true))
        }
        "process-label" if exec => inv.exec.process_label = text(value),
        "apparmor" if exec => inv.exec.apparmor = text(value),
        "user" | "u" if exec => inv.exec.user = text(value),
        _ => {}
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
        "restore" => RESTORE_VALUE_FLAGS,
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
            Some((name, value)) => record_flag(&mut inv, exec, &name, value),
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

    #[test]
    fn an_empty_process_is_absent_as_runc_reads_it() {
        for argv in [
            &["exec", "--process=", "--cap", "CAP_SYS_ADMIN", "id", "sh"][..],
            &["exec", "-p", "", "--cap", "CAP_SYS_ADMIN", "id", "sh"],
            &[
                "exec",
                "--process",
                "/p.json",
                "--process=",
                "-c",
                "CAP_SYS_ADMIN",
                "id",
            ],
            &["exec", "-process=", "--cap=CAP_SYS_ADMIN", "id", "sh"],
        ] {
            let inv = parse(&os(argv));
            assert_eq!(inv.process, None, "{argv:?}");
            assert_eq!(inv.exec.caps, vec!["CAP_SYS_ADMIN"], "{argv:?}");
            assert_eq!(inv.id.as_deref(), Some("id"), "{argv:?}");
        }
        // The last one wins (urfave/cli refuses two forms of one flag, so
        // both are `-p` here).
        let inv = parse(&os(&["exec", "-p", "", "-p", "/p.json", "id"]));
        assert_eq!(inv.process.as_deref(), Some(Path::new("/p.json")));
        // Empty labels, users and bundles are absent too.
        let inv = parse(&os(&[
            "exec",
            "--apparmor=",
            "--process-label",
            "",
            "-u",
            "",
            "id",
            "sh",
        ]));
        assert_eq!(inv.exec, ExecFlags::default());
        let inv = parse(&os(&["create", "--bundle=", "id"]));
        assert_eq!(inv.bundle, None);
    }

    #[test]
    fn restore_reads_its_bundle() {
        let inv = parse(&os(&[
            "--root",
            "/r",
            "restore",
            "--image-path",
            "/ckpt",
            "--bundle",
            "/b",
            "--work-path",
            "/w",
            "--detach",
            "id7",
        ]));
        assert_eq!(inv.command.as_deref(), Some("restore"));
        assert_eq!(inv.bundle.as_deref(), Some(Path::new("/b")));
        assert_eq!(inv.id.as_deref(), Some("id7"));
        let inv = parse(&os(&["restore", "--image-path", "/ckpt", "id8"]));
        assert_eq!((inv.bundle, inv.id.as_deref()), (None, Some("id8")));
    }

    #[test]
    fn the_uid_is_read_as_runc_reads_it() {
        let uid = |u: &str| {
            ExecFlags {
                user: Some(u.to_string()),
                ..Default::default()
            }
            .uid()
        };
        assert_eq!(uid("0"), Some(0));
        assert_eq!(uid("0:0"), Some(0));
        assert_eq!(uid("+0"), Some(0));
        assert_eq!(uid("00"), Some(0));
        assert_eq!(uid("-0"), Some(0));
        assert_eq!(uid("1000:1000"), Some(1000));
        // Go converts with uint32(int): it wraps.
        assert_eq!(uid("4294967296"), Some(0));
        assert_eq!(uid("-1"), Some(u32::MAX));
        // runc refuses these itself.
        assert_eq!(uid("root"), None);
        assert_eq!(uid(":0"), None);
        assert_eq!(uid(" 0"), None);
        assert_eq!(ExecFlags::default().uid(), None);
    }
}
