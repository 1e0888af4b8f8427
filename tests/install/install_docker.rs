//! Golden tests for `gpu-guard install docker` (daemon.json edits), and the
//! whole flow (state, backups, uninstall) against a temporary host root.

use std::fs;

use crate::install_support::*;
use gpu_guard::install::docker;
use gpu_guard::install::Engine;
use serde_json::Value;

const RUNTIME: &str = "/usr/bin/gpu-guard-runtime";
const CASES: [&str; 6] = [
    "missing",
    "empty",
    "other-runtimes",
    "tabs",
    "compact",
    "default-runc",
];

fn json(text: &str) -> Value {
    if text.trim().is_empty() {
        return serde_json::json!({});
    }
    serde_json::from_str(text).unwrap()
}

#[test]
fn install_matches_golden_files() {
    for case in CASES {
        let before = input(&format!("docker/{case}/before.json"));
        let plain = docker::install(before.as_deref(), RUNTIME, false).unwrap();
        golden(&format!("docker/{case}/install.json"), &plain.text);
        assert_eq!(plain.replaced_default, None, "{case}");
        let dflt = docker::install(before.as_deref(), RUNTIME, true).unwrap();
        golden(&format!("docker/{case}/install-default.json"), &dflt.text);
    }
}

#[test]
fn every_other_key_is_kept() {
    let before = input("docker/other-runtimes/before.json").unwrap();
    let after = docker::install(Some(&before), RUNTIME, true).unwrap();
    let (b, a) = (json(&before), json(&after.text));
    for (k, v) in b.as_object().unwrap() {
        if k != "default-runtime" && k != "runtimes" {
            assert_eq!(a.get(k), Some(v), "key {k} changed");
        }
    }
    assert_eq!(a["runtimes"]["nvidia"], b["runtimes"]["nvidia"]);
    assert_eq!(a["runtimes"]["gpu-guard"]["path"], RUNTIME);
    assert_eq!(a["default-runtime"], "gpu-guard");
    assert_eq!(after.replaced_default.as_deref(), Some("nvidia"));
}

#[test]
fn existing_runtime_entry_keeps_its_other_keys() {
    let before = input("docker/default-runc/before.json").unwrap();
    let after = json(&docker::install(Some(&before), RUNTIME, false).unwrap().text);
    assert_eq!(after["runtimes"]["gpu-guard"]["path"], RUNTIME);
    assert_eq!(
        after["runtimes"]["gpu-guard"]["runtimeArgs"],
        serde_json::json!(["--debug"])
    );
}

#[test]
fn second_install_changes_nothing() {
    for case in CASES {
        let before = input(&format!("docker/{case}/before.json"));
        for set_default in [false, true] {
            let once = docker::install(before.as_deref(), RUNTIME, set_default).unwrap();
            let twice = docker::install(Some(&once.text), RUNTIME, set_default).unwrap();
            assert_eq!(once.text, twice.text, "{case} set_default={set_default}");
            // Installing without --set-default never takes the default away.
            let plain = docker::install(Some(&once.text), RUNTIME, false).unwrap();
            assert_eq!(once.text, plain.text, "{case}");
        }
    }
}

#[test]
fn uninstall_round_trips() {
    for case in CASES {
        let before = input(&format!("docker/{case}/before.json"));
        let installed = docker::install(before.as_deref(), RUNTIME, true).unwrap();
        let removed =
            docker::uninstall(Some(&installed.text), installed.replaced_default.as_deref())
                .unwrap();
        let b = json(before.as_deref().unwrap_or(""));
        if case == "default-runc" {
            // gpu-guard's own entry was there before: uninstall removes it.
            let mut expected = b.clone();
            expected.as_object_mut().unwrap().remove("runtimes");
            assert_eq!(json(&removed.text), expected);
        } else {
            assert_eq!(json(&removed.text), b, "{case}");
        }
        // A file written in the indent it had, keys in their order: the
        // multi-line originals come back byte for byte.
        if matches!(case, "other-runtimes" | "tabs") {
            assert_eq!(Some(removed.text.as_str()), before.as_deref(), "{case}");
        }
        assert_eq!(removed.empty, b.as_object().unwrap().is_empty(), "{case}");
        assert!(!docker::mentions_gpu_guard(&removed.text), "{case}");
    }
}

#[test]
fn uninstall_without_record_drops_the_default() {
    let text = r#"{"default-runtime": "gpu-guard", "runtimes": {"gpu-guard": {"path": "/x"}}}"#;
    let removed = docker::uninstall(Some(text), None).unwrap();
    assert_eq!(json(&removed.text), serde_json::json!({}));
    assert!(removed.empty);
}

#[test]
fn invalid_input_is_refused() {
    for bad in [
        "{",
        "[]",
        "{\"runtimes\": []}",
        "{\"runtimes\": {\"gpu-guard\": 1}}",
    ] {
        let err = docker::install(Some(bad), RUNTIME, false).unwrap_err();
        assert!(err.to_string().contains("untouched"), "{bad}: {err}");
    }
    assert!(docker::install(Some("{\"default-runtime\": 3}"), RUNTIME, true).is_err());
}

#[test]
fn flow_creates_records_backs_up_and_restores() {
    let root = host_root("docker-flow");
    let cfg = root.join("etc/docker/daemon.json");
    fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    let before = input("docker/other-runtimes/before.json").unwrap();
    fs::write(&cfg, &before).unwrap();

    let mut o = options(&root, Engine::Docker);
    o.set_default = true;
    // NVIDIA's runtime is the default here: install chains to it.
    let chain = root.join("etc/gpu-guard/config.d/50-chain-docker.toml");
    assert_eq!(run(&o), vec![cfg.clone(), chain.clone()]);
    assert!(fs::read_to_string(&chain)
        .unwrap()
        .contains("[runtime.engines.docker]\npath = \"nvidia-container-runtime\"\n"));
    let installed = fs::read_to_string(&cfg).unwrap();
    assert_eq!(json(&installed)["default-runtime"], "gpu-guard");
    // The backup holds the content before the change, under the state dir.
    let backup = root.join("var/lib/gpu-guard/backup/etc/docker/daemon.json");
    assert_eq!(fs::read_to_string(&backup).unwrap(), before);
    let state: Value =
        json(&fs::read_to_string(root.join("var/lib/gpu-guard/engines/docker.json")).unwrap());
    assert_eq!(state["replaced_default"], "nvidia");
    assert_eq!(state["config"], "/etc/docker/daemon.json");

    // Second install: nothing to change.
    assert!(run(&o).is_empty());
    assert_eq!(fs::read_to_string(&cfg).unwrap(), installed);

    o.uninstall = true;
    o.set_default = false;
    assert_eq!(run(&o), vec![cfg.clone(), chain.clone()]);
    assert_eq!(fs::read_to_string(&cfg).unwrap(), before);
    assert!(!root.join("var/lib/gpu-guard/engines/docker.json").exists());
    assert!(
        !root.join("etc/gpu-guard").exists(),
        "directories install created"
    );
    // Uninstall again: nothing to change.
    assert!(run(&o).is_empty());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn flow_removes_a_file_it_created() {
    let root = host_root("docker-created");
    let o = options(&root, Engine::Docker);
    run(&o);
    let cfg = root.join("etc/docker/daemon.json");
    assert_eq!(
        json(&fs::read_to_string(&cfg).unwrap())["runtimes"]["gpu-guard"]["path"],
        RUNTIME
    );
    let mut u = o.clone();
    u.uninstall = true;
    run(&u);
    assert!(!cfg.exists(), "daemon.json gpu-guard created is removed");
    assert!(!root.join("etc").exists(), "and the directories it created");
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn binary_dry_run_prints_a_diff_and_writes_nothing() {
    let root = host_root("docker-dry");
    let cfg = root.join("etc/docker/daemon.json");
    fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    fs::write(&cfg, "{\n  \"debug\": true\n}\n").unwrap();
    let out = bin()
        .args([
            "install",
            "docker",
            "--dry-run",
            "--set-default",
            "--bin-dir",
            "/usr/bin",
        ])
        .arg("--host-root")
        .arg(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let shown = cfg.to_string_lossy().trim_start_matches('/').to_string();
    assert!(
        stdout.contains(&format!("--- a/{shown}\n+++ b/{shown}\n")),
        "{stdout}"
    );
    assert!(
        stdout.contains("+  \"default-runtime\": \"gpu-guard\""),
        "{stdout}"
    );
    assert_eq!(
        fs::read_to_string(&cfg).unwrap(),
        "{\n  \"debug\": true\n}\n"
    );
    assert!(
        !root.join("var").exists(),
        "dry run writes no state or backup"
    );
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn binary_refuses_invalid_json_and_leaves_it_untouched() {
    let root = host_root("docker-bad");
    let cfg = root.join("etc/docker/daemon.json");
    fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    fs::write(&cfg, "{ \"debug\": true, }").unwrap();
    let out = bin()
        .args(["install", "docker", "--bin-dir", "/usr/bin"])
        .arg("--host-root")
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one-line error: {stderr}");
    assert!(stderr.contains("is not valid JSON"), "{stderr}");
    assert_eq!(fs::read_to_string(&cfg).unwrap(), "{ \"debug\": true, }");
    assert!(!root.join("var").exists());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn binary_refuses_a_missing_runtime_wrapper() {
    let root = tempdir("docker-nobin");
    let out = bin()
        .args(["install", "docker", "--bin-dir", "/opt/nowhere"])
        .arg("--host-root")
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("/opt/nowhere/gpu-guard-runtime does not exist"),
        "{stderr}"
    );
    assert!(!root.join("etc").exists());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn fifo_config_is_an_error_not_a_hang() {
    let root = host_root("docker-fifo");
    let cfg = root.join("etc/docker/daemon.json");
    fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    nix::unistd::mkfifo(&cfg, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let err = gpu_guard::install::plan(&options(&root, Engine::Docker)).unwrap_err();
    assert!(err.to_string().contains("cannot read"), "{err}");
    fs::remove_dir_all(root).unwrap();
}
