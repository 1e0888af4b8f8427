//! `gpu-guard install` as one transaction, through the real binary: a file
//! that cannot be written leaves every other file as it was and no record;
//! the backup of a file is the content before gpu-guard's first change,
//! kept by later installs. (Faults in the middle of the commit, and a file
//! changed under it, need the test-hooks build: tests/test_hooks.)

use crate::install_support::*;
use crate::support::{have_root, have_tool};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// docker's daemon.json with NVIDIA's runtime as the default: install
/// changes it and writes the chain drop-in, two files.
fn docker_root(tag: &str) -> (std::path::PathBuf, String) {
    let root = host_root(tag);
    let cfg = root.join("etc/docker/daemon.json");
    fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    let before = input("docker/other-runtimes/before.json").unwrap();
    fs::write(&cfg, &before).unwrap();
    (root, before)
}

fn chown_tree(dir: &Path, uid: u32) {
    let st = Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(dir)
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn a_second_file_that_cannot_be_written_leaves_the_first_untouched() {
    if !have_root("runs install as another user") || !have_tool("setpriv") {
        return;
    }
    let (root, before) = docker_root("txn-unwritable");
    // gpu-guard's drop-in directory exists but cannot be written by the
    // user install runs as: the second file of the plan fails to stage.
    let config_d = root.join("etc/gpu-guard/config.d");
    fs::create_dir_all(&config_d).unwrap();
    chown_tree(&root, 65534);
    fs::set_permissions(&config_d, fs::Permissions::from_mode(0o555)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(crate::support::gpu_guard())
        .args(["install", "docker", "--bin-dir", "/usr/bin", "--host-root"])
        .arg(&root)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("50-chain-docker.toml") && text.contains("Permission denied"),
        "{text}"
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/docker/daemon.json")).unwrap(),
        before,
        "daemon.json must be as it was"
    );
    assert_eq!(
        files_under(&root.join("etc")),
        vec!["docker/daemon.json".to_string()],
        "no temp file or drop-in left"
    );
    assert!(
        !root.join("var/lib/gpu-guard/engines/docker.json").exists(),
        "nothing recorded"
    );
    // Writable again (and root's): the same command now succeeds.
    chown_tree(&root, 0);
    fs::set_permissions(&config_d, fs::Permissions::from_mode(0o755)).unwrap();
    let o = bin()
        .args(["install", "docker", "--bin-dir", "/usr/bin", "--host-root"])
        .arg(&root)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(config_d.join("50-chain-docker.toml").exists());
}

#[test]
fn the_backup_is_the_content_before_the_first_install() {
    let (root, before) = docker_root("txn-backup");
    let gg = |args: &[&str]| {
        let o = bin()
            .args(args)
            .args(["--host-root"])
            .arg(&root)
            .env_remove("GPU_GUARD_CONFIG")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {o:?}");
    };
    gg(&["install", "docker", "--bin-dir", "/usr/bin"]);
    let backup = root.join("var/lib/gpu-guard/backup/etc/docker/daemon.json");
    assert_eq!(fs::read_to_string(&backup).unwrap(), before);
    // A later install that changes daemon.json again keeps the original.
    gg(&[
        "install",
        "docker",
        "--bin-dir",
        "/usr/bin",
        "--set-default",
    ]);
    let now = fs::read_to_string(root.join("etc/docker/daemon.json")).unwrap();
    assert!(now.contains("\"default-runtime\": \"gpu-guard\""), "{now}");
    assert_eq!(
        fs::read_to_string(&backup).unwrap(),
        before,
        "the first backup is kept"
    );
    // After an uninstall, a new install's backup is of the file as it is then.
    gg(&["uninstall", "docker"]);
    let admin = before.replace('{', "{\n  \"debug\": true,");
    fs::write(root.join("etc/docker/daemon.json"), &admin).unwrap();
    gg(&["install", "docker", "--bin-dir", "/usr/bin"]);
    assert_eq!(fs::read_to_string(&backup).unwrap(), admin);
}
