//! The libraries scan's results kept by the identity of everything they
//! were read from, so the next start of the same image reads no ELF file:
//! the warm path is the rootfs walk (names, inode numbers, sizes and times,
//! super::walk) plus one small file read.
//!
//! The key is a SHA-256 fingerprint ([`Fingerprint`]) of the walk's and of
//! every other input (the container's loader environment, the model's
//! version and the budgets; the CPU's hwcaps levels are the host's,
//! constant for its cache). One JSON file per key in `libraries.cache_dir`,
//! written 0600 through a unique temporary name and a rename
//! (crate::sys::fsutil::write_with_mode), in a directory only its owner
//! can write (as the kernel-image cache, scan::cache); an entry that does
//! not parse or whose key differs is ignored. A result a budget cut short
//! is not kept.

use crate::core::libraries::LibraryScan;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Bumped whenever the model, the result format or the key changes.
pub const MODEL_VERSION: u32 = 2;
/// A real entry is a few KiB.
const MAX_ENTRY_BYTES: u64 = 4 << 20;

#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    key: String,
    scan: LibraryScan,
}

/// The cache directory; None from [`ResultCache::open`]: scan without.
pub struct ResultCache {
    dir: PathBuf,
}

/// The fingerprint of a byte stream: its SHA-256 (FIPS 180-4), the digest
/// the image reader already verifies blobs with. A key must mean the same
/// inputs in every gpu-guard that reads the cache directory (a new release
/// of the same cache format, a rollback): std's `DefaultHasher` says its
/// algorithm may change between Rust releases, so a key it made could name
/// other inputs after an upgrade. What it fingerprints (names, inode
/// numbers, nanosecond times of one host's files) is not chosen to collide
/// either.
#[derive(Default)]
pub struct Fingerprint(Sha256);

impl Fingerprint {
    pub fn update(&mut self, bytes: impl AsRef<[u8]>) {
        self.0.update(bytes.as_ref());
    }

    /// 64 hex digits.
    pub fn hex(&self) -> String {
        let d = self.0.clone().finalize();
        d.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The key of one scan: the walk's digest and the other inputs.
pub fn key(walk_digest: &str, inputs: &[&str]) -> String {
    let mut h = Fingerprint::default();
    h.update(MODEL_VERSION.to_le_bytes());
    h.update(walk_digest.as_bytes());
    for i in inputs {
        h.update((i.len() as u64).to_le_bytes());
        h.update(i.as_bytes());
    }
    h.hex()
}

impl ResultCache {
    /// Opens (creating, 0700) the directory; failure means no cache.
    pub fn open(dir: &str) -> Option<ResultCache> {
        crate::scan::cache::private_cache_dir(dir, "libraries cache").map(|dir| ResultCache { dir })
    }

    fn path_for(&self, key: &str) -> PathBuf {
        self.dir.join(format!("v{MODEL_VERSION}-{key}.json"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn get(&self, key: &str) -> Option<LibraryScan> {
        let bytes = crate::sys::fsutil::read_limited(&self.path_for(key), MAX_ENTRY_BYTES).ok()?;
        let s: Stored = serde_json::from_slice(&bytes).ok()?;
        (s.version == MODEL_VERSION && s.key == key).then_some(s.scan)
    }

    /// Stores a result; failures are ignored (the next start scans again).
    pub fn put(&self, key: &str, scan: &LibraryScan) {
        let s = Stored {
            version: MODEL_VERSION,
            key: key.to_string(),
            scan: scan.clone(),
        };
        if let Ok(bytes) = serde_json::to_vec(&s) {
            let _ = crate::sys::fsutil::write_with_mode(&self.path_for(key), &bytes, 0o600, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_mismatch() {
        let d = std::env::temp_dir().join(format!("gg-libcache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let c = ResultCache::open(d.to_str().unwrap()).unwrap();
        let k = key("digest", &["a", "b"]);
        assert_ne!(k, key("digest", &["ab"]));
        assert!(c.get(&k).is_none());
        let scan = LibraryScan {
            judged: 3,
            ..LibraryScan::default()
        };
        c.put(&k, &scan);
        assert_eq!(c.get(&k), Some(scan));
        std::fs::copy(c.path_for(&k), c.path_for("other")).unwrap();
        assert!(c.get("other").is_none());
        std::fs::write(c.path_for(&k), b"{").unwrap();
        assert!(c.get(&k).is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn keys_are_sha256_and_stable() {
        // FIPS 180-4's test vector: the key does not depend on the Rust
        // release that built gpu-guard.
        let mut f = Fingerprint::default();
        f.update(b"abc");
        assert_eq!(
            f.hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(key("d", &["x"]), key("d", &["x"]));
        assert_eq!(key("d", &["x"]).len(), 64);
    }
}
