//! The OCI runtime the wrapper chains: `runtime.path`, else the first
//! `runc`, then `crun`, on PATH that is not gpu-guard itself (a host may
//! have linked gpu-guard as runc). The wrapper execs it; `check --stage
//! runtime` asks it too, because NVIDIA's runtime there makes the env's GPU
//! requests count (core::detect), and `check` must decide as the wrapper.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no OCI runtime found: set runtime.path in the gpu-guard config, or put runc or crun on PATH")]
    NotFound,
    /// Exec'ing ourselves would decide and exec again, forever.
    #[error("cannot exec {}: runtime.path in the gpu-guard config names gpu-guard itself; set it to the real runtime (runc, crun, nvidia-container-runtime) or leave it empty", path.display())]
    IsSelf { path: PathBuf },
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The runtime to chain, from `runtime.path` (`configured`; empty: search
/// PATH).
pub fn find_real_runtime(configured: &str) -> Result<PathBuf, RuntimeError> {
    if !configured.is_empty() {
        if crate::config::runtime_is_self(configured) {
            return Err(RuntimeError::IsSelf {
                path: PathBuf::from(configured),
            });
        }
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
