//! `gpu-guard install` chains the runtime wrapper to NVIDIA's runtime when
//! that is the engine's default: a gpu-guard config drop-in
//! (`/etc/gpu-guard/config.d/50-chain-ENGINE.toml`, `[runtime.engines.ENGINE]
//! path`, read only for that engine's invocations) recorded in the
//! install state, a no-op on reinstall, removed by uninstall while
//! unchanged. And `install containerd` passes CDI annotations through,
//! never a pattern that would let a pod forge the keys security
//! exceptions trust.

use std::fs;
use std::path::{Path, PathBuf};

use crate::install_support::*;
use gpu_guard::install::{self, containerd, Engine};

const NVIDIA: &str = "/usr/bin/nvidia-container-runtime";

fn chain_path(root: &Path, engine: &str) -> PathBuf {
    root.join(format!("etc/gpu-guard/config.d/50-chain-{engine}.toml"))
}

fn state(root: &Path, engine: &str) -> serde_json::Value {
    serde_json::from_str(
        &fs::read_to_string(root.join(format!("var/lib/gpu-guard/engines/{engine}.json"))).unwrap(),
    )
    .unwrap()
}

fn put(root: &Path, rel: &str, text: &str) -> PathBuf {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, text).unwrap();
    p
}

/// NVIDIA's runtime binary on the fake host.
fn nvidia_binary(root: &Path) {
    put(root, "usr/bin/nvidia-container-runtime", "#!/bin/sh\n");
}

/// The install → reinstall → uninstall round trip for one engine whose
/// default runtime is NVIDIA's; `config` is the engine config (rel path).
fn round_trip(engine: Engine, name: &str, config: &str, before: &str, set_default: bool) {
    let root = host_root(&format!("chain-{name}-{set_default}"));
    nvidia_binary(&root);
    let cfg = put(&root, config, before);
    // The admin's own gpu-guard config: never touched.
    let conffile = put(&root, "etc/gpu-guard/config.toml", "mode = \"enforce\"\n");
    let mut o = options(&root, engine);
    o.set_default = set_default;

    let changed = run(&o);
    let chain = chain_path(&root, name);
    assert!(changed.contains(&chain), "{name}: {changed:?}");
    let text = fs::read_to_string(&chain).unwrap();
    golden(&format!("chain/{name}.toml"), &text);
    assert_eq!(text, install::chain_text(engine, NVIDIA));
    let st = state(&root, name);
    assert_eq!(st["chain"]["runtime"], NVIDIA, "{name}");
    assert_eq!(
        st["chain"]["file"],
        format!("/etc/gpu-guard/config.d/50-chain-{name}.toml")
    );
    // gpu-guard reads it: the wrapper's chain for this engine only, from
    // that file; the global runtime.path (every other engine) is untouched.
    let loaded = gpu_guard::config::load_detailed(Some(&conffile)).unwrap();
    assert_eq!(loaded.config.chained_runtime(Some(engine)), NVIDIA);
    assert_eq!(loaded.config.runtime.path, "");
    for other in Engine::ALL.into_iter().filter(|e| *e != engine) {
        assert_eq!(loaded.config.chained_runtime(Some(other)), "", "{other:?}");
    }
    assert_eq!(loaded.config.chained_runtime(None), "");
    assert!(loaded.drop_ins.contains(&chain));

    // Reinstall: nothing changes, even with gpu-guard now the default.
    assert!(run(&o).is_empty(), "{name}: reinstall is a no-op");

    let mut u = o.clone();
    u.uninstall = true;
    u.set_default = false;
    let changed = run(&u);
    assert!(changed.contains(&chain), "{name}: {changed:?}");
    assert!(!chain.exists());
    assert!(!root.join("etc/gpu-guard/config.d").exists());
    assert_eq!(
        fs::read_to_string(&conffile).unwrap(),
        "mode = \"enforce\"\n"
    );
    assert_eq!(fs::read_to_string(&cfg).unwrap(), before, "{name}");
    assert!(run(&u).is_empty());
    fs::remove_dir_all(root).unwrap();
}

const CONTAINERD_NVIDIA: &str = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"nvidia\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\nSystemdCgroup = true\n";

const CRIO_NVIDIA: &str = "[crio.runtime]\ndefault_runtime = \"nvidia\"\n[crio.runtime.runtimes.nvidia]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\nruntime_type = \"oci\"\n";

const DOCKER_NVIDIA: &str = "{\n    \"default-runtime\": \"nvidia\",\n    \"runtimes\": {\n        \"nvidia\": {\n            \"args\": [],\n            \"path\": \"nvidia-container-runtime\"\n        }\n    }\n}\n";

#[test]
fn containerd_chains_to_nvidia() {
    for set_default in [false, true] {
        round_trip(
            Engine::Containerd,
            "containerd",
            "etc/containerd/config.toml",
            CONTAINERD_NVIDIA,
            set_default,
        );
    }
}

#[test]
fn crio_chains_to_nvidia() {
    round_trip(
        Engine::Crio,
        "crio",
        "etc/crio/crio.conf",
        CRIO_NVIDIA,
        false,
    );
}

#[test]
fn docker_chains_to_nvidia_resolving_a_bare_name_on_the_host() {
    for set_default in [false, true] {
        round_trip(
            Engine::Docker,
            "docker",
            "etc/docker/daemon.json",
            DOCKER_NVIDIA,
            set_default,
        );
    }
}

#[test]
fn containerd_nvidia_default_in_a_conf_d_drop_in() {
    let root = host_root("chain-confd");
    put(
        &root,
        "etc/containerd/config.toml",
        "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
    );
    // nvidia-ctk's drop-in mode.
    put(
        &root,
        "etc/containerd/conf.d/99-nvidia.toml",
        &CONTAINERD_NVIDIA.replace("/usr/bin/", "/usr/local/nvidia/toolkit/"),
    );
    run(&options(&root, Engine::Containerd));
    let text = fs::read_to_string(chain_path(&root, "containerd")).unwrap();
    assert!(
        text.contains("path = \"/usr/local/nvidia/toolkit/nvidia-container-runtime\""),
        "{text}"
    );
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn no_chain_without_nvidia_default() {
    let root = host_root("chain-none");
    put(
        &root,
        "etc/containerd/config.toml",
        &CONTAINERD_NVIDIA.replace(
            "default_runtime_name = \"nvidia\"",
            "default_runtime_name = \"runc\"",
        ),
    );
    put(
        &root,
        "etc/docker/daemon.json",
        "{\"runtimes\": {\"nvidia\": {\"path\": \"/usr/bin/nvidia-container-runtime\"}}}\n",
    );
    put(
        &root,
        "etc/crio/crio.conf",
        "[crio.runtime.runtimes.nvidia]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\n",
    );
    for (e, n) in [
        (Engine::Containerd, "containerd"),
        (Engine::Docker, "docker"),
        (Engine::Crio, "crio"),
    ] {
        let changed = run(&options(&root, e));
        assert!(!chain_path(&root, n).exists(), "{n}: {changed:?}");
        assert!(state(&root, n).get("chain").is_none(), "{n}");
    }
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn an_edited_chain_file_stays_and_nvidia_gone_removes_ours() {
    let root = host_root("chain-edited");
    nvidia_binary(&root);
    let cfg = put(&root, "etc/containerd/config.toml", CONTAINERD_NVIDIA);
    let o = options(&root, Engine::Containerd);
    run(&o);
    let chain = chain_path(&root, "containerd");
    // The admin edits it: uninstall leaves it, with a warning.
    fs::write(
        &chain,
        "[runtime.engines.containerd]\npath = \"/opt/nvidia-container-runtime\"\n",
    )
    .unwrap();
    let mut u = o.clone();
    u.uninstall = true;
    let plan = install::plan(&u).unwrap();
    assert!(
        plan.warnings.iter().any(|w| w.contains("was edited")),
        "{:?}",
        plan.warnings
    );
    install::apply(&u, &plan).unwrap();
    assert!(chain.exists());
    // Install again over the edited file: left alone, warned.
    let plan = install::plan(&o).unwrap();
    assert!(!plan.changes.iter().any(|c| c.path == chain));
    assert!(plan
        .warnings
        .iter()
        .any(|w| w.contains("not the one gpu-guard wrote")));
    fs::remove_file(&chain).unwrap();
    install::apply(&o, &install::plan(&o).unwrap()).unwrap();
    assert!(chain.exists());
    // NVIDIA stops being the default: reinstall takes our unchanged file away.
    fs::write(
        &cfg,
        CONTAINERD_NVIDIA.replace(
            "default_runtime_name = \"nvidia\"",
            "default_runtime_name = \"runc\"",
        ),
    )
    .unwrap();
    run(&o);
    assert!(!chain.exists());
    assert!(state(&root, "containerd").get("chain").is_none());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn containerd_passes_cdi_annotations_and_never_trusted_keys() {
    let before = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"runc\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\ncontainer_annotations = [\"io.kubernetes.cri.sandbox-namespace\", \"nvidia.com/*\", \"*\", \"io.kubernetes.cri.*\", \"io.[k]ubernetes.x\"]\npod_annotations = [\"io.kubernetes.*\", \"example.com/x\", \"io.kubernetes.pod.namespace\", \"io.*\"]\n";
    let out = containerd::install(Some(before), "/usr/bin/gpu-guard-runtime", false)
        .unwrap()
        .text;
    golden("containerd/annotations/install.toml", &out);
    let doc: toml::Table = out.parse().unwrap();
    let ours = &doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["gpu-guard"];
    let list = |k: &str| -> Vec<String> {
        ours[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        list("container_annotations"),
        ["nvidia.com/*", "cdi.k8s.io/*"]
    );
    assert_eq!(list("pod_annotations"), ["example.com/x"]);
    // runc's own table is the admin's: untouched.
    let runc = &doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"];
    assert_eq!(runc["container_annotations"].as_array().unwrap().len(), 5);
    // Reinstall: the same text.
    assert_eq!(
        containerd::install(Some(&out), "/usr/bin/gpu-guard-runtime", false)
            .unwrap()
            .text,
        out
    );
    for (p, bad) in [
        ("io.kubernetes.cri.image-name", true),
        ("io.kubernetes.*", true),
        ("*", true),
        ("io.*", true),
        ("io.kubernetes.cri.sandbox-?ame", true),
        ("cdi.k8s.io/*", false),
        ("nvidia.com/gpu.*", false),
        ("example.com/[a-z]", false),
    ] {
        assert_eq!(containerd::untrusted_pattern(p), bad, "{p}");
    }
}
