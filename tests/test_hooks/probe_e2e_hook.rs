//! The prestart hook end to end under real runc, probing through the fake
//! NVML library (not a facts file): runc runs `gpu-guard hook prestart`
//! with the OCI State on stdin; a refusal fails the start with the diagnosis.
//!
//! Needs root, runc and a static busybox (/bin/busybox, Debian's
//! busybox-static). Without them: `SKIP:` locally, a failure under
//! GPU_GUARD_CI=1.

use crate::probe_common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn runc() -> Option<PathBuf> {
    let ok = Command::new("runc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| PathBuf::from("runc"))
}

fn prerequisites() -> bool {
    // Before any skip: without the feature this test cannot mean anything.
    require_test_hooks();
    if !crate::support::have_root("runc runs the test containers") {
        return false;
    }
    if runc().is_none() {
        skip_or_fail("runc is not installed (apt-get install runc)");
        return false;
    }
    if !Path::new("/bin/busybox").is_file() {
        skip_or_fail("/bin/busybox is missing (apt-get install busybox-static)");
        return false;
    }
    true
}

/// A runc bundle running `busybox true` with `env`, whose prestart hook is
/// gpu-guard with `config` and `hook_env` (the fake NVML's knobs).
fn bundle(
    host: &FakeHost,
    name: &str,
    env: &[&str],
    config: &Path,
    hook_env: &[String],
) -> PathBuf {
    let b = host.dir.join(name);
    let rootfs = b.join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    let out = Command::new("runc")
        .args(["spec", "--bundle"])
        .arg(&b)
        .output()
        .expect("runc spec");
    assert!(out.status.success(), "runc spec: {}", stderr(&out));
    let text = std::fs::read_to_string(b.join("config.json")).unwrap();
    let mut spec: serde_json::Value = serde_json::from_str(&text).unwrap();
    spec["process"]["terminal"] = json!(false);
    spec["process"]["args"] = json!(["/bin/busybox", "true"]);
    // Already within the security policy (what the runtime wrapper would
    // produce), so the hook-only verification passes and the subject here,
    // the probe, decides.
    let caps = json!(["CAP_KILL", "CAP_NET_BIND_SERVICE"]);
    spec["process"]["capabilities"] = json!({
        "bounding": caps, "effective": caps, "permitted": caps, "ambient": caps
    });
    spec["process"]["noNewPrivileges"] = json!(true);
    let mut penv: Vec<serde_json::Value> = spec["process"]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    penv.extend(env.iter().map(|e| json!(e)));
    spec["process"]["env"] = json!(penv);
    // A stand-in for NVIDIA's prestart hook, which `docker run --gpus` adds
    // and which attaches the GPUs NVIDIA_VISIBLE_DEVICES asks for: without
    // an attach signal an env request is not a GPU container
    // (src/core/detect.rs). It runs /bin/true under NVIDIA's hook name.
    let nvidia_hook = host.dir.join("nvidia-container-runtime-hook");
    if !nvidia_hook.exists() {
        std::os::unix::fs::symlink("/bin/true", &nvidia_hook).unwrap();
    }
    spec["hooks"] = json!({
        "prestart": [{
            "path": nvidia_hook,
            "args": ["nvidia-container-runtime-hook", "prestart"]
        }, {
            "path": gpu_guard(),
            "args": ["gpu-guard", "--config", config, "hook", "prestart"],
            "env": hook_env,
            "timeout": 30
        }]
    });
    std::fs::write(
        b.join("config.json"),
        serde_json::to_vec_pretty(&spec).unwrap(),
    )
    .unwrap();
    b
}

fn hook_env(host: &FakeHost, profile_name: &str, extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        format!("FAKE_NVML_FACTS={}", profile(profile_name).display()),
    ];
    v.extend(
        host.env()
            .into_iter()
            .map(|(k, p)| format!("{k}={}", p.display())),
    );
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// `runc run` the bundle; returns (success, stderr).
fn run_bundle(host: &FakeHost, bundle: &Path, id: &str) -> (bool, String) {
    let root = host.dir.join("runc-root");
    let mut c = Command::new("runc");
    c.arg("--root")
        .arg(&root)
        .args(["run", "--bundle"])
        .arg(bundle)
        .arg(id);
    let (out, _) = run_bounded(&mut c, Duration::from_secs(60));
    // A refused container is left in "stopped"/"creating": clean it up.
    let _ = Command::new("runc")
        .arg("--root")
        .arg(&root)
        .args(["delete", "--force", id])
        .output();
    (out.status.success(), stderr(&out))
}

fn unique_id(tag: &str) -> String {
    format!("gg-{tag}-{}", std::process::id())
}

#[test]
fn prestart_hook_under_runc_with_fake_nvml() {
    if !prerequisites() {
        return;
    }
    let lib = fake_lib();
    let gpu = [
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
    ];

    // Driver 550 / CUDA 12.4: the container starts.
    let host = FakeHost::new("h100x8", true);
    let cfg = host.config(&lib, Some(&host.dir.join("cache.json")), "");
    let b = bundle(&host, "ok", &gpu, &cfg, &hook_env(&host, "h100x8", &[]));
    let (ok, err) = run_bundle(&host, &b, &unique_id("ok"));
    assert!(ok, "h100x8 should start: {err}");

    // Driver 535 / CUDA 12.2: refused, with the failing clause in runc's error.
    let host = FakeHost::new("a100", true);
    let cfg = host.config(&lib, None, "");
    let b = bundle(&host, "old", &gpu, &cfg, &hook_env(&host, "a100", &[]));
    let (ok, err) = run_bundle(&host, &b, &unique_id("old"));
    assert!(!ok, "a100 (CUDA 12.2) should be refused");
    assert!(err.contains("error running hook"), "{err}");
    assert!(err.contains("cuda>=12.4"), "{err}");

    // Driver/library mismatch: refused with the diagnosis.
    let host = FakeHost::new("h100x8", true);
    let cfg = host.config(&lib, None, "");
    let env = hook_env(&host, "h100x8", &["FAKE_NVML_FAIL=lib_rm_version_mismatch"]);
    let b = bundle(&host, "mm", &gpu, &cfg, &env);
    let (ok, err) = run_bundle(&host, &b, &unique_id("mm"));
    assert!(!ok, "a version mismatch should be refused");
    assert!(err.contains("version mismatch"), "{err}");

    // A non-GPU container starts even with NVML broken.
    let env = hook_env(&host, "h100x8", &["FAKE_NVML_FAIL=init"]);
    let b = bundle(&host, "plain", &[], &cfg, &env);
    let (ok, err) = run_bundle(&host, &b, &unique_id("plain"));
    assert!(ok, "a non-GPU container must start: {err}");
}
