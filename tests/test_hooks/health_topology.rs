//! GPU health and topology at start through the real binary (docs/health.md;
//! docs/interfaces.md, "GPU health and topology at start"): the fake NVML
//! answers the health and P2P calls under real nvml-wrapper from each
//! GPU's `nvml_health` and `p2p`; sysfs and /dev are fake trees
//! (GPU_GUARD_SYS_DIR, GPU_GUARD_DEV_DIR, or `host --host-root`).

use crate::probe_common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

/// h100x8 with minor numbers, and NVML's health answers: GPU 1 a failed
/// row remap, 2 a remap pending, 3 a page retirement pending, 4 three
/// uncorrectable ECC errors, 5 lost; 0, 6 and 7 healthy.
fn sick_h100() -> Value {
    let mut v = profile_json("h100x8");
    let health = [
        json!(null),
        json!({"remap_failure": true}),
        json!({"remap_pending": true}),
        json!({"retired_pages_pending": true}),
        json!({"ecc_volatile_uncorrected": 3}),
        json!({"lost": true}),
    ];
    for (i, g) in v["gpus"].as_array_mut().unwrap().iter_mut().enumerate() {
        g["minor_number"] = json!(i);
        if let Some(h) = health.get(i).filter(|h| !h.is_null()) {
            g["nvml_health"] = h.clone();
        }
    }
    v
}

fn check(host: &FakeHost, cfg: &Path, args: &[&str]) -> (i32, Value) {
    let mut c = host.command_own(cfg);
    c.arg("check").args(args).arg("--json");
    let (out, _) = run_bounded(&mut c, LIMIT);
    (out.status.code().unwrap_or(-1), stdout_json(&out))
}

fn findings<'a>(d: &'a Value, check: &str) -> Vec<&'a Value> {
    d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect()
}

fn env_check(host: &FakeHost, cfg: &Path, visible: &str) -> (i32, Value) {
    let env = format!("NVIDIA_VISIBLE_DEVICES={visible}");
    check(host, cfg, &["--env", &env])
}

#[test]
fn host_json_carries_each_gpus_health() {
    let lib = fake_lib();
    let host = FakeHost::from_facts(&sick_h100(), true);
    let cfg = host.config(&lib, None, "");
    let (out, _) = run_bounded(host.command_own(&cfg).args(["host", "--json"]), LIMIT);
    // A lost GPU: the host cannot run every GPU container as it is.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let f = stdout_json(&out);
    let state = |i: usize| {
        f["gpus"][i]["health"]["state"]
            .as_str()
            .unwrap_or("?")
            .to_string()
    };
    let reasons = |i: usize| f["gpus"][i]["health"]["reasons"].clone();
    assert_eq!(state(0), "ok");
    assert_eq!(reasons(0), json!([]));
    assert_eq!(state(1), "failed");
    assert_eq!(reasons(1), json!(["row remapping failed"]));
    assert_eq!(state(2), "degraded");
    assert_eq!(reasons(2), json!(["row remapping pending"]));
    assert_eq!(reasons(3), json!(["page retirement pending"]));
    assert_eq!(
        reasons(4),
        json!(["uncorrectable ECC errors since the last reset: 3"])
    );
    assert_eq!(state(5), "failed");
    assert_eq!(reasons(5), json!(["GPU lost or inaccessible"]));
    // Named from /proc although NVML lost it.
    assert_eq!(f["gpus"][5]["uuid"], sick_h100()["gpus"][5]["uuid"]);
    assert!(f["gpus"][0].get("nvml_health").is_none(), "{f}");
    // For people: the state column and why.
    let (out, _) = run_bounded(host.command_own(&cfg).arg("host"), LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("HEALTH"), "{text}");
    assert!(text.contains("failed: row remapping failed"), "{text}");
    // Node labels count them.
    let (out, _) = run_bounded(
        host.command_own(&cfg).args(["host", "--node-labels"]),
        LIMIT,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("gpu-guard.io/gpu.healthy=6\n"), "{text}");
    assert!(text.contains("gpu-guard.io/gpu.failed=2\n"), "{text}");
}

#[test]
fn only_containers_given_a_failed_gpu_are_refused() {
    let lib = fake_lib();
    let host = FakeHost::from_facts(&sick_h100(), true);
    let cfg = host.config(&lib, None, "");
    // A healthy GPU of a node with failed ones: it starts (a note only).
    let (code, d) = env_check(&host, &cfg, "0");
    assert_eq!(code, 0, "{d:#}");
    assert_eq!(d["verdict"], "allow", "{d:#}");
    let h = findings(&d, "health");
    assert!(h.iter().all(|f| f["severity"] == "info"), "{d:#}");
    // The failed one: refused, naming index, UUID and bus id, what NVML
    // reported, and the fix.
    let (code, d) = env_check(&host, &cfg, "1");
    assert_eq!(code, 1, "{d:#}");
    let e: Vec<&Value> = findings(&d, "health")
        .into_iter()
        .filter(|f| f["severity"] == "error")
        .collect();
    assert_eq!(e.len(), 1, "{d:#}");
    let m = e[0]["message"].as_str().unwrap();
    for w in [
        "GPU 1 (NVIDIA H100 80GB HBM3",
        "GPU-00000001-1c6e-4d64-9e0a-3c1f2a7b9ea1",
        "bus 00000000:2A:00.0",
        "has failed",
        "row remapping failed",
    ] {
        assert!(m.contains(w), "missing {w:?}: {m}");
    }
    let fix = e[0]["fix"].as_str().unwrap();
    assert!(
        fix.contains("drain") && fix.contains("replace the board"),
        "{fix}"
    );
    // Lost: refused as failed, with the reset in the fix.
    let lost = sick_h100()["gpus"][5]["uuid"].as_str().unwrap().to_string();
    let (code, d) = env_check(&host, &cfg, &lost);
    assert_eq!(code, 1, "{d:#}");
    let f = findings(&d, "health");
    assert!(
        f.iter().any(|f| f["severity"] == "error"
            && f["message"]
                .as_str()
                .unwrap()
                .contains("GPU lost or inaccessible")
            && f["fix"].as_str().unwrap().contains("nvidia-smi -r -i 5")),
        "{d:#}"
    );
    assert!(
        findings(&d, "host")
            .iter()
            .all(|f| f["severity"] != "error"),
        "{d:#}"
    );
    // Degraded ones warn by default; each reason names its fix.
    for (gpu, fix) in [
        ("2", "nvidia-smi -r -i 2"),
        ("3", "nvidia-smi -r -i 3"),
        ("4", "clear the volatile counters"),
    ] {
        let (code, d) = env_check(&host, &cfg, gpu);
        assert_eq!(code, 0, "{d:#}");
        let f = findings(&d, "health");
        assert_eq!(f[0]["severity"], "warning", "{d:#}");
        assert!(f[0]["fix"].as_str().unwrap().contains(fix), "{gpu}: {d:#}");
    }
    // "all" includes the failed ones.
    let (code, _) = env_check(&host, &cfg, "all");
    assert_eq!(code, 1);
}

#[test]
fn the_health_keys_decide_what_a_sick_gpu_does() {
    let lib = fake_lib();
    let host = FakeHost::from_facts(&sick_h100(), true);
    let with = |table: &str| host.config(&lib, None, &format!("[health]\n{table}"));
    let cfg = with("degraded = \"enforce\"");
    let (code, d) = env_check(&host, &cfg, "2");
    assert_eq!(code, 1, "{d:#}");
    assert_eq!(findings(&d, "health")[0]["severity"], "error");
    let cfg = with("failed = \"warn\"");
    let (code, d) = env_check(&host, &cfg, "1");
    assert_eq!(code, 0, "{d:#}");
    let f = findings(&d, "health");
    assert_eq!(f[0]["severity"], "warning");
    assert!(f[0]["message"]
        .as_str()
        .unwrap()
        .contains("health.failed = \"warn\""));
    let cfg = with("failed = \"off\"\ndegraded = \"off\"");
    let (code, d) = env_check(&host, &cfg, "1,2");
    assert_eq!(code, 0, "{d:#}");
    assert!(findings(&d, "health").is_empty(), "{d:#}");
    // A word of another key is an error naming the key (exit 2, and the
    // decision the hooks would make: refused).
    let cfg = with("failed = \"refuse\"");
    let (code, d) = env_check(&host, &cfg, "0");
    assert_eq!(code, 2, "{d:#}");
    assert_eq!(d["verdict"], "refuse", "{d:#}");
    let m = d.to_string();
    assert!(
        m.contains("health.failed") && m.contains("unknown variant `refuse`"),
        "{d:#}"
    );
}

#[test]
fn cached_health_lives_max_age_s_while_health_is_checked() {
    let lib = fake_lib();
    // No GPU lost: a lost GPU is never cached.
    let mut facts = sick_h100();
    for i in [1, 5] {
        facts["gpus"][i]
            .as_object_mut()
            .unwrap()
            .remove("nvml_health");
    }
    let host = FakeHost::from_facts(&facts, true);
    let cache = host.dir.join("cache/host-facts.json");
    let cfg = host.config(
        &lib,
        Some(&cache),
        "cache_ttl_s = 300\n[health]\nmax_age_s = 2",
    );
    let (code, d) = env_check(&host, &cfg, "1");
    assert_eq!(code, 0, "{d:#}");
    assert!(
        d["host_source"].as_str().unwrap().starts_with("NVML"),
        "{d:#}"
    );
    // Row remapping of GPU 1 fails now.
    facts["gpus"][1]["nvml_health"] = json!({"remap_failure": true});
    std::fs::write(host.facts_file(), facts.to_string()).unwrap();
    let (code, d) = env_check(&host, &cfg, "1");
    assert!(
        d["host_source"].as_str().unwrap().starts_with("cache"),
        "{d:#}"
    );
    assert_eq!(code, 0, "within max_age_s the cached health serves: {d:#}");
    std::thread::sleep(Duration::from_millis(2200));
    let (code, d) = env_check(&host, &cfg, "1");
    assert!(
        d["host_source"].as_str().unwrap().starts_with("NVML"),
        "{d:#}"
    );
    assert_eq!(code, 1, "seen at the next start past max_age_s: {d:#}");
    // With health off the cache lives host.cache_ttl_s.
    let off = host.config(
        &lib,
        Some(&host.dir.join("cache2/host-facts.json")),
        "cache_ttl_s = 300\n[health]\nmax_age_s = 1\nfailed = \"off\"\ndegraded = \"off\"",
    );
    env_check(&host, &off, "0");
    std::thread::sleep(Duration::from_millis(1200));
    let (_, d) = env_check(&host, &off, "0");
    assert!(
        d["host_source"].as_str().unwrap().starts_with("cache"),
        "{d:#}"
    );
}

/// A spec for `check --spec`: NVIDIA's hook attaches GPU 0 to a process
/// running as `user`.
fn spec_for(host: &FakeHost, user: Value, extra_linux: Value) -> std::path::PathBuf {
    let mut linux = json!({"namespaces": [{"type": "pid"}]});
    for (k, v) in extra_linux.as_object().unwrap() {
        linux[k] = v.clone();
    }
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": {"user": user, "args": ["true"], "cwd": "/",
                    "env": ["NVIDIA_VISIBLE_DEVICES=0"]},
        "root": {"path": "rootfs"},
        "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook",
                                "args": ["nvidia-container-runtime-hook", "prestart"]}]},
        "linux": linux
    });
    let p = host.dir.join(format!(
        "spec-{}.json",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::write(&p, spec.to_string()).unwrap();
    p
}

#[test]
fn device_nodes_the_container_cannot_use_are_host_findings() {
    if !crate::support::have_root("the fake host's device nodes are made with mknod") {
        return;
    }
    let lib = fake_lib();
    let host = FakeHost::from_facts(&sick_h100(), true);
    let cfg = host.config(&lib, None, "");
    let spec = |user: Value| spec_for(&host, user, json!({}));
    let as_user = |user: Value| {
        let s = spec(user);
        check(&host, &cfg, &["--spec", s.to_str().unwrap()])
    };
    // All 0666: nothing to say.
    let (code, d) = as_user(json!({"uid": 1000, "gid": 1000}));
    assert_eq!(code, 0, "{d:#}");
    assert!(findings(&d, "host").is_empty(), "{d:#}");
    // Only group 44 may open /dev/nvidia0: uid 1000 cannot, a member can.
    host.device_node("nvidia0", 195, 0, 0o660);
    std::os::unix::fs::chown(host.dev().join("nvidia0"), Some(0), Some(44)).unwrap();
    let (code, d) = as_user(json!({"uid": 1000, "gid": 1000}));
    assert_eq!(code, 1, "{d:#}");
    let f = findings(&d, "host");
    let m = f[0]["message"].as_str().unwrap();
    assert!(
        m.contains("nvidia0 is crw-rw----") && m.contains("uid 1000 gid 1000"),
        "{m}"
    );
    assert!(m.contains("no CUDA-capable device is detected"), "{m}");
    assert!(
        f[0]["fix"].as_str().unwrap().contains("--group-add 44"),
        "{d:#}"
    );
    let (code, d) = as_user(json!({"uid": 1000, "gid": 1000, "additionalGids": [44]}));
    assert_eq!(code, 0, "{d:#}");
    // In a user namespace the host's ids are not the container's: not judged.
    let s = spec_for(
        &host,
        json!({"uid": 1000, "gid": 1000}),
        json!({"uidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}]}),
    );
    let (code, d) = check(&host, &cfg, &["--spec", s.to_str().unwrap()]);
    assert_eq!(code, 0, "{d:#}");
    // A directory where the node should be, a wrong major, a missing node.
    std::fs::remove_file(host.dev().join("nvidia0")).unwrap();
    std::fs::create_dir(host.dev().join("nvidia0")).unwrap();
    let (code, d) = as_user(json!({"uid": 0, "gid": 0}));
    assert_eq!(code, 1, "{d:#}");
    assert!(
        d.to_string()
            .contains("nvidia0 is a directory, not a character device"),
        "{d:#}"
    );
    std::fs::remove_dir(host.dev().join("nvidia0")).unwrap();
    host.device_node("nvidia0", 10, 0, 0o666);
    let (code, d) = as_user(json!({"uid": 0, "gid": 0}));
    assert_eq!(code, 1, "{d:#}");
    assert!(
        d.to_string().contains("not the NVIDIA driver's major 195"),
        "{d:#}"
    );
    host.device_node("nvidia0", 195, 0, 0o666);
    std::fs::remove_file(host.dev().join("nvidia-uvm")).unwrap();
    let (code, d) = as_user(json!({"uid": 0, "gid": 0}));
    assert_eq!(code, 0, "a missing node is a warning: {d:#}");
    let f = findings(&d, "host");
    assert_eq!(f[0]["severity"], "warning", "{d:#}");
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .contains("nvidia-uvm is missing"),
        "{d:#}"
    );
    // Only the nodes of the GPUs it gets: GPU 1's node broken, GPU 0 asked.
    host.device_node("nvidia-uvm", 508, 0, 0o666);
    std::fs::remove_file(host.dev().join("nvidia1")).unwrap();
    std::fs::create_dir(host.dev().join("nvidia1")).unwrap();
    let (code, d) = as_user(json!({"uid": 0, "gid": 0}));
    assert_eq!(code, 0, "{d:#}");
    // `host` names it, as an error.
    let (out, _) = run_bounded(host.command_own(&cfg).arg("host"), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nvidia1 is a directory"),
        "{}",
        stderr(&out)
    );
}

/// A host root for `host --host-root`: /dev with the driver's nodes,
/// /proc/devices, and /sys with each GPU's NUMA node.
fn host_root(host: &FakeHost) -> std::path::PathBuf {
    let root = host.dir.join("root");
    std::fs::create_dir_all(root.join("proc")).unwrap();
    std::fs::copy(host.devices(), root.join("proc/devices")).unwrap();
    std::os::unix::fs::symlink(host.dev(), root.join("dev")).unwrap();
    std::os::unix::fs::symlink(host.sys(), root.join("sys")).unwrap();
    root
}

#[test]
fn numa_nodes_from_sysfs_under_the_host_root() {
    let lib = fake_lib();
    let host = FakeHost::new("t4-a10", true);
    host.set_numa("00000000:3B:00.0", 0, "0-15,32-47");
    host.set_numa("00000000:AF:00.0", -1, "0-63");
    let root = host_root(&host);
    let cfg = host.config(&lib, None, "");
    let mut c = Command::new(gpu_guard());
    c.arg("--config")
        .arg(&cfg)
        .args(["host", "--json", "--host-root"])
        .arg(&root)
        .env("FAKE_NVML_FACTS", profile("t4-a10"))
        .env_remove("GPU_GUARD_SYS_DIR")
        .env_remove("GPU_GUARD_DEV_DIR");
    let (out, _) = run_bounded(&mut c, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let f = stdout_json(&out);
    assert_eq!(f["gpus"][0]["numa_node"], 0, "{f}");
    assert_eq!(f["gpus"][0]["local_cpus"], "0-15,32-47", "{f}");
    // -1 (no node known) is null; the key is there.
    assert_eq!(f["gpus"][1]["numa_node"], Value::Null, "{f}");
    assert!(f["gpus"][1].as_object().unwrap().contains_key("numa_node"));
    // Without the host root the test machine's sysfs has no such device:
    // unknown, and no key at all.
    let (out, _) = run_bounded(
        host.command("t4-a10", &cfg)
            .env("GPU_GUARD_SYS_DIR", host.dir.join("empty"))
            .args(["host", "--json"]),
        LIMIT,
    );
    let f = stdout_json(&out);
    assert!(
        !f["gpus"][0].as_object().unwrap().contains_key("numa_node"),
        "{f}"
    );
    // For people.
    let (out, _) = run_bounded(host.command("t4-a10", &cfg).arg("host"), LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("0 (CPUs 0-15,32-47)"), "{text}");
}

#[test]
fn numa_warnings_and_pin() {
    let lib = fake_lib();
    let host = FakeHost::new("h100x8", true);
    for (i, bus) in ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
        .iter()
        .enumerate()
    {
        let (node, cpus) = if i < 4 {
            (0, "0-15,32-47")
        } else {
            (1, "16-31,48-63")
        };
        host.set_numa(&format!("00000000:{bus}:00.0"), node, cpus);
    }
    host.set_cpus("0-63", "0-1");
    let cfg = host.config(&lib, None, "");
    // Across nodes: a warning naming the GPUs and nodes.
    let (code, d) = env_check(&host, &cfg, "0,1,4");
    assert_eq!(code, 0, "{d:#}");
    let t = findings(&d, "tuning");
    let m = t[0]["message"].as_str().unwrap();
    assert!(
        m.contains("GPU 0, 1 on NUMA node 0, GPU 4 on NUMA node 1"),
        "{m}"
    );
    assert_eq!(t[0]["severity"], "warning");
    // A cpuset of its own on the other node: a warning, never changed.
    let s = spec_for(
        &host,
        json!({"uid": 0, "gid": 0}),
        json!({"resources": {"cpu": {"cpus": "16-31", "mems": "1"}}}),
    );
    let pin = host.config(&lib, None, "[tuning]\nnuma = \"pin\"");
    let (_, d) = check(&host, &pin, &["--spec", s.to_str().unwrap()]);
    let m = findings(&d, "tuning")[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        m.contains("cpus 16-31 has no CPU of node 0") && m.contains("mems 1 leaves out node 0"),
        "{m}"
    );
    assert!(d["edits"].get("cpuset").is_none(), "{d:#}");
    // No cpuset: "pin" gives it its GPUs' node.
    let s = spec_for(&host, json!({"uid": 0, "gid": 0}), json!({}));
    let (code, d) = check(&host, &pin, &["--spec", s.to_str().unwrap()]);
    assert_eq!(code, 0, "{d:#}");
    assert_eq!(
        d["edits"]["cpuset"],
        json!({"cpus": "0-15,32-47", "mems": "0"}),
        "{d:#}"
    );
    // "warn" (the default) changes nothing; "off" says nothing.
    let (_, d) = check(&host, &cfg, &["--spec", s.to_str().unwrap()]);
    assert!(d["edits"].get("cpuset").is_none(), "{d:#}");
    let off = host.config(&lib, None, "[tuning]\nnuma = \"off\"");
    let (_, d) = env_check(&host, &off, "0,4");
    assert!(findings(&d, "tuning").is_empty(), "{d:#}");
}

#[test]
fn no_p2p_path_is_noted_and_disabled_only_when_asked() {
    let lib = fake_lib();
    let mut facts = profile_json("t4-a10");
    facts["gpus"][0]["p2p"] = json!({"1": "ioh_topology_not_supported"});
    let host = FakeHost::from_facts(&facts, true);
    let cfg = host.config(&lib, None, "");
    let (out, _) = run_bounded(host.command_own(&cfg).args(["host", "--json"]), LIMIT);
    let f = stdout_json(&out);
    // NVML answers for the pair both ways.
    assert_eq!(
        f["gpus"][0]["p2p"],
        json!({"1": "ioh_topology_not_supported"})
    );
    assert_eq!(
        f["gpus"][1]["p2p"],
        json!({"0": "ioh_topology_not_supported"})
    );
    let (code, d) = env_check(&host, &cfg, "all");
    assert_eq!(code, 0, "{d:#}");
    let note = findings(&d, "tuning")
        .into_iter()
        .find(|f| f["message"].as_str().unwrap().contains("P2P"))
        .unwrap_or_else(|| panic!("{d:#}"));
    assert_eq!(note["severity"], "info");
    assert!(note["message"]
        .as_str()
        .unwrap()
        .contains("GPU 0 and 1 (ioh_topology_not_supported)"));
    assert!(d["edits"]["env"].get("NCCL_P2P_DISABLE").is_none(), "{d:#}");
    let dis = host.config(&lib, None, "[tuning]\nnccl_p2p = \"disable\"");
    let (_, d) = env_check(&host, &dis, "all");
    assert_eq!(d["edits"]["env"]["NCCL_P2P_DISABLE"], "1", "{d:#}");
    // One GPU has no pair.
    let (_, d) = env_check(&host, &dis, "0");
    assert!(d["edits"]["env"].get("NCCL_P2P_DISABLE").is_none(), "{d:#}");
}

#[test]
fn facts_files_say_health_and_topology_as_the_probe_does() {
    let d = crate::support::TempDir::new("health-facts");
    let mut v = profile_json("t4-a10");
    v["gpus"][0]["nvml_health"] = json!({"remap_failure": true});
    v["gpus"][1]["health"] = json!({"state": "degraded", "reasons": ["row remapping pending"]});
    v["gpus"][1]["numa_node"] = json!(1);
    v["gpus"][1]["local_cpus"] = json!("16-31");
    let facts = d.join("facts.json");
    std::fs::write(&facts, v.to_string()).unwrap();
    let cfg = d.join("config.toml");
    std::fs::write(&cfg, "[log]\nsyslog = false\n[tuning]\nnuma = \"pin\"\n").unwrap();
    let run = |visible: &str| {
        let (out, _) = run_bounded(
            Command::new(gpu_guard())
                .arg("--config")
                .arg(&cfg)
                .args(["check", "--host"])
                .arg(&facts)
                .args([
                    "--env",
                    &format!("NVIDIA_VISIBLE_DEVICES={visible}"),
                    "--json",
                ]),
            LIMIT,
        );
        (out.status.code(), stdout_json(&out))
    };
    let (code, d0) = run("0");
    assert_eq!(code, Some(1), "{d0:#}");
    assert!(d0.to_string().contains("row remapping failed"), "{d0:#}");
    let (code, d1) = run("1");
    assert_eq!(code, Some(0), "{d1:#}");
    assert_eq!(findings(&d1, "health")[0]["severity"], "warning");
    assert_eq!(
        d1["edits"]["cpuset"],
        json!({"cpus": "16-31", "mems": "1"}),
        "{d1:#}"
    );
}

/// `host --host-root DIR` probes the host under DIR every time, as
/// `doctor --host-root` does: the facts cache (a file of this machine's
/// probe) is neither read nor written; without it, the same config writes it.
#[test]
fn host_under_a_host_root_keeps_no_facts_cache() {
    let lib = fake_lib();
    let host = FakeHost::new("t4-a10", true);
    host.set_numa("00000000:3B:00.0", 0, "0-15");
    let root = host_root(&host);
    let cache = host.dir.join("host-cache.json");
    let cfg = host.config(&lib, Some(&cache), "");
    let mut c = Command::new(gpu_guard());
    c.arg("--config")
        .arg(&cfg)
        .args(["host", "--json", "--host-root"])
        .arg(&root)
        .env("FAKE_NVML_FACTS", profile("t4-a10"))
        .env_remove("GPU_GUARD_SYS_DIR")
        .env_remove("GPU_GUARD_DEV_DIR");
    let (out, _) = run_bounded(&mut c, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["gpus"][0]["numa_node"], 0);
    assert!(!cache.exists(), "host --host-root wrote the facts cache");
    let (out, _) = run_bounded(host.command("t4-a10", &cfg).args(["host", "--json"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(cache.exists(), "the cache is written without --host-root");
}
