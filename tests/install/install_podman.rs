//! Tests for `gpu-guard install podman` (the precreate hook file) and the
//! hooks.d files the packages ship.

use std::fs;
use std::path::Path;

use crate::install_support::*;
use gpu_guard::install::hooks::{self, HookStage};
use gpu_guard::install::Engine;
use serde_json::Value;

fn write(root: &Path, host: &str, text: &str) {
    let p = root.join(host.trim_start_matches('/'));
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

#[test]
fn hook_files_follow_the_hooks_d_schema() {
    for (stage, name) in [
        (HookStage::Prestart, "prestart"),
        (HookStage::Precreate, "precreate"),
    ] {
        let v: Value =
            serde_json::from_str(&hooks::hook_json(stage, Path::new("/opt/gg/bin/gpu-guard")))
                .unwrap();
        assert_eq!(v["version"], "1.0.0");
        assert_eq!(v["hook"]["path"], "/opt/gg/bin/gpu-guard");
        assert_eq!(
            v["hook"]["args"],
            serde_json::json!(["gpu-guard", "hook", name])
        );
        assert_eq!(v["when"], serde_json::json!({"always": true}));
        assert_eq!(v["stages"], serde_json::json!([name]));
    }
}

#[test]
fn packaged_prestart_hook_is_what_install_would_write() {
    let packaged = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/hooks.d/gpu-guard-prestart.json"),
    )
    .unwrap();
    assert_eq!(
        packaged,
        hooks::hook_json(HookStage::Prestart, Path::new("/usr/bin/gpu-guard"))
    );
}

#[test]
fn flow_installs_the_precreate_hook_where_crio_does_not_look() {
    let root = host_root("podman-flow");
    let o = options(&root, Engine::Podman);
    let file = root.join("etc/containers/oci/hooks.d/gpu-guard-precreate.json");
    let conf = root.join("etc/containers/containers.conf.d/99-gpu-guard.conf");
    let plan = gpu_guard::install::plan(&o).unwrap();
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    // podman reads only /usr/share/containers/oci/hooks.d unless told: the
    // drop-in adds our directory and keeps that one. The prestart hook
    // (shipped inactive by the package) is activated beside the precreate one.
    let prestart = root.join("etc/containers/oci/hooks.d/gpu-guard-prestart.json");
    assert_eq!(run(&o), vec![conf.clone(), file.clone(), prestart.clone()]);
    golden(
        "podman/gpu-guard-precreate.json",
        &fs::read_to_string(&file).unwrap(),
    );
    golden(
        "podman/99-gpu-guard.conf",
        &fs::read_to_string(&conf).unwrap(),
    );
    assert!(run(&o).is_empty(), "second install changes nothing");
    let mut u = o.clone();
    u.uninstall = true;
    let mut removed = run(&u);
    removed.sort();
    assert_eq!(removed, vec![conf.clone(), file.clone(), prestart.clone()]);
    assert!(!file.exists() && !conf.exists() && !prestart.exists());
    assert!(!root.join("var/lib/gpu-guard/engines/podman.json").exists());
    // The directories install created went with the file.
    assert!(!root.join("etc").exists());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn crio_on_the_host_is_a_warning_and_crio_reading_the_dir_a_refusal() {
    let root = host_root("podman-crio");
    write(&root, "/usr/bin/crio", "");
    let o = options(&root, Engine::Podman);
    let plan = gpu_guard::install::plan(&o).unwrap();
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("CRI-O is installed")),
        "{:?}",
        plan.warnings
    );
    write(
        &root,
        "/etc/crio/crio.conf.d/20-hooks.conf",
        "[crio.runtime]\nhooks_dir = [\"/usr/share/containers/oci/hooks.d\", \"/etc/containers/oci/hooks.d\"]\n",
    );
    let out = bin()
        .args(["install", "podman", "--bin-dir", "/usr/bin", "--host-root"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("CRI-O reads hooks from /etc/containers/oci/hooks.d"),
        "{stderr}"
    );
    assert!(!root.join("etc/containers").exists());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn the_admins_hooks_dirs_are_kept_in_the_drop_in() {
    let root = host_root("podman-conf");
    write(
        &root,
        "/etc/containers/containers.conf",
        "[engine]\nhooks_dir = [\"/opt/site/hooks.d\"]\n",
    );
    write(
        &root,
        "/etc/containers/containers.conf.d/50-site.conf",
        "[engine]\nhooks_dir = [\"/opt/site/hooks.d\", \"/usr/share/containers/oci/hooks.d\"]\n",
    );
    let o = options(&root, Engine::Podman);
    run(&o);
    let conf = fs::read_to_string(root.join("etc/containers/containers.conf.d/99-gpu-guard.conf"))
        .unwrap();
    let dirs = gpu_guard::install::podman::configured_hooks_dirs([conf.as_str()]).unwrap();
    assert_eq!(
        dirs,
        vec![
            "/opt/site/hooks.d",
            "/usr/share/containers/oci/hooks.d",
            "/etc/containers/oci/hooks.d"
        ]
    );
    // Already read by podman: no drop-in.
    let root2 = host_root("podman-conf2");
    write(
        &root2,
        "/etc/containers/containers.conf",
        "[engine]\nhooks_dir = [\"/etc/containers/oci/hooks.d\"]\n",
    );
    let changed = run(&options(&root2, Engine::Podman));
    assert_eq!(
        changed,
        vec![
            root2.join("etc/containers/oci/hooks.d/gpu-guard-precreate.json"),
            root2.join("etc/containers/oci/hooks.d/gpu-guard-prestart.json")
        ]
    );
    // A custom hooks dir podman does not read is a warning, not a drop-in.
    let mut o3 = options(&root2, Engine::Podman);
    o3.config_path = Some("/srv/hooks".into());
    let plan = gpu_guard::install::plan(&o3).unwrap();
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("podman will not run the precreate hook")),
        "{:?}",
        plan.warnings
    );
    fs::remove_dir_all(root).unwrap();
    fs::remove_dir_all(root2).unwrap();
}

#[test]
fn binary_dry_run_for_a_custom_hooks_dir() {
    let root = host_root("podman-dry");
    let out = bin()
        .args([
            "install",
            "podman",
            "--dry-run",
            "--bin-dir",
            "/usr/bin",
            "--config-path",
            "/srv/hooks",
            "--host-root",
        ])
        .arg(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("--- /dev/null\n+++ b/"), "{stdout}");
    assert!(
        stdout.contains("srv/hooks/gpu-guard-precreate.json"),
        "{stdout}"
    );
    assert!(stdout.contains("+    \"precreate\""), "{stdout}");
    assert!(!root.join("srv").exists());
    fs::remove_dir_all(root).unwrap();
}

/// podman itself reads the files install writes and runs both stages: a
/// stand-in gpu-guard (a shell script logging its arguments, passing the
/// precreate config through) in place of the real binary.
#[test]
fn podman_runs_the_installed_hooks() {
    if !have_tool("podman") || !have_tool("runc") || !have_tool("busybox") {
        return;
    }
    if !crate::support::have_root("podman runs the test container") {
        return;
    }
    let root = tempdir("podman-real");
    let bin_dir = root.join("bin");
    let log = root.join("log");
    fs::create_dir_all(&bin_dir).unwrap();
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> {}\nif [ \"$2\" = precreate ]; then cat; else cat >/dev/null; fi\n",
        log.display()
    );
    fs::write(bin_dir.join("gpu-guard"), script).unwrap();
    fs::set_permissions(
        bin_dir.join("gpu-guard"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("gpu-guard", bin_dir.join("gpu-guard-runtime")).unwrap();
    let hooks_dir = root.join("hooks");
    let mut o = options(Path::new("/"), Engine::Podman);
    o.config_path = Some(hooks_dir.clone());
    o.bin_dir = bin_dir.clone();
    o.state_dir = root.join("state");
    run(&o);
    // The packaged prestart file, pointing at the stand-in.
    fs::write(
        hooks_dir.join(hooks::PRESTART_FILE),
        hooks::hook_json(HookStage::Prestart, &bin_dir.join("gpu-guard")),
    )
    .unwrap();
    let rootfs = root.join("rootfs");
    fs::create_dir_all(rootfs.join("bin")).unwrap();
    let busybox = std::process::Command::new("sh")
        .args(["-c", "command -v busybox"])
        .output()
        .unwrap();
    let busybox = String::from_utf8(busybox.stdout).unwrap();
    fs::copy(busybox.trim(), rootfs.join("bin/busybox")).unwrap();
    // runc, hard ulimits as podman needs on this kind of host (podman 4.3
    // on Debian 12 fails to start a container without them).
    let out = std::process::Command::new("timeout")
        .arg("120")
        .arg("podman")
        .arg("--hooks-dir")
        .arg(&hooks_dir)
        .args([
            "run",
            "--rm",
            "--runtime",
            "runc",
            "--ulimit",
            "nofile=10000:10000",
            "--ulimit",
            "nproc=1000:1000",
            "--rootfs",
        ])
        .arg(&rootfs)
        .args(["/bin/busybox", "echo", "started"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "started");
    let calls = fs::read_to_string(&log).unwrap();
    assert_eq!(calls, "hook precreate\nhook prestart\n");
    fs::remove_dir_all(root).unwrap();
}
