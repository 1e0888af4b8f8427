//! `gpu-guard install` and nvidia-ctk's conventions: an NVIDIA
//! runtime registered but not the default is named, `--chain-runtime
//! nvidia|PATH` chains to it, `--set-as-default` is nvidia-ctk's spelling,
//! a `--config` that is not a gpu-guard config (nvidia-ctk's flag for the
//! engine's file) is refused with a hint, and `uninstall --help` shows only
//! what uninstall uses. And a chain stays with its engine.

use std::fs;
use std::path::Path;

use crate::install_support::*;
use gpu_guard::core::runtime_engines::Engine;

/// daemon.json after `nvidia-ctk runtime configure --runtime=docker`:
/// NVIDIA's runtime registered, not the default.
const DOCKER_NVIDIA_REGISTERED: &str =
    "{\n    \"runtimes\": {\n        \"nvidia\": {\n            \"args\": [],\n            \"path\": \"nvidia-container-runtime\"\n        }\n    }\n}\n";

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

fn gg(root: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = bin()
        .args(args)
        .arg("--host-root")
        .arg(root)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn help(args: &[&str]) -> String {
    let out = bin().args(args).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn uninstall_help_shows_only_what_uninstall_uses() {
    let u = help(&["uninstall", "--help"]);
    for absent in [
        "--set-default",
        "--set-as-default",
        "--chain-runtime",
        "--check",
        "--bin-dir",
    ] {
        assert!(
            !u.contains(absent),
            "uninstall --help offers {absent}:\n{u}"
        );
    }
    for present in ["--dry-run", "--config-path", "--host-root", "--state-dir"] {
        assert!(u.contains(present), "{present}:\n{u}");
    }
    let i = help(&["install", "--help"]);
    for present in [
        "--set-default",
        "--set-as-default",
        "--chain-runtime",
        "--check",
        "--bin-dir",
    ] {
        assert!(i.contains(present), "{present}:\n{i}");
    }
}

#[test]
fn set_as_default_is_set_default() {
    let root = host_root("conv-set-as-default");
    put(&root, "etc/docker/daemon.json", "{}\n");
    let (code, _, err) = gg(
        &root,
        &[
            "install",
            "docker",
            "--set-as-default",
            "--bin-dir",
            "/usr/bin",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(root.join("etc/docker/daemon.json")).unwrap())
            .unwrap();
    assert_eq!(v["default-runtime"], "gpu-guard");
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_config_that_is_not_gpu_guards_is_refused_with_a_hint() {
    let root = host_root("conv-config");
    let daemon = root.join("etc/docker/daemon.json");
    put(&root, "etc/docker/daemon.json", DOCKER_NVIDIA_REGISTERED);
    let containerd = root.join("etc/containerd/config.toml");
    put(&root, "etc/containerd/config.toml", "version = 2\n");
    for (engine, file) in [("docker", &daemon), ("containerd", &containerd)] {
        let before = fs::read_to_string(file).unwrap();
        let out = bin()
            .arg("--config")
            .arg(file)
            .args(["install", engine, "--bin-dir", "/usr/bin", "--host-root"])
            .arg(&root)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("is not a gpu-guard config"), "{err}");
        assert!(
            err.contains(&format!("use --config-path {}", file.display())),
            "{err}"
        );
        assert_eq!(fs::read_to_string(file).unwrap(), before);
    }
    // Nothing was written anywhere on the host.
    assert_eq!(
        files_under(&root),
        [
            "etc/containerd/config.toml",
            "etc/docker/daemon.json",
            "usr/bin/gpu-guard",
            "usr/bin/gpu-guard-runtime"
        ]
    );
    // A missing --config is refused too (nvidia-ctk would create it).
    let out = bin()
        .arg("--config")
        .arg(root.join("etc/docker/nothing.json"))
        .args(["install", "docker", "--bin-dir", "/usr/bin", "--host-root"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config-path"));
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn nvidia_registered_but_not_default_is_named_and_can_be_chained() {
    let root = host_root("conv-chain");
    put(&root, "usr/bin/nvidia-container-runtime", "#!/bin/sh\n");
    put(&root, "etc/docker/daemon.json", DOCKER_NVIDIA_REGISTERED);
    let chain = root.join("etc/gpu-guard/config.d/50-chain-docker.toml");
    let (code, _, err) = gg(
        &root,
        &["install", "docker", "--bin-dir", "/usr/bin", "--dry-run"],
    );
    assert_eq!(code, Some(0));
    assert!(
        err.contains("registers NVIDIA's runtime `nvidia`")
            && err.contains("--chain-runtime nvidia"),
        "{err}"
    );
    let (code, _, err) = gg(
        &root,
        &[
            "install",
            "docker",
            "--bin-dir",
            "/usr/bin",
            "--chain-runtime",
            "nvidia",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(
        fs::read_to_string(&chain).unwrap(),
        gpu_guard::install::chain_text(Engine::Docker, "/usr/bin/nvidia-container-runtime")
    );
    // A later install without the flag keeps the operator's choice.
    let (code, out, err) = gg(&root, &["install", "docker", "--bin-dir", "/usr/bin"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("nothing to change"), "{out}{err}");
    assert!(!err.contains("warning"), "{err}");
    // A path, and what is refused.
    let (code, _, err) = gg(
        &root,
        &[
            "install",
            "docker",
            "--bin-dir",
            "/usr/bin",
            "--chain-runtime",
            "/usr/bin/nvidia-container-runtime",
            "--dry-run",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    for (engine, choice, says) in [
        ("docker", "nvidia-container-runtime", "absolute host path"),
        ("docker", "/usr/bin/none", "no such file"),
        ("podman", "nvidia", "does not apply"),
    ] {
        let (code, _, err) = gg(
            &root,
            &[
                "install",
                engine,
                "--bin-dir",
                "/usr/bin",
                "--chain-runtime",
                choice,
                "--dry-run",
            ],
        );
        assert_eq!(code, Some(2), "{choice}: {err}");
        assert!(err.contains(says), "{choice}: {err}");
    }
    let (code, _, _) = gg(&root, &["uninstall", "docker"]);
    assert_eq!(code, Some(0));
    assert!(!chain.exists());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn containerd_and_crio_name_a_registered_nvidia_runtime_too() {
    let root = host_root("conv-ctd");
    put(
        &root,
        "etc/containerd/config.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\n",
    );
    put(
        &root,
        "etc/crio/crio.conf",
        "[crio.runtime.runtimes.nvidia]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\nruntime_type = \"oci\"\n",
    );
    for engine in ["containerd", "crio"] {
        let (code, _, err) = gg(
            &root,
            &["install", engine, "--bin-dir", "/usr/bin", "--dry-run"],
        );
        assert_eq!(code, Some(0), "{engine}: {err}");
        assert!(err.contains("--chain-runtime nvidia"), "{engine}: {err}");
    }
    fs::remove_dir_all(root).unwrap();
}

/// docker's default is NVIDIA's runtime, containerd's is runc: after both
/// installs each engine's wrapper chains to its own, not to one global
/// runtime.path.
#[test]
fn two_engines_keep_their_own_chains() {
    let root = host_root("conv-two");
    put(&root, "usr/bin/nvidia-container-runtime", "#!/bin/sh\n");
    put(
        &root,
        "etc/docker/daemon.json",
        "{\"default-runtime\": \"nvidia\", \"runtimes\": {\"nvidia\": {\"path\": \"/usr/bin/nvidia-container-runtime\"}}}\n",
    );
    put(&root, "etc/containerd/config.toml", "version = 2\n");
    put(&root, "etc/gpu-guard/config.toml", "");
    for e in ["docker", "containerd"] {
        let (code, _, err) = gg(&root, &["install", e, "--bin-dir", "/usr/bin"]);
        assert_eq!(code, Some(0), "{e}: {err}");
    }
    let cfg = gpu_guard::config::load(Some(&root.join("etc/gpu-guard/config.toml"))).unwrap();
    assert_eq!(
        cfg.chained_runtime(Some(Engine::Docker)),
        "/usr/bin/nvidia-container-runtime"
    );
    assert_eq!(cfg.chained_runtime(Some(Engine::Containerd)), "");
    assert_eq!(cfg.chained_runtime(None), "");
    // Each engine's wrapper is told apart by its runtime root.
    assert_eq!(
        cfg.engine_for_root(Path::new("/run/gpu-guard/containerd/k8s.io")),
        Some(Engine::Containerd)
    );
    assert_eq!(
        cfg.engine_for_root(Path::new("/var/run/docker/runtime-runc/moby")),
        Some(Engine::Docker)
    );
    let ctd = fs::read_to_string(root.join("etc/containerd/config.toml")).unwrap();
    assert!(
        ctd.contains("Root = \"/run/gpu-guard/containerd\""),
        "{ctd}"
    );
    for e in ["docker", "containerd"] {
        assert_eq!(gg(&root, &["uninstall", e]).0, Some(0));
    }
    assert!(!root.join("etc/gpu-guard/config.d").exists());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn engine_tables_parse_validate_and_keep_default_roots() {
    use gpu_guard::config::parse;
    let c =
        parse("[runtime.engines.containerd]\npath = \"/x/nvidia-container-runtime\"\n").unwrap();
    assert_eq!(
        c.chained_runtime(Some(Engine::Containerd)),
        "/x/nvidia-container-runtime"
    );
    assert_eq!(
        c.runtime.engines.root(Engine::Containerd),
        "/run/gpu-guard/containerd"
    );
    assert_eq!(c.runtime.engines.root(Engine::Crio), "/run/gpu-guard/crio");
    let c = parse("[runtime.engines.crio]\nroot = \"/srv/crio-root\"\n").unwrap();
    assert_eq!(
        c.engine_for_root(Path::new("/srv/crio-root/x")),
        Some(Engine::Crio)
    );
    assert_eq!(c.engine_for_root(Path::new("/run/gpu-guard/crio")), None);
    for (bad, says) in [
        ("[runtime.engines.kata]\npath = \"x\"\n", "kata"),
        (
            "[runtime.engines.docker]\nroot = \"var/run\"\n",
            "runtime.engines.docker.root",
        ),
        (
            "[runtime.engines.podman]\nroot = \"/run/gpu-guard\"\n",
            "runtime.engines.podman.root",
        ),
        ("[runtime.engines.crio]\nrooot = \"/x\"\n", "rooot"),
    ] {
        let e = parse(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn a_moved_docker_exec_root_names_the_config_key() {
    use gpu_guard::install::docker::root_warning;
    let text = "{\"exec-root\": \"/srv/docker-exec/\"}";
    let w = root_warning(Some(text), "/var/run/docker/runtime-runc").unwrap();
    assert!(
        w.contains("runtime.engines.docker.root = \"/srv/docker-exec/runtime-runc\""),
        "{w}"
    );
    assert_eq!(
        root_warning(Some(text), "/srv/docker-exec/runtime-runc"),
        None
    );
    assert_eq!(
        root_warning(Some("{}"), "/var/run/docker/runtime-runc"),
        None
    );
    assert_eq!(
        root_warning(
            Some("{\"exec-root\": \"/run/docker\"}"),
            "/var/run/docker/runtime-runc"
        ),
        None
    );
}
