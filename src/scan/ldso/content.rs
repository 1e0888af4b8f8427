//! Where file contents come from: the loader model reads the ELF facts
//! of a file ([`DynInfo`]) and small text files (ld.so.conf, pip metadata,
//! version.json) through [`Content`], so the same model runs over a rootfs
//! ([`RootContent`], every read through the safe resolver) and over an
//! image whose files were read as they streamed by (`image::libraries`).

use super::snapshot::{Idx, Snapshot};
use crate::scan::elf_dynamic::{self, DynInfo};
use crate::scan::read::{ReadAt, SizedFile};
use crate::scan::rootfs::{self, Root};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Instant;

/// File contents for the model. Errors are one line for people.
pub trait Content {
    /// The loader facts of the regular file `i` of `snap`.
    fn dyn_info(&self, snap: &Snapshot, i: Idx) -> Result<Arc<DynInfo>, String>;
    /// At most `limit` bytes of the regular file `i`.
    fn read_small(&self, snap: &Snapshot, i: Idx, limit: usize) -> Result<Vec<u8>, String>;
}

/// The facts of node `i`: the model's own for a file it added, else the
/// content's.
pub fn info_of(snap: &Snapshot, content: &dyn Content, i: Idx) -> Result<Arc<DynInfo>, String> {
    match snap.virtual_info(i) {
        Some(v) => Ok(v.clone()),
        None => content.dyn_info(snap, i),
    }
}

/// Read budgets for a rootfs: bytes per file and in all, files parsed, a
/// deadline. What they stop is reported as not judged, never guessed. The
/// facts kept of each file ([`DynInfo::retained_bytes`]) are charged to
/// the same byte budgets: a file that names one long string thousands of
/// times costs the memory it takes, not the few bytes read.
#[derive(Clone, Debug)]
pub struct ReadLimits {
    pub max_files: u64,
    pub max_bytes: u64,
    pub max_file_bytes: u64,
    pub deadline: Instant,
}

/// A reader that fails once a file's or the scan's allowance is spent.
struct Metered<'a, R: ?Sized> {
    inner: &'a R,
    left: &'a Cell<u64>,
    file_left: Cell<u64>,
    deadline: Instant,
}

impl<R: ReadAt + ?Sized> ReadAt for Metered<'_, R> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let want = buf.len() as u64;
        if want > self.file_left.get() || want > self.left.get() {
            return Err(io::Error::other("read budget used up"));
        }
        if Instant::now() >= self.deadline {
            return Err(io::Error::other("time budget used up"));
        }
        let n = self.inner.read_at(buf, offset)?;
        self.file_left.set(self.file_left.get() - n as u64);
        self.left.set(self.left.get() - n as u64);
        Ok(n)
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// A rootfs's contents, read through [`Root`] (openat2 `RESOLVE_IN_ROOT`;
/// only regular files are opened, and only the inode the tree recorded).
pub struct RootContent<'r> {
    root: &'r Root,
    limits: ReadLimits,
    bytes_left: Cell<u64>,
    files_left: Cell<u64>,
    infos: RefCell<HashMap<Idx, Result<Arc<DynInfo>, String>>>,
    /// Files left unread because a budget ran out, and why.
    pub(crate) unread: RefCell<Vec<(String, String)>>,
}

impl<'r> RootContent<'r> {
    pub fn new(root: &'r Root, limits: ReadLimits) -> RootContent<'r> {
        RootContent {
            root,
            bytes_left: Cell::new(limits.max_bytes),
            files_left: Cell::new(limits.max_files),
            limits,
            infos: RefCell::new(HashMap::new()),
            unread: RefCell::new(Vec::new()),
        }
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.limits.max_bytes - self.bytes_left.get()
    }

    fn open(&self, snap: &Snapshot, i: Idx) -> Result<SizedFile, String> {
        let path = snap.path_of(i);
        let found = self.root.find(&path).map_err(|e| e.to_string())?;
        let want = snap.node(i).meta.id;
        if want != (0, 0) && (found.stat.dev, found.stat.ino) != want {
            return Err(format!("{path} changed while it was being read"));
        }
        let file = rootfs::open_regular(&found).map_err(|e| e.to_string())?;
        Ok(SizedFile::new(file, found.stat.size))
    }

    fn parse(&self, snap: &Snapshot, i: Idx) -> Result<Arc<DynInfo>, String> {
        let path = snap.path_of(i);
        if self.files_left.get() == 0 {
            let why = format!("more than {} files to parse", self.limits.max_files);
            self.unread.borrow_mut().push((path, why.clone()));
            return Err(why);
        }
        self.files_left.set(self.files_left.get() - 1);
        let file = self.open(snap, i)?;
        let metered = Metered {
            inner: &file,
            left: &self.bytes_left,
            file_left: Cell::new(self.limits.max_file_bytes),
            deadline: self.limits.deadline,
        };
        match elf_dynamic::read(&metered).and_then(|info| {
            let kept = info.retained_bytes();
            if kept > metered.file_left.get() || kept > self.bytes_left.get() {
                return Err(elf_dynamic::DynamicError::Io(io::Error::other(
                    "read budget used up by the facts it keeps",
                )));
            }
            self.bytes_left.set(self.bytes_left.get() - kept);
            Ok(info)
        }) {
            Ok(info) => Ok(Arc::new(info)),
            Err(e) => {
                let msg = e.to_string();
                if msg.contains("budget used up") {
                    self.unread.borrow_mut().push((path, msg.clone()));
                }
                Err(msg)
            }
        }
    }
}

impl Content for RootContent<'_> {
    fn dyn_info(&self, snap: &Snapshot, i: Idx) -> Result<Arc<DynInfo>, String> {
        if let Some(r) = self.infos.borrow().get(&i) {
            return r.clone();
        }
        let r = self.parse(snap, i);
        self.infos.borrow_mut().insert(i, r.clone());
        r
    }

    fn read_small(&self, snap: &Snapshot, i: Idx, limit: usize) -> Result<Vec<u8>, String> {
        let file = self.open(snap, i)?;
        let n = file.size().min(limit as u64) as usize;
        let mut buf = vec![0u8; n];
        crate::scan::read::read_exact_at(&file, &mut buf, 0).map_err(|e| e.to_string())?;
        Ok(buf)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Contents by absolute path: text files, and ELF facts.
    #[derive(Default)]
    pub(crate) struct TextContent {
        pub texts: HashMap<String, Vec<u8>>,
        pub infos: HashMap<String, Arc<DynInfo>>,
    }

    impl TextContent {
        pub(crate) fn new(texts: &[(&str, &str)]) -> TextContent {
            TextContent {
                texts: texts
                    .iter()
                    .map(|(p, t)| (p.to_string(), t.as_bytes().to_vec()))
                    .collect(),
                infos: HashMap::new(),
            }
        }
    }

    impl Content for TextContent {
        fn dyn_info(&self, snap: &Snapshot, i: Idx) -> Result<Arc<DynInfo>, String> {
            self.infos
                .get(&snap.path_of(i))
                .cloned()
                .ok_or_else(|| "not an ELF file".to_string())
        }

        fn read_small(&self, snap: &Snapshot, i: Idx, limit: usize) -> Result<Vec<u8>, String> {
            let mut t = self
                .texts
                .get(&snap.path_of(i))
                .cloned()
                .ok_or_else(|| "unreadable".to_string())?;
            t.truncate(limit);
            Ok(t)
        }
    }
}
