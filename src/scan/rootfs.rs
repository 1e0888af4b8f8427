//! Path resolution that stays inside a container's rootfs.
//!
//! The image is hostile until proven otherwise: `usr/lib/libx.so` may be a
//! symlink to `/etc/shadow` or `../../..`, a FIFO, a device node. So:
//! - every path is resolved relative to the rootfs with symlinks (absolute
//!   ones too) taken against the rootfs root and `..` clamped at it: with
//!   openat2(2) `RESOLVE_IN_ROOT` where the kernel has it (Linux 5.6+), else
//!   in userspace, one component at a time with O_NOFOLLOW, as
//!   filepath-securejoin and runc's libcontainer/utils do;
//! - the final file is first opened with O_PATH (no open(2) side effects on
//!   devices or FIFOs: path(7) "O_PATH ... the file itself is not opened"),
//!   checked with fstat(2) to be a regular file, and only then reopened for
//!   reading through /proc/self/fd, the same inode, with O_NONBLOCK;
//! - a directory is listed whole or not at all: readdir(3) returns NULL
//!   both at the end and on an error, and a listing cut short by an I/O
//!   error would pass for a complete one (hiding libraries from the check).
//!
//! Every system call goes through nix's safe wrappers (openat2, fstat,
//! readlinkat, fdopendir/readdir): no `unsafe` here.

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{self, AtFlags, OFlag, OpenHow, ResolveFlag, AT_FDCWD};
use nix::sys::stat::{self, Mode, SFlag};
use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// Linux follows at most 40 symlinks in one lookup (MAXSYMLINKS, path_resolution(7)).
const MAX_SYMLINKS: u32 = 40;
/// The deepest directory stack the userspace resolver keeps open.
const MAX_DEPTH: usize = 256;
/// The most entries read from one directory while globbing.
const MAX_DIR_ENTRIES: usize = 1 << 17;
/// PATH_MAX of <linux/limits.h>: a symlink target is shorter (symlink(2)
/// ENAMETOOLONG), so a longer one read back means something is wrong.
const PATH_MAX: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    #[error("cannot open the container rootfs {}: {source}", path.display())]
    OpenRoot {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot resolve {path} inside the rootfs: {source}")]
    Resolve {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not a regular file")]
    NotRegular { path: String },
    #[error("cannot open {path} for reading: {source}")]
    Open {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path} was replaced while it was being opened")]
    Changed { path: String },
    /// The directory could not be resolved or opened for listing.
    #[error("cannot list {path}: {source}")]
    ReadDir {
        path: String,
        #[source]
        source: io::Error,
    },
    /// The directory was opened, but readdir(3) failed part way: the
    /// entries read so far are not the whole directory, so none are
    /// returned.
    #[error("cannot list {path}: reading its entries failed: {source}")]
    ReadDirEntries {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// How paths are resolved inside the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolver {
    /// openat2(2) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS.
    Openat2,
    /// Component by component in userspace (kernels before 5.6, or seccomp
    /// filters that refuse openat2).
    Userspace,
}

/// What fstat(2) says about a file, as much as the scanner needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStat {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: i64,
    pub mode: u32,
}

impl FileStat {
    fn file_type(&self) -> SFlag {
        SFlag::from_bits_truncate(self.mode & SFlag::S_IFMT.bits())
    }
    pub fn is_regular(&self) -> bool {
        self.file_type() == SFlag::S_IFREG
    }
    pub fn is_dir(&self) -> bool {
        self.file_type() == SFlag::S_IFDIR
    }
    fn is_symlink(&self) -> bool {
        self.file_type() == SFlag::S_IFLNK
    }
}

impl From<stat::FileStat> for FileStat {
    fn from(st: stat::FileStat) -> FileStat {
        FileStat {
            dev: st.st_dev,
            ino: st.st_ino,
            // st_size is never negative for a file fstat(2) describes; the
            // clamp keeps a broken filesystem from wrapping it.
            size: st.st_size.max(0) as u64,
            mtime_sec: st.st_mtime,
            mtime_nsec: st.st_mtime_nsec,
            mode: st.st_mode,
        }
    }
}

pub fn fstat<Fd: AsFd>(fd: Fd) -> io::Result<FileStat> {
    Ok(stat::fstat(fd)?.into())
}

/// openat(2) with no mode: nothing here creates files. A path with a NUL
/// byte is EINVAL (nix's NixPath), as it was with CString.
fn openat<Fd: AsFd>(dir: Fd, name: &[u8], flags: OFlag) -> nix::Result<OwnedFd> {
    fcntl::openat(dir, name, flags, Mode::empty())
}

/// openat2(2) for an O_PATH descriptor with the given RESOLVE_* flags.
fn openat2_path<Fd: AsFd>(dir: Fd, path: &[u8], resolve: ResolveFlag) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(resolve);
    fcntl::openat2(dir, path, how)
}

/// The target of the symlink `fd` (an O_PATH|O_NOFOLLOW descriptor of it):
/// readlinkat(2) with an empty path reads the link `fd` itself refers to
/// (since Linux 2.6.39).
fn readlink_fd<Fd: AsFd>(fd: Fd) -> nix::Result<Vec<u8>> {
    let target = fcntl::readlinkat(fd, "")?.into_vec();
    if target.len() >= PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(target)
}

/// Does this kernel let us use openat2? Asked once per process.
fn openat2_works() -> bool {
    use std::sync::OnceLock;
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        // ENOSYS: kernel before 5.6; EPERM: a seccomp filter (openat2(2)).
        openat2_path(AT_FDCWD, b"/", ResolveFlag::RESOLVE_IN_ROOT).is_ok()
    })
}

/// An open container rootfs.
pub struct Root {
    fd: OwnedFd,
    resolver: Resolver,
}

/// A file found in the root, held by an O_PATH descriptor (not opened yet).
pub struct Found {
    pub path: String,
    pub fd: OwnedFd,
    pub stat: FileStat,
}

/// A directory entry: its name and whether it is a directory (not
/// following symlinks, so `**` cannot loop).
pub struct DirEntry {
    pub name: OsString,
    pub is_dir: bool,
}

/// One record as readdir(3) returns it: the name, and the type from
/// `d_type` (`None` for DT_UNKNOWN, which some filesystems always give).
pub struct RawEntry {
    pub name: CString,
    pub file_type: Option<Type>,
}

impl From<nix::dir::Entry> for RawEntry {
    fn from(e: nix::dir::Entry) -> RawEntry {
        RawEntry {
            name: e.file_name().to_owned(),
            file_type: e.file_type(),
        }
    }
}

/// The entries of one directory, each a readdir(3) result. readdir(3)
/// returns NULL both at the end and on error (errno tells them apart);
/// nix's [`Dir`] iterator turns the second into `Some(Err(errno))`, so an
/// I/O error is an item here, never a silent end.
pub type Entries<'a> = Box<dyn Iterator<Item = nix::Result<RawEntry>> + 'a>;

/// Stands between readdir(3) and the listing of the directory it is given
/// (relative to the root): tests make a listing fail part way with it;
/// production passes the entries through unchanged ([`no_tap`]).
pub type EntriesTap<'t> = &'t dyn for<'a> Fn(&str, Entries<'a>) -> Entries<'a>;

/// The production [`EntriesTap`]: every entry as readdir(3) gave it.
pub fn no_tap<'a>(_dir: &str, entries: Entries<'a>) -> Entries<'a> {
    entries
}

impl Root {
    /// Opens `path` (a host path, trusted: it comes from the bundle) as the root.
    pub fn open(path: &Path) -> Result<Root, RootfsError> {
        let resolver = if openat2_works() {
            Resolver::Openat2
        } else {
            Resolver::Userspace
        };
        Root::open_with(path, resolver)
    }

    /// Opens with a chosen resolver (tests run both).
    pub fn open_with(path: &Path, resolver: Resolver) -> Result<Root, RootfsError> {
        let fd = openat(
            AT_FDCWD,
            path.as_os_str().as_encoded_bytes(),
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        )
        .map_err(|e| RootfsError::OpenRoot {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        Ok(Root { fd, resolver })
    }

    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// Resolves `rel` inside the root to an O_PATH descriptor, following
    /// every symlink (the last one too) inside the root.
    fn resolve(&self, rel: &[u8]) -> io::Result<OwnedFd> {
        match self.resolver {
            Resolver::Openat2 => {
                let path = if rel.is_empty() { b"." } else { rel };
                // RESOLVE_IN_ROOT: absolute symlinks and `..` are taken
                // against the root, as if chroot(2)ed into it;
                // RESOLVE_NO_MAGICLINKS: the image's /proc-style links
                // cannot jump out (openat2(2)).
                let resolve = ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS;
                // EAGAIN: a concurrent rename raced the lookup (openat2(2)); retry.
                let mut tries = 0;
                loop {
                    match openat2_path(&self.fd, path, resolve) {
                        Err(Errno::EAGAIN) if tries < 8 => tries += 1,
                        other => return Ok(other?),
                    }
                }
            }
            Resolver::Userspace => Ok(self.resolve_userspace(rel)?),
        }
    }

    /// One component at a time: each is opened O_PATH|O_NOFOLLOW relative
    /// to the directory before it; a symlink's target is spliced into the
    /// remaining path (an absolute one restarts at the root), and `..` pops
    /// the directory stack but never above the root.
    fn resolve_userspace(&self, rel: &[u8]) -> nix::Result<OwnedFd> {
        let mut todo: std::collections::VecDeque<Vec<u8>> = rel
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
            .map(|c| c.to_vec())
            .collect();
        let mut stack: Vec<OwnedFd> = Vec::new();
        let mut links = 0u32;
        while let Some(comp) = todo.pop_front() {
            if comp == b".." {
                stack.pop();
                continue;
            }
            if stack.len() >= MAX_DEPTH {
                return Err(Errno::ENAMETOOLONG);
            }
            let cur = stack.last().unwrap_or(&self.fd);
            let fd = openat(
                cur,
                &comp,
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            )?;
            let st = FileStat::from(stat::fstat(&fd)?);
            if st.is_symlink() {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(Errno::ELOOP);
                }
                let target = readlink_fd(&fd)?;
                if target.first() == Some(&b'/') {
                    stack.clear();
                }
                for part in target
                    .split(|&b| b == b'/')
                    .rev()
                    .filter(|c| !c.is_empty() && *c != b".")
                {
                    todo.push_front(part.to_vec());
                }
                continue;
            }
            if todo.is_empty() {
                return Ok(fd);
            }
            if !st.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            stack.push(fd);
        }
        // The path ended at a directory (or was empty, or `..`).
        match stack.pop() {
            Some(fd) => Ok(fd),
            None => openat(&self.fd, b".", OFlag::O_PATH | OFlag::O_CLOEXEC),
        }
    }

    /// Finds `rel` in the root: an O_PATH descriptor and its stat. Any file
    /// type is returned; callers check [`FileStat::is_regular`].
    pub fn find(&self, rel: &str) -> Result<Found, RootfsError> {
        let err = |source| RootfsError::Resolve {
            path: rel.to_string(),
            source,
        };
        let fd = self.resolve(rel.as_bytes()).map_err(err)?;
        let stat = fstat(&fd).map_err(err)?;
        Ok(Found {
            path: rel.to_string(),
            fd,
            stat,
        })
    }

    /// Lists the directory `rel` (resolved inside the root), in name order.
    /// Fails as a whole if readdir(3) fails part way: a short listing would
    /// pass for a complete one.
    pub fn read_dir(&self, rel: &str) -> Result<Vec<DirEntry>, RootfsError> {
        self.read_dir_tapped(rel, &no_tap)
    }

    /// [`Root::read_dir`] with `tap` between readdir(3) and the listing
    /// (the fault-injection seam of the tests).
    pub fn read_dir_tapped(
        &self,
        rel: &str,
        tap: EntriesTap,
    ) -> Result<Vec<DirEntry>, RootfsError> {
        let shown = if rel.is_empty() { "/" } else { rel };
        let open_err = |source| RootfsError::ReadDir {
            path: shown.to_string(),
            source,
        };
        let pathfd = self.resolve(rel.as_bytes()).map_err(open_err)?;
        // Reopen the directory itself for reading; O_DIRECTORY refuses
        // anything else before it is opened (open(2)).
        let dir = Dir::openat(
            &pathfd,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| open_err(e.into()))?;
        // DT_UNKNOWN entries are stat'ed through the O_PATH descriptor of
        // the same directory (an O_PATH fd is a valid dirfd, open(2)),
        // since the Dir's own fd is borrowed by its iterator.
        let is_dir = |name: &CStr| {
            stat::fstatat(&pathfd, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileStat::from(st).is_dir())
        };
        let entries: Entries = Box::new(dir.into_iter().map(|r| r.map(RawEntry::from)));
        list_entries(tap(rel, entries), is_dir).map_err(|source| RootfsError::ReadDirEntries {
            path: shown.to_string(),
            source,
        })
    }
}

/// Collects a directory's entries, skipping `.` and `..`, in name order.
/// `is_dir` answers for entries whose `d_type` is DT_UNKNOWN (asked
/// without following symlinks). The first readdir(3) error fails the whole
/// listing.
fn list_entries<'a>(
    entries: Entries<'a>,
    mut is_dir: impl FnMut(&CStr) -> bool,
) -> io::Result<Vec<DirEntry>> {
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let bytes = entry.name.as_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let is_dir = match entry.file_type {
            Some(t) => t == Type::Directory,
            // Some filesystems do not fill d_type (readdir(3)): ask.
            None => is_dir(&entry.name),
        };
        out.push(DirEntry {
            name: OsString::from_vec(entry.name.into_bytes()),
            is_dir,
        });
        if out.len() >= MAX_DIR_ENTRIES {
            break;
        }
    }
    // Name order, so which of two names of one library is reported does
    // not depend on the filesystem's readdir order.
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Opens a file found with an O_PATH descriptor for reading, only if it is
/// a regular file, and checks that what was opened is that same inode.
pub fn open_regular(found: &Found) -> Result<File, RootfsError> {
    if !found.stat.is_regular() {
        return Err(RootfsError::NotRegular {
            path: found.path.clone(),
        });
    }
    let err = |source| RootfsError::Open {
        path: found.path.clone(),
        source,
    };
    // /proc/self/fd/N reopens exactly the inode the O_PATH fd holds (the
    // technique runc uses to reopen O_PATH handles); our /proc is the
    // host's, never the image's. O_NONBLOCK: should the inode be swapped
    // for a FIFO after the check, open(2) does not wait for a writer.
    let proc_path = format!("/proc/self/fd/{}", found.fd.as_raw_fd());
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let fd = openat(AT_FDCWD, proc_path.as_bytes(), flags).map_err(|e| err(e.into()))?;
    let st = fstat(&fd).map_err(err)?;
    if st.dev != found.stat.dev || st.ino != found.stat.ino || !st.is_regular() {
        return Err(RootfsError::Changed {
            path: found.path.clone(),
        });
    }
    Ok(File::from(fd))
}

/// Opens a host path given on the command line the same careful way
/// (symlinks followed as the user wrote them, but only a regular file is
/// ever opened for reading).
pub fn find_host(path: &Path) -> Result<Found, RootfsError> {
    let shown = path.display().to_string();
    let err = |source| RootfsError::Resolve {
        path: shown.clone(),
        source,
    };
    let fd = openat(
        AT_FDCWD,
        path.as_os_str().as_encoded_bytes(),
        OFlag::O_PATH | OFlag::O_CLOEXEC,
    )
    .map_err(|e| err(e.into()))?;
    let stat = fstat(&fd).map_err(err)?;
    Ok(Found {
        path: shown,
        fd,
        stat,
    })
}

/// Joins a relative directory and a name as bytes (`""` + `x` = `x`).
pub fn join(dir: &str, name: &OsStr) -> Option<String> {
    let name = name.to_str()?;
    Some(if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sys::test_dirs::tempdir;

    fn raw(name: &str, file_type: Option<Type>) -> nix::Result<RawEntry> {
        Ok(RawEntry {
            name: CString::new(name).unwrap(),
            file_type,
        })
    }

    /// Two entries, then readdir(3) fails (EIO): the listing is an error,
    /// not the two names it got.
    fn fails_after_two<'a>(_dir: &str, real: Entries<'a>) -> Entries<'a> {
        Box::new(real.take(2).chain(std::iter::once(Err(Errno::EIO))))
    }

    #[test]
    fn a_readdir_error_fails_the_listing() {
        let entries: Entries = Box::new(
            [
                raw("liba.so", Some(Type::File)),
                raw("sub", Some(Type::Directory)),
                Err(Errno::EIO),
                raw("libz.so", Some(Type::File)),
            ]
            .into_iter(),
        );
        let e = list_entries(entries, |_| false).err().expect("an error");
        assert_eq!(e.raw_os_error(), Some(Errno::EIO as i32));
    }

    #[test]
    fn listing_skips_dots_sorts_and_asks_for_unknown_types() {
        let entries: Entries = Box::new(
            [
                raw("zz", None),
                raw(".", Some(Type::Directory)),
                raw("..", Some(Type::Directory)),
                raw("b.so", Some(Type::Symlink)),
                raw("a", Some(Type::Directory)),
                raw("yy", None),
            ]
            .into_iter(),
        );
        let mut asked = Vec::new();
        let l = list_entries(entries, |n| {
            asked.push(n.to_owned());
            n.to_bytes() == b"zz"
        })
        .unwrap();
        let got: Vec<(&str, bool)> = l
            .iter()
            .map(|e| (e.name.to_str().unwrap(), e.is_dir))
            .collect();
        assert_eq!(
            got,
            [("a", true), ("b.so", false), ("yy", false), ("zz", true)]
        );
        assert_eq!(asked, [c"zz".to_owned(), c"yy".to_owned()]);
    }

    #[test]
    fn read_dir_reports_a_failure_part_way_through_a_real_directory() {
        let d = tempdir("rootfs-readdir");
        std::fs::create_dir_all(d.join("usr/lib")).unwrap();
        for n in ["liba.so", "libb.so", "libc.so", "libd.so"] {
            std::fs::write(d.join("usr/lib").join(n), b"x").unwrap();
        }
        for resolver in [Resolver::Openat2, Resolver::Userspace] {
            let root = Root::open_with(&d, resolver).unwrap();
            let l = root.read_dir("usr/lib").unwrap();
            assert_eq!(l.len(), 4, "{resolver:?}");
            match root.read_dir_tapped("usr/lib", &fails_after_two) {
                Err(e @ RootfsError::ReadDirEntries { .. }) => {
                    let m = e.to_string();
                    assert!(m.starts_with("cannot list usr/lib: "), "{m}");
                    assert!(m.contains("Input/output error"), "{m}");
                }
                Err(e) => panic!("{resolver:?}: wrong error {e}"),
                Ok(l) => panic!("{resolver:?}: a short listing of {} entries", l.len()),
            }
            // The root itself is shown as `/`.
            let e = root.read_dir_tapped("", &fails_after_two).err().unwrap();
            assert!(e.to_string().starts_with("cannot list /: "), "{e}");
            // Missing and non-directory paths fail when opened, as before.
            let e = root.read_dir("usr/nope").err().unwrap();
            assert!(matches!(e, RootfsError::ReadDir { .. }), "{e}");
            let e = root.read_dir("usr/lib/liba.so").err().unwrap();
            assert!(matches!(e, RootfsError::ReadDir { .. }), "{e}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn file_types_from_the_mode() {
        let st = |mode: SFlag| FileStat {
            dev: 1,
            ino: 2,
            size: 3,
            mtime_sec: 0,
            mtime_nsec: 0,
            mode: mode.bits() | 0o755,
        };
        assert!(st(SFlag::S_IFREG).is_regular());
        assert!(st(SFlag::S_IFDIR).is_dir());
        assert!(st(SFlag::S_IFLNK).is_symlink());
        for other in [
            SFlag::S_IFIFO,
            SFlag::S_IFCHR,
            SFlag::S_IFSOCK,
            SFlag::S_IFBLK,
        ] {
            let s = st(other);
            assert!(
                !s.is_regular() && !s.is_dir() && !s.is_symlink(),
                "{other:?}"
            );
        }
    }
}
