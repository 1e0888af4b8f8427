//! The wrapper's first step: what the engine asked the runtime to do, read
//! once from the argv ([`crate::oci::runtime_args`] reads runc's flags),
//! and which engine asked: the runtime root (`--root`) names it
//! (core::runtime_engines), since the engine sets that root from its own
//! configuration and no container can choose it. Nothing here decides or
//! changes anything.

use crate::core::cri_facts::CriRuntime;
use crate::core::exec_policy::ExecChange;
use crate::core::runtime_engines::{Engine, Engines};
use crate::oci::runtime_args;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

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
    /// The engine whose runtime root `--root` is under: its chain is the
    /// one exec'd.
    pub engine: Option<Engine>,
    /// The CRI runtime the root vouches for: only then are the spec's CRI
    /// facts (namespace, pod, image) believed (core::cri_facts).
    pub cri: Option<CriRuntime>,
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

/// Reads the argv; `engines` holds the roots that tell the engines apart.
pub fn call(args: &[OsString], engines: &Engines) -> Call {
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
    let root = inv.root.as_deref().map(Path::new);
    Call {
        log: inv.log,
        engine: root.and_then(|r| engines.engine_for_root(r)),
        cri: root.and_then(|r| engines.cri_runtime(r)),
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
        let c = call(
            &os(&[
                "--root",
                "/r",
                "restore",
                "-b",
                "/b",
                "--image-path",
                "/i",
                "x",
            ]),
            &Engines::default(),
        );
        assert!(matches!(&c.what, What::Start { bundle, spec }
            if bundle == std::path::Path::new("/b") && spec == std::path::Path::new("/b/config.json")));
        assert_eq!(c.id.as_deref(), Some("x"));
        assert!(matches!(
            call(&os(&["delete", "-f", "x"]), &Engines::default()).what,
            What::Delete
        ));
        assert!(matches!(
            call(&os(&["checkpoint", "x"]), &Engines::default()).what,
            What::PassThrough
        ));
        let c = call(
            &os(&["create", "-b", "/b", "-f", "other.json", "x"]),
            &Engines::default(),
        );
        assert!(
            matches!(&c.what, What::Start { spec, .. } if spec == std::path::Path::new("/b/other.json"))
        );
    }

    #[test]
    fn the_root_names_the_engine_and_vouches_for_cri_facts() {
        let e = Engines::default();
        let at = |root: &str| {
            let c = call(
                &os(&[
                    "--root",
                    root,
                    "--log",
                    "/b/log.json",
                    "create",
                    "--bundle",
                    "/b",
                    "x",
                ]),
                &e,
            );
            (c.engine, c.cri)
        };
        assert_eq!(
            at("/var/run/docker/runtime-runc/moby"),
            (Some(Engine::Docker), None)
        );
        assert_eq!(
            at("/run/gpu-guard/containerd/k8s.io"),
            (Some(Engine::Containerd), Some(CriRuntime::Containerd))
        );
        assert_eq!(
            at("/run/gpu-guard/crio"),
            (Some(Engine::Crio), Some(CriRuntime::Crio))
        );
        assert_eq!(at("/run/runc"), (None, None));
        let c = call(&os(&["create", "--bundle", "/b", "x"]), &e);
        assert_eq!((c.engine, c.cri), (None, None));
    }

    #[test]
    fn exec_flags_become_the_change_to_the_bundles_process() {
        let c = call(
            &os(&[
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
            ]),
            &Engines::default(),
        );
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
