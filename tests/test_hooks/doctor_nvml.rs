//! `gpu-guard doctor` on a host answered by the fake NVML: NVML within the
//! probe deadline is ok, a hung NVML is an error cut at the deadline, a
//! lost GPU and missing device nodes are reported with their fixes.

use crate::probe_common::*;
use crate::support::TempDir;
use std::time::Duration;

fn doctor(
    host: &FakeHost,
    cfg: &std::path::Path,
    env: &[(&str, &str)],
) -> (i32, serde_json::Value, Duration) {
    let state = TempDir::new("doctor-nvml-state");
    let mut cmd = host.command("a100", cfg);
    cmd.args(["doctor", "--json", "--state-dir"])
        .arg(state.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (out, took) = run_bounded(&mut cmd, Duration::from_secs(30));
    (out.status.code().unwrap_or(-1), stdout_json(&out), took)
}

fn check<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name}: {v:#}"))
}

#[test]
fn nvml_within_the_deadline_and_past_it() {
    let lib = fake_lib();
    let host = FakeHost::new("a100", true);
    let cfg = host.config(&lib, None, "probe_timeout_ms = 2000");
    let (_, v, _) = doctor(&host, &cfg, &[]);
    let nvml = check(&v, "host.nvml");
    assert_eq!(nvml["status"], "ok", "{v:#}");
    let m = nvml["message"].as_str().unwrap();
    assert!(
        m.contains("NVML (") && m.contains("2000 ms deadline"),
        "{m}"
    );
    assert_eq!(check(&v, "host.driver")["status"], "ok");
    assert_eq!(check(&v, "host.gpus")["status"], "ok");
    // A driver that hangs: cut at the deadline, an error with its fix.
    let (code, v, took) = doctor(&host, &cfg, &[("FAKE_NVML_INIT_DELAY_MS", "60000")]);
    assert_eq!(code, 1, "{v:#}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let nvml = check(&v, "host.nvml");
    assert_eq!(nvml["status"], "error", "{v:#}");
    assert!(
        nvml["message"]
            .as_str()
            .unwrap()
            .contains("NVML did not answer within 2000 ms"),
        "{nvml}"
    );
    assert!(
        nvml["fix"].as_str().unwrap().contains("nvidia-smi"),
        "{nvml}"
    );
}

#[test]
fn a_lost_gpu_and_missing_device_nodes() {
    let lib = fake_lib();
    let host = FakeHost::new("a100", true);
    let cfg = host.config(&lib, None, "");
    let (code, v, _) = doctor(&host, &cfg, &[("FAKE_NVML_FAIL", "gpu_lost:0")]);
    assert_eq!(code, 1, "{v:#}");
    let gpus = check(&v, "host.gpus");
    assert_eq!(gpus["status"], "error", "{v:#}");
    assert!(
        gpus["message"].as_str().unwrap().contains("GPU 0"),
        "{gpus}"
    );
    assert!(gpus["fix"].as_str().unwrap().contains("Xid"), "{gpus}");
    let _ = std::fs::remove_file(host.dev().join("nvidia-uvm"));
    let (_, v, _) = doctor(&host, &cfg, &[]);
    let nodes = check(&v, "host.device-nodes");
    assert_eq!(nodes["status"], "warning", "{v:#}");
    assert!(
        nodes["message"].as_str().unwrap().contains("nvidia-uvm"),
        "{nodes}"
    );
    // The probe's own device-node problem is not repeated under host.nvml.
    assert_eq!(check(&v, "host.nvml")["status"], "ok", "{v:#}");
}
