//! Small file helpers shared by every entry point: bounded reads and atomic
//! replacement (temp file in the same directory, fsync, rename), so a crash or
//! a concurrent reader never sees half a file.

use nix::fcntl::OFlag;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Reads a regular file of at most `limit` bytes. FIFOs, devices and
/// directories are refused before any read, so a hostile path cannot block us.
pub fn read_limited(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    // O_NONBLOCK: opening a FIFO with no writer must not block; we reject it
    // right after by its type.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if meta.len() > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file is larger than {limit} bytes"),
        ));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file is larger than {limit} bytes"),
        ));
    }
    Ok(buf)
}

/// [`read_limited`] as UTF-8 text.
pub fn read_to_string_limited(path: &Path, limit: u64) -> io::Result<String> {
    let bytes = read_limited(path, limit)?;
    String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}

/// Replaces `path` with `data` atomically and durably (fsync of the file and
/// its directory): for files that must survive a crash, such as an engine's
/// config. The temp file sits beside the target (same filesystem, so rename
/// is atomic) with a unique name, so concurrent writers never share one.
/// Keeps the old file's permission bits when there is one, else uses
/// `default_mode`.
pub fn atomic_write(path: &Path, data: &[u8], default_mode: u32) -> io::Result<()> {
    write_replace(path, data, default_mode, true)
}

/// Replaces `path` with `data` atomically for readers (they see the old or
/// the new file, never a mix) but without fsync: for files that do not
/// outlive a crash anyway, a container bundle's config.json or a cache in
/// /run, on the container-start path where an fsync on a busy disk can cost
/// more than the whole decision.
pub fn replace_file(path: &Path, data: &[u8], default_mode: u32) -> io::Result<()> {
    write_replace(path, data, default_mode, false)
}

fn write_replace(path: &Path, data: &[u8], default_mode: u32, durable: bool) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let mode = fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(default_mode);
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".gpu-guard.{}.{}.tmp",
        std::process::id(),
        unique()
    ));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(OFlag::O_CLOEXEC.bits())
            .open(&tmp)?;
        f.write_all(data)?;
        if durable {
            f.sync_all()?;
        }
        fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
        fs::rename(&tmp, path)?;
        // The rename is durable once the directory is synced; failure to sync
        // a directory (some filesystems refuse) does not undo the write.
        if durable {
            if let Ok(d) = File::open(&dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A per-process counter plus the clock: unique temp names within a process
/// (threads) and, with the pid, across processes.
fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}{:x}", N.fetch_add(1, Ordering::Relaxed), nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("gg-fsutil-{}-{}", std::process::id(), unique()));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn atomic_write_replaces_and_keeps_mode() {
        let d = tempdir();
        let p = d.join("config.json");
        fs::write(&p, b"old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        atomic_write(&p, b"new", 0o644).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // no temp files left behind
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn read_limited_refuses_fifo_and_large_files() {
        let d = tempdir();
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(read_limited(&fifo, 100).is_err());
        let big = d.join("big");
        fs::write(&big, vec![b'x'; 101]).unwrap();
        assert!(read_limited(&big, 100).is_err());
        assert_eq!(read_limited(&big, 101).unwrap().len(), 101);
        assert!(read_limited(&d, 100).is_err());
        fs::remove_dir_all(d).unwrap();
    }
}
