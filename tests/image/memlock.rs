//! `tuning.memlock` through `gpu-guard check --bundle`: the decision's
//! `edits.rlimits` (docs/interfaces.md, "Decision JSON") and the report.

use crate::compat_support::*;
use std::fs;

fn env() -> Vec<String> {
    vec![
        "NVIDIA_VISIBLE_DEVICES=all".into(),
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0".into(),
    ]
}

#[test]
fn memlock_shows_in_edits_and_only_raises() {
    let base = tmp("memlock");
    let rootfs = base.join("rootfs");
    fs::create_dir_all(&rootfs).unwrap();
    // Off by default.
    let b = bundle(&base, &rootfs, &env(), None);
    let (code, d) = check_json(&base, &b, "a100", "");
    assert_eq!(code, 0, "{d}");
    assert!(d["edits"].get("rlimits").is_none(), "{d}");
    // "unlimited": u64::MAX for soft and hard.
    let on = "[tuning]\nmemlock = \"unlimited\"\n";
    let (_, d) = check_json(&base, &b, "a100", on);
    assert_eq!(
        d["edits"]["rlimits"],
        serde_json::json!({"RLIMIT_MEMLOCK": {"soft": u64::MAX, "hard": u64::MAX}}),
        "{d}"
    );
    let (_, text) = check_human(&base, &b, "a100", on);
    assert!(
        text.contains("edit: rlimit RLIMIT_MEMLOCK soft=unlimited hard=unlimited"),
        "{text}"
    );
    // A container's higher hard limit is kept, its lower soft raised.
    let b = bundle(
        &base,
        &rootfs,
        &env(),
        Some(serde_json::json!([{"type": "RLIMIT_MEMLOCK", "soft": 65536, "hard": 4294967296u64}])),
    );
    let (_, d) = check_json(&base, &b, "a100", "[tuning]\nmemlock = 1073741824\n");
    assert_eq!(
        d["edits"]["rlimits"],
        serde_json::json!({"RLIMIT_MEMLOCK": {"soft": 1073741824u64, "hard": 4294967296u64}}),
        "{d}"
    );
    // Both already higher: no edit.
    let (_, d) = check_json(&base, &b, "a100", "[tuning]\nmemlock = \"65536\"\n");
    assert!(d["edits"].get("rlimits").is_none(), "{d}");
    // A bad value names the key.
    let cfg = config(&base, "[tuning]\nmemlock = \"lots\"\n");
    let out = std::process::Command::new(*BIN)
        .arg("--config")
        .arg(&cfg)
        .args(["check", "--json", "--bundle"])
        .arg(&b)
        .arg("--host")
        .arg(data("hosts/a100.json"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("memlock"), "{text}");
}
