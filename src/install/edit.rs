//! A planned engine-config change: the unified diff that `--dry-run`
//! prints, the bounded read of the files, and the backup taken before the
//! first write (the writes themselves are transaction.rs's: staged, then
//! renamed, so an engine never reads half a config).
//!
//! Backups live under the state directory (`/var/lib/gpu-guard/backup/` +
//! the file's absolute path), never beside the file: CRI-O reads *every*
//! regular file in `crio.conf.d` whatever its name (cri-o pkg/config/config.go,
//! `UpdateFromPath` walks the directory with no suffix filter), so a
//! `99-gpu-guard.toml.bak` there would be applied as configuration.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

use crate::sys::fsutil;

/// Engine configs and hook files are small; anything larger is not one.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot back up {} to {}: {source}", path.display(), backup.display())]
    Backup {
        path: PathBuf,
        backup: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// One file's planned change. `None` means the file is absent (before) or
/// is to be removed (after).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Where the file is on this machine (under `--host-root`).
    pub path: PathBuf,
    pub before: Option<String>,
    pub after: Option<String>,
    /// Permission bits for a file that does not exist yet.
    pub mode: u32,
}

impl FileChange {
    pub fn is_noop(&self) -> bool {
        self.before == self.after
    }
}

/// Reads a config file that may be absent. A path that exists but is not a
/// regular file (a FIFO, a directory) is an error, never a hang.
pub fn read_optional(path: &Path) -> Result<Option<String>, EditError> {
    match fsutil::read_to_string_limited(path, MAX_CONFIG_BYTES) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(EditError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A unified diff of one change, `--- a/PATH` / `+++ b/PATH`, with
/// `/dev/null` on the side where the file does not exist (as `git diff`
/// and `patch` expect for creations and deletions).
pub fn unified_diff(change: &FileChange) -> String {
    let shown = display_path(&change.path);
    let old_header = match change.before {
        Some(_) => format!("a/{shown}"),
        None => "/dev/null".to_string(),
    };
    let new_header = match change.after {
        Some(_) => format!("b/{shown}"),
        None => "/dev/null".to_string(),
    };
    let before = change.before.as_deref().unwrap_or("");
    let after = change.after.as_deref().unwrap_or("");
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&old_header, &new_header)
        .to_string()
}

fn display_path(path: &Path) -> String {
    let s = path.to_string_lossy();
    s.trim_start_matches('/').to_string()
}

/// Where the backup of `path` goes: `backup_dir` + the absolute path.
pub fn backup_path(backup_dir: &Path, path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // Only normal components, `..` resolved lexically: the result always
    // stays inside backup_dir, whatever the path says.
    let mut parts = Vec::new();
    for c in abs.components() {
        match c {
            Component::Normal(part) => parts.push(part),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    let mut out = backup_dir.to_path_buf();
    out.extend(parts);
    out
}

/// Writes `before` (the content of `path` before gpu-guard changes it) to
/// `backup`, in a private directory.
pub fn write_backup(path: &Path, backup: &Path, before: &str) -> Result<(), EditError> {
    let write_backup = || -> io::Result<()> {
        if let Some(dir) = backup.parent() {
            // 0700 whatever the umask, and refused if others can write
            // it: root writes engine configs (and credentials) here, and
            // a user who could write the directory could race that.
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            fsutil::check_private_dir(dir)?;
        }
        // Backups can hold registry credentials that admins put in
        // engine configs: readable by root only.
        fsutil::atomic_write(backup, before.as_bytes(), 0o600)
    };
    write_backup().map_err(|source| EditError::Backup {
        path: path.to_path_buf(),
        backup: backup.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_headers_follow_patch_conventions() {
        let modify = FileChange {
            path: PathBuf::from("/etc/docker/daemon.json"),
            before: Some("{}\n".into()),
            after: Some("{\"a\": 1}\n".into()),
            mode: 0o644,
        };
        let d = unified_diff(&modify);
        assert!(d.starts_with("--- a/etc/docker/daemon.json\n+++ b/etc/docker/daemon.json\n"));
        assert!(d.contains("\n-{}\n+{\"a\": 1}\n"), "{d}");
        let create = FileChange {
            before: None,
            ..modify.clone()
        };
        assert!(unified_diff(&create).starts_with("--- /dev/null\n+++ b/etc/"));
        let remove = FileChange {
            after: None,
            ..modify
        };
        assert!(unified_diff(&remove).contains("+++ /dev/null\n"));
    }

    #[test]
    fn backup_path_mirrors_the_absolute_path() {
        assert_eq!(
            backup_path(
                Path::new("/var/lib/gpu-guard/backup"),
                Path::new("/etc/containerd/../containerd/config.toml")
            ),
            PathBuf::from("/var/lib/gpu-guard/backup/etc/containerd/config.toml")
        );
    }
}
