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

fn search_path() -> std::ffi::OsString {
    std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into())
}

/// The runtime to chain, from the configured path (`configured`; empty:
/// search PATH). A name without `/` is looked up on PATH, as exec would.
pub fn find_real_runtime(configured: &str) -> Result<PathBuf, RuntimeError> {
    if !configured.is_empty() {
        if crate::config::runtime_is_self(configured) {
            return Err(RuntimeError::IsSelf {
                path: PathBuf::from(configured),
            });
        }
        return configured_runtime(configured);
    }
    let me = std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok());
    for name in ["runc", "crun"] {
        for dir in std::env::split_paths(&search_path()) {
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

/// A configured runtime that exists and can be run (one stat).
fn configured_runtime(configured: &str) -> Result<PathBuf, RuntimeError> {
    let path = PathBuf::from(configured);
    if !configured.contains('/') {
        return std::env::split_paths(&search_path())
            .map(|d| d.join(configured))
            .find(|c| is_executable(c))
            .ok_or(RuntimeError::Missing { path });
    }
    match std::fs::metadata(&path) {
        Err(_) => Err(RuntimeError::Missing { path }),
        Ok(_) if !is_executable(&path) => Err(RuntimeError::NotExecutable { path }),
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
    let err = find_real_runtime(cfg.chained_runtime(engine)).err()?;
    Some(problem(&err, &chain_key(cfg, engine), engine))
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
}
