//! The libraries scan of an image read from its layers (`check --image`):
//! the final tree (layers applied in order, whiteouts, symlinks across
//! layers, scan::ldso::snapshot) and, for every file the loader model may
//! open, its ELF facts read as the layer streams by.
//!
//! A layer is a stream, so a file's dynamic section and string table are
//! caught on the way: the first [`PREFIX`] bytes are kept (ELF header,
//! program headers and, in the usual layout, the string table), and what
//! the parse asks for beyond them is read when the stream reaches it (a
//! `patchelf`-moved dynamic section at the end of nvidia-curand's
//! `libcurand.so.10`). What lies before the stream's position and outside
//! the prefix cannot be had again: such a file is not judged, and named.
//! One header pass reads every layer; files the model reaches only
//! through a symlink or a hard link are read in a second, targeted pass.

use super::{ContentRef, Image, ImageError, ImageFile, Kind as TKind, Tree};
use crate::scan::elf_dynamic::{self, DynInfo};
use crate::scan::ldso::content::Content;
use crate::scan::ldso::resolve::{self, Resolved, StartEnv};
use crate::scan::ldso::snapshot::{FileMeta, Idx, Kind, Snapshot};
use crate::scan::read::ReadAt;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::sync::Arc;

/// Bytes kept from the start of each candidate file.
pub const PREFIX: u64 = 8 << 20;
/// The most read for one range past the prefix.
const MAX_RANGE: u64 = 2 << 20;
/// Text files (ld.so.conf, metadata) kept whole up to this size.
const MAX_TEXT: u64 = 64 << 10;

/// A file known only in ranges, that says which range it lacked.
struct Sparse {
    size: u64,
    ranges: Vec<(u64, Vec<u8>)>,
    missing: Cell<Option<(u64, u64)>>,
}

impl ReadAt for Sparse {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= self.size {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.size - offset);
        for (start, bytes) in &self.ranges {
            let end = start + bytes.len() as u64;
            if offset >= *start && offset + want <= end {
                let at = (offset - start) as usize;
                buf[..want as usize].copy_from_slice(&bytes[at..at + want as usize]);
                return Ok(want as usize);
            }
        }
        self.missing.set(Some((offset, want)));
        Err(io::Error::other("not read from the layer stream"))
    }

    fn size(&self) -> u64 {
        self.size
    }
}

fn read_up_to(r: &mut dyn Read, n: u64) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    r.take(n).read_to_end(&mut v)?;
    Ok(v)
}

/// Reads from `pos` up to `to`, keeping only the last [`MAX_RANGE`]
/// bytes: (where they start, them).
fn skip_keeping_tail(r: &mut dyn Read, pos: u64, to: u64) -> io::Result<(u64, Vec<u8>)> {
    let skip = (to - pos).saturating_sub(MAX_RANGE);
    io::copy(&mut r.take(skip), &mut io::sink())?;
    let tail = read_up_to(r, to - pos - skip)?;
    Ok((to - tail.len() as u64, tail))
}

/// The ELF facts of one streamed file of `size` bytes.
pub fn dyn_info_from_stream(r: &mut dyn Read, size: u64) -> Result<DynInfo, String> {
    let head = read_up_to(r, PREFIX.min(size)).map_err(|e| e.to_string())?;
    let mut pos = head.len() as u64;
    let mut sparse = Sparse {
        size,
        ranges: vec![(0, head)],
        missing: Cell::new(None),
    };
    for _ in 0..8 {
        sparse.missing.set(None);
        match elf_dynamic::read(&sparse) {
            Ok(info) => return Ok(info),
            Err(e) => {
                let Some((off, len)) = sparse.missing.get() else {
                    return Err(e.to_string());
                };
                if off < pos || len > MAX_RANGE {
                    return Err(format!(
                        "its dynamic section or strings (at offset {off}) lie where the layer stream has passed; not judged"
                    ));
                }
                // Keep the last MAX_RANGE bytes before the range too: a
                // string table just before its dynamic section.
                let (start, tail) = skip_keeping_tail(r, pos, off).map_err(|e| e.to_string())?;
                let mut bytes = tail;
                bytes.extend(
                    read_up_to(r, len.max(MAX_RANGE.min(size - off))).map_err(|e| e.to_string())?,
                );
                pos = start + bytes.len() as u64;
                sparse.ranges.push((start, bytes));
            }
        }
    }
    Err("its dynamic section is scattered over too many places; not judged".into())
}

/// Is this final path one the model may read?
fn candidate(path: &str) -> bool {
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

fn read_one(f: &ImageFile, r: &mut dyn Read) -> io::Result<Read1> {
    if is_text(&f.path) && f.size <= MAX_TEXT {
        return Ok(Read1::Text(read_up_to(r, MAX_TEXT)?));
    }
    Ok(Read1::Elf(dyn_info_from_stream(r, f.size).map(Arc::new)))
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

/// Reads the image's candidate files: as the layers stream by (one header
/// pass, which also gives the final tree), then those reached only
/// through a symlink or hard link.
pub fn read(img: &Image) -> Result<(Tree, ImageContent), ImageError> {
    let mut first: HashMap<ContentRef, Read1> = HashMap::new();
    let tree = img.index_with(&candidate, &mut |c, f, r| {
        first.insert(c, read_one(f, r)?);
        Ok(())
    })?;
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
        img.read_files(&tree, &|p| again.contains_key(p), &mut |f, r| {
            let c = tree
                .get(&f.path)
                .and_then(|n| n.content)
                .ok_or_else(|| io::Error::other("no content"))?;
            files.insert(key(c), read_one(f, r)?);
            Ok(())
        })?;
    }
    Ok((tree, ImageContent { files }))
}

/// The libraries scan of an image, for a container started with `inputs`.
pub fn scan(img: &Image, inputs: &StartEnv, trees: bool) -> Result<Resolved, ImageError> {
    let (tree, content) = read(img)?;
    let snap = snapshot(&tree);
    Ok(resolve::resolve(snap, &content, inputs, trees))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::elf_dynamic::tests::build_dso;

    /// `build_dso`'s file with everything after the program headers moved
    /// `delta` bytes later (its addresses equal its offsets).
    fn shifted(dso: &[u8], delta: u64) -> Vec<u8> {
        let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let tables = 64 + 2 * 56;
        let mut out = dso[..tables].to_vec();
        out.resize(tables + delta as usize, 0);
        out.extend_from_slice(&dso[tables..]);
        let total = out.len() as u64;
        out[64 + 32..64 + 40].copy_from_slice(&total.to_le_bytes());
        out[64 + 40..64 + 48].copy_from_slice(&total.to_le_bytes());
        let dyn_off = u64_at(&out, 120 + 8) + delta;
        out[120 + 8..120 + 16].copy_from_slice(&dyn_off.to_le_bytes());
        out[120 + 16..120 + 24].copy_from_slice(&dyn_off.to_le_bytes());
        let mut at = dyn_off as usize;
        while at + 16 <= out.len() {
            let tag = u64_at(&out, at);
            if tag == 5 {
                let v = u64_at(&out, at + 8) + delta;
                out[at + 8..at + 16].copy_from_slice(&v.to_le_bytes());
            }
            if tag == 0 {
                break;
            }
            at += 16;
        }
        out
    }

    /// A reader that hands out small pieces, as a decompressor does.
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(4093).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_dynamic_section_past_the_prefix_is_caught_on_the_way() {
        let dso = build_dso(&[(1, "libcudart.so.13"), (14, "libcurand.so.10")], 0);
        for delta in [0, PREFIX + 12345, 3 * PREFIX] {
            let f = shifted(&dso, delta);
            assert_eq!(
                crate::scan::elf_dynamic::read(f.as_slice()).unwrap().needed,
                ["libcudart.so.13"]
            );
            let info = dyn_info_from_stream(&mut Trickle(&f), f.len() as u64).unwrap();
            assert_eq!(
                info.soname.as_deref(),
                Some("libcurand.so.10"),
                "delta {delta}"
            );
            assert_eq!(info.needed, ["libcudart.so.13"]);
        }
    }

    /// Mutated objects: both readers return (never panic), and agree
    /// whenever the stream reader has an answer.
    #[test]
    fn mutated_objects_read_the_same_both_ways() {
        let base = build_dso(
            &[
                (1, "libcudart.so.13"),
                (1, "libc.so.6"),
                (14, "libx.so.1"),
                (15, "$ORIGIN"),
            ],
            0,
        );
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..3000 {
            let mut f = base.clone();
            for _ in 0..(next() % 6 + 1) {
                let at = (next() % f.len() as u64) as usize;
                f[at] = next() as u8;
            }
            if next() % 4 == 0 {
                f.truncate((next() % f.len() as u64) as usize);
            }
            let positioned = crate::scan::elf_dynamic::read(f.as_slice());
            if let Ok(streamed) = dyn_info_from_stream(&mut Trickle(&f), f.len() as u64) {
                assert_eq!(positioned.as_ref().ok(), Some(&streamed));
            }
        }
    }

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
