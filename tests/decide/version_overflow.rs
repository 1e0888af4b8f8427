//! Version components wider than 32 bits are invalid, as in NVIDIA's
//! parsers: such a CUDA_VERSION or requirement is refused as invalid, never
//! read as a huge version that every host (or no host) satisfies.

use std::path::PathBuf;
use std::process::Command;

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

fn check(env: &[&str]) -> (Option<i32>, String) {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let dir = crate::support::tempdir("vo");
    let cfg = dir.join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\ncache_dir = \"\"\n[log]\nsyslog = false\n",
            data.join("hosts/h100x8.json").display()
        ),
    )
    .unwrap();
    let mut c = Command::new(*BIN);
    c.arg("--config").arg(&cfg).arg("check");
    for e in env {
        c.args(["--env", e]);
    }
    let out = c.output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn overflowing_versions_are_invalid_not_huge() {
    // The same host allows the in-range forms, so only the overflow refuses.
    let (code, out) = check(&["NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=9.0"]);
    assert_eq!(code, Some(0), "{out}");
    for bad in [
        vec!["NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=9.4294967296"],
        vec![
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=4294967296.0",
        ],
        vec![
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=driver>=535.18446744073709551616",
        ],
        vec![
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=arch>=9.4294967296",
        ],
    ] {
        let (code, out) = check(&bad);
        assert_eq!(code, Some(1), "{bad:?}: {out}");
        assert!(
            out.contains("too large") || out.contains("is not a version"),
            "{bad:?}: {out}"
        );
    }
}
