//! The libraries scan of an image read from its layers (`check --image`):
//! the final tree (layers applied in order, whiteouts, symlinks across
//! layers, scan::ldso::snapshot) and, for every file the loader model may
//! open, its ELF facts read as the layer streams by.
//!
//! A layer is a stream, so a file's dynamic section and string table are
//! caught on the way (super::stream_elf). With the kernel-image scan on,
//! its one header pass reads them too ([`LibraryTap`], image::scan
//! `scan_with`); else this module makes one of its own. Files the model
//! reaches only through a symlink or a hard link are read in a second,
//! targeted pass.
//!
//! Budgets (`[libraries]`): the files whose facts are kept count against
//! `max_files`, the facts' bytes in memory against `max_file_bytes` and
//! `max_bytes` (past one, a file is not judged and the scan says so), and
//! the model's work against `time_budget_ms`, from when the layers are read
//! ([`crate::scan::ldso::budget`]).

use super::stream_elf::Recorder;
use super::{ContentRef, Image, ImageError, ImageFile, Kind as TKind, Tree};
use crate::core::policy::LibrariesConfig;
use crate::scan::elf_dynamic::DynInfo;
use crate::scan::ldso::budget::Budget;
use crate::scan::ldso::content::Content;
use crate::scan::ldso::resolve::{self, Resolved};
use crate::scan::ldso::snapshot::{FileMeta, Idx, Kind, Snapshot};
use crate::scan::ldso::StartEnv;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::sync::Arc;

/// Text files (ld.so.conf, metadata) kept whole up to this size.
const MAX_TEXT: u64 = 64 << 10;

fn read_up_to(r: &mut dyn Read, n: u64) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    r.take(n).read_to_end(&mut v)?;
    Ok(v)
}

/// Is this final path one the model may read?
pub fn candidate(path: &str) -> bool {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let parent = dir.rsplit('/').next().unwrap_or(dir);
    name.contains(".so") || parent == "bin" || parent == "sbin" || is_text(path)
}

fn is_text(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    path.starts_with("etc/ld.so.conf")
        || path == "etc/debian_version"
        || (name == "METADATA" && path.contains(".dist-info/"))
        || (name == "version.json" && path.starts_with("usr/local/cuda"))
}

/// What was read of one file.
#[derive(Clone, Debug)]
enum Read1 {
    Elf(Result<Arc<DynInfo>, String>),
    Text(Vec<u8>),
}

/// An image's contents for the model.
pub struct ImageContent {
    files: HashMap<(u64, u64), Read1>,
}

fn key(c: ContentRef) -> (u64, u64) {
    (c.layer as u64 + 1, c.entry)
}

impl Content for ImageContent {
    fn dyn_info(&self, snap: &Snapshot, i: Idx) -> Result<Arc<DynInfo>, String> {
        match self.files.get(&snap.node(i).meta.id) {
            Some(Read1::Elf(r)) => r.clone(),
            Some(Read1::Text(_)) => Err("not an ELF file".into()),
            None => Err("not read from the image".into()),
        }
    }

    fn read_small(&self, snap: &Snapshot, i: Idx, limit: usize) -> Result<Vec<u8>, String> {
        match self.files.get(&snap.node(i).meta.id) {
            Some(Read1::Text(t)) => Ok(t[..t.len().min(limit)].to_vec()),
            _ => Err("not read from the image".into()),
        }
    }
}

/// What the loader model needs of the files an image pass streams by.
pub struct LibraryTap {
    first: HashMap<ContentRef, Read1>,
    max_files: u64,
    max_file_bytes: u64,
    max_bytes: u64,
    files_left: u64,
    bytes_left: u64,
}

impl Default for LibraryTap {
    /// The default `[libraries]` budgets.
    fn default() -> LibraryTap {
        LibraryTap::with_limits(&LibrariesConfig::default())
    }
}

impl LibraryTap {
    /// A tap within `cfg`'s budgets of files and bytes.
    pub fn with_limits(cfg: &LibrariesConfig) -> LibraryTap {
        LibraryTap {
            first: HashMap::new(),
            max_files: cfg.max_files,
            max_file_bytes: cfg.max_file_bytes,
            max_bytes: cfg.max_bytes,
            files_left: cfg.max_files,
            bytes_left: cfg.max_bytes,
        }
    }

    /// The facts of one file, charged to the budgets: an error (with
    /// "budget" in it, so the scan names the file as not judged) past one.
    fn charge(&mut self, info: Result<DynInfo, String>) -> Result<Arc<DynInfo>, String> {
        let info = info?;
        let kept = info.retained_bytes();
        if kept > self.max_file_bytes || kept > self.bytes_left {
            return Err(format!(
                "read budget used up: its facts take {kept} bytes (libraries.max_file_bytes {}, max_bytes {})",
                self.max_file_bytes, self.max_bytes
            ));
        }
        self.bytes_left -= kept;
        Ok(Arc::new(info))
    }

    /// Reads `f` from `r` for the model, while `also` (another reader of
    /// the same stream, or nothing) reads it too: the file is read to its
    /// end either way.
    pub fn visit(
        &mut self,
        c: ContentRef,
        f: &ImageFile,
        r: &mut dyn Read,
        also: &mut dyn FnMut(&mut dyn Read) -> io::Result<()>,
    ) -> io::Result<()> {
        let read = if is_text(&f.path) && f.size <= MAX_TEXT {
            let text = read_up_to(r, MAX_TEXT)?;
            also(&mut text.as_slice())?;
            Read1::Text(text)
        } else if self.files_left == 0 {
            also(r)?;
            Read1::Elf(Err(format!(
                "read budget used up: more than {} files to parse (libraries.max_files)",
                self.max_files
            )))
        } else {
            self.files_left -= 1;
            let mut rec = Recorder::new(r, f.size);
            also(&mut rec)?;
            let info = rec.finish();
            Read1::Elf(self.charge(info))
        };
        self.first.insert(c, read);
        Ok(())
    }
}

/// Reads one file for the model, charged to `tap`'s budgets.
fn read_one(tap: &mut LibraryTap, f: &ImageFile, r: &mut dyn Read) -> io::Result<Read1> {
    let c = ContentRef {
        layer: usize::MAX,
        entry: u64::MAX,
    };
    tap.visit(c, f, r, &mut |_| Ok(()))?;
    tap.first
        .remove(&c)
        .ok_or_else(|| io::Error::other("not read"))
}

/// The model's tree of the image's final file tree.
pub fn snapshot(tree: &Tree) -> Snapshot {
    let mut s = Snapshot::new();
    let mut dirs: HashMap<String, Idx> = HashMap::new();
    dirs.insert(String::new(), crate::scan::ldso::snapshot::ROOT);
    for (path, node) in tree.iter() {
        if path.is_empty() {
            continue;
        }
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let parent = match dirs.get(dir) {
            Some(p) => *p,
            None => {
                // A directory the layers never listed is still there.
                let Some(p) = s.ensure_dir(&format!("/{dir}")) else {
                    continue;
                };
                dirs.insert(dir.to_string(), p);
                p
            }
        };
        let (kind, meta) = match &node.kind {
            TKind::Dir => (Kind::Dir, FileMeta::default()),
            TKind::File => {
                let id = node.content.map(key).unwrap_or((0, 0));
                (
                    Kind::File,
                    FileMeta {
                        id,
                        size: node.size,
                        ..FileMeta::default()
                    },
                )
            }
            TKind::Symlink(t) => (Kind::Symlink(t.as_str().into()), FileMeta::default()),
            TKind::Other => (Kind::Other, FileMeta::default()),
        };
        let is_dir = kind == Kind::Dir;
        let i = s.push(parent, name, kind, meta);
        if is_dir {
            dirs.insert(path.to_string(), i);
        }
    }
    s.finish();
    s
}

/// Reads the image's candidate files in a header pass of its own (which
/// also gives the final tree), then [`finish`].
pub fn read(img: &Image, cfg: &LibrariesConfig) -> Result<(Tree, ImageContent), ImageError> {
    let mut tap = LibraryTap::with_limits(cfg);
    let tree = img.index_with(&candidate, &mut |c, f, r| {
        tap.visit(c, f, r, &mut |_| Ok(()))
    })?;
    let content = finish(img, &tree, tap)?;
    Ok((tree, content))
}

/// What a pass gave (`tap`), plus the candidates reached only through a
/// symlink or a hard link, read in a targeted pass.
pub fn finish(img: &Image, tree: &Tree, mut tap: LibraryTap) -> Result<ImageContent, ImageError> {
    let mut first = std::mem::take(&mut tap.first);
    let mut files: HashMap<(u64, u64), Read1> = HashMap::new();
    let mut again: BTreeMap<String, ()> = BTreeMap::new();
    for (path, node) in tree.iter() {
        if !candidate(path) {
            continue;
        }
        let content = match node.kind {
            TKind::File => node.content,
            TKind::Symlink(_) => tree
                .resolve(path)
                .ok()
                .and_then(|r| tree.get(&r).and_then(|n| n.content)),
            _ => None,
        };
        let Some(c) = content else { continue };
        match first.remove(&c) {
            Some(r) => {
                files.insert(key(c), r);
            }
            None if !files.contains_key(&key(c)) => {
                again.insert(path.to_string(), ());
            }
            None => {}
        }
    }
    if !again.is_empty() {
        img.read_files(tree, &|p| again.contains_key(p), &mut |f, r| {
            let c = tree
                .get(&f.path)
                .and_then(|n| n.content)
                .ok_or_else(|| io::Error::other("no content"))?;
            files.insert(key(c), read_one(&mut tap, f, r)?);
            Ok(())
        })?;
    }
    Ok(ImageContent { files })
}

/// The libraries scan of an image, for a container started with `start`,
/// within `cfg`'s budgets.
pub fn scan(
    img: &Image,
    start: &StartEnv,
    trees: bool,
    cfg: &LibrariesConfig,
) -> Result<Resolved, ImageError> {
    let (tree, content) = read(img, cfg)?;
    Ok(model(&tree, &content, start, trees, cfg))
}

/// The same, from a pass already made (image::scan `scan_with`) with a
/// tap made by [`LibraryTap::with_limits`].
pub fn scan_from(
    img: &Image,
    tree: &Tree,
    tap: LibraryTap,
    start: &StartEnv,
    cfg: &LibrariesConfig,
) -> Result<Resolved, ImageError> {
    let content = finish(img, tree, tap)?;
    Ok(model(tree, &content, start, false, cfg))
}

/// The loader model over what was read, within `time_budget_ms` from now.
fn model(
    tree: &Tree,
    content: &ImageContent,
    start: &StartEnv,
    trees: bool,
    cfg: &LibrariesConfig,
) -> Resolved {
    let budget = Budget::from_now(cfg.time_budget_ms);
    let mut r = resolve::resolve(snapshot(tree), content, start, trees, &budget);
    crate::scan::ldso::note_budget(&mut r.scan, &budget);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_candidates() {
        assert!(candidate("usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(candidate("usr/local/bin/app"));
        assert!(candidate("etc/ld.so.conf.d/cuda.conf"));
        assert!(candidate(
            "usr/local/lib/python3.11/site-packages/nvidia_cuda_runtime-13.5.37.dist-info/METADATA"
        ));
        assert!(!candidate("usr/share/doc/README"));
        assert!(is_text("usr/local/cuda-12.4/version.json"));
    }
}
