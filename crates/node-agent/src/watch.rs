//! What the agent watches, by polling: a fingerprint of directories (each
//! entry's name, inode, size and modification time) and files. Polling,
//! not inotify: the files live on hostPath mounts, are replaced by rename,
//! and their directories may not exist yet (NVIDIA's conf.d before the
//! GPU Operator's toolkit runs); a stat of a few entries every interval
//! costs microseconds, and a full re-plan also runs every resync period,
//! whatever the fingerprint says.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One stat: (inode, size, mtime seconds, mtime nanoseconds).
type Stat = (u64, u64, i64, i64);

fn stat(path: &Path) -> Option<Stat> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// The state of a set of paths (paths on this machine).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint(BTreeMap<PathBuf, Option<Stat>>);

/// Fingerprints `paths`: each path itself and, for a directory, each of
/// its entries (not recursively).
pub fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    let mut out = BTreeMap::new();
    for p in paths {
        out.insert(p.clone(), stat(p));
        let Ok(rd) = std::fs::read_dir(p) else {
            continue;
        };
        for e in rd.flatten().take(4096) {
            let path = e.path();
            let s = stat(&path);
            out.insert(path, s);
        }
    }
    Fingerprint(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_changed_or_removed_entry_changes_the_fingerprint() {
        let d = std::env::temp_dir().join(format!("gg-agent-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let sub = d.join("conf.d");
        let paths = vec![sub.clone(), d.join("config.toml")];
        let empty = fingerprint(&paths);
        std::fs::create_dir_all(&sub).unwrap();
        let dir_only = fingerprint(&paths);
        assert_ne!(empty, dir_only);
        std::fs::write(sub.join("99-nvidia.toml"), "a").unwrap();
        let one = fingerprint(&paths);
        assert_ne!(dir_only, one);
        assert_eq!(one, fingerprint(&paths), "stable while nothing changes");
        std::fs::write(sub.join("99-nvidia.toml"), "ab").unwrap();
        assert_ne!(one, fingerprint(&paths));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
