//! `gpu-guard install ENGINE --chain-runtime amd` through the binary: the
//! wrapper chains AMD's `amd-container-runtime` as `amd-ctk runtime
//! configure` registers it with docker (runtime `amd`, by its bare name),
//! found on the host's PATH where the engine registers none; install names
//! a registered AMD runtime it will not chain, chains it without the flag
//! where it is the engine's default, and refuses `amd` where there is no
//! AMD runtime. Under the chain, `AMD_VISIBLE_DEVICES` attaches GPUs (AMD's
//! runtime adds them to the spec): `check --engine` judges such a
//! container on the GPUs it names, and not under runc.

use std::fs;
use std::path::{Path, PathBuf};

use crate::install_support::on_host_root as gg;
use crate::install_support::*;
use gpu_guard::install::Engine;

const AMD: &str = "/usr/bin/amd-container-runtime";

/// daemon.json as `amd-ctk runtime configure` writes it (runtime `amd` by
/// its bare name, CDI on); `default` adds `--set-as-default`.
fn amd_ctk_daemon_json(default: bool) -> String {
    let d = if default {
        "\n    \"default-runtime\": \"amd\","
    } else {
        ""
    };
    format!(
        "{{{d}\n    \"features\": {{\n        \"cdi\": true\n    }},\n    \"runtimes\": {{\n        \"amd\": {{\n            \"args\": [],\n            \"path\": \"amd-container-runtime\"\n        }}\n    }}\n}}\n"
    )
}

fn put(root: &Path, rel: &str, text: &str) -> PathBuf {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, text).unwrap();
    p
}

fn chain(root: &Path, engine: &str) -> PathBuf {
    root.join(format!("etc/gpu-guard/config.d/50-chain-{engine}.toml"))
}

#[test]
fn docker_chains_amds_runtime_when_asked_and_when_it_is_the_default() {
    let root = host_root("chain-amd");
    put(&root, "usr/bin/amd-container-runtime", "#!/bin/sh\n");
    put(&root, "etc/docker/daemon.json", &amd_ctk_daemon_json(false));
    // Registered, not the default: named, with the flag that keeps it.
    let (code, out) = gg(&root, &["install", "docker", "--dry-run"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("registers AMD's runtime `amd` (amd-container-runtime)")
            && out.contains("--chain-runtime amd"),
        "{out}"
    );
    let (code, out) = gg(&root, &["install", "docker", "--chain-runtime", "amd"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("warning"), "{out}");
    assert_eq!(
        fs::read_to_string(chain(&root, "docker")).unwrap(),
        gpu_guard::install::chain_text(Engine::Docker, AMD)
    );
    // gpu-guard's config reads it for docker's containers only.
    let conf = root.join("etc/gpu-guard/config.toml");
    put(&root, "etc/gpu-guard/config.toml", "");
    let loaded = gpu_guard::config::load_detailed(Some(&conf)).unwrap();
    assert_eq!(loaded.config.chained_runtime(Some(Engine::Docker)), AMD);
    assert_eq!(loaded.config.chained_runtime(Some(Engine::Containerd)), "");
    // Reinstalled without the flag: the choice is kept.
    let (code, out) = gg(&root, &["install", "docker"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("nothing to change"), "{out}");
    let (code, _) = gg(&root, &["uninstall", "docker"]);
    assert_eq!(code, Some(0));
    assert!(!chain(&root, "docker").exists());
    // `amd-ctk runtime configure --set-as-default`: chained without a flag.
    put(&root, "etc/docker/daemon.json", &amd_ctk_daemon_json(true));
    let (code, out) = gg(&root, &["install", "docker", "--set-default"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        fs::read_to_string(chain(&root, "docker")).unwrap(),
        gpu_guard::install::chain_text(Engine::Docker, AMD)
    );
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn amd_is_found_on_the_hosts_path_or_refused() {
    let root = host_root("chain-amd-path");
    put(&root, "etc/containerd/config.toml", "version = 2\n");
    // No AMD runtime at all: bad usage, saying what is missing.
    let (code, out) = gg(
        &root,
        &[
            "install",
            "containerd",
            "--chain-runtime",
            "amd",
            "--dry-run",
        ],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(
            "registers no AMD runtime and amd-container-runtime is not on the host's PATH"
        ),
        "{out}"
    );
    // Installed but not registered (containerd): its host path.
    put(&root, "usr/bin/amd-container-runtime", "#!/bin/sh\n");
    let (code, out) = gg(&root, &["install", "containerd", "--chain-runtime", "amd"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        fs::read_to_string(chain(&root, "containerd")).unwrap(),
        gpu_guard::install::chain_text(Engine::Containerd, AMD)
    );
    // An unknown vendor word names the choices.
    let (code, out) = gg(
        &root,
        &["install", "docker", "--chain-runtime", "intel", "--dry-run"],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("give `nvidia`, `amd`"), "{out}");
    fs::remove_dir_all(root).unwrap();
}

/// `check --json --spec --engine ENGINE` of a container with only
/// `AMD_VISIBLE_DEVICES=1`, docker chaining AMD's runtime (a stand-in),
/// containerd runc, on MI300X facts.
#[test]
fn amd_visible_devices_attach_gpus_under_the_amd_chain_only() {
    let dir = tempdir("chain-amd-check");
    let bin_of = |name: &str| {
        let p = put(&dir, name, "#!/bin/sh\nexit 0\n");
        fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        p
    };
    let (amd, runc) = (bin_of("amd-container-runtime"), bin_of("runc"));
    let probe = put(
        &dir,
        "probe.toml",
        "[host]\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\ncache_file = \"\"\n",
    );
    let o = bin()
        .arg("--config")
        .arg(&probe)
        .args(["host", "--json", "--host-root"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/amd/mi300x"))
        .output()
        .unwrap();
    let facts = put(&dir, "mi300x.json", &String::from_utf8_lossy(&o.stdout));
    let cfg = put(
        &dir,
        "config.toml",
        &format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n[runtime.engines.docker]\npath = \"{}\"\n[runtime.engines.containerd]\npath = \"{}\"\n",
            facts.display(),
            amd.display(),
            runc.display()
        ),
    );
    let spec = put(
        &dir,
        "spec.json",
        r#"{"ociVersion":"1.0.2","process":{"args":["true"],"cwd":"/","env":["PATH=/bin","AMD_VISIBLE_DEVICES=1"],"noNewPrivileges":true},"root":{"path":"rootfs"}}"#,
    );
    let check = |engine: &str| {
        let o = bin()
            .arg("--config")
            .arg(&cfg)
            .args(["check", "--json", "--spec"])
            .arg(&spec)
            .args(["--engine", engine])
            .env_remove("GPU_GUARD_CONFIG")
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&o.stderr));
        });
        (o.status.code(), v)
    };
    let (code, v) = check("docker");
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["gpu_container"], true, "{v}");
    assert_eq!(v["visible_gpus"], serde_json::json!([1]), "{v}");
    let (code, v) = check("containerd");
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(
        v["gpu_container"], false,
        "nothing attaches it under runc: {v}"
    );
    fs::remove_dir_all(dir).unwrap();
}
