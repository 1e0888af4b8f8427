//! Forward compatibility without a rootfs: the official
//! nvidia/cuda 12.4.1 requirement on a 535 host holds only through a
//! forward-compatibility alternative. `check --env` cannot read the image's
//! compat library, so it warns and names what decides (the library, a
//! data-center GPU); `check --bundle` of the same image reads it and
//! predicts CUDA error 804 on the GeForce. The warning never changes a
//! verdict, so a fleet answer is the same with or without it.

use crate::compat_support::*;
use std::process::Command;

const IMAGE: &str = "cuda-12.4.1-base-ubuntu2204";
const LIB: &str = "libcuda.so.550.54.15";

/// `check --json --env ... [more args]` with the image's env.
fn check_env(base: &std::path::Path, more: &[&str]) -> (i32, serde_json::Value) {
    let cfg = config(base, "");
    let mut cmd = Command::new(*BIN);
    cmd.arg("--config").arg(&cfg).args(["check", "--json"]);
    for e in image_env(IMAGE) {
        cmd.arg("--env").arg(e);
    }
    let out = cmd
        .args(more)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

fn host(profile: &str) -> String {
    data(&format!("hosts/{profile}.json")).display().to_string()
}

#[test]
fn env_alone_warns_what_decides_forward_compatibility() {
    let base = tmp("cc-unread");
    for profile in ["geforce-535", "tesla-535"] {
        let (code, d) = check_env(&base, &["--host", &host(profile)]);
        assert_eq!(code, 0, "{profile}: {d}");
        assert_eq!(d["verdict"], "allow", "{profile}: {d}");
        let c = findings(&d, "compat");
        assert_eq!(c.len(), 1, "{profile}: {d}");
        assert_eq!(c[0]["severity"], "warning");
        let m = c[0]["message"].as_str().unwrap();
        for w in [
            "NVIDIA_REQUIRE_CUDA holds only through a forward-compatibility alternative",
            "needs CUDA 12.4",
            "CUDA 12.2 (driver 535.104.05)",
            "compat library (/usr/local/cuda/compat/libcuda.so.*",
            "driver branch 535",
            "data-center GPU",
            "error 804",
        ] {
            assert!(m.contains(w), "{profile}: missing {w:?}: {m}");
        }
        let brand = if profile.starts_with("geforce") {
            "geforce"
        } else {
            "tesla"
        };
        assert!(m.contains(&format!("this host's GPUs are {brand}")), "{m}");
        let fix = c[0]["fix"].as_str().unwrap();
        assert!(
            fix.contains("check --image") && fix.contains("550.54.14"),
            "{fix}"
        );
    }
    // A host whose CUDA covers 12.4 natively: nothing to say.
    let (code, d) = check_env(&base, &["--host", &host("h100x8")]);
    assert_eq!(code, 0, "{d}");
    assert!(findings(&d, "compat").is_empty(), "{d}");
    // Refused outright (545 is past the forward-compatibility branches):
    // the refusal, not a forward-compatibility warning.
    let (code, d) = check_env(&base, &["--host", &host("geforce-545")]);
    assert_eq!(code, 1, "{d}");
    assert!(findings(&d, "compat").is_empty(), "{d}");
}

#[test]
fn the_bundle_reads_what_the_warning_names() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("cc-unread-bundle");
    let rootfs = image(&base, LIB, Some(&note_12_4("470, 525, 535")));
    let b = bundle(&base, &rootfs, &image_env(IMAGE), None);
    let (code, d) = check_json(&base, &b, "geforce-535", "");
    assert_eq!(code, 1, "{d}");
    let c = findings(&d, "compat");
    assert!(
        c.iter()
            .any(|f| f["severity"] == "error"
                && f["message"].as_str().unwrap().contains("error 804")),
        "{d}"
    );
    assert!(
        !c.iter()
            .any(|f| f["message"].as_str().unwrap().contains("was not read")),
        "{d}"
    );
    let (code, d) = check_json(&base, &b, "tesla-535", "");
    assert_eq!(code, 0, "{d}");
    assert!(
        !findings(&d, "compat")
            .iter()
            .any(|f| f["message"].as_str().unwrap().contains("was not read")),
        "{d}"
    );
}

#[test]
fn a_fleet_counts_the_same_with_the_warning() {
    let base = tmp("cc-unread-fleet");
    let dir = base.join("hosts");
    std::fs::create_dir_all(&dir).unwrap();
    for p in ["geforce-535", "tesla-535", "h100x8", "geforce-545"] {
        std::fs::copy(
            data(&format!("hosts/{p}.json")),
            dir.join(format!("{p}.json")),
        )
        .unwrap();
    }
    let (code, v) = check_env(&base, &["--hosts", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["summary"]["allowed"], 3, "{v}");
    assert_eq!(v["summary"]["refused"], 1, "{v}");
    let verdict = |h: &str| {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["host"] == format!("{h}.json"))
            .map(|r| r["decision"]["verdict"].clone())
    };
    assert_eq!(verdict("geforce-535").unwrap(), "allow", "{v}");
    assert_eq!(verdict("geforce-545").unwrap(), "refuse", "{v}");
}
