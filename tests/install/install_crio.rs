//! Golden tests for `gpu-guard install crio`: the drop-in (runtime handler
//! copied from the runtime CRI-O uses now), the prestart hook in a
//! directory CRI-O reads, uninstall, and refusals.

use std::fs;
use std::path::Path;

use crate::install_support::*;
use gpu_guard::install::Engine;
use gpu_guard::install::{crio, hooks};

const RUNTIME: &str = "/usr/bin/gpu-guard-runtime";

#[test]
fn drop_ins_match_golden_files() {
    let main = input("crio/crio.conf").unwrap();
    let crun = input("crio/10-crun.conf").unwrap();
    for (name, files, set_default) in [
        ("none", vec![], false),
        ("none-default", vec![], true),
        ("runc", vec![main.as_str()], false),
        ("crun-default", vec![main.as_str(), crun.as_str()], true),
    ] {
        let eff = crio::effective(files).unwrap();
        let text = crio::drop_in(&eff, RUNTIME, set_default);
        golden(&format!("crio/drop-in-{name}.toml"), &text);
        let doc: toml::Table = text.parse().unwrap();
        let rt = &doc["crio"]["runtime"]["runtimes"]["gpu-guard"];
        assert_eq!(rt["runtime_path"].as_str(), Some(RUNTIME), "{name}");
        assert_eq!(rt["runtime_type"].as_str(), Some("oci"), "{name}");
        let default = doc["crio"]["runtime"].get("default_runtime");
        assert_eq!(
            default.and_then(|d| d.as_str()),
            set_default.then_some("gpu-guard")
        );
    }
}

#[test]
fn handler_copies_the_current_runtime_but_not_a_vm_one() {
    let main = input("crio/crio.conf").unwrap();
    let eff = crio::effective([main.as_str()]).unwrap();
    assert_eq!(eff.hooks_dirs, vec!["/etc/crio/hooks.d".to_string()]);
    let doc: toml::Table = crio::drop_in(&eff, RUNTIME, false).parse().unwrap();
    let rt = &doc["crio"]["runtime"]["runtimes"]["gpu-guard"];
    assert_eq!(
        rt["monitor_path"].as_str(),
        Some("/usr/libexec/crio/conmon")
    );
    // The root is gpu-guard's own, whatever the copied runtime had: the
    // wrapper knows CRI-O by it.
    assert_eq!(rt["runtime_root"].as_str(), Some("/run/gpu-guard/crio"));
    // A kata default would not be copied: only "oci" runtimes are.
    let kata = "[crio.runtime]\ndefault_runtime = \"kata\"\n[crio.runtime.runtimes.kata]\nruntime_path = \"/k\"\nruntime_type = \"vm\"\n";
    let eff = crio::effective([kata]).unwrap();
    let doc: toml::Table = crio::drop_in(&eff, RUNTIME, false).parse().unwrap();
    let rt = doc["crio"]["runtime"]["runtimes"]["gpu-guard"]
        .as_table()
        .unwrap();
    assert_eq!(rt.len(), 3, "{rt:?}");
}

fn write(root: &Path, host: &str, text: &str) {
    let p = root.join(host.trim_start_matches('/'));
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

#[test]
fn flow_writes_drop_in_and_hook_and_uninstall_removes_both() {
    let root = host_root("crio-flow");
    write(
        &root,
        "/etc/crio/crio.conf",
        &input("crio/crio.conf").unwrap(),
    );
    write(
        &root,
        "/etc/crio/crio.conf.d/10-crun.conf",
        &input("crio/10-crun.conf").unwrap(),
    );
    let mut o = options(&root, Engine::Crio);
    o.set_default = true;
    let drop = root.join("etc/crio/crio.conf.d/99-gpu-guard.toml");
    let hook = root.join("etc/crio/hooks.d/gpu-guard-prestart.json");
    assert_eq!(run(&o), vec![drop.clone(), hook.clone()]);
    golden(
        "crio/drop-in-crun-default.toml",
        &fs::read_to_string(&drop).unwrap(),
    );
    assert_eq!(
        fs::read_to_string(&hook).unwrap(),
        hooks::hook_json(hooks::HookStage::Prestart, Path::new("/usr/bin/gpu-guard"))
    );
    assert!(run(&o).is_empty(), "second install changes nothing");
    o.set_default = false;
    assert!(
        run(&o).is_empty(),
        "install without --set-default keeps the default"
    );
    o.uninstall = true;
    assert_eq!(run(&o), vec![drop.clone(), hook.clone()]);
    assert_eq!(
        files_under(&root.join("etc")),
        vec!["crio/crio.conf", "crio/crio.conf.d/10-crun.conf"]
    );
    assert!(run(&o).is_empty());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn packaged_hook_is_used_and_left_alone() {
    let root = host_root("crio-pkg");
    let packaged = hooks::hook_json(hooks::HookStage::Prestart, Path::new("/usr/bin/gpu-guard"));
    write(
        &root,
        "/usr/share/containers/oci/hooks.d/gpu-guard-prestart.json",
        &packaged,
    );
    let o = options(&root, Engine::Crio);
    let drop = root.join("etc/crio/crio.conf.d/99-gpu-guard.toml");
    assert_eq!(run(&o), vec![drop.clone()]);
    let mut u = o.clone();
    u.uninstall = true;
    assert_eq!(run(&u), vec![drop]);
    assert!(root
        .join("usr/share/containers/oci/hooks.d/gpu-guard-prestart.json")
        .exists());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_precreate_hook_where_crio_reads_is_reported() {
    let root = host_root("crio-precreate");
    write(
        &root,
        "/usr/share/containers/oci/hooks.d/gpu-guard-precreate.json",
        "{}",
    );
    let plan = gpu_guard::install::plan(&options(&root, Engine::Crio)).unwrap();
    assert!(
        plan.warnings.iter().any(|w| w.contains("CRI-O refuses it")),
        "{:?}",
        plan.warnings
    );
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn invalid_crio_config_is_refused_and_nothing_written() {
    let root = host_root("crio-bad");
    write(
        &root,
        "/etc/crio/crio.conf.d/50-broken.conf",
        "[crio.runtime\n",
    );
    let out = bin()
        .args(["install", "crio", "--bin-dir", "/usr/bin", "--host-root"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("50-broken.conf is not valid TOML (line 1"),
        "{stderr}"
    );
    assert_eq!(
        files_under(&root.join("etc")),
        vec!["crio/crio.conf.d/50-broken.conf"]
    );
    assert!(!root.join("var").exists());
    fs::remove_dir_all(root).unwrap();
}
