//! Every entry point decides through the one pipeline: a fleet of hosts
//! (`check --host F --host G`) judges a bundle's rootfs with the same scans
//! as a single-host `check` (the compat library among them, read once when
//! a host needs it), so each host's decision is the one-host decision.

use crate::compat_support::*;
use std::process::Command;

#[test]
fn a_fleet_reads_the_compat_library_as_one_host_does() {
    let base = tmp("pipeline-fleet");
    let rootfs = image(
        &base,
        "libcuda.so.550.54.15",
        Some(&note_12_4("470, 525, 535")),
    );
    let b = bundle(
        &base,
        &rootfs,
        &image_env("cuda-12.4.1-base-ubuntu2204"),
        None,
    );
    let cfg = config(&base, "");
    let out = Command::new(*BIN)
        .arg("--config")
        .arg(&cfg)
        .args(["check", "--json", "--bundle"])
        .arg(&b)
        .arg("--host")
        .arg(data("hosts/tesla-535.json"))
        .arg("--host")
        .arg(data("hosts/geforce-535.json"))
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let fleet: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
    for (i, profile) in ["tesla-535", "geforce-535"].iter().enumerate() {
        let (_, one) = check_json(&base, &b, profile, "");
        let on_host = &fleet["results"][i]["decision"];
        assert_eq!(fleet["results"][i]["host"], format!("{profile}.json"));
        assert_eq!(on_host["verdict"], one["verdict"], "{profile}: {fleet}");
        assert!(!findings(&one, "compat").is_empty(), "{profile}: {one}");
        assert_eq!(
            findings(on_host, "compat"),
            findings(&one, "compat"),
            "{profile}: {fleet}"
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}
