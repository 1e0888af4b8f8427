//! Finding and running the real OCI runtime for the wrapper: the lookup on
//! PATH (never gpu-guard itself), the exec that replaces this process with
//! argv unchanged, and `state` to find a running container's bundle.

use crate::oci::runtime_args::Invocation;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

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
        if crate::config::runtime_is_self(configured) {
            // Exec'ing ourselves would decide and exec again, forever.
            return Err(RuntimeError::Exec {
                path: PathBuf::from(configured),
                source: std::io::Error::other(
                    "runtime.path in the gpu-guard config names gpu-guard itself; set it to the real runtime (runc, crun, nvidia-container-runtime) or leave it empty",
                ),
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

/// Replaces this process with the real runtime, argv unchanged.
pub fn exec_real(real: &Path, args: &[OsString]) -> i32 {
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

/// The bundle of a running container, from `<runtime> [--root R] state ID`
/// (runtime-spec "state": every runtime reports `bundle`).
pub fn container_bundle(real: &Path, inv: &Invocation) -> Option<PathBuf> {
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
