//! Reads a rootfs's file tree into a [`Snapshot`] (names, types, symlink
//! targets; identity and times of the files that can matter), and a digest
//! of everything read, so a later start of the same image can reuse the
//! result (super::result_cache).
//!
//! The walk never leaves the rootfs: it descends only real directories,
//! each opened relative to its parent with `O_NOFOLLOW | O_DIRECTORY`
//! (a symlink or a swapped-in non-directory is refused by the kernel), and
//! reads symlinks with readlinkat(2) without following them. A directory
//! is listed whole or not at all (readdir(3) errors are not an end of
//! listing, scan::rootfs). It is bounded: directories, entries, depth and
//! time; what it could not walk is named. Python's `__pycache__`
//! directories are not entered ([`SKIPPED_DIR`]).
//!
//! The digest leaves out `st_dev`: overlayfs gives every container's mount
//! its own device number but keeps the lower layers' inode numbers, so the
//! same image digests the same in every container.

use super::result_cache::Fingerprint;
use super::snapshot::{FileMeta, Idx, Kind, Snapshot, PATH_MAX, ROOT};
use nix::dir::{Dir, Type};
use nix::fcntl::{self, AtFlags, OFlag};
use nix::sys::stat::{self, Mode, SFlag};
use std::ffi::{CStr, CString};
use std::path::Path;
use std::time::Instant;

/// The deepest directory walked (real trees are a few tens deep).
const MAX_DEPTH: usize = 64;
/// Entries read from one directory.
const MAX_DIR_ENTRIES: usize = 1 << 17;
/// Directories named as not walked.
const MAX_UNWALKED_LISTED: usize = 32;
/// Listed, never descended into: Python's bytecode caches hold compiled
/// modules (`.pyc`) only (PEP 3147), nothing the loader opens, and they are
/// a third of the directories of a Python image.
const SKIPPED_DIR: &str = "__pycache__";

#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error("cannot open the rootfs {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: nix::Error,
    },
}

/// The walk's budgets.
#[derive(Clone, Debug)]
pub struct WalkLimits {
    pub max_dirs: u64,
    pub max_entries: u64,
    pub deadline: Instant,
}

/// What the walk read.
#[derive(Debug)]
pub struct Walked {
    pub snap: Snapshot,
    /// The fingerprint (hex) of every name, type, inode, size, time and
    /// link target read.
    pub digest: String,
    /// Why the walk stopped early, if it did.
    pub stopped: Option<String>,
    /// Directories not walked or not listable (bounded) and their count.
    pub unwalked: Vec<String>,
    pub unwalked_total: u64,
    pub dirs: u64,
    pub entries: u64,
}

struct Walker<'l> {
    limits: &'l WalkLimits,
    snap: Snapshot,
    hash: Fingerprint,
    stopped: Option<String>,
    unwalked: Vec<String>,
    unwalked_total: u64,
    dirs: u64,
    entries: u64,
}

/// Files whose identity and times are read: the ones the model may open
/// (shared objects, programs in `bin`/`sbin`, configuration under `/etc`,
/// pip metadata and CUDA's version.json).
fn worth_stat(name: &str, in_bin: bool, in_etc: bool) -> bool {
    name.contains(".so") || in_bin || in_etc || name == "METADATA" || name == "version.json"
}

fn meta_of(st: &stat::FileStat) -> FileMeta {
    FileMeta {
        id: (st.st_dev, st.st_ino),
        size: st.st_size.max(0) as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    }
}

fn kind_of_mode(mode: u32) -> Option<Type> {
    let t = SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits());
    Some(match t {
        SFlag::S_IFDIR => Type::Directory,
        SFlag::S_IFREG => Type::File,
        SFlag::S_IFLNK => Type::Symlink,
        _ => Type::Fifo,
    })
}

impl Walker<'_> {
    fn unwalk(&mut self, path: String, why: Option<String>) {
        self.unwalked_total += 1;
        if self.unwalked.len() < MAX_UNWALKED_LISTED {
            self.unwalked.push(path);
        }
        if let (Some(w), None) = (why, &self.stopped) {
            self.stopped = Some(w);
        }
    }

    fn over_budget(&mut self) -> Option<String> {
        if Instant::now() >= self.limits.deadline {
            return Some("the time budget ran out while walking the rootfs".into());
        }
        if self.dirs >= self.limits.max_dirs {
            return Some(format!(
                "the rootfs has more than {} directories (max_dirs)",
                self.limits.max_dirs
            ));
        }
        if self.entries >= self.limits.max_entries {
            return Some(format!(
                "the rootfs has more than {} entries",
                self.limits.max_entries
            ));
        }
        None
    }

    /// Lists one directory: whole, or an error.
    fn list(&self, dir: &mut Dir) -> nix::Result<Vec<(CString, Option<Type>, u64)>> {
        let mut out = Vec::new();
        for e in dir.iter() {
            let e = e?;
            let name = e.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            out.push((name.to_owned(), e.file_type(), e.ino()));
            if out.len() >= MAX_DIR_ENTRIES {
                break;
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Walks one directory, open for reading (its fd also serves the *at
    /// calls on its entries: one open per directory).
    fn walk_dir(&mut self, fd: &mut Dir, idx: Idx, depth: usize) {
        if let Some(why) = self.over_budget() {
            let p = self.snap.path_of(idx);
            self.unwalk(p, Some(why));
            return;
        }
        if depth > MAX_DEPTH {
            let p = self.snap.path_of(idx);
            self.unwalk(
                p,
                Some(format!("directories nested deeper than {MAX_DEPTH}")),
            );
            return;
        }
        self.dirs += 1;
        let entries = match self.list(fd) {
            Ok(e) => e,
            Err(e) => {
                let p = self.snap.path_of(idx);
                self.unwalk(format!("{p} (cannot list it: {e})"), None);
                return;
            }
        };
        let here = self.snap.node(idx).name.to_string();
        let in_bin = matches!(here.as_str(), "bin" | "sbin");
        let in_etc = self.snap.path_of(idx).starts_with("/etc");
        let mut subdirs = Vec::new();
        for (name, t, ino) in entries {
            self.entries += 1;
            let Ok(s) = name.to_str() else { continue };
            if let Some(child) = self.add_entry(fd, idx, &name, s, t, ino, in_bin, in_etc) {
                if s != SKIPPED_DIR {
                    subdirs.push((name, child));
                }
            }
        }
        for (name, child) in subdirs {
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            match Dir::openat(&*fd, name.as_c_str(), flags, Mode::empty()) {
                Ok(mut cfd) => self.walk_dir(&mut cfd, child, depth + 1),
                Err(e) => {
                    let p = self.snap.path_of(child);
                    self.unwalk(format!("{p} (cannot open it: {e})"), None);
                }
            }
        }
    }

    /// Adds one entry; returns it when it is a directory to walk.
    #[allow(clippy::too_many_arguments)]
    fn add_entry(
        &mut self,
        fd: &Dir,
        parent: Idx,
        cname: &CStr,
        name: &str,
        t: Option<Type>,
        ino: u64,
        in_bin: bool,
        in_etc: bool,
    ) -> Option<Idx> {
        let mut st = None;
        let t = match t {
            Some(t) => t,
            None => {
                let s = stat::fstatat(fd, cname, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
                let t = kind_of_mode(s.st_mode)?;
                st = Some(s);
                t
            }
        };
        self.hash.update(parent.to_le_bytes());
        self.hash.update(name.as_bytes());
        self.hash.update([0, t as u8]);
        self.hash.update(ino.to_le_bytes());
        let (kind, meta) = match t {
            Type::Directory => (Kind::Dir, FileMeta::default()),
            Type::Symlink => {
                let target = fcntl::readlinkat(fd, cname).ok()?;
                let target = target.to_string_lossy();
                if target.len() >= PATH_MAX {
                    return None;
                }
                self.hash.update(target.as_bytes());
                (Kind::Symlink(target.as_ref().into()), FileMeta::default())
            }
            Type::File => {
                let meta = if worth_stat(name, in_bin, in_etc) {
                    let s = match st {
                        Some(s) => s,
                        None => stat::fstatat(fd, cname, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?,
                    };
                    let m = meta_of(&s);
                    self.hash.update(m.size.to_le_bytes());
                    self.hash.update(m.mtime.0.to_le_bytes());
                    self.hash.update(m.mtime.1.to_le_bytes());
                    self.hash.update(m.ctime.0.to_le_bytes());
                    self.hash.update(m.ctime.1.to_le_bytes());
                    m
                } else {
                    FileMeta::default()
                };
                (Kind::File, meta)
            }
            _ => (Kind::Other, FileMeta::default()),
        };
        let is_dir = kind == Kind::Dir;
        let i = self.snap.push(parent, name, kind, meta);
        is_dir.then_some(i)
    }
}

/// Walks the rootfs at `rootfs` (a host path the caller trusts: it comes
/// from the bundle or the command line).
pub fn walk(rootfs: &Path, limits: &WalkLimits) -> Result<Walked, WalkError> {
    let mut fd = Dir::open(
        rootfs,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| WalkError::Open {
        path: rootfs.display().to_string(),
        source,
    })?;
    let mut w = Walker {
        limits,
        snap: Snapshot::new(),
        hash: Fingerprint::default(),
        stopped: None,
        unwalked: Vec::new(),
        unwalked_total: 0,
        dirs: 0,
        entries: 0,
    };
    w.walk_dir(&mut fd, ROOT, 0);
    w.snap.finish();
    let digest = w.hash.hex();
    Ok(Walked {
        snap: w.snap,
        digest,
        stopped: w.stopped,
        unwalked: w.unwalked,
        unwalked_total: w.unwalked_total,
        dirs: w.dirs,
        entries: w.entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::time::Duration;

    use crate::sys::test_dirs::tempdir;

    fn limits() -> WalkLimits {
        WalkLimits {
            max_dirs: 1000,
            max_entries: 100_000,
            deadline: Instant::now() + Duration::from_secs(30),
        }
    }

    #[test]
    fn walks_without_following_links_and_digests() {
        let d = tempdir("walk-basic");
        std::fs::create_dir_all(d.join("usr/lib")).unwrap();
        std::fs::write(d.join("usr/lib/libx.so.1"), b"x").unwrap();
        std::fs::write(d.join("usr/lib/readme"), b"x").unwrap();
        symlink("usr/lib", d.join("lib")).unwrap();
        symlink("/", d.join("usr/lib/up")).unwrap();
        let w = walk(&d, &limits()).unwrap();
        let s = &w.snap;
        let lib = s.lookup("/lib/libx.so.1", true).unwrap();
        assert_eq!(s.path_of(lib), "/usr/lib/libx.so.1");
        assert_ne!(s.node(lib).meta.id, (0, 0));
        let readme = s.lookup("/usr/lib/readme", true).unwrap();
        assert_eq!(s.node(readme).meta.id, (0, 0));
        assert_eq!(w.dirs, 3);
        // A bytecode cache is listed in its parent, never entered.
        std::fs::create_dir_all(d.join("usr/lib/__pycache__/deep")).unwrap();
        let w2 = walk(&d, &limits()).unwrap();
        assert_eq!(w2.dirs, 3);
        assert!(w2.snap.lookup("/usr/lib/__pycache__", true).is_ok());
        assert!(w2.snap.lookup("/usr/lib/__pycache__/deep", true).is_err());
        std::fs::remove_dir_all(d.join("usr/lib/__pycache__")).unwrap();
        assert!(w.stopped.is_none());
        let again = walk(&d, &limits()).unwrap();
        assert_eq!(w.digest, again.digest);
        std::fs::write(d.join("usr/lib/libx.so.1"), b"xy").unwrap();
        assert_ne!(walk(&d, &limits()).unwrap().digest, w.digest);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn budgets_stop_and_name_what_was_not_walked() {
        let d = tempdir("walk-budget");
        for i in 0..10 {
            std::fs::create_dir_all(d.join(format!("d{i}/sub"))).unwrap();
        }
        let mut l = limits();
        l.max_dirs = 5;
        let w = walk(&d, &l).unwrap();
        assert!(
            w.stopped.as_deref().unwrap().contains("max_dirs"),
            "{:?}",
            w.stopped
        );
        assert!(w.unwalked_total > 0);
        assert_eq!(w.dirs, 5);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
