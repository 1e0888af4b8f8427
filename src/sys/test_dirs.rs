//! The unit tests' one temporary-directory helper (the integration tests
//! have theirs in tests/support).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh empty directory `gg-<tag>-<pid>-<n>` under the system temp dir,
/// mode 0755 whatever the umask (the atomic writers refuse directories
/// others can write). Unique per call: the tests of one binary run in
/// parallel threads of one process.
pub fn tempdir(tag: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "gg-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}
