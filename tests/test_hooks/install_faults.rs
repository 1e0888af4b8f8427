//! `gpu-guard install` as one transaction, with faults injected in the
//! middle of its commit (GPU_GUARD_TEST_INSTALL_HOOK runs a command before
//! commit step N, GPU_GUARD_TEST_INSTALL_FAULT=N:fail|abort fails or
//! crashes there; test-hooks builds only). The plan here changes two
//! files: docker's daemon.json (step 0) and the chain drop-in (step 1);
//! step 2 is after both, before the state.

use crate::support::tempdir;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BEFORE: &str = r#"{
  "default-runtime": "nvidia",
  "runtimes": {
    "nvidia": {
      "args": [],
      "path": "nvidia-container-runtime"
    }
  }
}
"#;

struct Host {
    root: PathBuf,
}

impl Host {
    fn new(tag: &str) -> Host {
        let root = tempdir(tag);
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        fs::write(root.join("usr/bin/gpu-guard"), b"#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("gpu-guard", root.join("usr/bin/gpu-guard-runtime")).unwrap();
        fs::create_dir_all(root.join("etc/docker")).unwrap();
        fs::write(root.join("etc/docker/daemon.json"), BEFORE).unwrap();
        Host { root }
    }

    fn daemon_json(&self) -> PathBuf {
        self.root.join("etc/docker/daemon.json")
    }

    fn chain(&self) -> PathBuf {
        self.root
            .join("etc/gpu-guard/config.d/50-chain-docker.toml")
    }

    fn state(&self) -> PathBuf {
        self.root.join("var/lib/gpu-guard/engines/docker.json")
    }

    fn journal(&self) -> PathBuf {
        self.root.join("var/lib/gpu-guard/engines/docker.journal")
    }

    fn gg(&self, args: &[&str], env: &[(&str, String)]) -> (Option<i32>, String) {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpu-guard"));
        c.args(args)
            .arg("--host-root")
            .arg(&self.root)
            .env_remove("GPU_GUARD_CONFIG")
            .env_remove("GPU_GUARD_TEST_INSTALL_HOOK")
            .env_remove("GPU_GUARD_TEST_INSTALL_FAULT");
        if args[0] == "install" {
            c.args(["--bin-dir", "/usr/bin"]);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        let o: Output = c.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.code(), text)
    }

    /// Nothing of an install is left: daemon.json as before, no drop-in,
    /// no record, no journal, no temp file.
    fn assert_untouched(&self, out: &str) {
        assert_eq!(
            fs::read_to_string(self.daemon_json()).unwrap(),
            BEFORE,
            "{out}"
        );
        assert!(!self.chain().exists(), "{out}");
        assert!(!self.state().exists(), "{out}");
        assert!(!self.journal().exists(), "{out}");
        assert_eq!(temp_files(&self.root), Vec::<String>::new(), "{out}");
    }
}

fn temp_files(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(".tmp") {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

#[test]
fn a_file_changed_before_its_rename_is_refused_and_nothing_is_left() {
    let h = Host::new("txn-changed-0");
    // An admin's edit lands between the plan and the first rename.
    let edit = format!("0:printf ' ' >> {}", h.daemon_json().display());
    let (code, out) = h.gg(
        &["install", "docker"],
        &[("GPU_GUARD_TEST_INSTALL_HOOK", edit)],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("daemon.json changed while install was planning"),
        "{out}"
    );
    // The admin's edit stays; nothing of gpu-guard's is there.
    assert_eq!(
        fs::read_to_string(h.daemon_json()).unwrap(),
        format!("{BEFORE} ")
    );
    assert!(!h.chain().exists() && !h.state().exists() && !h.journal().exists());
    assert!(temp_files(&h.root).is_empty());
}

#[test]
fn a_second_file_written_by_someone_else_rolls_back_the_first() {
    let h = Host::new("txn-changed-1");
    // Someone writes the drop-in after daemon.json was replaced.
    let edit = format!(
        "1:mkdir -p {0} && echo '# theirs' > {1}",
        h.chain().parent().unwrap().display(),
        h.chain().display()
    );
    let (code, out) = h.gg(
        &["install", "docker"],
        &[("GPU_GUARD_TEST_INSTALL_HOOK", edit)],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("50-chain-docker.toml changed"), "{out}");
    assert_eq!(fs::read_to_string(h.daemon_json()).unwrap(), BEFORE);
    assert_eq!(fs::read_to_string(h.chain()).unwrap(), "# theirs\n");
    assert!(!h.state().exists() && !h.journal().exists());
}

#[test]
fn an_error_in_the_middle_of_the_commit_rolls_back() {
    let h = Host::new("txn-fail");
    let (code, out) = h.gg(
        &["install", "docker"],
        &[("GPU_GUARD_TEST_INSTALL_FAULT", "1:fail".into())],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("injected"), "{out}");
    h.assert_untouched(&out);
    // The directories the failed commit created are gone too.
    assert!(!h.root.join("etc/gpu-guard").exists(), "{out}");
    let (code, out) = h.gg(&["install", "docker"], &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(h.chain().exists() && h.state().exists());
}

#[test]
fn a_crash_half_way_is_rolled_back_by_the_next_uninstall() {
    let h = Host::new("txn-abort-1");
    let (code, out) = h.gg(
        &["install", "docker"],
        &[("GPU_GUARD_TEST_INSTALL_FAULT", "1:abort".into())],
    );
    assert_ne!(code, Some(0), "{out}");
    // Killed after daemon.json was replaced: the journal knows.
    assert_ne!(fs::read_to_string(h.daemon_json()).unwrap(), BEFORE);
    assert!(h.journal().exists(), "the intent is recorded: {out}");
    assert!(!h.state().exists());
    let (code, out) = h.gg(&["uninstall", "docker"], &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("interrupted half way; put back"), "{out}");
    h.assert_untouched(&out);
}

#[test]
fn a_crash_after_every_file_is_completed_by_the_next_install() {
    let h = Host::new("txn-abort-2");
    let (code, out) = h.gg(
        &["install", "docker"],
        &[("GPU_GUARD_TEST_INSTALL_FAULT", "2:abort".into())],
    );
    assert_ne!(code, Some(0), "{out}");
    assert!(h.chain().exists() && h.journal().exists() && !h.state().exists());
    let installed = fs::read_to_string(h.daemon_json()).unwrap();
    let (code, out) = h.gg(&["install", "docker"], &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("its record was completed"), "{out}");
    assert!(out.contains("already registered"), "{out}");
    assert_eq!(fs::read_to_string(h.daemon_json()).unwrap(), installed);
    assert!(h.state().exists() && !h.journal().exists());
    // And uninstall, knowing every file, puts everything back.
    let (code, out) = h.gg(&["uninstall", "docker"], &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!h.chain().exists() && !h.state().exists(), "{out}");
    let back: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(h.daemon_json()).unwrap()).unwrap();
    let orig: serde_json::Value = serde_json::from_str(BEFORE).unwrap();
    assert_eq!(back, orig);
}
