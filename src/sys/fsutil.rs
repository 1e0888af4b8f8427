//! Small file helpers shared by every entry point: bounded reads and atomic
//! replacement (temp file in the same directory, fsync, rename), so a crash or
//! a concurrent reader never sees half a file; and the check of the private
//! directories gpu-guard reads its own files back from.

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
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
    read_open_file(&file, meta.len(), limit)
}

/// Reads the open regular file `file`, which fstat said holds `len` bytes,
/// refusing more than `limit`: a read for those bytes and one that finds
/// the end, where `read_to_end` on a `take`n file starts with 8 KiB reads
/// (every container start reads the config this way). A file that grew
/// since is read on, up to the limit.
pub fn read_open_file(mut file: &fs::File, len: u64, limit: u64) -> io::Result<Vec<u8>> {
    // One byte past the limit is read to tell a file that is over it.
    let limit = usize::try_from(limit).map_or(usize::MAX - 1, |l| l.min(usize::MAX - 1));
    let mut buf = vec![0u8; usize::try_from(len).unwrap_or(limit).min(limit) + 1];
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            if filled > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("file is larger than {limit} bytes"),
                ));
            }
            buf.resize(buf.len().saturating_mul(2).min(limit + 1), 0);
        }
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
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
/// Keeps the old file's permission bits (never setuid, setgid or sticky)
/// when there is a regular file at `path`, else uses `default_mode`.
pub fn atomic_write(path: &Path, data: &[u8], default_mode: u32) -> io::Result<()> {
    write_replace(path, data, Perms::KeepOr(default_mode), true)
}

/// Replaces `path` with `data` atomically for readers (they see the old or
/// the new file, never a mix) but without fsync: for files that do not
/// outlive a crash anyway, a container bundle's config.json or a cache in
/// /run, on the container-start path where an fsync on a busy disk can cost
/// more than the whole decision. Permission bits as [`atomic_write`].
pub fn replace_file(path: &Path, data: &[u8], default_mode: u32) -> io::Result<()> {
    write_replace(path, data, Perms::KeepOr(default_mode), false)
}

/// [`atomic_write`] (`durable`) or [`replace_file`] with exactly `mode`,
/// whatever the old file had: for private files (caches, state) whose mode
/// is part of their trust check, so a file found with a wrong mode is healed
/// by the next write instead of copied forward.
pub fn write_with_mode(path: &Path, data: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    write_replace(path, data, Perms::Exactly(mode), durable)
}

/// How the new file's permission bits are chosen.
#[derive(Clone, Copy)]
enum Perms {
    /// The old regular file's bits, else this.
    KeepOr(u32),
    Exactly(u32),
}

/// The permission bits of the regular file at `path`, read without
/// following a symlink: None for a symlink, anything not a regular file, a
/// file owned by someone other than us or root, or nothing there.
///
/// Why: this runs as root in directories other users may have raced. The old
/// code stat()ed the path, which follows a symlink: a user who swapped the
/// target for a link to /usr/bin/something got that binary's mode copied,
/// and with the chmod-by-path below, root set a root-owned binary to 4777.
/// open(2) with O_PATH|O_NOFOLLOW opens a final-component symlink itself
/// (never its target), and fstat(2) on that fd describes exactly what was
/// opened, so no later swap can change the answer.
fn old_mode(path: &Path) -> Option<u32> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
        .open(path)
        .ok()?;
    let st = nix::sys::stat::fstat(&file).ok()?;
    let kind = st.st_mode & libc::S_IFMT;
    // Only a mode we or root chose is carried forward: a file someone else
    // planted there (mode 0777, say) must not make ours world-writable.
    let euid = nix::unistd::geteuid().as_raw();
    let ours = st.st_uid == euid || st.st_uid == 0;
    (kind == libc::S_IFREG && ours).then_some(st.st_mode & 0o777)
}

/// The one writer behind [`atomic_write`], [`replace_file`] and
/// [`write_with_mode`]. Safe against a user who can write `path`'s
/// directory and races us (tests/decide/write_safety.rs):
/// - the temp file is created with O_CREAT|O_EXCL|O_NOFOLLOW (open(2)): a
///   link or file planted at its name makes the open fail, never redirects
///   it; the name is unique and retried on EEXIST;
/// - its mode is set with fchmod(2) on our own fd, never chmod by path, so a
///   swap of the temp name cannot point the chmod at another file;
/// - the old mode is read through [`old_mode`] (no symlink following) and
///   masked to 0o777: setuid, setgid and sticky bits are never copied;
/// - rename(2) replaces the directory entry at `path`: a symlink there is
///   replaced itself, its target is never written.
///
/// The directory itself must not be writable by others for the *content* to
/// be trusted later; callers that read back check it with
/// [`check_private_dir`].
fn write_replace(path: &Path, data: &[u8], perms: Perms, durable: bool) -> io::Result<()> {
    stage(path, data, perms, durable)?.commit()
}

/// A new file's content written (and, when durable, fsynced) under a temp
/// name beside its target, not yet in place: [`Staged::commit`] renames it
/// over the target; dropping it uncommitted removes the temp file. Install
/// stages every file of a change before it replaces any (all or none).
#[derive(Debug)]
pub struct Staged {
    tmp: PathBuf,
    path: PathBuf,
    durable: bool,
    done: bool,
}

/// [`atomic_write`] in two steps: the content staged now, the rename by
/// [`Staged::commit`]. Permission bits as [`atomic_write`]'s (the old
/// file's, read now, else `default_mode`).
pub fn stage_write(path: &Path, data: &[u8], default_mode: u32) -> io::Result<Staged> {
    stage(path, data, Perms::KeepOr(default_mode), true)
}

fn stage(path: &Path, data: &[u8], perms: Perms, durable: bool) -> io::Result<Staged> {
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let mode = match perms {
        Perms::KeepOr(default) => old_mode(path).unwrap_or(default),
        Perms::Exactly(mode) => mode,
    } & 0o777;
    let (mut f, tmp) = create_temp(&dir, name)?;
    let staged = Staged {
        tmp,
        path: path.to_path_buf(),
        durable,
        done: false,
    };
    f.write_all(data)?;
    // fchmod, not chmod: the fd is the file we created, whatever the
    // name now points at. Exact bits, whatever the umask.
    nix::sys::stat::fchmod(&f, Mode::from_bits_truncate(mode)).map_err(io::Error::from)?;
    if durable {
        f.sync_all()?;
    }
    Ok(staged)
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

impl Staged {
    /// The file this replaces.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temp file that holds the content until [`Staged::commit`].
    pub fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// Puts the staged file in place (rename(2): readers see the old or
    /// the new file, never a mix).
    pub fn commit(mut self) -> io::Result<()> {
        fs::rename(&self.tmp, &self.path)?;
        self.done = true;
        // The rename is durable once the directory is synced; failure to sync
        // a directory (some filesystems refuse) does not undo the write.
        if self.durable {
            if let Ok(d) = File::open(parent_dir(&self.path)) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            // unlink(2) removes the name, never follows it.
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Creates `.NAME.gpu-guard.PID.N.tmp` in `dir`, mode 0600 until the caller
/// fchmods it: O_EXCL|O_NOFOLLOW, so it is always a new inode of ours.
fn create_temp(dir: &Path, name: &std::ffi::OsStr) -> io::Result<(File, PathBuf)> {
    let mut attempts = 0;
    loop {
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".gpu-guard.{}.{}.tmp",
            std::process::id(),
            unique()
        ));
        let tmp = dir.join(tmp_name);
        // create_new is O_CREAT|O_EXCL: with it the kernel never follows a
        // symlink at the name (open(2)); O_NOFOLLOW says so again.
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 16 => attempts += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Refuses a directory that gpu-guard keeps private files in (the host facts
/// cache, the scan cache, install state and backups) unless only we can
/// change what is in it: the directory must be a real directory (not a
/// symlink), owned by root (by the effective uid when not running as root)
/// and not writable by group or others. Its ancestors must be owned by root
/// or us and not writable by group or others unless sticky (as /tmp is), so
/// no one else can swap the directory itself.
///
/// Why: anyone who can write such a directory can replace the files root
/// reads back (a planted host cache decides which containers may start) and
/// race root's writes there. The error is one line that names the directory,
/// what is wrong and the fix.
pub fn check_private_dir(dir: &Path) -> io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let euid = nix::unistd::geteuid().as_raw();
    let owner_ok = |uid: u32| uid == euid || uid == 0;
    let meta = fs::symlink_metadata(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("directory {}: {e}", dir.display())))?;
    let refuse =
        |meta: &fs::Metadata, what: &str, fix: String| unsafe_dir(dir, dir, meta, what, &fix);
    if meta.file_type().is_symlink() {
        let fix = format!("replace the link {} with a real directory", dir.display());
        return Err(refuse(&meta, "is a symlink", fix));
    }
    if !meta.is_dir() {
        return Err(refuse(
            &meta,
            "is not a directory",
            format!("remove {}", dir.display()),
        ));
    }
    if meta.uid() != euid {
        let (who, fix) = if euid == 0 {
            ("root".to_string(), format!("chown root {}", dir.display()))
        } else {
            (
                format!("uid {euid}"),
                format!("chown {euid} {}", dir.display()),
            )
        };
        return Err(refuse(&meta, &format!("is not owned by {who}"), fix));
    }
    if meta.mode() & 0o022 != 0 {
        let fix = format!("chmod 0700 {}", dir.display());
        return Err(refuse(&meta, "is writable by group or others", fix));
    }
    // Ancestors, both as written (the links on the way sit in them) and as
    // resolved (the directories really walked through). A way with no link
    // and no `..` resolves to itself: its directories are checked once.
    let abs = std::path::absolute(dir)?;
    let mut winding = abs
        .components()
        .any(|c| c == std::path::Component::ParentDir);
    for a in abs.ancestors().skip(1) {
        winding |= check_ancestor(dir, a, owner_ok)?;
    }
    if winding {
        if let Ok(real) = fs::canonicalize(dir) {
            for a in real.ancestors().skip(1) {
                check_ancestor(dir, a, owner_ok)?;
            }
        }
    }
    Ok(())
}

/// Checks one ancestor `a` of the private directory `dir`; true when it is
/// a symlink, which is resolved on the canonical way instead (the link
/// itself lives in the next ancestor up, which is checked).
fn check_ancestor(dir: &Path, a: &Path, owner_ok: impl Fn(u32) -> bool) -> io::Result<bool> {
    let Ok(m) = fs::symlink_metadata(a) else {
        return Ok(false);
    };
    if m.file_type().is_symlink() {
        return Ok(true);
    }
    if !owner_ok(m.uid()) {
        let fix = format!("chown root {} or move {}", a.display(), dir.display());
        return Err(unsafe_dir(dir, a, &m, "is owned by another user", &fix));
    }
    // A sticky directory (/tmp) lets others add entries but not rename
    // or remove ours.
    if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
        let fix = format!("chmod go-w {} or move {}", a.display(), dir.display());
        return Err(unsafe_dir(
            dir,
            a,
            &m,
            "is writable by group or others",
            &fix,
        ));
    }
    Ok(false)
}

/// The one-line refusal: the directory, the offending path (it or an
/// ancestor) with its mode and owner, and the fix.
fn unsafe_dir(dir: &Path, shown: &Path, meta: &fs::Metadata, what: &str, fix: &str) -> io::Error {
    let subject = if shown == dir {
        String::new()
    } else {
        format!(": {}", shown.display())
    };
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "refusing directory {}{subject} (mode {:04o}, owner uid {}) {what}, so others could replace the files gpu-guard keeps there; fix: {fix}",
            dir.display(),
            meta.mode() & 0o7777,
            meta.uid()
        ),
    )
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
    use std::os::unix::fs::PermissionsExt;

    use crate::sys::test_dirs::tempdir;

    #[test]
    fn atomic_write_replaces_and_keeps_mode() {
        let d = tempdir("fsutil");
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
    fn an_open_file_is_read_whole_up_to_the_limit() {
        let d = tempdir("fsutil-read");
        let p = d.join("f");
        let data: Vec<u8> = (0..100u8).collect();
        fs::write(&p, &data).unwrap();
        let f = fs::File::open(&p).unwrap();
        let read = |len, limit| {
            use std::io::Seek;
            (&f).rewind().unwrap();
            read_open_file(&f, len, limit)
        };
        assert_eq!(read(100, 100).unwrap(), data);
        // A file that grew since its size was taken is read on, within the
        // limit, and refused past it.
        assert_eq!(read(10, 1000).unwrap(), data);
        assert_eq!(read(0, 100).unwrap(), data);
        let e = read(10, 99).unwrap_err();
        assert!(e.to_string().contains("larger than 99 bytes"), "{e}");
        // Shrunk: what is there.
        assert_eq!(read(500, 1000).unwrap(), data);
        // No limit at all does not overflow.
        assert_eq!(read(100, u64::MAX).unwrap(), data);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn private_dir_check_refuses_writable_dirs() {
        let d = tempdir("fsutil");
        set_mode(&d, 0o755);
        check_private_dir(&d).unwrap();
        set_mode(&d, 0o777);
        let msg = check_private_dir(&d).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("chmod 0700 {}", d.display())),
            "{msg}"
        );
        assert!(msg.contains("mode 0777"), "{msg}");
        set_mode(&d, 0o700);
        let file = d.join("f");
        fs::write(&file, b"").unwrap();
        assert!(check_private_dir(&file).is_err());
        assert!(check_private_dir(&d.join("absent")).is_err());
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn exact_modes_and_no_mode_from_a_fifo() {
        let d = tempdir("fsutil");
        let p = d.join("c.json");
        // A mode of 0600 comes from the caller, not the umask or the old file.
        fs::write(&p, b"old").unwrap();
        set_mode(&p, 0o666);
        write_with_mode(&p, b"new", 0o600, false).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
            0o600
        );
        // No symlink or FIFO at the target has its mode copied.
        fs::remove_file(&p).unwrap();
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        replace_file(&p, b"x", 0o640).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
            0o640
        );
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
        fs::remove_dir_all(d).unwrap();
    }

    fn set_mode(p: &Path, mode: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn read_limited_refuses_fifo_and_large_files() {
        let d = tempdir("fsutil");
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
