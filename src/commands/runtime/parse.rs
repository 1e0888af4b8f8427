//! The wrapper's first step: what the engine asked the runtime to do, read
//! once from the argv ([`crate::oci::runtime_args`] reads runc's flags).
//! Nothing here decides or changes anything.

use crate::core::exec_policy::ExecChange;
use crate::oci::runtime_args;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// One invocation of the runtime, as the wrapper needs it.
pub struct Call {
    /// The global `--log` file: where containerd's shim and docker read a
    /// refusal from.
    pub log: Option<PathBuf>,
    /// The global `--root`: the runtime's state directory, which keys the
    /// create-time markers and `state` queries.
    pub root: Option<OsString>,
    /// The container id.
    pub id: Option<String>,
    pub what: What,
}

/// What the invocation is.
pub enum What {
    /// `create`, `run` or `restore`: a container starts from the bundle's
    /// config.json. runc's restore loads the spec as create does (runc
    /// restore.go, utils_linux.go startContainer and setupSpec), so it is
    /// judged as create is.
    Start {
        bundle: PathBuf,
        /// The spec file: `config.json` in the bundle, or crun's `--config`.
        spec: PathBuf,
    },
    /// A start whose bundle cannot be known (the working directory cannot
    /// be read): the real runtime reports its own error.
    StartUnknown(String),
    /// `exec`: a process runs in a container that exists.
    Exec {
        /// `--process FILE` (None: absent or empty).
        process: Option<PathBuf>,
        /// What the flags change of the bundle's process when there is no
        /// process file.
        change: ExecChange,
    },
    /// `delete`: the container is gone, and its marker with it.
    Delete,
    /// Anything else: passed through untouched.
    PassThrough,
}

/// Reads the argv.
pub fn call(args: &[OsString]) -> Call {
    let inv = runtime_args::parse(args);
    let what = match inv.command.as_deref() {
        Some("create" | "run" | "restore") => start(inv.bundle.clone(), inv.config.clone()),
        Some("exec") => What::Exec {
            process: inv.process.clone(),
            change: exec_change(&inv.exec),
        },
        Some("delete") => What::Delete,
        _ => What::PassThrough,
    };
    Call {
        log: inv.log,
        root: inv.root,
        id: inv.id,
        what,
    }
}

impl Call {
    pub fn root(&self) -> Option<&OsStr> {
        self.root.as_deref()
    }
}

/// The bundle (the working directory when none is given, as runc's
/// setupSpec leaves it) and the spec file in it.
fn start(bundle: Option<PathBuf>, config: Option<PathBuf>) -> What {
    let bundle = match bundle {
        Some(b) => b,
        None => match std::env::current_dir() {
            Ok(d) => d,
            Err(e) => {
                return What::StartUnknown(format!(
                    "no bundle: cannot read the working directory: {e}"
                ))
            }
        },
    };
    let spec = bundle.join(config.unwrap_or_else(|| PathBuf::from("config.json")));
    What::Start { bundle, spec }
}

/// runc exec's privilege flags as the change they make to the bundle's
/// process (runc exec.go getProcess).
fn exec_change(flags: &runtime_args::ExecFlags) -> ExecChange {
    let labels = [
        ("--process-label", &flags.process_label),
        ("--apparmor", &flags.apparmor),
    ];
    ExecChange {
        caps: flags.caps.clone(),
        no_new_privs: flags.no_new_privs,
        labels: labels
            .into_iter()
            .filter_map(|(flag, v)| v.clone().map(|v| (flag, v)))
            .collect(),
        uid: flags.uid(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn restore_starts_a_container_and_delete_forgets_it() {
        let c = call(&os(&[
            "--root",
            "/r",
            "restore",
            "-b",
            "/b",
            "--image-path",
            "/i",
            "x",
        ]));
        assert!(matches!(&c.what, What::Start { bundle, spec }
            if bundle == std::path::Path::new("/b") && spec == std::path::Path::new("/b/config.json")));
        assert_eq!(c.id.as_deref(), Some("x"));
        assert!(matches!(
            call(&os(&["delete", "-f", "x"])).what,
            What::Delete
        ));
        assert!(matches!(
            call(&os(&["checkpoint", "x"])).what,
            What::PassThrough
        ));
        let c = call(&os(&["create", "-b", "/b", "-f", "other.json", "x"]));
        assert!(
            matches!(&c.what, What::Start { spec, .. } if spec == std::path::Path::new("/b/other.json"))
        );
    }

    #[test]
    fn exec_flags_become_the_change_to_the_bundles_process() {
        let c = call(&os(&[
            "exec",
            "--process=",
            "--cap",
            "CAP_SYS_ADMIN",
            "--no-new-privs=false",
            "--apparmor",
            "unconfined",
            "-u",
            "4294967296:0",
            "x",
            "sh",
        ]));
        let What::Exec { process, change } = c.what else {
            panic!("not an exec");
        };
        assert_eq!(process, None);
        assert_eq!(change.caps, vec!["CAP_SYS_ADMIN"]);
        assert_eq!(change.no_new_privs, Some(false));
        assert_eq!(
            change.labels,
            vec![("--apparmor", "unconfined".to_string())]
        );
        assert_eq!(change.uid, Some(0));
    }
}
