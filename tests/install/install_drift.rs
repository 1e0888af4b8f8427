//! `gpu-guard install ENGINE --check`: whether each engine's effective
//! configuration still runs gpu-guard as installed (docker, CRI-O and
//! podman here; containerd with the real `containerd config dump` in
//! install_containerd_merge.rs), naming the file responsible and the
//! command that repairs it; and the pure registration function a `doctor`
//! can reuse.

use std::fs;
use std::path::Path;

use crate::install_support::*;
use gpu_guard::install::registration::{effective_registration, Registration};
use gpu_guard::install::Engine;

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

fn check(root: &Path, engine: &str) -> (Option<i32>, String) {
    let out = bin()
        .args([
            "install",
            engine,
            "--check",
            "--bin-dir",
            "/usr/bin",
            "--host-root",
        ])
        .arg(root)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn drift(root: &Path, engine: Engine) -> gpu_guard::install::registration::Drift {
    match effective_registration(&options(root, engine)).unwrap() {
        Registration::Drift(d) => d,
        other => panic!("{engine:?}: {other:?}"),
    }
}

#[test]
fn not_installed_is_not_ok() {
    let root = host_root("drift-none");
    assert_eq!(
        effective_registration(&options(&root, Engine::Docker)).unwrap(),
        Registration::NotInstalled
    );
    let (code, text) = check(&root, "docker");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("not installed"), "{text}");
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn docker_default_taken_away_is_drift() {
    let root = host_root("drift-docker");
    put(&root, "etc/docker/daemon.json", "{}\n");
    let mut o = options(&root, Engine::Docker);
    o.set_default = true;
    run(&o);
    assert_eq!(effective_registration(&o).unwrap(), Registration::Ok);
    assert_eq!(check(&root, "docker").0, Some(0));
    // An admin puts runc back as the default.
    put(
        &root,
        "etc/docker/daemon.json",
        "{\"default-runtime\": \"runc\", \"runtimes\": {\"gpu-guard\": {\"path\": \"/usr/bin/gpu-guard-runtime\"}}}\n",
    );
    let d = drift(&root, Engine::Docker);
    assert_eq!(
        d.file.as_deref(),
        Some(Path::new("/etc/docker/daemon.json"))
    );
    assert!(
        d.message.contains("default runtime is `runc`"),
        "{}",
        d.message
    );
    assert_eq!(
        d.fix,
        "gpu-guard install docker --set-default && systemctl restart docker"
    );
    let (code, text) = check(&root, "docker");
    assert_eq!(code, Some(1));
    assert!(
        text.contains("(file: /etc/docker/daemon.json)")
            && text.contains("fix: gpu-guard install docker --set-default"),
        "{text}"
    );
    // The runtime removed by hand.
    put(&root, "etc/docker/daemon.json", "{}\n");
    assert!(drift(&root, Engine::Docker)
        .message
        .contains("registers no `gpu-guard` runtime"));
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn crio_later_drop_in_is_drift_naming_it() {
    let root = host_root("drift-crio");
    put(
        &root,
        "etc/crio/crio.conf",
        "[crio.runtime]\ndefault_runtime = \"runc\"\n",
    );
    let mut o = options(&root, Engine::Crio);
    o.set_default = true;
    run(&o);
    assert_eq!(effective_registration(&o).unwrap(), Registration::Ok);
    put(
        &root,
        "etc/crio/crio.conf.d/99-zz-nvidia.toml",
        "[crio.runtime]\ndefault_runtime = \"nvidia\"\n",
    );
    let d = drift(&root, Engine::Crio);
    assert_eq!(
        d.file.as_deref(),
        Some(Path::new("/etc/crio/crio.conf.d/99-zz-nvidia.toml"))
    );
    assert!(
        d.message.contains("default runtime is `nvidia`"),
        "{}",
        d.message
    );
    fs::remove_file(root.join("etc/crio/crio.conf.d/99-zz-nvidia.toml")).unwrap();
    // Our handler edited to lose its root: the wrapper could not tell CRI-O.
    let drop = root.join("etc/crio/crio.conf.d/99-gpu-guard.toml");
    let text = fs::read_to_string(&drop).unwrap();
    fs::write(
        &drop,
        text.replace("runtime_root = \"/run/gpu-guard/crio\"\n", ""),
    )
    .unwrap();
    let d = drift(&root, Engine::Crio);
    assert!(d.message.contains("runtime_root"), "{}", d.message);
    assert_eq!(
        d.file.as_deref(),
        Some(Path::new("/etc/crio/crio.conf.d/99-gpu-guard.toml"))
    );
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn podman_hooks_dir_taken_away_or_hook_removed_is_drift() {
    let root = host_root("drift-podman");
    let o = options(&root, Engine::Podman);
    run(&o);
    assert_eq!(effective_registration(&o).unwrap(), Registration::Ok);
    // A later containers.conf drop-in replaces hooks_dir.
    put(
        &root,
        "etc/containers/containers.conf.d/zz-site.conf",
        "[engine]\nhooks_dir = [\"/usr/share/containers/oci/hooks.d\"]\n",
    );
    let d = drift(&root, Engine::Podman);
    assert_eq!(
        d.file.as_deref(),
        Some(Path::new("/etc/containers/containers.conf.d/zz-site.conf"))
    );
    assert!(
        d.message.contains("never runs gpu-guard's precreate hook"),
        "{}",
        d.message
    );
    assert_eq!(d.fix, "gpu-guard install podman");
    fs::remove_file(root.join("etc/containers/containers.conf.d/zz-site.conf")).unwrap();
    fs::remove_file(root.join("etc/containers/oci/hooks.d/gpu-guard-precreate.json")).unwrap();
    assert!(drift(&root, Engine::Podman).message.contains("is missing"));
    // The repair the fix names.
    run(&o);
    assert_eq!(effective_registration(&o).unwrap(), Registration::Ok);
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn an_edited_file_of_ours_is_drift() {
    let root = host_root("drift-edited");
    put(
        &root,
        "etc/containerd/config.toml",
        "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
    );
    fs::create_dir_all(root.join("etc/containerd/conf.d")).unwrap();
    let o = options(&root, Engine::Containerd);
    run(&o);
    assert_eq!(effective_registration(&o).unwrap(), Registration::Ok);
    let drop = root.join("etc/containerd/conf.d/99-gpu-guard.toml");
    let text = fs::read_to_string(&drop).unwrap();
    fs::write(
        &drop,
        format!("{text}\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\nbin_dir = \"/x\"\n"),
    )
    .unwrap();
    let d = drift(&root, Engine::Containerd);
    assert_eq!(
        d.file.as_deref(),
        Some(Path::new("/etc/containerd/conf.d/99-gpu-guard.toml"))
    );
    assert!(d.message.contains("out of date"), "{}", d.message);
    fs::remove_dir_all(root).unwrap();
}
