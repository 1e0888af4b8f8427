//! Real nvml-wrapper -> fake libnvidia-ml -> `gpu-guard host --json` equals
//! the host facts file the fake answers from, for every profile.

use crate::probe_common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn host_json_equals_each_profile() {
    let lib = fake_lib();
    for name in PROFILES {
        let host = FakeHost::new(name, true);
        let cfg = host.config(&lib, None, "");
        let (out, _) = run_bounded(host.command(name, &cfg).args(["host", "--json"]), LIMIT);
        // A host without the driver still prints its facts, and exits 1
        // so scripts can tell it from a GPU host (`gpu-guard host --help`).
        let want = if *name == "no-driver" { 1 } else { 0 };
        assert_eq!(out.status.code(), Some(want), "{name}: {}", stderr(&out));
        assert_eq!(stdout_json(&out), probed_json(name), "{name}");
        if *name == "no-driver" {
            // The fake answers NVML_ERROR_DRIVER_NOT_LOADED and there is no
            // /proc/driver/nvidia: the no-driver diagnosis.
            assert!(
                stderr(&out).contains("no NVIDIA driver on this host"),
                "{name}: {}",
                stderr(&out)
            );
        } else {
            // A healthy host with its device nodes: nothing to say.
            assert_eq!(stderr(&out), "", "{name}");
        }
    }
}

#[test]
fn host_json_without_proc_tree_still_comes_from_nvml() {
    // NVML alone is enough: /proc is only the fallback.
    let lib = fake_lib();
    for name in ["a100-mig", "l4x2-minor"] {
        let host = FakeHost::new(name, false);
        let cfg = host.config(&lib, None, "");
        let (out, _) = run_bounded(host.command(name, &cfg).args(["host", "--json"]), LIMIT);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        assert_eq!(stdout_json(&out), probed_json(name), "{name}");
    }
}

#[test]
fn host_table_for_people() {
    let lib = fake_lib();
    let host = FakeHost::new("a100-mig", true);
    let cfg = host.config(&lib, None, "");
    let (out, _) = run_bounded(host.command("a100-mig", &cfg).arg("host"), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("");
    assert!(
        first.starts_with("Driver 550.90.07, CUDA 12.4 (source: NVML ("),
        "{text}"
    );
    assert!(text.contains("NVIDIA A100-SXM4-40GB"), "{text}");
    assert!(text.contains("40960 MiB"), "{text}");
    assert!(text.contains("00000000:0F:00.0"), "{text}");
    assert!(
        text.contains("MIG MIG-0b7c4e52-1a33-5d7e-8f21-6a9c0d4e3b12"),
        "{text}"
    );
    // One header, two GPU rows, two MIG rows.
    assert_eq!(text.lines().count(), 6, "{text}");
}

#[test]
fn facts_file_wins_over_nvml() {
    // host.facts_file set: never probe, even with a broken NVML configured.
    let host = FakeHost::new("a100", true);
    let cfg = host.config(
        std::path::Path::new("/nonexistent/libnvidia-ml.so.1"),
        None,
        &format!("facts_file = \"{}\"", profile("t4-a10").display()),
    );
    let (out, _) = run_bounded(
        host.command("a100", &cfg)
            .env("FAKE_NVML_FAIL", "init")
            .args(["host", "--json"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out), profile_json("t4-a10"));
}

#[test]
fn bad_config_is_a_one_line_error() {
    let host = FakeHost::new("a100", true);
    let cfg = host.dir.join("bad.toml");
    std::fs::write(&cfg, "[host]\nprobe_timeout_ms = 0\n").unwrap();
    let (out, _) = run_bounded(host.command("a100", &cfg).args(["host", "--json"]), LIMIT);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("host.probe_timeout_ms"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty());
}
