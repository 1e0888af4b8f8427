//! `tuning.numa = "pin"` under real runc: the runtime wrapper, probing the
//! fake NVML and a stand-in sysfs (GPU_GUARD_SYS_DIR) whose GPU's NUMA node
//! has one real CPU, writes the node's cpuset into config.json, and the
//! container runc starts runs on exactly that CPU (its
//! `Cpus_allowed_list`); a cpuset the spec already has is never changed.
//!
//! Needs root, runc and a static busybox (/bin/busybox).

use crate::probe_common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn prerequisites() -> Option<PathBuf> {
    require_test_hooks();
    if !crate::support::have_root("runc runs the test containers") {
        return None;
    }
    let runc = Command::new("sh")
        .args(["-c", "command -v runc"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let Some(runc) = runc else {
        skip_or_fail("runc is not installed (apt-get install runc)");
        return None;
    };
    if !Path::new("/bin/busybox").is_file() {
        skip_or_fail("/bin/busybox is missing (apt-get install busybox-static)");
        return None;
    }
    Some(runc)
}

/// The highest CPU this process may run on: one the container's cgroup
/// can be given (runc's cgroup is a child of one that allows it).
fn a_cpu_we_may_use() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    let last = list.rsplit([',', '-']).next().unwrap();
    last.parse().unwrap()
}

/// A busybox bundle printing its Cpus_allowed_list, asking for GPUs by
/// env; `cpus` is the spec's own cpuset, if any.
fn bundle(dir: &Path, cpus: Option<&str>) -> PathBuf {
    let b = dir.join(format!("bundle-{}", cpus.unwrap_or("none")));
    std::fs::create_dir_all(b.join("rootfs/bin")).unwrap();
    std::fs::copy("/bin/busybox", b.join("rootfs/bin/busybox")).unwrap();
    let out = Command::new("runc")
        .args(["spec", "--bundle"])
        .arg(&b)
        .output()
        .unwrap();
    assert!(out.status.success(), "runc spec: {}", stderr(&out));
    let mut spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.join("config.json")).unwrap()).unwrap();
    spec["process"]["terminal"] = json!(false);
    spec["process"]["args"] = json!([
        "/bin/busybox",
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status"
    ]);
    spec["process"]["env"] = json!(["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]);
    if let Some(c) = cpus {
        spec["linux"]["resources"]["cpu"] = json!({"cpus": c});
    }
    std::fs::write(b.join("config.json"), spec.to_string()).unwrap();
    b
}

#[test]
fn pin_gives_the_started_container_its_gpus_node() {
    let Some(runc) = prerequisites() else {
        return;
    };
    let lib = fake_lib();
    let host = FakeHost::new("a100", true);
    let cpu = a_cpu_we_may_use();
    // GPU 0's node: node 0 with this one CPU (a real subset of the machine).
    host.set_numa("00000000:07:00.0", 0, &cpu.to_string());
    host.set_cpus(&format!("0-{cpu}"), "0");
    let cfg = host.config(
        &lib,
        None,
        &format!(
            "[detect]\nenv_requests = \"always\"\n[tuning]\nnuma = \"pin\"\n[kernel_image]\nseverity = \"off\"\n[libraries]\nseverity = \"off\"\n[runtime]\npath = \"{}\"",
            runc.display()
        ),
    );
    let run = |b: &Path, id: &str| {
        let root = host.dir.join("runc-root");
        let mut c = host.command("a100", &cfg);
        c.args(["runtime", "--root"])
            .arg(&root)
            .args(["run", "--bundle"])
            .arg(b)
            .arg(id)
            .env("GPU_GUARD_MARKER_DIR", host.dir.join("markers"));
        let (out, _) = run_bounded(&mut c, Duration::from_secs(60));
        let _ = Command::new(&runc)
            .arg("--root")
            .arg(&root)
            .args(["delete", "--force", id])
            .output();
        out
    };
    let id = |tag: &str| format!("gg-numa-{tag}-{}", std::process::id());
    let b = bundle(host.dir.path(), None);
    let out = run(&b, &id("pin"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert_eq!(
        text.trim(),
        format!("Cpus_allowed_list:\t{cpu}"),
        "{}",
        stderr(&out)
    );
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        spec["linux"]["resources"]["cpu"],
        json!({"cpus": cpu.to_string(), "mems": "0"})
    );
    // The spec's own cpuset (CPU 0) stays, whatever the GPUs' node.
    let b = bundle(host.dir.path(), Some("0"));
    let out = run(&b, &id("own"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert_eq!(text.trim(), "Cpus_allowed_list:\t0", "{}", stderr(&out));
}
