//! NVIDIA's own settings decide which device requests count:
//! `accept-nvidia-visible-devices-as-volume-mounts` (default false) and
//! `accept-nvidia-visible-devices-envvar-when-unprivileged` (default true)
//! in NVIDIA's config.toml. The table is NVIDIA's own
//! (nvidia-container-toolkit internal/config/image/cuda_image_test.go,
//! `TestVisibleDevices`, the rows without preferred env vars), then the
//! binary reads a real NVIDIA config file through `detect.nvidia_config`.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use gpu_guard::core::container::Container;
use gpu_guard::core::detect;
use gpu_guard::core::policy::{DetectConfig, EnvRequests, NvidiaDeviceSettings};
use serde_json::json;

const ROOT: &str = "/var/run/nvidia-container-devices";

/// (description, mounted devices, NVIDIA_VISIBLE_DEVICES, privileged,
/// accept unprivileged, accept mounts, expected devices; None: no request)
type Row = (
    &'static str,
    &'static [&'static str],
    &'static str,
    bool,
    bool,
    bool,
    Option<&'static [&'static str]>,
);

const NVIDIA_TABLE: &[Row] = &[
    (
        "Mount devices, unprivileged, no accept unprivileged",
        &["GPU0", "GPU1"],
        "GPU2,GPU3",
        false,
        false,
        true,
        Some(&["GPU0", "GPU1"]),
    ),
    (
        "No mount devices, unprivileged, no accept unprivileged",
        &[],
        "GPU0,GPU1",
        false,
        false,
        true,
        None,
    ),
    (
        "No mount devices, privileged, no accept unprivileged",
        &[],
        "GPU0,GPU1",
        true,
        false,
        true,
        Some(&["GPU0", "GPU1"]),
    ),
    (
        "No mount devices, unprivileged, accept unprivileged",
        &[],
        "GPU0,GPU1",
        false,
        true,
        true,
        Some(&["GPU0", "GPU1"]),
    ),
    (
        "Mount devices, unprivileged, accept unprivileged, no accept mounts",
        &["GPU0", "GPU1"],
        "GPU2,GPU3",
        false,
        true,
        false,
        Some(&["GPU2", "GPU3"]),
    ),
    (
        "Mount devices, unprivileged, no accept unprivileged, no accept mounts",
        &["GPU0", "GPU1"],
        "GPU2,GPU3",
        false,
        false,
        false,
        None,
    ),
];

fn container(mounts: &[&str], env: &str, privileged: bool) -> Container {
    let bounding = if privileged {
        json!(["CAP_CHOWN", "CAP_SYS_ADMIN"])
    } else {
        json!(["CAP_CHOWN"])
    };
    let mut envs = vec![];
    if !env.is_empty() {
        envs.push(format!("NVIDIA_VISIBLE_DEVICES={env}"));
    }
    let mounts: Vec<_> = mounts
        .iter()
        .map(|d| json!({"source": "/dev/null", "destination": format!("{ROOT}/{d}"), "type": "bind"}))
        .collect();
    let spec =
        json!({"process": {"env": envs, "capabilities": {"bounding": bounding}}, "mounts": mounts});
    Container::from_spec(&spec, None).unwrap()
}

#[test]
fn nvidias_visible_devices_table() {
    for (what, mounts, env, privileged, accept_unpriv, accept_mounts, want) in NVIDIA_TABLE {
        let cfg = DetectConfig {
            // The request itself, whatever attaches it.
            env_requests: EnvRequests::Always,
            nvidia: NvidiaDeviceSettings {
                accept_volume_mounts: *accept_mounts,
                accept_envvar_unprivileged: *accept_unpriv,
            },
            ..DetectConfig::default()
        };
        let d = detect::classify_with(&container(mounts, env, *privileged), &cfg);
        match want {
            None => assert!(!d.gpu, "{what}: {:?}", d.request),
            Some(names) => {
                assert!(d.gpu, "{what}");
                let got: Vec<&str> = d.request.devices.iter().map(|r| r.name.as_str()).collect();
                assert_eq!(&got, names, "{what}");
            }
        }
    }
}

#[test]
fn nvidias_defaults_ignore_the_mounts() {
    // NVIDIA's defaults (no config file): the env, not the mounts.
    let cfg = DetectConfig {
        env_requests: EnvRequests::Always,
        ..DetectConfig::default()
    };
    assert_eq!(cfg.nvidia, NvidiaDeviceSettings::default());
    let d = detect::classify_with(&container(&["GPU0"], "GPU2", false), &cfg);
    let got: Vec<&str> = d.request.devices.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(got, ["GPU2"]);
    // Mounts alone: nothing NVIDIA acts on.
    assert!(!detect::classify_with(&container(&["GPU0"], "", false), &cfg).gpu);
}

fn tmp(tag: &str) -> PathBuf {
    crate::support::tempdir(&format!("nvidia-settings-{tag}"))
}

/// The binary reads NVIDIA's config file named by `detect.nvidia_config`:
/// on a host with a T4 (GPU 0, sm_75) and an A10 (GPU 1, sm_86), a spec
/// whose mounts name GPU 1 and whose env names GPU 0 needs arch>=8.0: it
/// runs when NVIDIA takes the mounts, and is refused when NVIDIA takes the
/// env (its default). Its parse is kept with gpu-guard's parsed config
/// between starts: each edit still counts at the next start.
#[test]
fn check_follows_nvidias_config_file() {
    let dir = tmp("check");
    let hosts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/t4-a10.json");
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_ARCH=arch>=8.0"],
                    "args": ["sh"], "cwd": "/", "noNewPrivileges": true,
                    "capabilities": {"bounding": ["CAP_CHOWN"]}},
        "root": {"path": "rootfs"},
        "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}]},
        "mounts": [{"source": "/dev/null", "destination": format!("{ROOT}/1"), "type": "bind"}]
    });
    let spec_file = dir.join("config.json");
    fs::write(&spec_file, spec.to_string()).unwrap();
    let nvidia = dir.join("nvidia-config.toml");
    let cfg = dir.join("gpu-guard.toml");
    fs::write(
        &cfg,
        format!(
            "[detect]\nnvidia_config = \"{}\"\n[log]\nsyslog = false\n",
            nvidia.display()
        ),
    )
    .unwrap();
    let kept = dir.join("kept");
    let check = || {
        let out = Command::new(crate::support::gpu_guard())
            .arg("--config")
            .arg(&cfg)
            .args(["check", "--json", "--spec"])
            .arg(&spec_file)
            .arg("--host")
            .arg(&hosts)
            .env("GPU_GUARD_CONFIG_CACHE", &kept)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (
            out.status.code(),
            v["verdict"].as_str().unwrap_or("").to_string(),
        )
    };
    // No NVIDIA config: NVIDIA's defaults, the env's GPU 0; the second
    // start takes the parse kept by the first.
    assert_eq!(check(), (Some(1), "refuse".into()));
    assert_eq!(fs::read_dir(&kept).unwrap().count(), 1);
    assert_eq!(check(), (Some(1), "refuse".into()));
    fs::write(
        &nvidia,
        "accept-nvidia-visible-devices-as-volume-mounts = true\n",
    )
    .unwrap();
    assert_eq!(check(), (Some(0), "allow".into()));
    fs::write(
        &nvidia,
        "accept-nvidia-visible-devices-as-volume-mounts = false\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n",
    )
    .unwrap();
    // Neither is honoured in this unprivileged container: not a GPU container.
    assert_eq!(check(), (Some(0), "skip".into()));
    assert_eq!(check(), (Some(0), "skip".into()));
    // Gone again: NVIDIA's defaults again.
    fs::remove_file(&nvidia).unwrap();
    assert_eq!(check(), (Some(1), "refuse".into()));
    fs::remove_dir_all(dir).unwrap();
}

/// Hosts other than this one (`--host` repeated, `--hosts`, `--nodes`) are
/// judged with NVIDIA's defaults, or the settings of `--nvidia-config`,
/// never this host's NVIDIA config file.
#[test]
fn other_hosts_are_judged_with_nvidias_defaults_not_this_hosts_file() {
    let dir = tmp("fleet");
    let facts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/t4-a10.json");
    let hosts = dir.join("hosts");
    fs::create_dir_all(&hosts).unwrap();
    fs::copy(&facts, hosts.join("t4-a10.json")).unwrap();
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_ARCH=arch>=8.0"],
                    "args": ["sh"], "cwd": "/", "noNewPrivileges": true,
                    "capabilities": {"bounding": ["CAP_CHOWN"]}},
        "root": {"path": "rootfs"},
        "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}]},
        "mounts": [{"source": "/dev/null", "destination": format!("{ROOT}/1"), "type": "bind"}]
    });
    let spec_file = dir.join("config.json");
    fs::write(&spec_file, spec.to_string()).unwrap();
    // This host's NVIDIA toolkit takes the mounts (GPU 1, an A10: sm_86).
    let nvidia = dir.join("nvidia-config.toml");
    fs::write(
        &nvidia,
        "accept-nvidia-visible-devices-as-volume-mounts = true\n",
    )
    .unwrap();
    let cfg = dir.join("gpu-guard.toml");
    fs::write(
        &cfg,
        format!(
            "[detect]\nnvidia_config = \"{}\"\n[log]\nsyslog = false\n",
            nvidia.display()
        ),
    )
    .unwrap();
    let check = |extra: &[&str]| {
        let out = Command::new(crate::support::gpu_guard())
            .arg("--config")
            .arg(&cfg)
            .args(["check", "--spec"])
            .arg(&spec_file)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let f = facts.to_str().unwrap();
    let h = hosts.to_str().unwrap();
    // This host, from a facts file: this host's NVIDIA config counts.
    assert_eq!(check(&["--host", f]).0, Some(0));
    // A fleet: NVIDIA's defaults take the env's GPU 0, a T4 (sm_75).
    let (code, out) = check(&["--hosts", h]);
    assert_eq!(code, Some(1), "{out}");
    let (code, out) = check(&["--host", f, "--host", f]);
    assert_eq!(code, Some(1), "{out}");
    // Unless the fleet's own NVIDIA config is given.
    let (code, out) = check(&["--hosts", h, "--nvidia-config", nvidia.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}");
    fs::remove_dir_all(dir).unwrap();
}
