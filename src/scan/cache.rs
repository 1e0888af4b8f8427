//! Scan results cached by (device, inode, size, mtime), so the second start
//! of the same image parses nothing: the warm path is an fstat plus one
//! small file read per library.
//!
//! One JSON file per library in `kernel_image.cache_dir`, written with
//! [`crate::sys::fsutil::write_with_mode`] (0600, unique temp name + rename), so
//! concurrent writers never corrupt each other and readers never see half
//! a file. An entry that fails to parse, or whose key does not match its
//! name, is ignored and rewritten. Only results that depend on the file's
//! bytes are cached (device code, or a format error); I/O and budget
//! failures are not.

use super::rootfs::FileStat;
use crate::core::amd::AmdCode;
use crate::core::kernel_image::{Image, Outcome};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Bumped when the format or the parser's results change, so old entries
/// are ignored (2: AMD code objects are read too).
const VERSION: u32 = 2;
/// A real entry is a few KiB at most (a few hundred distinct images).
const MAX_ENTRY_BYTES: u64 = 1 << 20;

#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    version: u32,
    dev: u64,
    ino: u64,
    size: u64,
    mtime_sec: i64,
    mtime_nsec: i64,
    #[serde(default)]
    images: Vec<Image>,
    #[serde(default)]
    error: Option<String>,
    /// The HIP code objects (scan::amd).
    #[serde(default)]
    amd: Vec<AmdCode>,
}

/// What the scan of one library gave: its CUDA images (or why it could not
/// be read) and its AMD code objects.
pub type Scan = (Outcome, Vec<AmdCode>);

/// Opens (creating, mode 0700) a cache directory that only its owner can
/// write; None means "work without a cache", never a failed container.
/// Entries decide what an image is said to contain: a directory others can
/// write is not used (costs a rescan, never a container). Root is told
/// (syslog) as it is a misconfiguration to fix; a rootless hook meeting
/// root's directory is normal and only debug.
pub fn private_cache_dir(dir: &str, what: &str) -> Option<PathBuf> {
    if dir.is_empty() {
        return None;
    }
    let dir = PathBuf::from(dir);
    let check = crate::sys::fsutil::check_private_dir;
    // Checked first: the directory is there at every start but the first.
    let checked = match check(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .ok()?;
            check(&dir)
        }
        checked => checked,
    };
    if let Err(e) = checked {
        let level = match nix::unistd::geteuid().is_root() {
            true => log::Level::Warn,
            false => log::Level::Debug,
        };
        log::log!(level, "{what} not used: {e}");
        return None;
    }
    Some(dir)
}

/// The cache directory; `None` from [`Cache::open`] means "scan without".
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// Opens (creating, mode 0700) the cache directory. Failure means no
    /// cache, never a failed container.
    pub fn open(dir: &str) -> Option<Cache> {
        private_cache_dir(dir, "scan cache").map(|dir| Cache { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_for(&self, st: &FileStat) -> PathBuf {
        self.dir.join(format!(
            "v{VERSION}-{:x}-{:x}-{:x}-{:x}-{:x}.json",
            st.dev, st.ino, st.size, st.mtime_sec, st.mtime_nsec
        ))
    }

    /// The cached outcome for a file with this stat, if there is a valid one.
    pub fn get(&self, st: &FileStat) -> Option<Outcome> {
        self.get_scan(st).map(|(o, _)| o)
    }

    /// [`Cache::get`] with the AMD code objects.
    pub fn get_scan(&self, st: &FileStat) -> Option<Scan> {
        let bytes = crate::sys::fsutil::read_limited(&self.path_for(st), MAX_ENTRY_BYTES).ok()?;
        let s: Stored = serde_json::from_slice(&bytes).ok()?;
        if s.version != VERSION
            || s.dev != st.dev
            || s.ino != st.ino
            || s.size != st.size
            || s.mtime_sec != st.mtime_sec
            || s.mtime_nsec != st.mtime_nsec
        {
            return None;
        }
        let outcome = match s.error {
            Some(e) => Err(e),
            None => Ok(s.images),
        };
        Some((outcome, s.amd))
    }

    /// Stores an outcome; failures are ignored (the next start scans again).
    pub fn put(&self, st: &FileStat, outcome: &Outcome) {
        self.put_scan(st, outcome, &[])
    }

    /// [`Cache::put`] with the AMD code objects.
    pub fn put_scan(&self, st: &FileStat, outcome: &Outcome, amd: &[AmdCode]) {
        let (images, error) = match outcome {
            Ok(images) => (images.clone(), None),
            Err(e) => (Vec::new(), Some(e.clone())),
        };
        let s = Stored {
            version: VERSION,
            dev: st.dev,
            ino: st.ino,
            size: st.size,
            mtime_sec: st.mtime_sec,
            mtime_nsec: st.mtime_nsec,
            images,
            error,
            amd: amd.to_vec(),
        };
        if let Ok(bytes) = serde_json::to_vec(&s) {
            let _ = crate::sys::fsutil::write_with_mode(&self.path_for(st), &bytes, 0o600, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arch::{Arch, Kind, Variant};

    use crate::sys::test_dirs::tempdir;

    fn st(ino: u64) -> FileStat {
        FileStat {
            dev: 7,
            ino,
            size: 1234,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 5,
            mode: nix::sys::stat::SFlag::S_IFREG.bits() | 0o644,
        }
    }

    #[test]
    fn roundtrip_corruption_and_key_mismatch() {
        let d = tempdir("scan-cache-rt").join("d");
        let c = Cache::open(d.to_str().unwrap()).expect("cache dir");
        let imgs = vec![Image {
            kind: Kind::Ptx,
            arch: Arch::new(90, Variant::Arch),
            ptx_isa: Some((9, 5)),
        }];
        assert!(c.get(&st(1)).is_none());
        c.put(&st(1), &Ok(imgs.clone()));
        assert_eq!(c.get(&st(1)), Some(Ok(imgs.clone())));
        let amd = vec![AmdCode {
            arch: "gfx90a:xnack-".into(),
            compressed: true,
            code_object_version: None,
        }];
        c.put_scan(&st(4), &Ok(Vec::new()), &amd);
        assert_eq!(c.get_scan(&st(4)), Some((Ok(Vec::new()), amd)));
        c.put(&st(2), &Err("bad magic".into()));
        assert_eq!(c.get(&st(2)), Some(Err("bad magic".into())));
        // A different mtime is a different file.
        let mut other = st(1);
        other.mtime_nsec = 6;
        assert!(c.get(&other).is_none());
        // Corrupt entry: ignored, then rewritten.
        std::fs::write(c.path_for(&st(1)), b"{not json").unwrap();
        assert!(c.get(&st(1)).is_none());
        c.put(&st(1), &Ok(imgs.clone()));
        assert_eq!(c.get(&st(1)), Some(Ok(imgs.clone())));
        // An entry copied under another key's name does not match.
        std::fs::copy(c.path_for(&st(1)), c.path_for(&st(3))).unwrap();
        assert!(c.get(&st(3)).is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn uncreatable_dir_means_no_cache() {
        assert!(Cache::open("").is_none());
        let d = tempdir("scan-cache-file").join("d");
        std::fs::write(&d, b"a file, not a dir").unwrap();
        assert!(Cache::open(d.join("sub").to_str().unwrap()).is_none());
        assert!(Cache::open(d.to_str().unwrap()).is_none());
        std::fs::remove_file(&d).unwrap();
    }

    #[test]
    fn concurrent_writers_leave_a_valid_entry() {
        let d = tempdir("scan-cache-conc").join("d");
        let c = std::sync::Arc::new(Cache::open(d.to_str().unwrap()).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let imgs = vec![Image {
                            kind: Kind::Sass,
                            arch: Arch::new(80 + i, Variant::Plain),
                            ptx_isa: None,
                        }];
                        c.put(&st(9), &Ok(imgs));
                        if let Some(got) = c.get(&st(9)) {
                            assert_eq!(got.unwrap().len(), 1);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(c.get(&st(9)).unwrap().unwrap().len(), 1);
        // Only the entry itself remains: no temp files left behind.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
