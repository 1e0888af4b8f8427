//! The hooks believe no CRI fact (podman's precreate hook and
//! the prestart hook have no evidence of which engine runs the container,
//! and podman writes CRI-O's keys itself), and under `mode = "audit"` they
//! refuse nothing and change nothing: precreate writes its
//! input back byte for byte. The emergency bypass, a `mode = "off"`
//! drop-in, works under the config trust rules.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

use crate::support::TempDir as Tmp;

const NVIDIA_HOOK: &str = r#"{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}"#;

/// A config on the A100 facts file (driver 535, CUDA 12.2).
fn config(dir: &Path, extra: &str) -> PathBuf {
    let p = dir.join("config.toml");
    let facts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
    std::fs::write(
        &p,
        format!(
            "{extra}\n[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n",
            facts.display()
        ),
    )
    .unwrap();
    p
}

/// A GPU spec (NVIDIA's hook attaches) with these capabilities, env and
/// annotations.
fn spec(caps: &[&str], env_extra: &[&str], annotations: &str) -> String {
    let q = |v: &[&str]| {
        v.iter()
            .map(|e| format!("\"{e}\""))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut env = vec!["NVIDIA_VISIBLE_DEVICES=all"];
    env.extend_from_slice(env_extra);
    format!(
        r#"{{"ociVersion":"1.0.2","process":{{"args":["sh"],"cwd":"/","user":{{"uid":0,"gid":0}},"env":[{}],"noNewPrivileges":false,"capabilities":{{"bounding":[{c}],"effective":[{c}],"permitted":[{c}]}}}},"root":{{"path":"rootfs"}},"hooks":{{"prestart":[{NVIDIA_HOOK}]}},"annotations":{{{annotations}}}}}"#,
        q(&env),
        c = q(caps)
    )
}

fn precreate(cfg: &Path, input: &str) -> Output {
    let mut child = Command::new(*BIN)
        .args(["--config", cfg.to_str().unwrap(), "hook", "precreate"])
        .env_remove("GPU_GUARD_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `hook prestart` on a bundle holding `spec`.
fn prestart(cfg: &Path, dir: &Path, spec: &str) -> Output {
    let bundle = dir.join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("config.json"), spec).unwrap();
    let state = format!(
        r#"{{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":1,"bundle":"{}"}}"#,
        bundle.display()
    );
    let mut child = Command::new(*BIN)
        .args(["--config", cfg.to_str().unwrap(), "hook", "prestart"])
        .env_remove("GPU_GUARD_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(state.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn bounding(out: &[u8]) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(out).unwrap();
    v["process"]["capabilities"]["bounding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

const EXEMPT: &str = "[[security.exceptions]]\nnamespace = \"gpu-operator\"\nprofile = \"docker-default\"\nallow_privileged = true\n";

/// What `podman run --annotation ...` (and podman's own pod keys) put in
/// the spec: both runtimes' spellings of "namespace gpu-operator".
const FORGED: &str = r#""io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-namespace":"gpu-operator","io.kubernetes.cri-o.ContainerType":"container","io.kubernetes.pod.namespace":"gpu-operator""#;

#[test]
fn the_hooks_never_believe_cri_annotations() {
    let d = Tmp::new("hook-forged");
    let cfg = config(d.path(), EXEMPT);
    // --privileged with forged keys: no exception, refused by both hooks.
    let all: Vec<String> = gpu_guard::core::capability::all_names();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    for keys in [
        FORGED,
        r#""io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-namespace":"gpu-operator""#,
        r#""io.kubernetes.cri-o.ContainerType":"container","io.kubernetes.pod.namespace":"gpu-operator""#,
    ] {
        let s = spec(&all, &[], keys);
        let o = precreate(&cfg, &s);
        assert_eq!(o.status.code(), Some(1), "{keys}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("the container is privileged"),
            "{keys}"
        );
        let o = prestart(&cfg, d.path(), &s);
        assert_eq!(o.status.code(), Some(1), "{keys}");
    }
    // `--cap-add NET_RAW` with forged keys: dropped to the default profile,
    // not kept by the exception's docker-default.
    let o = precreate(&cfg, &spec(&["CAP_CHOWN", "CAP_NET_RAW"], &[], FORGED));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(bounding(&o.stdout), ["CAP_CHOWN"]);
}

#[test]
fn under_audit_the_hooks_refuse_nothing_and_precreate_writes_its_input_back() {
    let d = Tmp::new("hook-audit");
    let cfg = config(d.path(), "mode = \"audit\"");
    // Enforce refuses this one (CUDA 12.4 on 12.2) and edits this one.
    for env in [
        "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
    ] {
        let s = spec(&["CAP_CHOWN", "CAP_NET_RAW"], &[env], "");
        let o = precreate(&cfg, &s);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{env}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            o.stdout,
            s.as_bytes(),
            "{env}: precreate changed the config"
        );
        let o = prestart(&cfg, d.path(), &s);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{env}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // The same under enforce: refused, and edited.
    let cfg = config(d.path(), "mode = \"enforce\"");
    let o = precreate(
        &cfg,
        &spec(
            &["CAP_CHOWN", "CAP_NET_RAW"],
            &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"],
            "",
        ),
    );
    assert_eq!(o.status.code(), Some(1));
    let s = spec(
        &["CAP_CHOWN", "CAP_NET_RAW"],
        &["NVIDIA_REQUIRE_CUDA=cuda>=12.0"],
        "",
    );
    let o = precreate(&cfg, &s);
    assert_ne!(o.stdout, s.as_bytes());
}

#[test]
fn a_mode_off_drop_in_is_the_emergency_bypass_under_the_trust_rules() {
    let d = Tmp::new("bypass");
    let cfg = config(d.path(), "");
    let dropins = d.join("config.d");
    std::fs::create_dir_all(&dropins).unwrap();
    std::fs::set_permissions(&dropins, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = spec(
        &["CAP_CHOWN", "CAP_NET_RAW"],
        &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"],
        "",
    );
    assert_eq!(precreate(&cfg, &s).status.code(), Some(1));
    // `echo 'mode = "off"' > /etc/gpu-guard/config.d/99-off.toml` (umask 022).
    let off = dropins.join("99-off.toml");
    std::fs::write(&off, "mode = \"off\"\n").unwrap();
    std::fs::set_permissions(&off, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = precreate(&cfg, &s);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.stdout, s.as_bytes(), "off changes nothing");
    assert_eq!(prestart(&cfg, d.path(), &s).status.code(), Some(0));
    // One anybody could have written is not a bypass: refused, named.
    std::fs::set_permissions(&off, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = precreate(&cfg, &s);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("99-off.toml") && err.contains("chmod go-w"),
        "{err}"
    );
}
