//! The reconcile loop against containerd's own reading of its config
//! (`containerd config dump`, Debian 12's containerd 1.6, where an
//! imported file's CRI section replaces the main one whole): the agent
//! runs against a host root while the test writes NVIDIA's drop-in (as
//! the GPU Operator's toolkit does, after gpu-guard's, with a name that
//! sorts after it), rewrites it with one more runtime, and removes it. After
//! each change containerd's merged configuration must run gpu-guard, with
//! NVIDIA's current runtimes (and the chain to NVIDIA's default) or, once
//! NVIDIA's file is gone, without them. The seconds each took are printed
//! (integration/bench-agent.sh records them in BENCHMARKS.md).

use crate::support::{have_tool, TempDir};
use crate::{agent_bin, wait_for};
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};

const MAIN: &str = r#"# the node's containerd config, as kubeadm nodes have it
version = 2
imports = ["conf.d/*.toml"]
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
"#;

const NVIDIA_BIN: &str = "/usr/local/nvidia/toolkit/nvidia-container-runtime";

/// NVIDIA's drop-in as nvidia-ctk writes it for a containerd 1.x config
/// with imports: a copy of the CRI section with its runtimes added and
/// made the default.
fn nvidia_drop_in(extra: &[&str]) -> String {
    let cri = "plugins.\"io.containerd.grpc.v1.cri\".containerd";
    let mut s = format!(
        "version = 2\n[{cri}]\n  default_runtime_name = \"nvidia\"\n[{cri}.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n  [{cri}.runtimes.runc.options]\n    SystemdCgroup = true\n"
    );
    for name in std::iter::once("nvidia").chain(extra.iter().copied()) {
        let bin = match name {
            "nvidia" => NVIDIA_BIN.to_string(),
            other => format!("{NVIDIA_BIN}.{}", other.trim_start_matches("nvidia-")),
        };
        s.push_str(&format!(
            "[{cri}.runtimes.{name}]\n  runtime_type = \"io.containerd.runc.v2\"\n  [{cri}.runtimes.{name}.options]\n    BinaryName = \"{bin}\"\n    SystemdCgroup = true\n"
        ));
    }
    s
}

/// What containerd 1.6 reads: the CRI section's `containerd` table.
fn dump(root: &Path) -> Option<toml::Table> {
    // A relative import glob is taken from the working directory by
    // containerd before 1.6.29 and from the config's directory after: the
    // config's directory is both here.
    let dir = root.join("etc/containerd");
    let out = Command::new("containerd")
        .current_dir(&dir)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .args(["config", "dump"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let t: toml::Table = String::from_utf8_lossy(&out.stdout).parse().ok()?;
    t["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
        .as_table()
        .cloned()
}

fn runtimes(c: &toml::Table) -> Vec<String> {
    let mut v: Vec<String> = c["runtimes"]
        .as_table()
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn runs_gpu_guard(c: &toml::Table) -> bool {
    c["runtimes"]
        .get("gpu-guard")
        .and_then(|g| g["options"]["BinaryName"].as_str())
        == Some("/usr/bin/gpu-guard-runtime")
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn host(root: &Path) {
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    fs::write(root.join("usr/bin/gpu-guard"), b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink("gpu-guard", root.join("usr/bin/gpu-guard-runtime")).unwrap();
    fs::create_dir_all(root.join("etc/containerd/conf.d")).unwrap();
    fs::write(root.join("etc/containerd/config.toml"), MAIN).unwrap();
}

#[test]
fn nvidia_s_drop_in_comes_changes_and_goes_and_containerd_keeps_running_gpu_guard() {
    if !have_tool("containerd") {
        return;
    }
    let t = TempDir::new("agent-reconcile");
    let root = t.join("host");
    host(&root);
    let record = t.join("restarts");
    let rec_script = t.join("restart.sh");
    fs::write(
        &rec_script,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", record.display()),
    )
    .unwrap();
    let status = t.join("status");
    let child = agent_bin()
        .args(["--host-root"])
        .arg(&root)
        .args([
            "--bin-dir",
            "/usr/bin",
            "--labels-file",
            "",
            "--api-server",
            "",
        ])
        .args(["--restart-command", &format!("sh {}", rec_script.display())])
        .arg("--status-file")
        .arg(&status)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut agent = Agent(child);
    let conf_d = root.join("etc/containerd/conf.d");
    let chain = root.join("etc/gpu-guard/config.d/50-chain-containerd.toml");
    let ready = || {
        agent_bin()
            .arg("--status-file")
            .arg(&status)
            .arg("ready")
            .output()
            .is_ok_and(|o| o.status.success())
    };

    // The agent registers gpu-guard; containerd reads it.
    let s = wait_for(20.0, || dump(&root).is_some_and(|c| runs_gpu_guard(&c)));
    assert!(s.is_some(), "gpu-guard never registered");
    assert!(wait_for(10.0, ready).is_some(), "never ready");

    // 1. The GPU Operator's toolkit writes NVIDIA's drop-in, which sorts
    //    after gpu-guard's and would replace its CRI section whole.
    fs::write(conf_d.join("99-nvidia.toml"), nvidia_drop_in(&[])).unwrap();
    let added = wait_for(20.0, || {
        dump(&root).is_some_and(|c| {
            runs_gpu_guard(&c)
                && runtimes(&c).contains(&"nvidia".to_string())
                && c["default_runtime_name"].as_str() == Some("nvidia")
        }) && fs::read_to_string(&chain).is_ok_and(|t| t.contains(NVIDIA_BIN))
    });
    let added = added.expect("containerd never ran gpu-guard beside NVIDIA's runtime");
    assert!(conf_d.join("zz-gpu-guard.toml").exists());
    assert!(!conf_d.join("99-gpu-guard.toml").exists());

    // 2. An Operator upgrade adds a runtime to NVIDIA's file.
    fs::write(
        conf_d.join("99-nvidia.toml"),
        nvidia_drop_in(&["nvidia-cdi"]),
    )
    .unwrap();
    let changed = wait_for(20.0, || {
        dump(&root)
            .is_some_and(|c| runs_gpu_guard(&c) && runtimes(&c).contains(&"nvidia-cdi".to_string()))
    })
    .expect("NVIDIA's new runtime never reached containerd's merged config");

    // 3. The Operator is removed with its drop-in: its chain goes too.
    fs::remove_file(conf_d.join("99-nvidia.toml")).unwrap();
    let removed = wait_for(20.0, || {
        dump(&root).is_some_and(|c| {
            runs_gpu_guard(&c)
                && runtimes(&c) == ["gpu-guard", "runc"]
                && c["default_runtime_name"].as_str() == Some("runc")
        }) && !chain.exists()
    })
    .expect("NVIDIA's runtimes stayed after its drop-in was removed");
    assert!(wait_for(10.0, ready).is_some(), "not ready at the end");
    eprintln!(
        "reconcile bound: NVIDIA drop-in added {added:.2} s, changed {changed:.2} s, removed {removed:.2} s"
    );

    // Every engine change was followed by a restart of containerd.
    let restarts = fs::read_to_string(&record).unwrap_or_default();
    assert!(restarts.lines().count() >= 4, "{restarts}");
    assert!(restarts.lines().all(|l| l == "containerd"), "{restarts}");
    let metrics =
        fs::read_to_string(root.join("var/lib/gpu-guard/metrics/gpu-guard-node-agent.prom"))
            .unwrap();
    assert!(
        metrics.contains("gpu_guard_agent_effective{engine=\"containerd\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("gpu_guard_agent_engine_restarts_total{engine=\"containerd\"} 0"),
        "{metrics}"
    );

    // SIGTERM without an API server: everything stays registered.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = std::mem::replace(&mut agent.0, Command::new("true").spawn().unwrap())
        .wait_with_output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("keeping gpu-guard registered"), "{log}");
    assert!(log.contains("re-applied install containerd"), "{log}");
    assert!(dump(&root).is_some_and(|c| runs_gpu_guard(&c)));
}
