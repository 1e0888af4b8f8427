//! The GPU Operator's driver root: on a node whose host has no driver,
//! NVML is loaded from `/run/nvidia/driver` (the driver container's root,
//! NVIDIA's toolkit `driver-root`), so `host`, `doctor` and every start see
//! the driver instead of "install the NVIDIA driver". The host's own
//! library, when there is one, is still the one used. The root searched
//! is GPU_GUARD_LIBRARY_ROOT (test-hooks builds) standing for `/`.

use crate::probe_common::*;
use crate::support::TempDir;
use std::time::Duration;

fn put_library(root: &std::path::Path, dir: &str) {
    let d = root.join(dir);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::copy(fake_lib(), d.join("libnvidia-ml.so.1")).unwrap();
}

#[test]
fn nvml_is_found_in_the_operator_s_driver_root() {
    let host = FakeHost::new("a100", true);
    let root = TempDir::new("driver-root");
    // No host.nvml_library: the default search.
    let cfg = host.config(std::path::Path::new(""), None, "");
    put_library(root.path(), "run/nvidia/driver/usr/lib/x86_64-linux-gnu");
    let mut c = host.command("a100", &cfg);
    c.args(["host", "--json"])
        .env("GPU_GUARD_LIBRARY_ROOT", root.path());
    let (out, _) = run_bounded(&mut c, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let facts = stdout_json(&out);
    assert_eq!(
        facts["driver_version"],
        profile_json("a100")["driver_version"]
    );
    assert!(!facts["gpus"].as_array().unwrap().is_empty(), "{facts:#}");

    let mut c = host.command("a100", &cfg);
    c.args(["doctor", "--json"])
        .env("GPU_GUARD_LIBRARY_ROOT", root.path());
    let (out, _) = run_bounded(&mut c, Duration::from_secs(30));
    let v = stdout_json(&out);
    let nvml = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "host.nvml")
        .unwrap();
    assert_eq!(nvml["status"], "ok", "{v:#}");
    assert!(
        nvml["message"]
            .as_str()
            .unwrap()
            .contains("run/nvidia/driver"),
        "{nvml}"
    );

    // The host's own library wins when there is one (here it is the
    // system's libnvidia-ml.so.1, which this machine does not have: the
    // loader's search, not the driver root, is what failed).
    put_library(root.path(), "usr/lib64");
    let mut c = host.command("a100", &cfg);
    c.args(["host", "--json"])
        .env("GPU_GUARD_LIBRARY_ROOT", root.path());
    let (out, _) = run_bounded(&mut c, Duration::from_secs(30));
    let err = stderr(&out);
    if std::path::Path::new("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists() {
        return;
    }
    assert!(err.contains("cannot load libnvidia-ml.so.1"), "{err}");
    assert!(!err.contains("run/nvidia/driver"), "{err}");
}
