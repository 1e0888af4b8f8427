//! Golden tests for `gpu-guard install containerd`: config versions 1, 2
//! and 3, comments and other runtimes kept, conf.d drop-ins, idempotence,
//! uninstall round trips, invalid input untouched; and, where containerd is
//! installed, containerd itself reading the result (`containerd config dump`).

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::install_support::*;
use gpu_guard::install::containerd;
use gpu_guard::install::Engine;

const RUNTIME: &str = "/usr/bin/gpu-guard-runtime";
/// Cases edited in place (no conf.d import).
const MAIN_CASES: [&str; 7] = [
    "missing",
    "empty",
    "v1-no-version",
    "v2-kubeadm",
    "v2-nvidia",
    "v3-default",
    "v2-dotted",
];

#[test]
fn install_matches_golden_files() {
    for case in MAIN_CASES {
        let before = input(&format!("containerd/{case}/before.toml"));
        let plain = containerd::install(before.as_deref(), RUNTIME, false).unwrap();
        golden(&format!("containerd/{case}/install.toml"), &plain.text);
        let dflt = containerd::install(before.as_deref(), RUNTIME, true).unwrap();
        golden(
            &format!("containerd/{case}/install-default.toml"),
            &dflt.text,
        );
        // What install wrote is valid TOML.
        plain.text.parse::<toml::Table>().unwrap();
        dflt.text.parse::<toml::Table>().unwrap();
    }
}

fn runtime_of<'a>(doc: &'a toml::Table, plugin: &str) -> &'a toml::Table {
    doc["plugins"][plugin]["containerd"]["runtimes"]["gpu-guard"]
        .as_table()
        .unwrap()
}

#[test]
fn runtime_lands_in_the_table_of_the_config_version() {
    for (case, plugin) in [
        ("missing", "io.containerd.grpc.v1.cri"),
        ("v1-no-version", "cri"),
        ("v2-kubeadm", "io.containerd.grpc.v1.cri"),
        ("v3-default", "io.containerd.cri.v1.runtime"),
    ] {
        let before = input(&format!("containerd/{case}/before.toml"));
        let text = containerd::install(before.as_deref(), RUNTIME, true)
            .unwrap()
            .text;
        let doc: toml::Table = text.parse().unwrap();
        let rt = runtime_of(&doc, plugin);
        assert_eq!(
            rt["runtime_type"].as_str(),
            Some("io.containerd.runc.v2"),
            "{case}"
        );
        assert_eq!(
            rt["options"]["BinaryName"].as_str(),
            Some(RUNTIME),
            "{case}"
        );
        assert_eq!(
            doc["plugins"][plugin]["containerd"]["default_runtime_name"].as_str(),
            Some("gpu-guard"),
            "{case}"
        );
    }
}

#[test]
fn settings_of_the_current_runtime_carry_over() {
    // SystemdCgroup must match the kubelet; the new runtime copies it.
    let before = input("containerd/v2-kubeadm/before.toml").unwrap();
    let doc: toml::Table = containerd::install(Some(&before), RUNTIME, false)
        .unwrap()
        .text
        .parse()
        .unwrap();
    let rt = runtime_of(&doc, "io.containerd.grpc.v1.cri");
    assert_eq!(rt["options"]["SystemdCgroup"].as_bool(), Some(true));
    assert_eq!(rt["privileged_without_host_devices"].as_bool(), Some(false));
    // From the default runtime (nvidia), not kata (another shim).
    let before = input("containerd/v2-nvidia/before.toml").unwrap();
    let doc: toml::Table = containerd::install(Some(&before), RUNTIME, false)
        .unwrap()
        .text
        .parse()
        .unwrap();
    let rt = runtime_of(&doc, "io.containerd.grpc.v1.cri");
    assert_eq!(rt["options"]["BinaryName"].as_str(), Some(RUNTIME));
    assert_eq!(rt["options"]["SystemdCgroup"].as_bool(), Some(true));
}

#[test]
fn comments_and_other_content_are_kept() {
    let before = input("containerd/v2-kubeadm/before.toml").unwrap();
    let after = containerd::install(Some(&before), RUNTIME, true)
        .unwrap()
        .text;
    for line in before.lines() {
        if line.contains("default_runtime_name") {
            continue;
        }
        assert!(after.contains(line), "lost line {line:?}");
    }
    assert!(after.contains("default_runtime_name = \"gpu-guard\""));
}

#[test]
fn second_install_changes_nothing() {
    for case in MAIN_CASES {
        let before = input(&format!("containerd/{case}/before.toml"));
        for set_default in [false, true] {
            let once = containerd::install(before.as_deref(), RUNTIME, set_default).unwrap();
            let twice = containerd::install(Some(&once.text), RUNTIME, set_default).unwrap();
            assert_eq!(once.text, twice.text, "{case}");
            assert_eq!(twice.replaced_default, None, "{case}");
        }
    }
}

#[test]
fn uninstall_round_trips_byte_for_byte() {
    for case in MAIN_CASES {
        let before = input(&format!("containerd/{case}/before.toml"));
        let installed = containerd::install(before.as_deref(), RUNTIME, true).unwrap();
        let removed =
            containerd::uninstall(Some(&installed.text), installed.replaced_default.as_deref())
                .unwrap();
        assert!(!containerd::mentions_gpu_guard(&removed.text), "{case}");
        match before {
            Some(b) if !b.is_empty() => assert_eq!(removed.text, b, "{case}"),
            // A new file holds only the version install added.
            _ => assert!(removed.empty, "{case}: {}", removed.text),
        }
    }
}

#[test]
fn drop_ins_match_golden_files() {
    for case in ["v2-imports", "v3-imports"] {
        let before = input(&format!("containerd/{case}/before.toml")).unwrap();
        let doc = containerd::parse(Some(&before)).unwrap();
        assert!(
            containerd::conf_d_dir(&doc, Path::new("/etc/containerd/config.toml")).is_some(),
            "{case}"
        );
        for (set_default, name) in [(false, "drop-in.toml"), (true, "drop-in-default.toml")] {
            let text = containerd::drop_in(&before, RUNTIME, set_default).unwrap();
            golden(&format!("containerd/{case}/{name}"), &text);
            let d: toml::Table = text.parse().unwrap();
            let m: toml::Table = before.parse().unwrap();
            // Never a higher version than the main config (containerd refuses it).
            assert_eq!(d["version"], m["version"], "{case}");
        }
    }
    // containerd < 2.0 replaces a whole plugin section from an import, so
    // the v2 drop-in carries the main config's CRI settings along.
    let v2 = containerd::drop_in(
        &input("containerd/v2-imports/before.toml").unwrap(),
        RUNTIME,
        false,
    )
    .unwrap();
    assert!(v2.contains("sandbox_image = \"registry.k8s.io/pause:3.9\""));
    // containerd 2.x merges plugin sections: the v3 drop-in holds only ours.
    let v3 = containerd::drop_in(
        &input("containerd/v3-imports/before.toml").unwrap(),
        RUNTIME,
        false,
    )
    .unwrap();
    let d: toml::Table = v3.parse().unwrap();
    let runtimes = d["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
        .as_table()
        .unwrap();
    assert_eq!(runtimes.keys().collect::<Vec<_>>(), vec!["gpu-guard"]);
}

#[test]
fn invalid_input_is_refused() {
    for (bad, says) in [
        ("version = 2\n[plugins\n", "not valid TOML"),
        ("version = 7\n", "version = 7"),
        ("version = \"2\"\n", "version"),
        (
            "version = 2\n[plugins]\n\"io.containerd.grpc.v1.cri\" = { containerd = { snapshotter = \"overlayfs\" } }\n",
            "cannot edit safely",
        ),
    ] {
        let err = containerd::install(Some(bad), RUNTIME, false).unwrap_err();
        assert!(err.to_string().contains(says), "{bad:?}: {err}");
        assert!(err.to_string().contains("untouched"), "{bad:?}: {err}");
    }
}

#[test]
fn flow_with_conf_d_writes_a_drop_in_and_leaves_the_main_file() {
    let root = host_root("ctd-confd");
    let cfg = root.join("etc/containerd/config.toml");
    fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    let before = input("containerd/v3-imports/before.toml").unwrap();
    fs::write(&cfg, &before).unwrap();
    let mut o = options(&root, Engine::Containerd);
    o.set_default = true;
    let drop = root.join("etc/containerd/conf.d/99-gpu-guard.toml");
    assert_eq!(run(&o), vec![drop.clone()]);
    assert_eq!(fs::read_to_string(&cfg).unwrap(), before);
    assert!(fs::read_to_string(&drop)
        .unwrap()
        .contains("BinaryName = \"/usr/bin/gpu-guard-runtime\""));
    assert!(run(&o).is_empty(), "second install changes nothing");
    o.set_default = false;
    assert!(
        run(&o).is_empty(),
        "install without --set-default keeps the default"
    );
    o.uninstall = true;
    assert_eq!(run(&o), vec![drop.clone()]);
    assert!(!drop.exists());
    assert_eq!(fs::read_to_string(&cfg).unwrap(), before);
    // Only the (empty) conf.d dir and no backup of a file that never existed.
    assert_eq!(
        files_under(&root.join("etc")),
        vec!["containerd/config.toml"]
    );
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn flow_restores_the_replaced_default_and_removes_a_created_file() {
    let root = host_root("ctd-flow");
    let cfg = root.join("etc/containerd/config.toml");
    fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    let before = input("containerd/v2-kubeadm/before.toml").unwrap();
    fs::write(&cfg, &before).unwrap();
    let mut o = options(&root, Engine::Containerd);
    o.set_default = true;
    run(&o);
    assert!(fs::read_to_string(&cfg)
        .unwrap()
        .contains("default_runtime_name = \"gpu-guard\""));
    assert_eq!(
        fs::read_to_string(root.join("var/lib/gpu-guard/backup/etc/containerd/config.toml"))
            .unwrap(),
        before
    );
    o.uninstall = true;
    run(&o);
    assert_eq!(fs::read_to_string(&cfg).unwrap(), before);

    // No config at all: install creates one, uninstall removes it.
    fs::remove_file(&cfg).unwrap();
    o.uninstall = false;
    run(&o);
    assert!(fs::read_to_string(&cfg)
        .unwrap()
        .starts_with("version = 2\n"));
    o.uninstall = true;
    run(&o);
    assert!(!cfg.exists());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn binary_refuses_invalid_toml_and_leaves_it_untouched() {
    let root = host_root("ctd-bad");
    let cfg = root.join("etc/containerd/config.toml");
    fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    fs::write(&cfg, "version = 2\n[plugins\n").unwrap();
    for dry in [true, false] {
        let mut cmd = bin();
        cmd.args([
            "install",
            "containerd",
            "--bin-dir",
            "/usr/bin",
            "--host-root",
        ])
        .arg(&root);
        if dry {
            cmd.arg("--dry-run");
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains("is not valid TOML"), "{stderr}");
    }
    assert_eq!(fs::read_to_string(&cfg).unwrap(), "version = 2\n[plugins\n");
    fs::remove_dir_all(root).unwrap();
}

/// containerd itself loads what install wrote (version 1 and 2 configs,
/// and a v2 config with a conf.d drop-in): `containerd config dump` parses
/// the file and its imports and prints the merged result.
#[test]
fn containerd_reads_the_result() {
    if !have_tool("containerd") {
        return;
    }
    for case in [
        "missing",
        "v1-no-version",
        "v2-kubeadm",
        "v2-nvidia",
        "v2-dotted",
        "v2-imports",
    ] {
        let root = host_root(&format!("ctd-real-{case}"));
        let cfg = root.join("etc/containerd/config.toml");
        fs::create_dir_all(cfg.parent().unwrap()).unwrap();
        if let Some(b) = input(&format!("containerd/{case}/before.toml")) {
            // Point the import at the test's own conf.d.
            let b = b.replace(
                "/etc/containerd/conf.d",
                &root.join("etc/containerd/conf.d").to_string_lossy(),
            );
            fs::write(&cfg, b).unwrap();
        }
        let mut o = options(&root, Engine::Containerd);
        o.set_default = true;
        // Paths inside the config are real paths here, so no host root.
        o.host_root = "/".into();
        o.config_path = Some(cfg.clone());
        o.bin_dir = root.join("usr/bin");
        o.state_dir = root.join("var/lib/gpu-guard");
        // With no host root, the chain drop-in (v2-nvidia) must still land
        // in the test's tree, never in the machine's /etc/gpu-guard.
        o.config_d = root.join("etc/gpu-guard/config.d");
        run(&o);
        assert!(
            !Path::new("/etc/gpu-guard/config.d/50-chain-nvidia-containerd.toml").exists(),
            "{case}: a test wrote into the real /etc/gpu-guard"
        );
        let out = Command::new("containerd")
            .arg("--config")
            .arg(&cfg)
            .args(["config", "dump"])
            .output()
            .unwrap();
        let dump = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{case}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: toml::Table = dump.parse().unwrap();
        let cri = &doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"];
        assert_eq!(
            cri["default_runtime_name"].as_str(),
            Some("gpu-guard"),
            "{case}"
        );
        let rt = &cri["runtimes"]["gpu-guard"];
        assert_eq!(
            rt["runtime_type"].as_str(),
            Some("io.containerd.runc.v2"),
            "{case}"
        );
        assert_eq!(
            rt["options"]["BinaryName"].as_str(),
            Some(root.join("usr/bin/gpu-guard-runtime").to_str().unwrap()),
            "{case}"
        );
        if case == "v2-kubeadm" || case == "v2-imports" {
            assert_eq!(
                rt["options"]["SystemdCgroup"].as_bool(),
                Some(true),
                "{case}"
            );
            // The main config's own CRI settings still apply.
            assert_eq!(
                cri["runtimes"]["runc"]["options"]["SystemdCgroup"].as_bool(),
                Some(true)
            );
        }
        fs::remove_dir_all(root).unwrap();
    }
}
