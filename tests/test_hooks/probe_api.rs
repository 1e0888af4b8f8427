//! The library API the decision pipeline calls, `host::probe_with`, in
//! process through the real nvml-wrapper and the fake NVML: the report's
//! facts, source and problem kinds for each situation.
//!
//! The fake reads its FAKE_NVML_* variables at nvmlInit, and the process
//! environment is shared by all threads: every test here holds ENV_LOCK.

use crate::probe_common::*;
use gpu_guard::core::facts::{HostFacts, HostProblemKind, HostReport};
use gpu_guard::core::policy::HostConfig;
use gpu_guard::host::probe_with;
use std::path::Path;
use std::sync::Mutex;

static ENV_LOCK: Mutex<()> = Mutex::new(());

fn cfg(lib: &Path, cache: Option<&Path>) -> HostConfig {
    HostConfig {
        nvml_library: lib.display().to_string(),
        cache_file: cache.map(|c| c.display().to_string()).unwrap_or_default(),
        ..HostConfig::default()
    }
}

/// Runs probe_with with the fake answering from `profile_name` and the
/// given fault, holding the environment lock.
fn probe_fake(
    profile_name: &str,
    fail: Option<&str>,
    cfg: &HostConfig,
    host: &FakeHost,
) -> HostReport {
    let _g = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    std::env::set_var("FAKE_NVML_FACTS", profile(profile_name));
    match fail {
        Some(f) => std::env::set_var("FAKE_NVML_FAIL", f),
        None => std::env::remove_var("FAKE_NVML_FAIL"),
    }
    std::env::remove_var("FAKE_NVML_INIT_DELAY_MS");
    let r = probe_with(cfg, &host.paths());
    std::env::remove_var("FAKE_NVML_FAIL");
    r
}

/// The facts NVML gives for a profile: the profile, each GPU healthy.
fn facts_of(name: &str) -> HostFacts {
    HostFacts::from_json(&probed_json(name).to_string()).unwrap()
}

fn kinds(r: &HostReport) -> Vec<HostProblemKind> {
    r.problems.iter().map(|p| p.kind.clone()).collect()
}

#[test]
fn healthy_hosts_report_nvml_facts_without_problems() {
    let lib = fake_lib();
    for name in [
        "a100",
        "h100x8",
        "t4-a10",
        "a100-mig",
        "driver-no-gpu",
        "l4x2-minor",
    ] {
        let host = FakeHost::new(name, true);
        let r = probe_fake(name, None, &cfg(&lib, None), &host);
        assert_eq!(r.facts, Some(facts_of(name)), "{name}");
        assert!(r.problems.is_empty(), "{name}: {:?}", r.problems);
        assert!(r.source.starts_with("NVML ("), "{}", r.source);
    }
}

#[test]
fn each_fault_gives_its_problem_kind() {
    let lib = fake_lib();
    let host = FakeHost::new("h100x8", true);
    let c = cfg(&lib, None);

    let r = probe_fake("h100x8", Some("init"), &c, &host);
    assert_eq!(r.facts, None);
    assert_eq!(kinds(&r), vec![HostProblemKind::ProbeFailed]);

    let r = probe_fake("h100x8", Some("lib_rm_version_mismatch"), &c, &host);
    assert_eq!(r.facts, None);
    assert_eq!(kinds(&r), vec![HostProblemKind::ProbeFailed]);
    let p = &r.problems[0];
    assert!(
        p.message.contains("kernel module is 550.54.15"),
        "{}",
        p.message
    );
    assert!(
        p.fix
            .as_deref()
            .unwrap_or("")
            .contains("reboot, or reinstall the driver"),
        "{:?}",
        p.fix
    );

    let r = probe_fake("h100x8", Some("gpu_lost:3,gpu_lost:5"), &c, &host);
    assert_eq!(
        kinds(&r),
        vec![
            HostProblemKind::GpuLost { index: 3 },
            HostProblemKind::GpuLost { index: 5 }
        ]
    );
    let f = r.facts.expect("facts with lost GPUs");
    assert_eq!(f.gpus.len(), 8);
    // Two lost GPUs, two /proc entries NVML did not report: named in order.
    assert_eq!(f.gpus[3].pci_bus_id.as_deref(), Some("00000000:5D:00.0"));
    assert_eq!(f.gpus[5].pci_bus_id.as_deref(), Some("00000000:AB:00.0"));
    assert!(r.problems[0]
        .message
        .contains("GPU 3 (NVIDIA H100 80GB HBM3, bus 00000000:5D:00.0"));

    let r = probe_fake("h100x8", Some("driver_not_loaded"), &c, &host);
    // The fake tree still has /proc/driver/nvidia: the /proc fallback.
    assert_eq!(kinds(&r), vec![HostProblemKind::Degraded]);
    let f = r.facts.expect("facts from /proc");
    assert_eq!(f.driver_version.as_deref(), Some("550.54.15"));
    assert!(f.gpus.iter().all(|g| g.compute_capability.is_none()));
    assert_eq!(r.source, host.proc().display().to_string());
}

#[test]
fn nvml_missing_with_and_without_a_driver() {
    let missing = Path::new("/nonexistent/libnvidia-ml.so.1");
    let host = FakeHost::new("a100", true);
    let r = probe_fake("a100", None, &cfg(missing, None), &host);
    assert_eq!(kinds(&r), vec![HostProblemKind::Degraded]);
    assert!(
        r.problems[0]
            .message
            .starts_with("NVML not available: cannot load /nonexistent/libnvidia-ml.so.1"),
        "{}",
        r.problems[0].message
    );
    assert_eq!(r.facts.unwrap().gpus[0].name, "NVIDIA A100-SXM4-80GB");

    let bare = FakeHost::new("no-driver", false);
    let r = probe_fake("no-driver", None, &cfg(missing, None), &bare);
    assert_eq!(kinds(&r), vec![HostProblemKind::NoDriver]);
    assert_eq!(r.facts, Some(facts_of("no-driver")));
    assert!(r.problems[0].fix.is_some());
}

#[test]
fn facts_file_is_read_and_never_probed() {
    let host = FakeHost::new("a100", true);
    let mut c = cfg(Path::new("/nonexistent/libnvidia-ml.so.1"), None);
    c.facts_file = profile("t4-a10").display().to_string();
    let r = probe_with(&c, &host.paths());
    let file = std::fs::read_to_string(profile("t4-a10")).unwrap();
    assert_eq!(r.facts, Some(HostFacts::from_json(&file).unwrap()));
    assert!(r.source.starts_with("facts file"), "{}", r.source);
    c.facts_file = host.dir.join("nope.json").display().to_string();
    let r = probe_with(&c, &host.paths());
    assert_eq!(kinds(&r), vec![HostProblemKind::ProbeFailed]);
}

#[test]
fn warm_cache_answers_without_nvml() {
    let lib = fake_lib();
    let host = FakeHost::new("a100-mig", true);
    let cache = host.dir.join("run/gpu-guard/host-facts.json");
    let c = cfg(&lib, Some(&cache));
    let cold = probe_fake("a100-mig", None, &c, &host);
    assert!(cold.source.starts_with("NVML"), "{}", cold.source);
    assert!(cache.is_file());
    // NVML now fails: a warm cache must not call it.
    let warm = probe_fake("a100-mig", Some("init"), &c, &host);
    assert!(warm.source.starts_with("cache "), "{}", warm.source);
    assert_eq!(warm.facts, cold.facts);
    assert!(warm.problems.is_empty(), "{:?}", warm.problems);
    // A driver reload voids it: NVML is asked, and fails.
    host.set_driver("550.90.12");
    let after = probe_fake("a100-mig", Some("init"), &c, &host);
    assert_eq!(kinds(&after), vec![HostProblemKind::ProbeFailed]);
}

#[test]
fn unreadable_proc_version_without_nvml_is_a_probe_failure() {
    let host = FakeHost::new("a100", true);
    std::fs::write(host.proc().join("version"), "something unexpected\n").unwrap();
    let r = probe_with(
        &cfg(Path::new("/nonexistent/libnvidia-ml.so.1"), None),
        &host.paths(),
    );
    assert_eq!(r.facts, None);
    assert_eq!(kinds(&r), vec![HostProblemKind::ProbeFailed]);
    assert!(
        r.problems[0].message.contains("names no driver version"),
        "{}",
        r.problems[0].message
    );
}
