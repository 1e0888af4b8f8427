//! `gpu-guard doctor [--json]` through the binary, over a private host root
//! (`--host-root`, as the DaemonSet runs it): a healthy node, then each
//! class of problem with its fix and the exit status (0 all well or only
//! warnings, 1 an error, 2 bad usage or an invalid config), and the JSON
//! shape fleets read.

use crate::install_support::{bin, tempdir};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

pub(crate) fn put(root: &Path, rel: &str, text: &str, mode: u32) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, text).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
}

/// A host root with gpu-guard, runc, the device nodes of a one-GPU host
/// (character devices of the driver's majors, as /proc/devices there
/// lists them: mknod needs root, None without it), docker's config, and
/// gpu-guard's config reading host facts from
/// tests/data/hosts/PROFILE.json; docker registered by `gpu-guard install`.
fn node(tag: &str, profile: &str) -> Option<PathBuf> {
    if !crate::support::have_root("the host root's device nodes are made with mknod") {
        return None;
    }
    let root = tempdir(tag);
    put(&root, "usr/bin/gpu-guard", "#!/bin/sh\n", 0o755);
    std::os::unix::fs::symlink("gpu-guard", root.join("usr/bin/gpu-guard-runtime")).unwrap();
    put(&root, "usr/bin/runc", "#!/bin/sh\n", 0o755);
    char_node(&root, "dev/nvidiactl", 195, 255, 0o666);
    char_node(&root, "dev/nvidia-uvm", 508, 0, 0o666);
    put(
        &root,
        "proc/devices",
        "Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n",
        0o444,
    );
    put(&root, "etc/docker/daemon.json", "{}\n", 0o644);
    config(&root, profile, "");
    let o = install(&root, &["docker"]);
    assert_eq!(o.0, Some(0), "{}", o.1);
    Some(root)
}

/// A character device MAJOR:MINOR with `mode` at `rel` under `root`.
fn char_node(root: &Path, rel: &str, major: u64, minor: u64, mode: u32) {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    let _ = fs::remove_file(&p);
    mknod(&p, SFlag::S_IFCHR, Mode::empty(), makedev(major, minor)).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
}

fn config(root: &Path, profile: &str, extra: &str) {
    put(
        root,
        "etc/gpu-guard/config.toml",
        &format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\ncache_dir = \"\"\n[log]\nsyslog = false\n{extra}",
            data(&format!("hosts/{profile}.json")).display()
        ),
        0o644,
    );
}

fn install(root: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["install"];
    all.extend_from_slice(args);
    crate::install_support::on_host_root(root, &all)
}

/// `doctor --json --host-root ROOT`: exit status and the report.
pub(crate) fn doctor(root: &Path) -> (i32, serde_json::Value) {
    let o = bin()
        .args(["doctor", "--json", "--host-root"])
        .arg(root)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap_or(-1), v)
}

/// The check named `name`.
fn check<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {v:#}"))
}

/// `name` has `status`, its message has every word, and a non-ok check has a fix.
pub(crate) fn expect(v: &serde_json::Value, name: &str, status: &str, words: &[&str]) {
    let c = check(v, name);
    assert_eq!(c["status"], status, "{name}: {c:#}");
    let m = c["message"].as_str().unwrap();
    for w in words {
        assert!(m.contains(w), "{name}: missing {w:?}: {m}");
    }
    if status != "ok" {
        assert!(
            c["fix"].as_str().is_some_and(|f| !f.is_empty()),
            "{name} has no fix: {c:#}"
        );
    }
}

#[test]
fn a_healthy_node_and_the_json_shape() {
    let Some(root) = node("doctor-ok", "a100") else {
        return;
    };
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["status"], "ok", "{v:#}");
    for (name, words) in [
        (
            "config",
            &["/etc/gpu-guard/config.toml is valid and trusted"][..],
        ),
        ("config.mode", &["enforce"][..]),
        ("host.nvml", &["a100.json"][..]),
        ("host.driver", &["535.104.05", "CUDA 12.2"][..]),
        ("host.gpus", &["1 GPU", "tesla", "8.0"][..]),
        ("host.device-nodes", &["nvidiactl"][..]),
        ("engine.docker", &["runs gpu-guard as installed"][..]),
        ("chain.docker", &["/usr/bin/runc"][..]),
        ("hooks", &["no gpu-guard hook file"][..]),
        ("cdi", &["no CDI spec directory"][..]),
        ("dirs.state", &["/var/lib/gpu-guard is private"][..]),
    ] {
        expect(&v, name, "ok", words);
    }
    // Fleets read a stable shape: these keys, these words, counts that add up.
    let obj = v.as_object().unwrap();
    assert_eq!(
        obj.keys().collect::<Vec<_>>(),
        ["status", "checks", "summary"]
    );
    let checks = v["checks"].as_array().unwrap();
    for c in checks {
        let keys: Vec<&String> = c.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["name", "status", "message", "fix"], "{c}");
        assert!(["ok", "warning", "error"].contains(&c["status"].as_str().unwrap()));
        assert!(!c["message"].as_str().unwrap().contains('\n'));
    }
    let n = |s: &str| checks.iter().filter(|c| c["status"] == s).count();
    assert_eq!(v["summary"]["ok"], n("ok"));
    assert_eq!(v["summary"]["warning"], n("warning"));
    assert_eq!(v["summary"]["error"], n("error"));
    assert_eq!(n("ok"), checks.len(), "{v:#}");
    // The same for people, on stdout, with the same exit status.
    let o = bin()
        .args(["doctor", "--host-root"])
        .arg(&root)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("ok ") && l.contains("engine.docker")),
        "{text}"
    );
    assert!(
        text.trim_end()
            .ends_with(&format!("0 errors, 0 warnings, {} ok", checks.len())),
        "{text}"
    );
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn config_problems_name_the_file_and_exit_2() {
    let Some(root) = node("doctor-config", "a100") else {
        return;
    };
    put(
        &root,
        "etc/gpu-guard/config.d/50-warn.toml",
        "mode = \"warn\"\n",
        0o644,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "a warning only: {v:#}");
    expect(
        &v,
        "config.mode",
        "warning",
        &["mode = \"warn\"", "starts it anyway"],
    );
    expect(
        &v,
        "config",
        "ok",
        &["config drop-ins merged", "50-warn.toml"],
    );
    // A drop-in others can write is policy nobody may trust.
    put(
        &root,
        "etc/gpu-guard/config.d/60-off.toml",
        "mode = \"off\"\n",
        0o666,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 2, "{v:#}");
    expect(
        &v,
        "config",
        "error",
        &[
            "60-off.toml",
            "writable by group or others",
            "GPU containers are refused",
        ],
    );
    // The other checks still ran.
    expect(&v, "engine.docker", "ok", &[]);
    fs::remove_file(root.join("etc/gpu-guard/config.d/60-off.toml")).unwrap();
    put(
        &root,
        "etc/gpu-guard/config.d/60-typo.toml",
        "[tuning]\nenabeld = true\n",
        0o644,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 2, "{v:#}");
    expect(&v, "config", "error", &["60-typo.toml", "enabeld"]);
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn host_problems() {
    let Some(root) = node("doctor-host", "no-driver") else {
        return;
    };
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(&v, "host.driver", "error", &["no NVIDIA driver"]);
    config(&root, "driver-no-gpu", "");
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(&v, "host.gpus", "error", &["no GPU"]);
    config(&root, "a100", "");
    fs::remove_file(root.join("dev/nvidia-uvm")).unwrap();
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "a warning: {v:#}");
    expect(&v, "host.device-nodes", "warning", &["nvidia-uvm"]);
    // A directory where the node should be (`docker run -v` before it
    // existed): an error; a node only a group can open: a warning.
    fs::create_dir(root.join("dev/nvidia-uvm")).unwrap();
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(
        &v,
        "host.device-nodes",
        "error",
        &["nvidia-uvm is a directory"],
    );
    fs::remove_dir(root.join("dev/nvidia-uvm")).unwrap();
    char_node(&root, "dev/nvidia-uvm", 508, 0, 0o660);
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "a warning: {v:#}");
    expect(
        &v,
        "host.device-nodes",
        "warning",
        &["crw-rw----", "only its owner and group"],
    );
    char_node(&root, "dev/nvidia-uvm", 508, 0, 0o666);
    // NVML's health, as a facts file records it: a failed GPU is an error.
    let facts = root.join("facts.json");
    let mut a100: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(data("hosts/a100.json")).unwrap()).unwrap();
    a100["gpus"][0]["health"] =
        serde_json::json!({"state": "failed", "reasons": ["row remapping failed"]});
    fs::write(&facts, a100.to_string()).unwrap();
    put(
        &root,
        "etc/gpu-guard/config.toml",
        &format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[log]\nsyslog = false\n",
            facts.display()
        ),
        0o644,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(
        &v,
        "host.health",
        "error",
        &["GPU 0", "failed", "row remapping failed"],
    );
    // Unreadable facts: the probe failed.
    config(&root, "none-such", "");
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(&v, "host.nvml", "error", &["none-such.json"]);
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn drift_and_the_chained_runtime() {
    let Some(root) = node("doctor-engine", "a100") else {
        return;
    };
    // Someone takes gpu-guard out of daemon.json.
    put(&root, "etc/docker/daemon.json", "{}\n", 0o644);
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(
        &v,
        "engine.docker",
        "error",
        &["docker no longer runs gpu-guard"],
    );
    assert!(check(&v, "engine.docker")["fix"]
        .as_str()
        .unwrap()
        .contains("gpu-guard install docker"));
    assert_eq!(install(&root, &["docker"]).0, Some(0));
    // A chain to a runtime that is not there fails every container.
    let dropin = "etc/gpu-guard/config.d/60-chain.toml";
    put(
        &root,
        dropin,
        "[runtime.engines.docker]\npath = \"/usr/bin/nvidia-container-runtime\"\n",
        0o644,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(
        &v,
        "chain.docker",
        "error",
        &[
            "runtime.engines.docker.path",
            "does not exist",
            "GPU or not",
        ],
    );
    put(&root, "usr/bin/nvidia-container-runtime", "", 0o644);
    let (_, v) = doctor(&root);
    expect(&v, "chain.docker", "error", &["not an executable file"]);
    fs::set_permissions(
        root.join("usr/bin/nvidia-container-runtime"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    expect(
        &v,
        "chain.docker",
        "ok",
        &["/usr/bin/nvidia-container-runtime"],
    );
    // Install chains NVIDIA's runtime; a later drop-in chains runc instead.
    fs::remove_file(root.join(dropin)).unwrap();
    let o = install(
        &root,
        &[
            "docker",
            "--chain-runtime",
            "/usr/bin/nvidia-container-runtime",
        ],
    );
    assert_eq!(o.0, Some(0), "{}", o.1);
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    expect(&v, "chain.docker", "ok", &["nvidia-container-runtime"]);
    put(
        &root,
        "etc/gpu-guard/config.d/60-runc.toml",
        "[runtime.engines.docker]\npath = \"/usr/bin/runc\"\n",
        0o644,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "a warning: {v:#}");
    expect(
        &v,
        "chain.docker",
        "warning",
        &[
            "/usr/bin/runc",
            "install chained /usr/bin/nvidia-container-runtime",
        ],
    );
    // Naming gpu-guard itself would exec itself forever.
    put(
        &root,
        "etc/gpu-guard/config.d/60-runc.toml",
        "[runtime.engines.docker]\npath = \"/usr/bin/gpu-guard-runtime\"\n",
        0o644,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(&v, "chain.docker", "error", &["names gpu-guard itself"]);
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn hook_files_and_engines_not_registered() {
    let Some(root) = node("doctor-hooks", "a100") else {
        return;
    };
    put(&root, "usr/bin/podman", "#!/bin/sh\n", 0o755);
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    expect(
        &v,
        "engine.podman",
        "warning",
        &["not registered", "bypass gpu-guard"],
    );
    let o = install(&root, &["podman"]);
    assert_eq!(o.0, Some(0), "{}", o.1);
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    expect(
        &v,
        "hooks.podman",
        "ok",
        &["gpu-guard-precreate.json", "gpu-guard-prestart.json"],
    );
    expect(
        &v,
        "hooks",
        "ok",
        &["/etc/containers/oci/hooks.d/gpu-guard-precreate.json"],
    );
    put(
        &root,
        "etc/containers/oci/hooks.d/gpu-guard-precreate.json",
        "{not json",
        0o644,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(
        &v,
        "hooks.podman",
        "error",
        &["gpu-guard-precreate.json: not valid JSON"],
    );
    assert_eq!(install(&root, &["podman"]).0, Some(0));
    // A stray hook file, in a directory podman reads, calling a gone binary.
    put(
        &root,
        "usr/share/containers/oci/hooks.d/gpu-guard-old.json",
        r#"{"version":"1.0.0","hook":{"path":"/opt/gone/gpu-guard","args":["gpu-guard","hook","prestart"]},"when":{"always":true},"stages":["prestart"]}"#,
        0o644,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(
        &v,
        "hooks",
        "error",
        &["gpu-guard-old.json", "/opt/gone/gpu-guard does not exist"],
    );
    fs::remove_dir_all(root).unwrap();
    // No engine registered at all: nothing on the node is checked.
    let bare = tempdir("doctor-bare");
    config(&bare, "a100", "");
    put(&bare, "usr/bin/containerd", "", 0o755);
    let (code, v) = doctor(&bare);
    assert_eq!(code, 1, "{v:#}");
    expect(&v, "engines", "error", &["registered with no engine"]);
    assert!(check(&v, "engines")["fix"]
        .as_str()
        .unwrap()
        .contains("gpu-guard install containerd"));
    fs::remove_dir_all(bare).unwrap();
}

#[test]
fn cdi_and_private_directories() {
    let Some(root) = node("doctor-dirs", "a100") else {
        return;
    };
    // NVIDIA's spec for the running driver (a100: 535.104.05), its files
    // there: ok. The judgement is `host`'s (core::cdi), on the host root.
    let lib = "usr/lib/x86_64-linux-gnu/libcuda.so";
    put(&root, &format!("{lib}.535.104.05"), "", 0o644);
    put(&root, "dev/nvidia0", "", 0o644);
    let spec = |version: &str, node: &str| {
        format!(
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: {node}\n      type: c\n      major: 195\ncontainerEdits:\n  mounts:\n  - hostPath: /{lib}.{version}\n    containerPath: /{lib}.{version}\n"
        )
    };
    put(
        &root,
        "etc/cdi/nvidia.yaml",
        &spec("535.104.05", "/dev/nvidia0"),
        0o644,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    expect(&v, "cdi", "ok", &["/etc/cdi (1 spec)"]);
    // After a driver change the spec names the old driver's libraries:
    // CDI containers would fail, so it is an error, with host paths.
    put(
        &root,
        "etc/cdi/nvidia.yaml",
        &spec("530.30.02", "/dev/nvidia0"),
        0o644,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(
        &v,
        "cdi",
        "error",
        &[
            "530.30.02",
            "/etc/cdi/nvidia.yaml",
            "nvidia-ctk cdi generate",
        ],
    );
    let msg = check(&v, "cdi")["message"].as_str().unwrap().to_string();
    assert!(!msg.contains(&root.display().to_string()), "{msg}");
    // A spec others could have written is refused at start: an error too.
    put(
        &root,
        "etc/cdi/nvidia.yaml",
        &spec("535.104.05", "/dev/nvidia0"),
        0o666,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(&v, "cdi", "error", &["could be written by others"]);
    // A spec that is not one (no kind) is not checked: a warning.
    put(&root, "etc/cdi/nvidia.yaml", "cdiVersion: 0.5.0\n", 0o644);
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    expect(&v, "cdi", "warning", &["were not checked"]);
    // The directories are the config's.
    let off = "etc/gpu-guard/config.d/50-cdi.toml";
    put(&root, off, "[host]\ncdi_spec_dirs = []\n", 0o644);
    let (_, v) = doctor(&root);
    expect(&v, "cdi", "ok", &["host.cdi_spec_dirs is empty"]);
    fs::remove_file(root.join(off)).unwrap();
    fs::remove_dir_all(root.join("etc/cdi")).unwrap();
    put(&root, "etc/cdi", "not a directory", 0o644);
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    expect(&v, "cdi", "warning", &["CDI spec directory /etc/cdi"]);
    fs::remove_file(root.join("etc/cdi")).unwrap();
    fs::set_permissions(
        root.join("var/lib/gpu-guard"),
        fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    let (_, v) = doctor(&root);
    expect(
        &v,
        "dirs.state",
        "warning",
        &["writable by group or others"],
    );
    assert!(check(&v, "dirs.state")["fix"]
        .as_str()
        .unwrap()
        .contains("chmod 0700"));
    // Bad usage is 2.
    let o = bin().args(["doctor", "--bogus"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    fs::remove_dir_all(root).unwrap();
}

/// The chains the config names are checked whether or not an install is
/// recorded: the next install, or a registration by hand, runs them.
#[test]
fn every_chain_the_config_names() {
    let bare = tempdir("doctor-chains");
    config(
        &bare,
        "a100",
        "[runtime]\npath = \"/usr/bin/nvidia-container-runtime\"\n[runtime.engines.crio]\npath = \"/opt/none/crun\"\n",
    );
    let (code, v) = doctor(&bare);
    assert_eq!(code, 1, "{v:#}");
    expect(&v, "engines", "error", &["registered with no engine"]);
    expect(&v, "chain", "error", &["/usr/bin/nvidia-container-runtime"]);
    expect(&v, "chain.crio", "error", &["/opt/none/crun"]);
    // Once they exist and can run, both are ok.
    put(
        &bare,
        "usr/bin/nvidia-container-runtime",
        "#!/bin/sh\n",
        0o755,
    );
    put(&bare, "opt/none/crun", "#!/bin/sh\n", 0o755);
    let (_, v) = doctor(&bare);
    expect(&v, "chain", "ok", &["/usr/bin/nvidia-container-runtime"]);
    expect(&v, "chain.crio", "ok", &["/opt/none/crun"]);
    fs::remove_dir_all(bare).unwrap();
}
