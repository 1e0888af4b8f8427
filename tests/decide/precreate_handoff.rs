//! Precreate hands a refusal to gpu-guard's own prestart hook (podman shows
//! a prestart hook's stderr, not a precreate hook's) only when that hook is
//! this very binary: same device and inode as /proc/self/exe. A program that
//! merely has the name (a copy, or gpu-guard-anything elsewhere) does not
//! count, or a refused container would start whenever such a hook is listed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

use crate::support::TempDir as Tmp;

/// A file removed on drop (the hard link lives beside the binary, outside
/// any temp dir, as a hard link must be on the same filesystem).
struct Removed(PathBuf);
impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Host facts from the a100 profile (driver 535, CUDA 12.2): a container
/// that requires CUDA 12.4 is refused.
fn config(dir: &Path) -> PathBuf {
    let p = dir.join("config.toml");
    let facts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
    std::fs::write(
        &p,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\ncache_dir = \"\"\n[log]\nsyslog = false\n",
            facts.display()
        ),
    )
    .unwrap();
    p
}

fn precreate(cfg: &Path, stage: &str, hook_path: &Path) -> Output {
    let spec = serde_json::json!({
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"]},
        "hooks": {stage: [{"path": hook_path, "args": ["gpu-guard", "hook", stage]}]}
    });
    // NVIDIA's hook attaches the GPUs (docker --gpus, podman's hooks.d),
    // which makes the env request count.
    let mut spec = spec;
    let nvidia = serde_json::json!({"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]});
    match spec["hooks"]["prestart"].as_array_mut() {
        Some(list) => list.push(nvidia),
        None => spec["hooks"]["prestart"] = serde_json::json!([nvidia]),
    }
    let mut child = Command::new(*BIN)
        .args(["--config", cfg.to_str().unwrap(), "hook", "precreate"])
        .env_remove("GPU_GUARD_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(spec.to_string().as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Handed off: exit 0 with the edited config on stdout.
fn assert_handed_off(o: &Output, what: &str) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{what}: expected the refusal to be left to the prestart hook; stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["process"]["noNewPrivileges"], true, "{what}");
}

/// Refused here: exit 1, the diagnosis on stderr, nothing on stdout.
fn assert_refused_here(o: &Output, what: &str) {
    assert_eq!(
        o.status.code(),
        Some(1),
        "{what}: a hook that is not this binary must not take the refusal; stdout: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(o.stdout.is_empty(), "{what}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cuda>=12.4"),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn the_binary_itself_and_links_to_it_count() {
    let t = Tmp::new("links");
    let cfg = config(&t.0);
    for stage in ["prestart", "createRuntime"] {
        assert_handed_off(&precreate(&cfg, stage, Path::new(*BIN)), "the binary");
    }
    let sym = t.0.join("gpu-guard");
    std::os::unix::fs::symlink(*BIN, &sym).unwrap();
    assert_handed_off(&precreate(&cfg, "prestart", &sym), "a symlink to it");
    // A hard link counts whatever its name: it is the same file.
    let hard = Removed(
        Path::new(*BIN).with_file_name(format!(".handoff-hardlink-{}", std::process::id())),
    );
    std::fs::hard_link(*BIN, &hard.0).unwrap();
    assert_handed_off(&precreate(&cfg, "prestart", &hard.0), "a hard link to it");
}

#[test]
fn a_copy_or_a_lookalike_name_does_not_count() {
    let t = Tmp::new("copies");
    let cfg = config(&t.0);
    // Same bytes, same name, another inode: not this binary.
    let bin_dir = t.0.join("usr/bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let copy = bin_dir.join("gpu-guard");
    std::fs::copy(*BIN, &copy).unwrap();
    assert_refused_here(&precreate(&cfg, "prestart", &copy), "a copy");
    // The basename prefix the old check trusted.
    let lookalike = bin_dir.join("gpu-guard-anything");
    std::fs::write(&lookalike, b"#!/bin/sh\nexit 0\n").unwrap();
    assert_refused_here(
        &precreate(&cfg, "createRuntime", &lookalike),
        "gpu-guard-anything",
    );
    // A path that does not exist, and a relative one.
    assert_refused_here(
        &precreate(&cfg, "prestart", Path::new("/nonexistent/gpu-guard")),
        "a missing path",
    );
    assert_refused_here(
        &precreate(&cfg, "prestart", Path::new("gpu-guard")),
        "a relative path",
    );
}
