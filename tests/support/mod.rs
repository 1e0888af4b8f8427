//! What every test binary shares: temp directories and the one rule for a
//! test that cannot run (a missing tool, not being root).
//!
//! The rule: locally such a test prints `SKIP: <reason>` and passes without
//! testing anything; under `GPU_GUARD_CI=1` (CI, `.ci/run`) it fails, so CI
//! can never be green with a test that did not run. The SKIP line goes
//! straight to the stderr handle rather than through `eprintln!`, which
//! libtest captures: it shows in `cargo test`'s output, not only when the
//! test fails.
//!
//! Each binary includes this file as `#[path = "../support/mod.rs"] mod support;`.
#![allow(dead_code)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// True under CI (GPU_GUARD_CI=1): a test that cannot run is a failure.
pub fn ci() -> bool {
    std::env::var("GPU_GUARD_CI").is_ok_and(|v| v == "1")
}

/// The rule for a test that cannot run here: fails under CI, prints
/// `SKIP: reason` otherwise. The caller returns right after it.
pub fn skip_or_fail(reason: &str) {
    assert!(!ci(), "GPU_GUARD_CI=1 and {reason}: CI runs every test");
    let _ = writeln!(std::io::stderr(), "SKIP: {reason}");
}

/// Whether `tool` is on PATH; when it is not, [`skip_or_fail`] says so and
/// the test returns.
pub fn have_tool(tool: &str) -> bool {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        skip_or_fail(&format!("{tool} is not installed"));
    }
    found
}

/// Whether this test runs as root; when not, [`skip_or_fail`] says `why`
/// it needs root.
pub fn have_root(why: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        skip_or_fail(&format!("{why}: not running as root"));
    }
    root
}

/// `v`, or (when `what` is missing) [`skip_or_fail`] and None.
pub fn require<T>(v: Option<T>, what: &str) -> Option<T> {
    if v.is_none() {
        skip_or_fail(&format!("{what} is missing"));
    }
    v
}

/// A fresh empty directory `gg-<tag>-<pid>-<n>` under the system temp dir,
/// mode 0755 whatever the umask (write_safety's writer refuses directories
/// others can write). Unique per call: the tests of one binary run in
/// parallel threads of one process, so the pid alone does not separate them.
pub fn tempdir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(sweep_dead_runs);
    let d = std::env::temp_dir().join(format!(
        "gg-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create temp dir");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod temp dir");
    d
}

/// Removes the [`tempdir`]s (`gg-TAG-PID-N`) of test processes that are
/// gone: a plain `tempdir` is kept for inspection after a failure, so the
/// next run clears what earlier ones left. A directory of a live process
/// (a test binary running beside this one) is left alone.
fn sweep_dead_runs() {
    use std::os::unix::fs::MetadataExt;
    let tmp = std::env::temp_dir();
    let (Ok(entries), Ok(top)) = (std::fs::read_dir(&tmp), std::fs::metadata(&tmp)) else {
        return;
    };
    // Never into another filesystem (something mounted there).
    let here =
        |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.dev() == top.dev());
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("gg-")) else {
            continue;
        };
        let mut parts = rest.rsplitn(3, '-');
        let (Some(n), Some(pid), Some(_tag)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let alive = Path::new("/proc").join(pid).exists();
        if numeric(n) && numeric(pid) && !alive && here(&e.path()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A [`tempdir`] removed (with what is in it) on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir(tempdir(tag))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

/// The path of workspace binary `name` that the tests run:
/// `$GPU_GUARD_TEST_BIN_DIR/name` when that is set, else cargo's own build
/// of it (`cargo_built`, from `option_env!("CARGO_BIN_EXE_<name>")`).
/// integration/test-all.sh points the variable at the release build, which
/// is built without test-hooks, so every test outside test_hooks runs
/// against the binaries the packages ship. The test_hooks binary never
/// calls this: it needs cargo's test-hooks build.
pub fn under_test(name: &str, cargo_built: Option<&'static str>) -> &'static str {
    static CHOSEN: std::sync::Mutex<Vec<(String, &'static str)>> =
        std::sync::Mutex::new(Vec::new());
    let Some(dir) = std::env::var_os("GPU_GUARD_TEST_BIN_DIR") else {
        return cargo_built
            .unwrap_or_else(|| panic!("cargo builds no {name} for this test binary's package"));
    };
    let mut chosen = CHOSEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = chosen.iter().find(|(n, _)| n == name) {
        return path;
    }
    let path = Path::new(&dir).join(name);
    assert!(
        path.is_file(),
        "GPU_GUARD_TEST_BIN_DIR names {}, which holds no {name}",
        Path::new(&dir).display()
    );
    let path: &'static str = Box::leak(path.to_string_lossy().into_owned().into_boxed_str());
    chosen.push((name.to_string(), path));
    path
}

/// gpu-guard's binary under test ([`under_test`]).
pub fn gpu_guard() -> &'static str {
    under_test("gpu-guard", option_env!("CARGO_BIN_EXE_gpu-guard"))
}
