//! The OCI runtime the wrapper chains: the invoking engine's
//! `runtime.engines.ENGINE.path`, else `runtime.path`, else the first
//! `runc`, then `crun`, on PATH that is not gpu-guard itself (a host may
//! have linked gpu-guard as runc). The wrapper execs it; `check --stage
//! runtime` asks it too, because NVIDIA's runtime there makes the env's GPU
//! requests count (core::detect), and `check` must decide as the wrapper.
//!
//! A chain that names nothing runnable fails every container the engine
//! starts through gpu-guard, GPU or not: [`find_real_runtime`] says so
//! before anything is decided, and [`chained_runtime_problem`] tells the
//! wrapper, `host`, `check` and `doctor` what is wrong and the fix.

use crate::core::policy::Config;
use crate::core::runtime_engines::Engine;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no OCI runtime found: no runc or crun on PATH, and no runtime configured")]
    NotFound,
    /// Exec'ing ourselves would decide and exec again, forever.
    #[error("the configured runtime {} names gpu-guard itself, which would exec itself forever", path.display())]
    IsSelf { path: PathBuf },
    #[error("the configured runtime {} does not exist", path.display())]
    Missing { path: PathBuf },
    #[error("the configured runtime {} is not an executable file", path.display())]
    NotExecutable { path: PathBuf },
}

/// What is wrong with a chained runtime, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeProblem {
    /// One line: which runtime, set by which key, what is wrong with it,
    /// and that every container through gpu-guard fails.
    pub message: String,
    pub fix: String,
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The search path when there is no PATH: systemd's default for services
/// (systemd `src/basic/path-util.h`, `DEFAULT_PATH` with split-usr's
/// `/sbin:/bin`), which engines and their runtimes run under.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn search_path() -> std::ffi::OsString {
    std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into())
}

/// Whose filesystem the chained runtime is looked for in.
#[derive(Clone, Copy)]
pub enum Filesystem<'a> {
    /// This process's: the wrapper, `host`, `check`, `doctor` on its own
    /// node. Bare names on this process's PATH; gpu-guard itself known by
    /// its inode too ([`crate::config::runtime_is_self`]).
    Own,
    /// A host's filesystem mounted at a directory (`doctor --host-root`, as
    /// the DaemonSet runs it): the function maps a host path to the file
    /// here. Bare names on exec's default PATH (the engine's wrapper runs
    /// with the host's environment, not this pod's); gpu-guard known by its
    /// file name, since this process's binary is not the host's.
    Mounted(&'a dyn Fn(&Path) -> PathBuf),
}

impl Filesystem<'_> {
    /// The file here for a host path, and whether a symlink on the way
    /// names gpu-guard. On a mounted host the final symlinks are followed
    /// on the host (an absolute target is the host's path, not this
    /// process's), at most 40 (Linux's MAXSYMLINKS).
    fn locate<'p>(&self, host: &'p Path) -> (std::borrow::Cow<'p, Path>, bool) {
        let Filesystem::Mounted(fs) = self else {
            return (std::borrow::Cow::Borrowed(host), false);
        };
        let mut at = host.to_path_buf();
        let mut via_self = false;
        for _ in 0..40 {
            let Ok(target) = std::fs::read_link(fs(&at)) else {
                break;
            };
            via_self |= names_gpu_guard(&target);
            at = match at.parent() {
                Some(dir) if target.is_relative() => dir.join(target),
                _ => target,
            };
        }
        (std::borrow::Cow::Owned(fs(&at)), via_self)
    }

    fn search(&self) -> std::ffi::OsString {
        match self {
            Filesystem::Own => search_path(),
            Filesystem::Mounted(_) => DEFAULT_PATH.into(),
        }
    }

    fn names_self(&self, configured: &str) -> bool {
        match self {
            Filesystem::Own => crate::config::runtime_is_self(configured),
            Filesystem::Mounted(_) => names_gpu_guard(Path::new(configured)),
        }
    }

    /// A runc or crun found on the search path that is gpu-guard (a host
    /// may have linked gpu-guard as runc): skipped, never chained.
    fn is_self_candidate(&self, cand: &Path, me: Option<&Path>) -> bool {
        match self {
            Filesystem::Own => {
                let canon = cand.canonicalize().ok();
                canon.is_some() && canon.as_deref() == me
            }
            Filesystem::Mounted(_) => self.locate(cand).1,
        }
    }
}

fn names_gpu_guard(p: &Path) -> bool {
    matches!(
        p.file_name().and_then(|n| n.to_str()),
        Some("gpu-guard-runtime" | "gpu-guard")
    )
}

/// The runtime to chain, from the configured path (`configured`; empty:
/// search PATH). A name without `/` is looked up on PATH, as exec would.
pub fn find_real_runtime(configured: &str) -> Result<PathBuf, RuntimeError> {
    find_runtime_in(configured, &Filesystem::Own)
}

/// [`find_real_runtime`] on `fs`; the path returned is the host's.
pub fn find_runtime_in(configured: &str, fs: &Filesystem) -> Result<PathBuf, RuntimeError> {
    if !configured.is_empty() {
        if fs.names_self(configured) {
            return Err(RuntimeError::IsSelf {
                path: PathBuf::from(configured),
            });
        }
        return configured_runtime(configured, fs);
    }
    let me = match fs {
        Filesystem::Own => std::env::current_exe()
            .ok()
            .and_then(|p| p.canonicalize().ok()),
        Filesystem::Mounted(_) => None,
    };
    let search = fs.search();
    for name in ["runc", "crun"] {
        for dir in std::env::split_paths(&search) {
            let cand = dir.join(name);
            if is_executable(&fs.locate(&cand).0) && !fs.is_self_candidate(&cand, me.as_deref()) {
                return Ok(cand);
            }
        }
    }
    Err(RuntimeError::NotFound)
}

/// A configured runtime that exists and can be run (one stat).
fn configured_runtime(configured: &str, fs: &Filesystem) -> Result<PathBuf, RuntimeError> {
    let path = PathBuf::from(configured);
    if !configured.contains('/') {
        let found = std::env::split_paths(&fs.search())
            .map(|d| d.join(configured))
            .find(|c| is_executable(&fs.locate(c).0));
        return match found {
            Some(c) if fs.locate(&c).1 => Err(RuntimeError::IsSelf { path }),
            Some(c) => Ok(c),
            None => Err(RuntimeError::Missing { path }),
        };
    }
    let (here, via_self) = fs.locate(&path);
    if via_self {
        return Err(RuntimeError::IsSelf { path });
    }
    match std::fs::metadata(here) {
        Err(_) => Err(RuntimeError::Missing { path }),
        Ok(m) if !(m.is_file() && m.permissions().mode() & 0o111 != 0) => {
            Err(RuntimeError::NotExecutable { path })
        }
        Ok(_) => Ok(path),
    }
}

/// The config key that names the runtime chained for `engine`:
/// `runtime.engines.ENGINE.path` when that engine has one, else
/// `runtime.path` (`""` there: the PATH search).
pub fn chain_key(cfg: &Config, engine: Option<Engine>) -> String {
    match engine {
        Some(e) if cfg.runtime.engines.get(e).path.is_some() => {
            format!("runtime.engines.{}.path", e.name())
        }
        _ => "runtime.path".to_string(),
    }
}

/// What `err` means for the containers `engine` starts through gpu-guard,
/// and the fix; `key` names the config key that chose the runtime.
pub fn problem(err: &RuntimeError, key: &str, engine: Option<Engine>) -> RuntimeProblem {
    let who = engine.map_or("the engine".to_string(), |e| e.name().to_string());
    let reinstall = engine.map_or(
        "`gpu-guard install ENGINE --chain-runtime PATH`".to_string(),
        |e| format!("`gpu-guard install {} --chain-runtime PATH`", e.name()),
    );
    let message = match err {
        RuntimeError::NotFound => format!(
            "{err} ({key} is empty): gpu-guard-runtime cannot start any container {who} runs through it"
        ),
        _ => format!(
            "{err} ({key}): gpu-guard-runtime cannot start any container {who} runs through it, GPU or not"
        ),
    };
    let fix = match err {
        RuntimeError::NotFound => format!(
            "install runc, or set {key} in the gpu-guard config to the runtime to run (runc, crun, nvidia-container-runtime)"
        ),
        RuntimeError::IsSelf { .. } => format!(
            "set {key} to the real runtime (runc, crun, nvidia-container-runtime), or leave it empty"
        ),
        _ => format!(
            "install that runtime, or set {key} in the gpu-guard config to one that exists ({reinstall} writes it; `gpu-guard host` names the file), or remove the key"
        ),
    };
    RuntimeProblem { message, fix }
}

/// Whether the runtime the wrapper chains for `engine` (None: an engine
/// not known, the global chain) can be run: None when it can, else the
/// problem and its fix. For `host`, `check` and `doctor`; it reads the
/// file system (one stat, or the PATH search) and changes nothing.
pub fn chained_runtime_problem(cfg: &Config, engine: Option<Engine>) -> Option<RuntimeProblem> {
    chained_runtime_in(cfg, engine, &Filesystem::Own).err()
}

/// The runtime the wrapper chains for `engine` on `fs` (its host path), or
/// what is wrong with it and the fix: [`chained_runtime_problem`] on
/// another root, for `doctor --host-root`.
pub fn chained_runtime_in(
    cfg: &Config,
    engine: Option<Engine>,
    fs: &Filesystem,
) -> Result<PathBuf, RuntimeProblem> {
    find_runtime_in(cfg.chained_runtime(engine), fs)
        .map_err(|err| problem(&err, &chain_key(cfg, engine), engine))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_that_names_nothing_runnable_is_a_problem_with_its_key() {
        let dir = std::env::temp_dir().join(format!("gg-chain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("not-executable");
        std::fs::write(&plain, "").unwrap();
        let mut cfg = Config::default();
        cfg.runtime.engines.docker.path = Some(dir.join("missing").display().to_string());
        cfg.runtime.engines.crio.path = Some(plain.display().to_string());
        let p = chained_runtime_problem(&cfg, Some(Engine::Docker)).unwrap();
        assert!(p.message.contains("does not exist"), "{p:?}");
        assert!(p.message.contains("runtime.engines.docker.path"), "{p:?}");
        assert!(
            p.fix.contains("gpu-guard install docker --chain-runtime"),
            "{p:?}"
        );
        let p = chained_runtime_problem(&cfg, Some(Engine::Crio)).unwrap();
        assert!(p.message.contains("not an executable file"), "{p:?}");
        // containerd has no chain of its own: the global one, empty here,
        // finds runc on PATH when there is one.
        assert_eq!(chain_key(&cfg, Some(Engine::Containerd)), "runtime.path");
        cfg.runtime.path = "/bin/sh".into();
        assert_eq!(
            chained_runtime_problem(&cfg, Some(Engine::Containerd)),
            None
        );
        cfg.runtime.path = "no-such-runtime-on-path".into();
        let p = chained_runtime_problem(&cfg, None).unwrap();
        assert!(p.message.contains("(runtime.path)"), "{p:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_mounted_host_is_searched_below_its_root_and_gpu_guard_as_runc_skipped() {
        let root = std::env::temp_dir().join(format!("gg-chain-root-{}", std::process::id()));
        let bin = root.join("usr/bin");
        let sbin = root.join("usr/sbin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&sbin).unwrap();
        let fs_at = |host: &Path| root.join(host.strip_prefix("/").unwrap_or(host));
        let fs = Filesystem::Mounted(&fs_at);
        // The host has linked gpu-guard as runc in /usr/sbin (searched
        // first); the real one in /usr/bin is chained, by its host path.
        std::fs::write(bin.join("gpu-guard"), "").unwrap();
        std::os::unix::fs::symlink("/usr/bin/gpu-guard", sbin.join("runc")).unwrap();
        std::fs::write(bin.join("runc"), "").unwrap();
        for f in ["gpu-guard", "runc"] {
            std::fs::set_permissions(bin.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert_eq!(
            find_runtime_in("", &fs).unwrap(),
            Path::new("/usr/bin/runc")
        );
        // Named, the first runc on the path is the one exec would run.
        for named in ["runc", "/usr/sbin/runc"] {
            assert!(
                matches!(
                    find_runtime_in(named, &fs),
                    Err(RuntimeError::IsSelf { .. })
                ),
                "{named}"
            );
        }
        assert!(matches!(
            find_runtime_in("/opt/gpu-guard/bin/gpu-guard-runtime", &fs),
            Err(RuntimeError::IsSelf { .. })
        ));
        let mut cfg = Config::default();
        cfg.runtime.engines.containerd.path = Some("/usr/bin/nvidia-container-runtime".into());
        let p = chained_runtime_in(&cfg, Some(Engine::Containerd), &fs).unwrap_err();
        assert!(p.message.contains("does not exist"), "{p:?}");
        assert!(
            p.message.contains("runtime.engines.containerd.path"),
            "{p:?}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
