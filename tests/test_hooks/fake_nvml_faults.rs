//! Each fault the fake NVML injects (and each missing piece of a driver
//! install) gives the documented diagnosis, through the real binary.
//! The decisions these lead to are in probe_e2e_check.rs.

use crate::probe_common::*;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn init_failure_is_a_probe_failure() {
    let lib = fake_lib();
    let host = FakeHost::new("a100", true);
    let cfg = host.config(&lib, None, "");
    let (out, _) = run_bounded(
        host.command("a100", &cfg)
            .env("FAKE_NVML_FAIL", "init")
            .args(["host", "--json"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("NVML probe failed"), "{err}");
    assert!(err.contains("internal driver error"), "{err}");
    assert!(err.contains("nvidia-smi"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn no_permission_says_so() {
    let lib = fake_lib();
    let host = FakeHost::new("a100", true);
    let cfg = host.config(&lib, None, "");
    // NVML_ERROR_NO_PERMISSION = 4 (nvml.h).
    let (out, _) = run_bounded(
        host.command("a100", &cfg)
            .env("FAKE_NVML_FAIL", "init:4")
            .args(["host", "--json"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("no permission"), "{err}");
    assert!(err.contains("/dev/nvidiactl"), "{err}");
}

#[test]
fn driver_library_mismatch_shows_both_versions() {
    let lib = fake_lib();
    let host = FakeHost::new("a100-mig", true);
    // The loaded kernel module is older than the installed library, as after
    // a driver upgrade without a reboot. The library is reached through the
    // link chain the driver installs: libnvidia-ml.so.1 -> libnvidia-ml.so.<version>.
    host.set_driver("550.54.14");
    let versioned = host.dir.join("libnvidia-ml.so.550.90.07");
    std::os::unix::fs::symlink(&lib, &versioned).unwrap();
    let so1 = host.dir.join("libnvidia-ml.so.1");
    std::os::unix::fs::symlink("libnvidia-ml.so.550.90.07", &so1).unwrap();
    let cfg = host.config(&so1, None, "");
    let (out, _) = run_bounded(
        host.command("a100-mig", &cfg)
            .env("FAKE_NVML_FAIL", "lib_rm_version_mismatch")
            .args(["host", "--json"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("driver/library version mismatch"), "{err}");
    assert!(
        err.contains("kernel module 550.54.14, libnvidia-ml 550.90.07: reboot, or reinstall the driver matching the loaded module"),
        "{err}"
    );
}

#[test]
fn lost_gpu_is_named_from_proc_with_xid_hint() {
    let lib = fake_lib();
    let host = FakeHost::new("h100x8", true);
    let cfg = host.config(&lib, None, "");
    let (out, _) = run_bounded(
        host.command("h100x8", &cfg)
            .env("FAKE_NVML_FAIL", "gpu_lost:1")
            .args(["host", "--json"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("GPU 1 (NVIDIA H100 80GB HBM3, bus 00000000:2A:00.0, GPU-00000001-1c6e-4d64-9e0a-3c1f2a7b9ea1) is lost"),
        "{err}"
    );
    assert!(err.contains("dmesg | grep -i xid"), "{err}");
    // The lost GPU stays in the facts (so "all" still includes it), filled
    // in from /proc; the healthy ones come from NVML.
    let facts = stdout_json(&out);
    let want = probed_json("h100x8");
    assert_eq!(facts["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(facts["gpus"][1]["uuid"], want["gpus"][1]["uuid"]);
    assert_eq!(
        facts["gpus"][1]["compute_capability"],
        serde_json::Value::Null
    );
    for i in [0, 2, 7] {
        assert_eq!(facts["gpus"][i], want["gpus"][i], "gpu {i}");
    }
    // Its health says so, as the health check reads it.
    assert_eq!(facts["gpus"][1]["health"]["state"], "failed");
    assert_eq!(
        facts["gpus"][1]["health"]["reasons"][0],
        "GPU lost or inaccessible"
    );
}

#[test]
fn lost_gpu_without_proc_is_named_by_index() {
    let lib = fake_lib();
    let host = FakeHost::new("t4-a10", false);
    let cfg = host.config(&lib, None, "");
    let (out, _) = run_bounded(
        host.command("t4-a10", &cfg)
            .env("FAKE_NVML_FAIL", "gpu_lost:0")
            .arg("host"),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    // Errors go to stderr, the table to stdout.
    let err = stderr(&out);
    assert!(err.contains("gpu-guard: error: GPU 0 is lost"), "{err}");
    assert!(!text.contains("GPU 0 is lost"), "{text}");
    assert!(text.contains("NVIDIA A10"), "{text}");
}

#[test]
fn hung_init_is_cut_at_the_deadline() {
    let lib = fake_lib();
    let host = FakeHost::new("a100", true);
    let cfg = host.config(&lib, None, "probe_timeout_ms = 300");
    let (out, took) = run_bounded(
        host.command("a100", &cfg)
            .env("FAKE_NVML_INIT_DELAY_MS", "60000")
            .args(["host", "--json"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let err = stderr(&out);
    assert!(err.contains("NVML did not answer within 300 ms"), "{err}");
    assert!(err.contains("kernel module 535.104.05 is loaded"), "{err}");
}

#[test]
fn slow_init_within_the_deadline_is_fine() {
    let lib = fake_lib();
    let host = FakeHost::new("a100", true);
    let cfg = host.config(&lib, None, "probe_timeout_ms = 5000");
    let (out, took) = run_bounded(
        host.command("a100", &cfg)
            .env("FAKE_NVML_INIT_DELAY_MS", "200")
            .args(["host", "--json"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert_eq!(stdout_json(&out), probed_json("a100"));
}

#[test]
fn nvml_missing_falls_back_to_proc() {
    let host = FakeHost::new("t4-a10", true);
    let cfg = host.config(Path::new("/nonexistent/libnvidia-ml.so.1"), None, "");
    let (out, _) = run_bounded(host.command("t4-a10", &cfg).args(["host", "--json"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("warning: NVML not available"), "{err}");
    assert!(err.contains("/nonexistent/libnvidia-ml.so.1"), "{err}");
    assert!(
        err.contains("compute capability unknown, arch requirements cannot be judged"),
        "{err}"
    );
    let facts = stdout_json(&out);
    let want = profile_json("t4-a10");
    assert_eq!(facts["driver_version"], want["driver_version"]);
    // Inferred from the 535 branch, as nvmlSystemGetCudaDriverVersion would say.
    assert_eq!(facts["cuda_driver_version"], want["cuda_driver_version"]);
    for i in 0..2 {
        let (g, w) = (&facts["gpus"][i], &want["gpus"][i]);
        assert_eq!(g["index"], w["index"]);
        assert_eq!(g["uuid"], w["uuid"]);
        assert_eq!(g["name"], w["name"]);
        assert_eq!(g["pci_bus_id"], w["pci_bus_id"]);
        assert_eq!(g["compute_capability"], serde_json::Value::Null);
        assert_eq!(g["minor_number"], i as u64);
    }
}

#[test]
fn a_library_that_is_not_nvml_falls_back_to_proc() {
    let host = FakeHost::new("a100", true);
    // Any real shared object without NVML's symbols: the C library.
    let libc = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/aarch64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.exists())
    .expect("a libc.so.6");
    let cfg = host.config(libc, None, "");
    let (out, _) = run_bounded(host.command("a100", &cfg).args(["host", "--json"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("is not a usable NVML library"), "{err}");
    assert_eq!(stdout_json(&out)["driver_version"], "535.104.05");
}

#[test]
fn no_driver_lists_what_was_looked_at() {
    let host = FakeHost::new("no-driver", false);
    let cfg = host.config(Path::new("/nonexistent/libnvidia-ml.so.1"), None, "");
    let (out, _) = run_bounded(
        host.command("no-driver", &cfg).args(["host", "--json"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout_json(&out), profile_json("no-driver"));
    let err = stderr(&out);
    assert!(err.contains("no NVIDIA driver on this host"), "{err}");
    assert!(err.contains("/nonexistent/libnvidia-ml.so.1"), "{err}");
    assert!(err.contains("version is missing"), "{err}");
    assert!(err.contains("nvidiactl is missing"), "{err}");
    // From the host's /proc/modules and /proc/devices (stand-ins here).
    assert!(err.contains("kernel module nvidia is not loaded"), "{err}");
    assert!(
        err.contains("no NVIDIA character devices registered"),
        "{err}"
    );
}

#[test]
fn kernel_module_not_loaded_is_no_driver() {
    let lib = fake_lib();
    let host = FakeHost::new("a100", false);
    host.set_module_loaded(false);
    let cfg = host.config(&lib, None, "");
    let (out, _) = run_bounded(
        host.command("a100", &cfg)
            .env("FAKE_NVML_FAIL", "driver_not_loaded")
            .args(["host", "--json"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout_json(&out), profile_json("no-driver"));
    let err = stderr(&out);
    assert!(err.contains("no NVIDIA driver on this host"), "{err}");
    assert!(err.contains("driver is not loaded"), "{err}");
    assert!(err.contains("kernel module nvidia is not loaded"), "{err}");
}

#[test]
fn missing_device_nodes_are_named() {
    let lib = fake_lib();
    let host = FakeHost::new("l4x2-minor", true);
    std::fs::remove_file(host.dev().join("nvidia2")).unwrap();
    std::fs::remove_file(host.dev().join("nvidia-uvm")).unwrap();
    let cfg = host.config(&lib, None, "");
    let (out, _) = run_bounded(
        host.command("l4x2-minor", &cfg).args(["host", "--json"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    let dev = host.dev();
    for n in ["nvidia2", "nvidia-uvm"] {
        assert!(
            err.contains(&format!("warning: {}/{n} is missing", dev.display())),
            "{err}"
        );
    }
    assert!(!err.contains("nvidia0"), "{err}");
    assert!(err.contains("nvidia-modprobe"), "{err}");
}

#[test]
fn mismatch_through_the_system_library_name_finds_its_version() {
    // host.nvml_library empty: the loader finds libnvidia-ml.so.1 itself
    // (here on LD_LIBRARY_PATH), and the diagnosis asks dladdr which file
    // that was, then reads the version from the driver's link chain.
    let lib = fake_lib();
    let host = FakeHost::new("t4-a10", true);
    host.set_driver("535.104.05");
    let libdir = host.dir.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    std::os::unix::fs::symlink(&lib, libdir.join("libnvidia-ml.so.535.129.03")).unwrap();
    std::os::unix::fs::symlink(
        "libnvidia-ml.so.535.129.03",
        libdir.join("libnvidia-ml.so.1"),
    )
    .unwrap();
    let cfg = host.dir.join("system-lib.toml");
    std::fs::write(&cfg, "[host]\nnvml_library = \"\"\ncache_file = \"\"\n").unwrap();
    let (out, _) = run_bounded(
        host.command("t4-a10", &cfg)
            .env("LD_LIBRARY_PATH", &libdir)
            .env("FAKE_NVML_FAIL", "lib_rm_version_mismatch")
            .args(["host", "--json"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("kernel module 535.104.05, libnvidia-ml 535.129.03"),
        "{err}"
    );
    assert!(err.contains("(libnvidia-ml.so.1)"), "{err}");
}
