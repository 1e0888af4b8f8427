//! Shared helpers for the tests/install_*.rs golden tests.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use gpu_guard::install::Engine;
use gpu_guard::install::{Options, DEFAULT_STATE_DIR};

/// The golden data root.
pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/install")
        .join(rel)
}

/// Reads a golden input; `None` when the case has no such file.
pub fn input(rel: &str) -> Option<String> {
    fs::read_to_string(data(rel)).ok()
}

/// Compares `actual` with the golden file `rel`. With GPU_GUARD_BLESS=1 the
/// golden file is (re)written first, for a person to review in the diff;
/// CI never sets it.
pub fn golden(rel: &str, actual: &str) {
    let path = data(rel);
    if std::env::var_os("GPU_GUARD_BLESS").is_some() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, actual).unwrap();
    }
    let expected = fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "golden file {} unreadable ({e}); run with GPU_GUARD_BLESS=1 and review it",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "output differs from golden file {}",
        path.display()
    );
}

/// Temp dirs and the skip rule come from the shared support module.
pub use crate::support::{have_tool, tempdir};

/// A fake host root with /usr/bin/gpu-guard and /usr/bin/gpu-guard-runtime.
pub fn host_root(tag: &str) -> PathBuf {
    let root = tempdir(tag);
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    fs::write(root.join("usr/bin/gpu-guard"), b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink("gpu-guard", root.join("usr/bin/gpu-guard-runtime")).unwrap();
    root
}

pub fn options(root: &Path, engine: Engine) -> Options {
    let o = Options::new(engine, root);
    assert_eq!(o.bin_dir, PathBuf::from("/usr/bin"));
    assert_eq!(o.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
    o
}

/// Plans and applies; returns the plan's changed paths.
pub fn run(opts: &Options) -> Vec<PathBuf> {
    let plan = gpu_guard::install::plan(opts).unwrap();
    gpu_guard::install::apply(opts, &plan).unwrap();
    plan.changes.into_iter().map(|c| c.path).collect()
}

/// Every regular file under `dir`, relative, sorted.
pub fn files_under(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) {
        let Ok(rd) = fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = vec![];
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The gpu-guard binary cargo built for these tests.
pub fn bin() -> std::process::Command {
    std::process::Command::new(crate::support::gpu_guard())
}

/// `gpu-guard ARGS --bin-dir /usr/bin --host-root ROOT` without the
/// caller's config: its exit status and everything it printed.
pub fn on_host_root(root: &Path, args: &[&str]) -> (Option<i32>, String) {
    let o = bin()
        .args(args)
        .args(["--bin-dir", "/usr/bin", "--host-root"])
        .arg(root)
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
