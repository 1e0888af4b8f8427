//! The host facts cache through the binary: warm hits make no NVML call,
//! damaged or foreign files are rebuilt, a driver change or reboot voids it,
//! failures are never cached, and many processes at once all get the right
//! facts whether the cache is cold or warm.

use crate::probe_common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

fn host_json(
    host: &FakeHost,
    profile_name: &str,
    cfg: &Path,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let mut c = host.command(profile_name, cfg);
    c.args(["host", "--json"]);
    for (k, v) in env {
        c.env(k, v);
    }
    let (out, _) = run_bounded(&mut c, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout_json(&out)
}

/// Exit status and everything `gpu-guard host` (the table) printed.
fn host_source(
    host: &FakeHost,
    profile_name: &str,
    cfg: &Path,
    env: &[(&str, &str)],
) -> (i32, String) {
    let mut c = host.command(profile_name, cfg);
    c.arg("host");
    for (k, v) in env {
        c.env(k, v);
    }
    let (out, _) = run_bounded(&mut c, LIMIT);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.code().unwrap_or(-1),
        format!("{text}{}", stderr(&out)),
    )
}

fn setup(profile_name: &str) -> (FakeHost, PathBuf, PathBuf) {
    let host = FakeHost::new(profile_name, true);
    let cache = host.dir.join("run/gpu-guard/host-facts.json");
    let cfg = host.config(&fake_lib(), Some(&cache), "");
    (host, cache, cfg)
}

#[test]
fn warm_cache_makes_no_nvml_call() {
    let (host, cache, cfg) = setup("t4-a10");
    assert!(!cache.exists());
    assert_eq!(host_json(&host, "t4-a10", &cfg, &[]), probed_json("t4-a10"));
    assert!(cache.is_file(), "cold probe writes the cache");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(cache.parent().unwrap())
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o755);
    // Any NVML call would now fail or hang: a hit never makes one.
    assert_eq!(
        host_json(&host, "t4-a10", &cfg, &[("FAKE_NVML_FAIL", "init")]),
        probed_json("t4-a10")
    );
    let (code, src) = host_source(
        &host,
        "t4-a10",
        &cfg,
        &[("FAKE_NVML_INIT_DELAY_MS", "60000")],
    );
    assert_eq!(code, 0, "{src}");
    assert!(src.contains("(source: cache "), "{src}");
    // And the cached facts are the profile's even if NVML would now say otherwise.
    assert_eq!(host_json(&host, "h100x8", &cfg, &[]), probed_json("t4-a10"));
}

#[test]
fn truncated_or_foreign_cache_is_rebuilt() {
    let (host, cache, cfg) = setup("a100-mig");
    host_json(&host, "a100-mig", &cfg, &[]);
    let full = std::fs::read(&cache).unwrap();
    for bad in [
        full[..full.len() / 2].to_vec(),
        Vec::new(),
        br#"{"hello": "I am some other program's file"}"#.to_vec(),
        b"\x00\xff\xfe not even text".to_vec(),
    ] {
        std::fs::write(&cache, &bad).unwrap();
        // Ignored, not trusted: NVML is asked (and answers a100-mig).
        assert_eq!(
            host_json(&host, "a100-mig", &cfg, &[]),
            probed_json("a100-mig")
        );
        let rebuilt: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&cache).unwrap()).expect("rebuilt cache is JSON");
        assert_eq!(rebuilt["format"], "gpu-guard host facts cache v2");
        assert_eq!(rebuilt["facts"], probed_json("a100-mig"));
        // And it is warm again.
        assert_eq!(
            host_json(&host, "a100-mig", &cfg, &[("FAKE_NVML_FAIL", "init")]),
            probed_json("a100-mig")
        );
    }
}

#[test]
fn driver_change_or_reboot_invalidates() {
    let (host, _cache, cfg) = setup("a100");
    assert_eq!(host_json(&host, "a100", &cfg, &[]), probed_json("a100"));
    // Same driver: the cached a100 answer stands even though NVML would say h100x8.
    assert_eq!(host_json(&host, "h100x8", &cfg, &[]), probed_json("a100"));
    // The driver is reloaded at another version: the cache is void.
    host.set_driver("550.54.15");
    assert_eq!(host_json(&host, "h100x8", &cfg, &[]), probed_json("h100x8"));
    // A reboot (new boot id) voids it too.
    assert_eq!(host_json(&host, "t4-a10", &cfg, &[]), probed_json("h100x8"));
    host.set_boot_id("99999999-2222-3333-4444-555555555555");
    assert_eq!(host_json(&host, "t4-a10", &cfg, &[]), probed_json("t4-a10"));
}

#[test]
fn ttl_expires() {
    let host = FakeHost::new("a100", true);
    let cache = host.dir.join("c.json");
    let cfg = host.config(&fake_lib(), Some(&cache), "cache_ttl_s = 1");
    assert_eq!(host_json(&host, "a100", &cfg, &[]), probed_json("a100"));
    assert_eq!(host_json(&host, "t4-a10", &cfg, &[]), probed_json("a100"));
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(host_json(&host, "t4-a10", &cfg, &[]), probed_json("t4-a10"));
}

#[test]
fn failures_and_lost_gpus_are_never_cached() {
    let (host, cache, cfg) = setup("h100x8");
    let (code, _) = host_source(&host, "h100x8", &cfg, &[("FAKE_NVML_FAIL", "init")]);
    assert_eq!(code, 2);
    assert!(!cache.exists(), "a failed probe wrote the cache");
    let (code, src) = host_source(&host, "h100x8", &cfg, &[("FAKE_NVML_FAIL", "gpu_lost:2")]);
    // Facts printed, but a lost GPU is a host error: exit 1.
    assert_eq!(code, 1, "{src}");
    assert!(!cache.exists(), "a probe with a lost GPU wrote the cache");
    // The /proc fallback is partial: not cached either.
    let cfg2 = host.config(
        Path::new("/nonexistent/libnvidia-ml.so.1"),
        Some(&cache),
        "",
    );
    let (code, src) = host_source(&host, "h100x8", &cfg2, &[]);
    assert_eq!(code, 0, "{src}");
    assert!(src.contains("NVML not available"), "{src}");
    assert!(!cache.exists(), "the /proc fallback wrote the cache");
}

#[test]
fn unwritable_cache_still_answers() {
    let host = FakeHost::new("a100", true);
    // The cache "directory" is a file: nothing can be written there.
    std::fs::write(host.dir.join("blocker"), b"").unwrap();
    let cfg = host.config(&fake_lib(), Some(&host.dir.join("blocker/c.json")), "");
    assert_eq!(host_json(&host, "a100", &cfg, &[]), probed_json("a100"));
}

#[test]
fn cache_disabled_by_empty_path_or_zero_ttl() {
    let host = FakeHost::new("a100", true);
    let cfg = host.config(&fake_lib(), None, "");
    assert_eq!(host_json(&host, "a100", &cfg, &[]), probed_json("a100"));
    assert_eq!(host_json(&host, "t4-a10", &cfg, &[]), probed_json("t4-a10"));
    let cache = host.dir.join("c.json");
    let cfg = host.config(&fake_lib(), Some(&cache), "cache_ttl_s = 0");
    assert_eq!(host_json(&host, "a100", &cfg, &[]), probed_json("a100"));
    assert!(!cache.exists());
}

/// Starts `n` `gpu-guard host --json` at once and returns their outputs.
fn concurrent(
    host: &FakeHost,
    profile_name: &str,
    cfg: &Path,
    env: &[(&str, &str)],
    n: usize,
) -> Vec<std::process::Output> {
    let mut children = Vec::new();
    for _ in 0..n {
        let mut c = host.command(profile_name, cfg);
        c.args(["host", "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        children.push(c.spawn().expect("spawn"));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    children
        .into_iter()
        .map(|mut ch| {
            while ch.try_wait().expect("try_wait").is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = ch.kill();
                    panic!("a concurrent gpu-guard did not finish");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            ch.wait_with_output().expect("output")
        })
        .collect()
}

#[test]
fn thirty_two_processes_cold_then_warm() {
    for profile_name in ["h100x8", "a100-mig"] {
        let (host, cache, cfg) = setup(profile_name);
        let want = probed_json(profile_name);
        // Cold: all probe (a slow init widens the race) and all write.
        let outs = concurrent(
            &host,
            profile_name,
            &cfg,
            &[("FAKE_NVML_INIT_DELAY_MS", "50")],
            32,
        );
        for o in &outs {
            assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
            assert_eq!(stdout_json(o), want);
        }
        assert!(cache.is_file());
        // No temp file left behind by the racing writers.
        let leftovers: Vec<_> = std::fs::read_dir(cache.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        // Warm: NVML would fail; every process reads the cache.
        let outs = concurrent(&host, profile_name, &cfg, &[("FAKE_NVML_FAIL", "init")], 32);
        for o in &outs {
            assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
            assert_eq!(stdout_json(o), want);
        }
    }
}

#[test]
fn readers_racing_a_rewrite_never_see_half_a_file() {
    let (host, cache, cfg) = setup("h100x8");
    host_json(&host, "h100x8", &cfg, &[]);
    // Writers (driver changed -> re-probe -> rewrite) and readers at once;
    // readers must get a whole old or new file, and so the right facts.
    host.set_driver("550.54.99");
    let outs = concurrent(&host, "h100x8", &cfg, &[], 32);
    for o in &outs {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
        assert_eq!(stdout_json(o), probed_json("h100x8"));
    }
    let text = std::fs::read_to_string(&cache).unwrap();
    assert!(
        text.contains("550.54.99"),
        "the rewritten cache carries the new key"
    );
}
