//! The labeller: the agent runs the host's gpu-guard in the host's root
//! (chroot) for `host --node-labels`, writes node-feature-discovery's
//! feature file, and writes it again when the host's GPUs or driver
//! change; a host whose facts cannot be read loses the file.

use crate::support::TempDir;
use crate::{agent_bin, gpu_guard_bin, runnable_root, wait_for};
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};

const FEATURES: &str = "etc/kubernetes/node-feature-discovery/features.d/gpu-guard";

fn facts(dir: &str) -> String {
    fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/data/hosts")
            .join(dir),
    )
    .unwrap()
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What `gpu-guard host --node-labels` prints for `facts` (run here,
/// with a config of its own naming the facts file).
fn expected(t: &TempDir, facts_text: &str) -> String {
    let f = t.join("expected-facts.json");
    fs::write(&f, facts_text).unwrap();
    let cfg = t.join("expected.toml");
    fs::write(&cfg, format!("[host]\nfacts_file = \"{}\"\n", f.display())).unwrap();
    let o = Command::new(gpu_guard_bin().unwrap())
        .arg("--config")
        .arg(&cfg)
        .args(["host", "--node-labels"])
        .output()
        .unwrap();
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn the_feature_file_follows_the_host() {
    let Some(root) = runnable_root("agent-labels") else {
        return;
    };
    let t = TempDir::new("agent-labels-run");
    fs::create_dir_all(root.join("etc/gpu-guard")).unwrap();
    fs::write(
        root.join("etc/gpu-guard/config.toml"),
        "[host]\nfacts_file = \"/etc/gpu-guard/facts.json\"\n",
    )
    .unwrap();
    let a10 = facts("a10-535.json");
    fs::write(root.join("etc/gpu-guard/facts.json"), &a10).unwrap();
    let _agent = Proc(
        agent_bin()
            .arg("--host-root")
            .arg(root.path())
            .args(["--api-server", "", "--restart-mode", "none"])
            .arg("--status-file")
            .arg(t.join("status"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let file = root.join(FEATURES);
    let want = expected(&t, &a10);
    assert!(want.contains("gpu-guard.io/"), "{want}");
    let read = || fs::read_to_string(&file).unwrap_or_default();
    assert!(
        wait_for(20.0, || read() == want).is_some(),
        "feature file: {:?}, expected {want:?}",
        read()
    );

    // The GPUs and driver change (another facts file): written again.
    let h100 = facts("h100x8.json");
    let want = expected(&t, &h100);
    fs::write(root.join("etc/gpu-guard/facts.json"), &h100).unwrap();
    assert!(
        wait_for(20.0, || read() == want).is_some(),
        "feature file: {:?}, expected {want:?}",
        read()
    );

    // No facts at all (the facts file gone): the labels go, so no affinity
    // places pods here on stale facts.
    fs::remove_file(root.join("etc/gpu-guard/facts.json")).unwrap();
    fs::write(
        root.join("etc/gpu-guard/config.toml"),
        "[host]\nfacts_file = \"/etc/gpu-guard/facts.json\"\n# touched\n",
    )
    .unwrap();
    assert!(
        wait_for(20.0, || !file.exists()).is_some(),
        "feature file still there: {:?}",
        read()
    );
}
