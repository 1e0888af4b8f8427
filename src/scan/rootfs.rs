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
//!   reading through /proc/self/fd, the same inode, with O_NONBLOCK.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Linux follows at most 40 symlinks in one lookup (MAXSYMLINKS, path_resolution(7)).
const MAX_SYMLINKS: u32 = 40;
/// The deepest directory stack the userspace resolver keeps open.
const MAX_DEPTH: usize = 256;
/// The most entries read from one directory while globbing.
pub const MAX_DIR_ENTRIES: usize = 1 << 17;

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
    #[error("cannot list {path}: {source}")]
    ReadDir {
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
    pub fn is_regular(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }
}

pub fn fstat(fd: RawFd) -> io::Result<FileStat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a full `stat` into the buffer on success.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: rc == 0, so the kernel filled it.
    let st = unsafe { st.assume_init() };
    Ok(FileStat {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size.max(0) as u64,
        mtime_sec: st.st_mtime,
        mtime_nsec: st.st_mtime_nsec,
        mode: st.st_mode,
    })
}

fn cstr(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn openat(dir: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: a valid C string and flags; the fd returned is ours to own.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd >= 0 is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn openat2(dir: RawFd, path: &CStr, flags: u64, resolve: u64) -> io::Result<OwnedFd> {
    // SAFETY: open_how is plain data; zeroed is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags;
    how.resolve = resolve;
    // SAFETY: the syscall reads `how` (size given) and the C string only.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The target of the symlink `fd` (an O_PATH|O_NOFOLLOW descriptor of it).
fn readlink_fd(fd: RawFd) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: buf is writable for its length; "" with an O_PATH symlink fd
    // reads that link (readlinkat(2), since Linux 2.6.39).
    let n = unsafe {
        libc::readlinkat(
            fd,
            c"".as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    if n >= buf.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(buf)
}

/// Does this kernel let us use openat2? Asked once per process.
fn openat2_works() -> bool {
    use std::sync::OnceLock;
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        // ENOSYS: kernel before 5.6; EPERM: a seccomp filter.
        openat2(
            libc::AT_FDCWD,
            c"/",
            (libc::O_PATH | libc::O_CLOEXEC) as u64,
            libc::RESOLVE_IN_ROOT,
        )
        .is_ok()
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
        let c = cstr(path.as_os_str().as_bytes()).map_err(|source| RootfsError::OpenRoot {
            path: path.to_path_buf(),
            source,
        })?;
        let fd = openat(
            libc::AT_FDCWD,
            &c,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
        .map_err(|source| RootfsError::OpenRoot {
            path: path.to_path_buf(),
            source,
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
                let c = cstr(if rel.is_empty() { b"." } else { rel })?;
                let flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
                let resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
                // EAGAIN: a concurrent rename raced the lookup (openat2(2)); retry.
                let mut tries = 0;
                loop {
                    match openat2(self.fd.as_raw_fd(), &c, flags, resolve) {
                        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < 8 => tries += 1,
                        other => return other,
                    }
                }
            }
            Resolver::Userspace => self.resolve_userspace(rel),
        }
    }

    /// One component at a time: each is opened O_PATH|O_NOFOLLOW relative
    /// to the directory before it; a symlink's target is spliced into the
    /// remaining path (an absolute one restarts at the root), and `..` pops
    /// the directory stack but never above the root.
    fn resolve_userspace(&self, rel: &[u8]) -> io::Result<OwnedFd> {
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
                return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
            }
            let cur = stack.last().map_or(self.fd.as_raw_fd(), |f| f.as_raw_fd());
            let fd = openat(
                cur,
                &cstr(&comp)?,
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )?;
            let st = fstat(fd.as_raw_fd())?;
            if st.is_symlink() {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = readlink_fd(fd.as_raw_fd())?;
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
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
            stack.push(fd);
        }
        // The path ended at a directory (or was empty, or `..`).
        match stack.pop() {
            Some(fd) => Ok(fd),
            None => openat(self.fd.as_raw_fd(), c".", libc::O_PATH | libc::O_CLOEXEC),
        }
    }

    /// Finds `rel` in the root: an O_PATH descriptor and its stat. Any file
    /// type is returned; callers check [`FileStat::is_regular`].
    pub fn find(&self, rel: &str) -> Result<Found, RootfsError> {
        let fd = self
            .resolve(rel.as_bytes())
            .map_err(|source| RootfsError::Resolve {
                path: rel.to_string(),
                source,
            })?;
        let stat = fstat(fd.as_raw_fd()).map_err(|source| RootfsError::Resolve {
            path: rel.to_string(),
            source,
        })?;
        Ok(Found {
            path: rel.to_string(),
            fd,
            stat,
        })
    }

    /// Lists the directory `rel` (resolved inside the root).
    pub fn read_dir(&self, rel: &str) -> Result<Vec<DirEntry>, RootfsError> {
        let err = |source| RootfsError::ReadDir {
            path: rel.to_string(),
            source,
        };
        let pathfd = self.resolve(rel.as_bytes()).map_err(err)?;
        // Reopen the directory itself for reading; O_DIRECTORY refuses
        // anything else before it is opened.
        let dirfd = openat(
            pathfd.as_raw_fd(),
            c".",
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
        .map_err(err)?;
        list_dir(dirfd).map_err(err)
    }
}

/// Reads a directory descriptor's entries (consumes it).
fn list_dir(dirfd: OwnedFd) -> io::Result<Vec<DirEntry>> {
    use std::os::fd::IntoRawFd;
    let raw = dirfd.into_raw_fd();
    // SAFETY: fdopendir takes ownership of a valid directory fd.
    let dir = unsafe { libc::fdopendir(raw) };
    if dir.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so the fd is still ours to close.
        unsafe { libc::close(raw) };
        return Err(e);
    }
    let mut out = Vec::new();
    loop {
        // SAFETY: dir is a valid DIR*; readdir returns NULL at the end.
        let ent = unsafe { libc::readdir(dir) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name is a NUL-terminated array inside *ent.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        // SAFETY: ent is valid until the next readdir.
        let d_type = unsafe { (*ent).d_type };
        let is_dir = match d_type {
            libc::DT_DIR => true,
            libc::DT_UNKNOWN => {
                // Some filesystems do not fill d_type: ask, without following.
                let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
                // SAFETY: valid dir fd, C string and buffer.
                let rc = unsafe {
                    libc::fstatat(
                        libc::dirfd(dir),
                        name.as_ptr(),
                        st.as_mut_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
                // SAFETY: filled when rc == 0.
                rc == 0 && unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFDIR
            }
            _ => false,
        };
        out.push(DirEntry {
            name: OsString::from_vec(bytes.to_vec()),
            is_dir,
        });
        if out.len() >= MAX_DIR_ENTRIES {
            break;
        }
    }
    // SAFETY: closes the DIR* and its fd exactly once.
    unsafe { libc::closedir(dir) };
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
    // /proc/self/fd/N reopens exactly the inode the O_PATH fd holds (the
    // technique runc uses to reopen O_PATH handles); our /proc is the
    // host's, never the image's.
    let proc_path = format!("/proc/self/fd/{}", found.fd.as_raw_fd());
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let fd = openat(
        libc::AT_FDCWD,
        &cstr(proc_path.as_bytes()).map_err(|source| RootfsError::Open {
            path: found.path.clone(),
            source,
        })?,
        flags,
    )
    .map_err(|source| RootfsError::Open {
        path: found.path.clone(),
        source,
    })?;
    let st = fstat(fd.as_raw_fd()).map_err(|source| RootfsError::Open {
        path: found.path.clone(),
        source,
    })?;
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
    let c = cstr(path.as_os_str().as_bytes()).map_err(|source| RootfsError::Resolve {
        path: shown.clone(),
        source,
    })?;
    let fd = openat(libc::AT_FDCWD, &c, libc::O_PATH | libc::O_CLOEXEC).map_err(|source| {
        RootfsError::Resolve {
            path: shown.clone(),
            source,
        }
    })?;
    let stat = fstat(fd.as_raw_fd()).map_err(|source| RootfsError::Resolve {
        path: shown.clone(),
        source,
    })?;
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
