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

/// A fake `nvidia-smi` printing the CSV of the profile, piped through `sed`.
fn fake_smi(dir: &Path, sed: &str) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\njq -r '.driver_version as $d | .gpus[] | [$d, .name, .compute_capability, .uuid, (.memory_mib|tostring), .pci_bus_id] | join(\", \")' \"$FAKE_NVML_FACTS\" | sed '{sed}'\n"
    );
    let p = bin.join("nvidia-smi");
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

fn run_script(host: &FakeHost, profile_name: &str) -> (Option<i32>, String) {
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
        .env("FAKE_NVML_FACTS", profile(profile_name))
        .envs(host.env())
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
