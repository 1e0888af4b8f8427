//! `gpu-guard check` end to end with the probe behind it (docs/interfaces.md:
//! `check --env ... --json`, exit 0 allow/skip, 1 refuse): the decisions the
//! probe's findings lead to, with the fake NVML instead of a facts file, and
//! 32 concurrent checks on a cold and a warm cache.

use crate::probe_common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);
const GPU_ENV: &[&str] = &[
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
];

fn check_cmd(host: &FakeHost, profile_name: &str, cfg: &Path, env: &[&str]) -> Command {
    let mut c = host.command(profile_name, cfg);
    c.arg("check");
    for e in env {
        c.arg("--env").arg(e);
    }
    c.arg("--json");
    c
}

fn check(
    host: &FakeHost,
    profile_name: &str,
    cfg: &Path,
    env: &[&str],
    fake: &[(&str, &str)],
) -> (Output, Value) {
    let mut c = check_cmd(host, profile_name, cfg, env);
    for (k, v) in fake {
        c.env(k, v);
    }
    let (out, _) = run_bounded(&mut c, LIMIT);
    let d = stdout_json(&out);
    (out, d)
}

fn findings(d: &Value) -> Vec<(String, String, String)> {
    d["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| {
                    (
                        f["check"].as_str().unwrap_or("").to_string(),
                        f["severity"].as_str().unwrap_or("").to_string(),
                        f["message"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn has_finding(d: &Value, check: &str, severity: &str, text: &str) -> bool {
    findings(d)
        .iter()
        .any(|(c, s, m)| c == check && s == severity && m.contains(text))
}

fn assert_allow(out: &Output, d: &Value) {
    assert_eq!(out.status.code(), Some(0), "{d}\n{}", stderr(out));
    assert_eq!(d["verdict"], "allow", "{d}");
}

fn assert_refuse(out: &Output, d: &Value) {
    assert_eq!(out.status.code(), Some(1), "{d}\n{}", stderr(out));
    assert_eq!(d["verdict"], "refuse", "{d}");
}

#[test]
fn requirement_decided_from_nvml_facts() {
    let lib = fake_lib();
    let host = FakeHost::new("h100x8", true);
    let cfg = host.config(&lib, None, "");
    let (out, d) = check(&host, "h100x8", &cfg, GPU_ENV, &[]);
    assert_allow(&out, &d);
    assert_eq!(d["gpu_container"], true);
    let host = FakeHost::new("a100", true);
    let cfg = host.config(&lib, None, "");
    let (out, d) = check(&host, "a100", &cfg, GPU_ENV, &[]);
    assert_refuse(&out, &d);
    assert!(has_finding(&d, "requirement", "error", "cuda>=12.4"), "{d}");
}

#[test]
fn thirty_two_concurrent_checks_cold_and_warm_cache() {
    let lib = fake_lib();
    for (profile_name, want_code, want_verdict) in [("h100x8", 0, "allow"), ("a100", 1, "refuse")] {
        let host = FakeHost::new(profile_name, true);
        let cache = host.dir.join("run/gpu-guard/host-facts.json");
        let cfg = host.config(&lib, Some(&cache), "");
        for (phase, fake) in [
            ("cold", ("FAKE_NVML_INIT_DELAY_MS", "50")),
            // Warm: NVML would fail, so a right answer proves the cache was read.
            ("warm", ("FAKE_NVML_FAIL", "init")),
        ] {
            let children: Vec<_> = (0..32)
                .map(|_| {
                    check_cmd(&host, profile_name, &cfg, GPU_ENV)
                        .env(fake.0, fake.1)
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .expect("spawn")
                })
                .collect();
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            for mut ch in children {
                while ch.try_wait().expect("try_wait").is_none() {
                    if std::time::Instant::now() > deadline {
                        let _ = ch.kill();
                        panic!("{profile_name} {phase}: a check did not finish");
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                let out = ch.wait_with_output().expect("output");
                let d = stdout_json(&out);
                assert_eq!(
                    out.status.code(),
                    Some(want_code),
                    "{profile_name} {phase}: {d}"
                );
                assert_eq!(d["verdict"], want_verdict, "{profile_name} {phase}: {d}");
            }
            assert!(cache.is_file(), "{profile_name} {phase}: no cache written");
        }
    }
}

#[test]
fn probe_failure_follows_on_probe_failure() {
    let lib = fake_lib();
    let host = FakeHost::new("h100x8", true);
    let refuse = host.config(&lib, None, "on_probe_failure = \"refuse\"");
    let (out, d) = check(
        &host,
        "h100x8",
        &refuse,
        GPU_ENV,
        &[("FAKE_NVML_FAIL", "init")],
    );
    assert_refuse(&out, &d);
    assert!(has_finding(&d, "host", "error", "NVML"), "{d}");
    let allow = host.config(&lib, None, "on_probe_failure = \"allow\"");
    let (out, d) = check(
        &host,
        "h100x8",
        &allow,
        GPU_ENV,
        &[("FAKE_NVML_FAIL", "init")],
    );
    assert_allow(&out, &d);
    assert!(has_finding(&d, "host", "warning", "NVML"), "{d}");
}

#[test]
fn version_mismatch_refuses_with_both_versions() {
    let lib = fake_lib();
    let host = FakeHost::new("h100x8", true);
    host.set_driver("550.54.14");
    let versioned = host.dir.join("libnvidia-ml.so.550.90.07");
    std::os::unix::fs::symlink(&lib, &versioned).unwrap();
    let cfg = host.config(&versioned, None, "");
    let (out, d) = check(
        &host,
        "h100x8",
        &cfg,
        GPU_ENV,
        &[("FAKE_NVML_FAIL", "lib_rm_version_mismatch")],
    );
    assert_refuse(&out, &d);
    assert!(has_finding(&d, "host", "error", "version mismatch"), "{d}");
    let text = d.to_string();
    assert!(
        text.contains("550.54.14") && text.contains("550.90.07"),
        "{d}"
    );
}

#[test]
fn lost_gpu_refuses_only_containers_that_see_it() {
    let lib = fake_lib();
    let host = FakeHost::new("h100x8", true);
    let cfg = host.config(&lib, None, "");
    let lost = [("FAKE_NVML_FAIL", "gpu_lost:1")];
    let (out, d) = check(&host, "h100x8", &cfg, GPU_ENV, &lost);
    assert_refuse(&out, &d);
    assert!(has_finding(&d, "health", "error", "GPU 1"), "{d}");
    let (out, d) = check(
        &host,
        "h100x8",
        &cfg,
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"],
        &lost,
    );
    assert_allow(&out, &d);
}

#[test]
fn hung_nvml_refuses_gpu_containers_at_the_deadline() {
    let lib = fake_lib();
    let host = FakeHost::new("a100", true);
    let cfg = host.config(&lib, None, "probe_timeout_ms = 300");
    let mut c = check_cmd(&host, "a100", &cfg, GPU_ENV);
    c.env("FAKE_NVML_INIT_DELAY_MS", "60000");
    let (out, took) = run_bounded(&mut c, Duration::from_secs(20));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let d = stdout_json(&out);
    assert_refuse(&out, &d);
    assert!(
        has_finding(&d, "host", "error", "did not answer within 300 ms"),
        "{d}"
    );
}

#[test]
fn non_gpu_containers_never_wait_for_nvml() {
    let lib = fake_lib();
    let host = FakeHost::new("a100", true);
    // A hung NVML and a long deadline: a non-GPU container must not pay it.
    let cfg = host.config(&lib, None, "probe_timeout_ms = 20000");
    for env in [&["NVIDIA_VISIBLE_DEVICES=void"][..], &["PATH=/bin"][..]] {
        let mut c = check_cmd(&host, "a100", &cfg, env);
        c.env("FAKE_NVML_INIT_DELAY_MS", "60000");
        let (out, took) = run_bounded(&mut c, Duration::from_secs(30));
        assert!(took < Duration::from_secs(3), "{env:?} took {took:?}");
        let d = stdout_json(&out);
        assert_eq!(out.status.code(), Some(0), "{d}");
        assert_eq!(d["verdict"], "skip", "{d}");
        assert_eq!(d["gpu_container"], false, "{d}");
    }
}

#[test]
fn no_driver_refuses_gpu_containers() {
    let host = FakeHost::new("no-driver", false);
    let cfg = host.config(Path::new("/nonexistent/libnvidia-ml.so.1"), None, "");
    let (out, d) = check(&host, "no-driver", &cfg, GPU_ENV, &[]);
    assert_refuse(&out, &d);
    assert!(
        has_finding(&d, "host", "error", "no NVIDIA driver on this host"),
        "{d}"
    );
}

#[test]
fn proc_fallback_warns_that_arch_cannot_be_judged() {
    let host = FakeHost::new("t4-a10", true);
    let cfg = host.config(Path::new("/nonexistent/libnvidia-ml.so.1"), None, "");
    let (out, d) = check(
        &host,
        "t4-a10",
        &cfg,
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0,arch>=7.0",
        ],
        &[],
    );
    // cuda 12.2 (from the 535 branch) satisfies cuda>=12.0; arch is unknown:
    // a warning, never a silent pass.
    assert_eq!(out.status.code(), Some(0), "{d}\n{}", stderr(&out));
    assert_ne!(d["verdict"], "refuse", "{d}");
    assert!(
        findings(&d)
            .iter()
            .any(|(_, s, m)| s == "warning" && m.contains("compute capability")),
        "{d}"
    );
}
