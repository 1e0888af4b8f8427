//! integration/gpu-check.sh (the real-GPU check) against a stand-in host:
//! the fake NVML installed as `libnvidia-ml.so.1` on LD_LIBRARY_PATH (so the
//! system library path of the probe is the one exercised) and an
//! `nvidia-smi` that prints the same profile. The script must pass when
//! they agree and fail on any difference. Needs bash and jq.

use crate::probe_common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A fake `nvidia-smi` answering from the profile, piped through `sed`:
/// the identity CSV, each health field (`Yes`/`No`, the ECC count) from
/// `nvml_health`, and the `topo -p2p r|w` matrix from `p2p`.
fn fake_smi(dir: &Path, sed: &str) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let yes = |key: &str| {
        format!("jq -r '.gpus[] | if (.nvml_health.{key} // false) then \"Yes\" else \"No\" end' \"$FAKE_NVML_FACTS\"")
    };
    let script = format!(
        r#"#!/bin/sh
case "$*" in
  *remapped_rows.failure*) {failure} ;;
  *remapped_rows.pending*) {pending} ;;
  *retired_pages.pending*) {retired} ;;
  *ecc.errors.uncorrected.volatile.total*) jq -r '.gpus[] | (.nvml_health.ecc_volatile_uncorrected // 0)' "$FAKE_NVML_FACTS" ;;
  *topo*) jq -r '. as $all | (.gpus | length) as $n | ([range($n)] | map("GPU\(.)") | "\t" + join("\t")), (.gpus[] as $g | [range($n)] | map(. as $j | if $j == $g.index then "X" elif ($g.p2p[($j|tostring)] // $all.gpus[$j].p2p[($g.index|tostring)] // "ok") == "ok" then "OK" else "TNS" end) | "GPU\($g.index)\t" + join("\t"))' "$FAKE_NVML_FACTS" ;;
  *) jq -r '.driver_version as $d | .gpus[] | [$d, .name, .compute_capability, .uuid, (.memory_mib|tostring), .pci_bus_id] | join(", ")' "$FAKE_NVML_FACTS" ;;
esac | sed '{sed}'
"#,
        failure = yes("remap_failure"),
        pending = yes("remap_pending"),
        retired = yes("retired_pages_pending"),
    );
    let p = bin.join("nvidia-smi");
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

fn run_script(host: &FakeHost, profile_name: &str) -> (Option<i32>, String) {
    run_script_on(host, &profile(profile_name), &host.sys())
}

/// The script on `host`, the fake answering from `facts`, comparing the
/// NUMA facts with the sysfs at `sys`.
fn run_script_on(host: &FakeHost, facts: &Path, sys: &Path) -> (Option<i32>, String) {
    let libdir = host.dir.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    let so = libdir.join("libnvidia-ml.so.1");
    if !so.exists() {
        std::os::unix::fs::symlink(fake_lib(), &so).unwrap();
    }
    let path = format!(
        "{}:{}",
        host.dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("bash");
    c.arg(repo().join("integration/gpu-check.sh"))
        .arg(gpu_guard())
        .env("PATH", path)
        .env("LD_LIBRARY_PATH", &libdir)
        .env("FAKE_NVML_FACTS", facts)
        .envs(host.env())
        .env("GPU_CHECK_SYS", sys)
        .env_remove("FAKE_NVML_FAIL")
        .env_remove("GPU_GUARD_CONFIG");
    let (out, _) = run_bounded(&mut c, Duration::from_secs(30));
    (
        out.status.code(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out)),
    )
}

#[test]
fn gpu_check_script_agrees_and_catches_differences() {
    require_test_hooks();
    for tool in ["bash", "jq"] {
        if !have(tool) {
            skip_or_fail(&format!("{tool} is not installed"));
            return;
        }
    }
    for name in ["a100", "h100x8", "t4-a10", "a100-mig"] {
        let host = FakeHost::new(name, true);
        fake_smi(host.dir.path(), "");
        let (code, text) = run_script(&host, name);
        assert_eq!(code, Some(0), "{name}: {text}");
        assert!(text.contains("gpu-check: OK"), "{name}: {text}");
    }
    let host = FakeHost::new("t4-a10", true);
    for (sed, what) in [
        ("s/Tesla T4/Tesla T4X/", "GPU 0 name"),
        ("s/, 8.6,/, 8.0,/", "GPU 1 compute_capability"),
        ("s/15360/15000/", "GPU 0 memory_mib"),
        ("s/00000000:AF:00.0/00000000:B0:00.0/", "GPU 1 pci_bus_id"),
        ("s/^535.129.03/535.129.04/", "driver_version"),
        ("1d", "GPU count"),
    ] {
        fake_smi(host.dir.path(), sed);
        let (code, text) = run_script(&host, "t4-a10");
        assert_eq!(code, Some(1), "{sed}: {text}");
        assert!(text.contains(&format!("DIFF {what}")), "{sed}: {text}");
    }
}

#[test]
fn gpu_check_script_compares_health_topology_and_p2p() {
    require_test_hooks();
    for tool in ["bash", "jq"] {
        if !have(tool) {
            skip_or_fail(&format!("{tool} is not installed"));
            return;
        }
    }
    let mut facts = profile_json("t4-a10");
    facts["gpus"][0]["nvml_health"] = serde_json::json!({"remap_pending": true});
    facts["gpus"][1]["nvml_health"] = serde_json::json!({"remap_failure": true});
    facts["gpus"][0]["p2p"] = serde_json::json!({"1": "ioh_topology_not_supported"});
    let host = FakeHost::from_facts(&facts, true);
    host.set_numa("00000000:3B:00.0", 0, "0-15");
    host.set_numa("00000000:AF:00.0", -1, "0-31");
    fake_smi(host.dir.path(), "");
    let (code, text) = run_script_on(&host, &host.facts_file(), &host.sys());
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("GPU 1 health: failed"), "{text}");
    assert!(
        text.contains("GPU 0 topology: NUMA node 0, CPUs 0-15"),
        "{text}"
    );
    // GPU 0 is degraded only: a warning, not a health error.
    assert!(
        text.contains("check NVIDIA_VISIBLE_DEVICES=0: allow"),
        "{text}"
    );
    // nvidia-smi says otherwise: a difference.
    fake_smi(host.dir.path(), "s/^No$/Yes/");
    let (code, text) = run_script_on(&host, &host.facts_file(), &host.sys());
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("DIFF GPU 0 health"), "{text}");
    // Another sysfs than the one gpu-guard read: a difference.
    fake_smi(host.dir.path(), "");
    let other = host.dir.join("other-sys");
    let d = other.join("bus/pci/devices/0000:3b:00.0");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("numa_node"), "1\n").unwrap();
    std::fs::write(d.join("local_cpulist"), "16-31\n").unwrap();
    let (code, text) = run_script_on(&host, &host.facts_file(), &other);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("DIFF GPU 0 numa_node"), "{text}");
    assert!(text.contains("DIFF GPU 1 numa_node"), "{text}");
    // A P2P path nvidia-smi sees and gpu-guard does not.
    fake_smi(host.dir.path(), "s/TNS/OK/");
    let (code, text) = run_script_on(&host, &host.facts_file(), &host.sys());
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("DIFF p2p pairs without a path"), "{text}");
}
