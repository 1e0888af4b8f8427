//! `gpu-guard install containerd --config-path .../config.toml.tmpl`: k3s
//! and RKE2 rewrite their containerd `config.toml` at every start from
//! that template, so install edits the template and never the generated
//! file. tests/data/install/k3s/config.toml is k3s's base template
//! (k3s pkg/agent/templates/templates_linux.go) as k3s renders it on a node
//! with NVIDIA's runtime and the systemd cgroup driver; the tests render the
//! template the same way (the base for `{{ template "base" . }}`,
//! `{{ .SystemdCgroup }}` as true) and hand the result to the real
//! `containerd config dump`.

use crate::install_support::on_host_root as gg;
use crate::install_support::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const K3S: &str = "/var/lib/rancher/k3s/agent/etc/containerd";
const RKE2: &str = "/var/lib/rancher/rke2/agent/etc/containerd";

fn rendered_base() -> String {
    fs::read_to_string(data("k3s/config.toml")).unwrap()
}

/// A host root with gpu-guard and k3s's rendered config.toml.
fn k3s_root(tag: &str, dir: &str, base: Option<&str>) -> PathBuf {
    let root = host_root(tag);
    let d = root.join(dir.trim_start_matches('/'));
    fs::create_dir_all(&d).unwrap();
    if let Some(b) = base {
        fs::write(d.join("config.toml"), b).unwrap();
    }
    root
}

/// What k3s writes to config.toml from the template at its next start.
fn render(template: &str, base: &str) -> String {
    template
        .replace("{{ template \"base\" . }}", base)
        .replace("{{ .SystemdCgroup }}", "true")
}

fn dump(config: &Path) -> toml::Table {
    let out = Command::new("containerd")
        .arg("--config")
        .arg(config)
        .args(["config", "dump"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "containerd config dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).parse().unwrap()
}

#[test]
fn a_new_template_keeps_k3s_base_and_adds_gpu_guard() {
    let base = rendered_base();
    let root = k3s_root("k3s-new", K3S, Some(&base));
    let tmpl = format!("{K3S}/config.toml.tmpl");
    let (code, out) = gg(&root, &["install", "containerd", "--config-path", &tmpl]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("systemctl restart k3s"),
        "the restart is k3s's: {out}"
    );
    assert!(out.contains("is a template"), "{out}");
    let text = fs::read_to_string(root.join(tmpl.trim_start_matches('/'))).unwrap();
    assert!(
        text.starts_with("{{ template \"base\" . }}\n"),
        "k3s's own settings stay: {text}"
    );
    assert!(
        text.contains("SystemdCgroup = {{ .SystemdCgroup }}"),
        "{text}"
    );
    // The generated file is k3s's: untouched.
    assert_eq!(
        fs::read_to_string(root.join(&K3S[1..]).join("config.toml")).unwrap(),
        base
    );
    // A second install changes nothing.
    let (code, out) = gg(&root, &["install", "containerd", "--config-path", &tmpl]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("nothing to change"), "{out}");
    // Until k3s renders it again, its containerd does not run gpu-guard.
    let (code, out) = gg(
        &root,
        &["install", "containerd", "--check", "--config-path", &tmpl],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("has not rendered the template since install"),
        "{out}"
    );
    assert!(out.contains("systemctl restart k3s"), "{out}");
    // k3s restarts: the rendered config is one containerd loads, with
    // gpu-guard's runtime, k3s's settings and NVIDIA's runtime kept.
    let rendered = render(&text, &base);
    let generated = root.join(&K3S[1..]).join("config.toml");
    fs::write(&generated, &rendered).unwrap();
    let (code, out) = gg(
        &root,
        &["install", "containerd", "--check", "--config-path", &tmpl],
    );
    assert_eq!(code, Some(0), "{out}");
    if have_tool("containerd") {
        let d = dump(&generated);
        let cri = &d["plugins"]["io.containerd.grpc.v1.cri"];
        let ours = &cri["containerd"]["runtimes"]["gpu-guard"];
        assert_eq!(
            ours["options"]["BinaryName"].as_str(),
            Some("/usr/bin/gpu-guard-runtime"),
            "{d:#?}"
        );
        assert_eq!(
            ours["options"]["SystemdCgroup"].as_bool(),
            Some(true),
            "{ours:#?}"
        );
        assert_eq!(
            ours["options"]["Root"].as_str(),
            Some("/run/gpu-guard/containerd")
        );
        assert_eq!(
            cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"].as_str(),
            Some("/usr/bin/nvidia-container-runtime")
        );
        assert_eq!(cri["containerd"]["snapshotter"].as_str(), Some("overlayfs"));
        assert_eq!(
            cri["cni"]["conf_dir"].as_str(),
            Some("/var/lib/rancher/k3s/agent/etc/cni/net.d")
        );
    }
    // Uninstall removes the template install created; k3s's config stays.
    let (code, out) = gg(&root, &["uninstall", "containerd"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!root.join(tmpl.trim_start_matches('/')).exists(), "{out}");
    assert!(generated.exists());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn an_existing_template_keeps_its_own_lines() {
    let root = k3s_root(
        "k3s-own",
        RKE2,
        Some(&rendered_base().replace("k3s", "rke2")),
    );
    let tmpl = format!("{RKE2}/config.toml.tmpl");
    let mine = "{{ template \"base\" . }}\n\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n";
    let path = root.join(tmpl.trim_start_matches('/'));
    fs::write(&path, mine).unwrap();
    let (code, out) = gg(&root, &["install", "containerd", "--config-path", &tmpl]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("systemctl restart rke2-server"), "{out}");
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(mine), "{text}");
    assert!(text.contains("# BEGIN gpu-guard"), "{text}");
    // Uninstall gives the admin's template back byte for byte.
    let (code, out) = gg(&root, &["uninstall", "containerd"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(fs::read_to_string(&path).unwrap(), mine);
    // k3s sets its default runtime with its own flag.
    let (code, out) = gg(
        &root,
        &[
            "install",
            "containerd",
            "--set-default",
            "--config-path",
            &tmpl,
        ],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("--default-runtime gpu-guard"), "{out}");
    assert!(out.contains("/etc/rancher/k3s/config.yaml"), "{out}");
    assert!(!out.contains("cannot edit safely"), "{out}");
    assert_eq!(fs::read_to_string(&path).unwrap(), mine, "left untouched");
    // A gpu-guard runtime the admin wrote is not overwritten.
    let theirs = format!("{mine}[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.\"gpu-guard\"]\n  runtime_type = \"x\"\n");
    fs::write(&path, &theirs).unwrap();
    let (code, out) = gg(&root, &["install", "containerd", "--config-path", &tmpl]);
    assert_eq!(code, Some(2), "{out}");
    assert_eq!(fs::read_to_string(&path).unwrap(), theirs);
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_plain_toml_template_is_edited_as_a_config() {
    let base = rendered_base();
    let root = k3s_root("k3s-plain", K3S, Some(&base));
    let tmpl = format!("{K3S}/config.toml.tmpl");
    let path = root.join(tmpl.trim_start_matches('/'));
    // The common recipe: copy config.toml to config.toml.tmpl, then edit.
    fs::write(&path, &base).unwrap();
    let (code, out) = gg(&root, &["install", "containerd", "--config-path", &tmpl]);
    assert_eq!(code, Some(0), "{out}");
    let text = fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains("BEGIN gpu-guard"),
        "plain TOML gets no block: {text}"
    );
    let doc: toml::Table = text.parse().unwrap();
    let rt = &doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["gpu-guard"];
    assert_eq!(
        rt["options"]["BinaryName"].as_str(),
        Some("/usr/bin/gpu-guard-runtime")
    );
    assert_eq!(
        rt["options"]["SystemdCgroup"].as_bool(),
        Some(true),
        "copied from runc"
    );
    assert_eq!(
        fs::read_to_string(root.join(&K3S[1..]).join("config.toml")).unwrap(),
        base
    );
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn nvidia_as_k3s_default_is_chained_and_v3_templates() {
    let base = rendered_base().replace(
        "  snapshotter = \"overlayfs\"\n",
        "  snapshotter = \"overlayfs\"\n  default_runtime_name = \"nvidia\"\n",
    );
    let root = k3s_root("k3s-chain", K3S, Some(&base));
    fs::write(root.join("usr/bin/nvidia-container-runtime"), "").unwrap();
    let tmpl = format!("{K3S}/config.toml.tmpl");
    let (code, out) = gg(&root, &["install", "containerd", "--config-path", &tmpl]);
    assert_eq!(code, Some(0), "{out}");
    let chain = root.join("etc/gpu-guard/config.d/50-chain-containerd.toml");
    let text = fs::read_to_string(&chain).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(
        text.contains("path = \"/usr/bin/nvidia-container-runtime\""),
        "{text}"
    );
    fs::remove_dir_all(root).unwrap();
    // containerd 2.x's template, before k3s rendered anything.
    let root = k3s_root("k3s-v3", K3S, None);
    let tmpl = format!("{K3S}/config-v3.toml.tmpl");
    let (code, out) = gg(&root, &["install", "containerd", "--config-path", &tmpl]);
    assert_eq!(code, Some(0), "{out}");
    let text = fs::read_to_string(root.join(tmpl.trim_start_matches('/'))).unwrap();
    assert!(
        text.contains("[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.gpu-guard]"),
        "{text}"
    );
    fs::remove_dir_all(root).unwrap();
}

/// Without --config-path, install finds k3s's and RKE2's containerd under
/// the host root by their rendered config.toml, and edits the template
/// they render it from: never a new /etc/containerd/config.toml, which
/// neither reads.
#[test]
fn k3s_and_rke2_are_found_without_a_config_path() {
    for (dir, unit) in [(K3S, "systemctl restart k3s"), (RKE2, "rke2-server")] {
        let root = k3s_root("k3s-detect", dir, Some(&rendered_base()));
        let (code, out) = gg(&root, &["install", "containerd", "--dry-run"]);
        assert_eq!(code, Some(0), "{out}");
        let tmpl = format!("{}/config.toml.tmpl", &dir[1..]);
        assert!(
            out.contains(&format!("+++ b/{tmpl}")) || out.contains(&tmpl),
            "{out}"
        );
        assert!(!out.contains("etc/containerd/config.toml\n"), "{out}");
        assert!(!root.join("etc/containerd").exists(), "{out}");
        let (code, out) = gg(&root, &["install", "containerd"]);
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains(unit), "the restart is {unit}'s: {out}");
        let text = fs::read_to_string(root.join(&tmpl)).unwrap();
        assert!(text.contains("# BEGIN gpu-guard"), "{text}");
        assert!(!root.join("etc/containerd").exists(), "{out}");
        // Once rendered, the drift check reads the rendered file.
        fs::write(
            root.join(&dir[1..]).join("config.toml"),
            render(&text, &rendered_base()),
        )
        .unwrap();
        let (code, out) = gg(&root, &["install", "containerd", "--check"]);
        assert_eq!(code, Some(0), "{out}");
        let o = bin()
            .args(["doctor", "--host-root"])
            .arg(&root)
            .env_remove("GPU_GUARD_CONFIG")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(out.contains("engine.containerd"), "{out}");
        assert!(!out.contains("containerd is on this node but"), "{out}");
        let (code, out) = gg(&root, &["uninstall", "containerd"]);
        assert_eq!(code, Some(0), "{out}");
        assert!(!root.join(&tmpl).exists(), "{out}");
        fs::remove_dir_all(root).unwrap();
    }
}

/// A k3s whose containerd is 2.x renders a version 3 config from
/// config-v3.toml.tmpl: that is the template install writes.
#[test]
fn a_version_3_k3s_gets_the_v3_template() {
    let v3 = "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n";
    let root = k3s_root("k3s-v3", K3S, Some(v3));
    let (code, out) = gg(&root, &["install", "containerd"]);
    assert_eq!(code, Some(0), "{out}");
    let text = fs::read_to_string(root.join(&K3S[1..]).join("config-v3.toml.tmpl")).unwrap();
    assert!(text.contains("\"io.containerd.cri.v1.runtime\""), "{text}");
    assert!(!root.join(&K3S[1..]).join("config.toml.tmpl").exists());
    fs::remove_dir_all(root).unwrap();
}
