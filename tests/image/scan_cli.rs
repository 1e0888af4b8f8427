//! `gpu-guard scan`: the JSON shape of docs/interfaces.md, the listing for people,
//! directory walks and exit statuses.

use crate::scan_support::*;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::symlink;
use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(gpu_guard())
        .arg("scan")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn json_has_the_design_shape() {
    let multi = fixture("multi-arch.so");
    let none = fixture("no-device-code.so");
    let (code, out, err) = run(&["--json", multi.to_str().unwrap(), none.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["path"], multi.to_str().unwrap());
    let entries = files[0]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 8);
    for e in entries {
        let o = e.as_object().unwrap();
        match o["kind"].as_str().unwrap() {
            "sass" => {
                assert_eq!(o.len(), 3, "{o:?}");
                assert!(o["arch"].as_str().unwrap().starts_with("sm_"));
            }
            "ptx" => {
                assert_eq!(o.len(), 4, "{o:?}");
                assert_eq!(o["arch"], "compute_90");
                assert_eq!(o["ptx_isa"], "9.5");
            }
            k => panic!("kind {k}"),
        }
        assert!(o["compressed"].is_boolean());
    }
    assert!(entries.iter().any(|e| e["arch"] == "sm_90a"));
    // No device code: an empty list, no error.
    assert_eq!(files[1]["entries"], Value::Array(vec![]));
    assert!(files[1].get("error").is_none());
}

#[test]
fn errors_and_exit_statuses() {
    let dir = tempdir("cli");
    let text = dir.join("notes.txt");
    fs::write(&text, b"hello").unwrap();
    let broken = dir.join("broken.so");
    let real = fs::read(fixture("multi-arch.so")).unwrap();
    fs::write(&broken, &real[..real.len() / 3]).unwrap();
    // A file that is not ELF, named explicitly: error, status 1.
    let (code, out, _) = run(&["--json", text.to_str().unwrap()]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["files"][0]["error"], "not an ELF file or fat binary");
    // A truncated library: error, status 1, still valid JSON.
    let (code, out, _) = run(&["--json", broken.to_str().unwrap()]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["files"][0]["error"].as_str().unwrap().len() > 5);
    // A missing operand: status 2, reported, the others still listed.
    let ok = fixture("sm90a.so");
    let (code, out, _) = run(&["--json", "/nonexistent/x.so", ok.to_str().unwrap()]);
    assert_eq!(code, 2);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["files"][0]["error"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/x.so"));
    assert_eq!(v["files"][1]["entries"].as_array().unwrap().len(), 2);
    // For people: errors on stderr, one line each.
    let (code, out, err) = run(&[text.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // A FIFO operand is refused without blocking.
    let fifo = dir.join("fifo.so");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let (code, _, err) = run(&[fifo.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    // No operand at all: usage.
    let (code, _, _) = run(&[]);
    assert_eq!(code, 2);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn walks_directories_for_elf_files_only() {
    let dir = tempdir("walk");
    fs::create_dir_all(dir.join("lib/sub")).unwrap();
    fs::copy(fixture("sm90a.so"), dir.join("lib/a.so")).unwrap();
    fs::copy(fixture("ptx-only.so"), dir.join("lib/sub/b.so")).unwrap();
    fs::write(dir.join("lib/readme.txt"), b"text").unwrap();
    // Symlinks are not followed in a walk (no loops, no duplicates).
    symlink("a.so", dir.join("lib/a-link.so")).unwrap();
    symlink("..", dir.join("lib/sub/up")).unwrap();
    let (code, out, err) = run(&["--json", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let paths: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    let a = dir.join("lib/a.so");
    let b = dir.join("lib/sub/b.so");
    assert_eq!(paths, [a.to_str().unwrap(), b.to_str().unwrap()]);
    // People's listing: a summary per file.
    let (code, out, _) = run(&[dir.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("a.so: 1 SASS, 1 PTX"), "{out}");
    assert!(out.contains("  sm_90a"), "{out}");
    assert!(
        out.contains("  compute_80     PTX ISA 9.5 compressed"),
        "{out}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rootfs_mode_prints_the_decision_findings() {
    let root = tempdir("rootfs-mode");
    let torch = root.join("usr/local/lib/python3.12/dist-packages/torch/lib");
    fs::create_dir_all(&torch).unwrap();
    fs::copy(fixture("multi-arch.so"), torch.join("libtorch_cuda.so")).unwrap();
    let cache = tempdir("rootfs-mode-cache");
    let config = cache.join("config.toml");
    fs::write(
        &config,
        format!(
            "[kernel_image]\nseverity = \"enforce\"\ncache_dir = \"{}\"\n",
            cache.join("c").display()
        ),
    )
    .unwrap();
    let hosts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts");
    let run = |host: &str| {
        Command::new(gpu_guard())
            .arg("--config")
            .arg(&config)
            .args(["scan", "--json", "--rootfs", "--host"])
            .arg(hosts.join(host))
            .arg(&root)
            .output()
            .unwrap()
    };
    // A100 (8.0): sm_80 runs; nothing to say.
    let out = run("a100.json");
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rootfs"][0]["findings"], Value::Array(vec![]));
    // V100 (7.0): no image, an error under enforce, exit 1.
    let out = run("tesla-535.json");
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = &v["rootfs"][0]["findings"][0];
    assert_eq!(f["check"], "kernel-image");
    assert_eq!(f["severity"], "error");
    assert!(
        f["message"].as_str().unwrap().contains("sm_70")
            || f["fix"].as_str().unwrap().contains("sm_70")
    );
    // --rootfs needs --host.
    let out = Command::new(gpu_guard())
        .args(["scan", "--rootfs"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    fs::remove_dir_all(&root).unwrap();
    fs::remove_dir_all(&cache).unwrap();
}
