//! gpu-guard-node-agent's integration tests, one binary: node-install.sh
//! (the init container) against host roots whose binary can and cannot
//! run, the reconcile loop against containerd's own `config dump` while
//! NVIDIA's drop-in comes, changes and goes, the labeller's feature file,
//! and the DaemonSet-deletion decision against an API server over TLS.
//!
//! Helpers here: the gpu-guard binary cargo built beside this test, host
//! roots it can run in (chroot), and the agent's command line.

#[path = "../../../../tests/support/mod.rs"]
mod support;

mod deletion;
mod labeller;
mod node_install;
mod reconcile_containerd;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's target directory for this build profile (this test
/// runs from `target/<profile>/deps`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The gpu-guard binary of this build (`cargo test --workspace` builds it
/// for the root package's tests); `None` (after skip_or_fail) when absent.
pub fn gpu_guard_bin() -> Option<PathBuf> {
    let p = profile_dir().join("gpu-guard");
    if p.is_file() {
        return Some(p);
    }
    support::skip_or_fail(&format!(
        "{} is not built (cargo build -p gpu-guard, or cargo test --workspace)",
        p.display()
    ));
    None
}

pub fn agent_bin() -> Command {
    Command::new(support::under_test(
        "gpu-guard-node-agent",
        option_env!("CARGO_BIN_EXE_gpu-guard-node-agent"),
    ))
}

/// Copies `bin` into `root` at `dest` (a host path) with every library
/// `ldd` names and the loader, at their own paths: a root the binary runs
/// in under chroot, as on a host.
pub fn make_runnable(root: &Path, bin: &Path, dest: &str) {
    let target = root.join(dest.trim_start_matches('/'));
    fs::create_dir_all(target.parent().unwrap()).unwrap();
    fs::copy(bin, &target).unwrap();
    let out = Command::new("ldd").arg(bin).output().unwrap();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let lib = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(str::to_string);
        let Some(lib) = lib else { continue };
        let to = root.join(lib.trim_start_matches('/'));
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(&lib, &to).unwrap();
    }
}

/// A host root the gpu-guard binary runs in: /opt/gpu-guard/bin with the
/// binary and its runtime link, and /usr/bin for tests that install there.
pub fn runnable_root(tag: &str) -> Option<support::TempDir> {
    if !support::have_root("chroot into a host root") || !support::have_tool("ldd") {
        return None;
    }
    let bin = gpu_guard_bin()?;
    let root = support::TempDir::new(tag);
    make_runnable(root.path(), &bin, "/opt/gpu-guard/bin/gpu-guard");
    std::os::unix::fs::symlink(
        "gpu-guard",
        root.join("opt/gpu-guard/bin/gpu-guard-runtime"),
    )
    .unwrap();
    Some(root)
}

/// Waits up to `secs` for `cond`, polling every 50 ms; the seconds it took.
pub fn wait_for(secs: f64, mut cond: impl FnMut() -> bool) -> Option<f64> {
    let t = std::time::Instant::now();
    loop {
        if cond() {
            return Some(t.elapsed().as_secs_f64());
        }
        if t.elapsed().as_secs_f64() > secs {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
