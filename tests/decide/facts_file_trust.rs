//! `host.facts_file` decides what starts, so it is read under the config's
//! trust rules (docs/configuration.md): a facts file others could have
//! written refuses GPU containers with a clear message, whatever
//! `host.on_probe_failure` says. A file named on `check --host` is the
//! caller's own input and is read as it is.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::support::TempDir as Tmp;

fn run(cfg: &Path, args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(crate::support::gpu_guard())
        .arg("--config")
        .arg(cfg)
        .args(args)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn a_facts_file_others_can_write_refuses_gpu_containers() {
    let d = Tmp::new("facts-trust");
    let facts = d.join("facts.json");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json"),
        &facts,
    )
    .unwrap();
    let cfg = d.join("config.toml");
    for on_failure in ["refuse", "allow"] {
        std::fs::write(
            &cfg,
            format!(
                "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\non_probe_failure = \"{on_failure}\"\n[log]\nsyslog = false\n",
                facts.display()
            ),
        )
        .unwrap();
        let gpu = ["check", "--env", "NVIDIA_VISIBLE_DEVICES=all"];
        std::fs::set_permissions(&facts, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (code, out) = run(&cfg, &gpu);
        assert_eq!(code, Some(0), "{on_failure}: {out}");
        std::fs::set_permissions(&facts, std::fs::Permissions::from_mode(0o666)).unwrap();
        let (code, out) = run(&cfg, &gpu);
        assert_eq!(code, Some(1), "{on_failure}: {out}");
        assert!(
            out.contains("host facts file (host.facts_file) not trusted"),
            "{out}"
        );
        assert!(out.contains("chmod go-w"), "{out}");
        // Not a GPU container: none of it matters.
        let (code, out) = run(&cfg, &["check", "--env", "A=1"]);
        assert_eq!(code, Some(0), "{on_failure}: {out}");
        // `host` cannot show facts from it.
        let (code, out) = run(&cfg, &["host"]);
        assert_eq!(code, Some(2), "{out}");
        assert!(out.contains("not trusted"), "{out}");
    }
    // The same file named on the command line is the caller's input.
    let (code, out) = run(
        &cfg,
        &[
            "check",
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--host",
            facts.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{out}");
}
