//! The file tree the loader model runs on: names, types, symlink targets
//! and file identities of a container's rootfs, read once (a rootfs walk,
//! [`super::walk`], or an image's merged layers, `image::libraries`), then
//! looked up in memory however many searches the loader makes.
//!
//! Paths resolve as the kernel resolves them for a process chrooted into
//! the rootfs (openat2(2) `RESOLVE_IN_ROOT`): absolute symlink targets
//! start at the root, `..` stops there, at most 40 symlinks are followed
//! (`MAXSYMLINKS`, path_resolution(7)), a path component that is not a
//! directory is `ENOTDIR`. Nothing here touches the host's filesystem.
//!
//! The model adds what the container will have at start and the image
//! does not: the libraries NVIDIA's runtime injects and the SONAME links
//! `ldconfig` creates ([`Snapshot::set_child`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::scan::elf_dynamic::DynInfo;

/// Index of a node; the root is 0.
pub type Idx = u32;
pub const ROOT: Idx = 0;
/// Linux's MAXSYMLINKS.
const MAX_SYMLINKS: u32 = 40;
/// PATH_MAX of <linux/limits.h>: longer paths are ENAMETOOLONG.
pub const PATH_MAX: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink(Box<str>),
    /// FIFOs, sockets, devices.
    Other,
}

/// What identifies a regular file's content and tells when it changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileMeta {
    /// Equal for two names of one file (hard links): (st_dev, st_ino) of a
    /// rootfs, (layer, entry) of an image. (0, 0): not known yet.
    pub id: (u64, u64),
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: Box<str>,
    pub parent: Idx,
    pub kind: Kind,
    /// Children sorted by name (directories).
    pub children: Vec<Idx>,
    pub meta: FileMeta,
}

/// Why a lookup failed, as the errno open(2) would set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// ENOENT.
    NotFound,
    /// ENOTDIR.
    NotDir,
    /// ELOOP: more than 40 symlinks.
    Loop,
    /// ENAMETOOLONG.
    TooLong,
}

impl LookupError {
    /// ld.so goes on to the next directory after ENOENT, EACCES and
    /// ENOTDIR only (elf/dl-load.c `open_path`: "Continue the search if
    /// the file does not exist ..."); any other error ends that search path.
    pub fn continues(self) -> bool {
        matches!(self, LookupError::NotFound | LookupError::NotDir)
    }

    pub fn text(self) -> &'static str {
        match self {
            LookupError::NotFound => "No such file or directory",
            LookupError::NotDir => "Not a directory",
            LookupError::Loop => "Too many levels of symbolic links",
            LookupError::TooLong => "File name too long",
        }
    }
}

/// A container's file tree.
#[derive(Clone, Debug)]
pub struct Snapshot {
    nodes: Vec<Node>,
    /// Facts of files the model adds (the injected driver libraries): their
    /// content is not in the image.
    virtual_info: HashMap<Idx, Arc<DynInfo>>,
}

impl Default for Snapshot {
    fn default() -> Snapshot {
        Snapshot::new()
    }
}

impl Snapshot {
    /// A tree holding only the root directory.
    pub fn new() -> Snapshot {
        Snapshot {
            nodes: vec![Node {
                name: "".into(),
                parent: ROOT,
                kind: Kind::Dir,
                children: Vec::new(),
                meta: FileMeta::default(),
            }],
            virtual_info: HashMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    pub fn node(&self, i: Idx) -> &Node {
        &self.nodes[i as usize]
    }

    /// Appends a child while building (children are sorted by
    /// [`Snapshot::finish`]); the caller gives each name once per directory.
    pub fn push(&mut self, parent: Idx, name: &str, kind: Kind, meta: FileMeta) -> Idx {
        let i = self.nodes.len() as Idx;
        self.nodes.push(Node {
            name: name.into(),
            parent,
            kind,
            children: Vec::new(),
            meta,
        });
        self.nodes[parent as usize].children.push(i);
        i
    }

    /// Sorts every directory's children by name, for lookups.
    pub fn finish(&mut self) {
        let names: Vec<Box<str>> = self.nodes.iter().map(|n| n.name.clone()).collect();
        for n in &mut self.nodes {
            n.children
                .sort_by(|a, b| names[*a as usize].cmp(&names[*b as usize]));
        }
    }

    /// The child `name` of directory `dir`.
    pub fn child(&self, dir: Idx, name: &str) -> Option<Idx> {
        let d = &self.nodes[dir as usize];
        d.children
            .binary_search_by(|c| (*self.nodes[*c as usize].name).cmp(name))
            .ok()
            .map(|k| d.children[k])
    }

    /// Adds or replaces the entry `name` of directory `dir` (an injected
    /// library, a link ldconfig creates), keeping the children sorted.
    pub fn set_child(&mut self, dir: Idx, name: &str, kind: Kind, meta: FileMeta) -> Idx {
        if let Some(i) = self.child(dir, name) {
            let n = &mut self.nodes[i as usize];
            n.kind = kind;
            n.meta = meta;
            n.children.clear();
            self.virtual_info.remove(&i);
            return i;
        }
        let i = self.nodes.len() as Idx;
        self.nodes.push(Node {
            name: name.into(),
            parent: dir,
            kind,
            children: Vec::new(),
            meta,
        });
        let pos = {
            let d = &self.nodes[dir as usize];
            d.children
                .binary_search_by(|c| (*self.nodes[*c as usize].name).cmp(name))
                .unwrap_or_else(|p| p)
        };
        self.nodes[dir as usize].children.insert(pos, i);
        i
    }

    /// Attaches the facts of a file the model added.
    pub fn set_virtual_info(&mut self, i: Idx, info: Arc<DynInfo>) {
        self.virtual_info.insert(i, info);
    }

    pub fn virtual_info(&self, i: Idx) -> Option<&Arc<DynInfo>> {
        self.virtual_info.get(&i)
    }

    /// Makes `path` a directory (creating missing components as empty
    /// directories, as a bind mount's target is created), following
    /// symlinks on the way. None when a component exists and is not one.
    pub fn ensure_dir(&mut self, path: &str) -> Option<Idx> {
        let mut cur = ROOT;
        for comp in components(path) {
            let next = match self.child(cur, comp) {
                Some(c) => c,
                None => self.set_child(cur, comp, Kind::Dir, FileMeta::default()),
            };
            let here = self.path_of(next);
            cur = self.lookup(&here, true).ok()?;
            if self.nodes[cur as usize].kind != Kind::Dir {
                return None;
            }
        }
        Some(cur)
    }

    /// The absolute path of a node, symlink-free (`/usr/lib/x.so`; `/`).
    pub fn path_of(&self, mut i: Idx) -> String {
        let mut parts = Vec::new();
        while i != ROOT {
            let n = &self.nodes[i as usize];
            parts.push(&*n.name);
            i = n.parent;
        }
        if parts.is_empty() {
            return "/".to_string();
        }
        let mut out = String::new();
        for p in parts.iter().rev() {
            out.push('/');
            out.push_str(p);
        }
        out
    }

    /// Resolves `path` (absolute inside the rootfs; a relative one is taken
    /// from the root) as the kernel would in the chrooted container,
    /// following a final symlink when `follow_last`.
    pub fn lookup(&self, path: &str, follow_last: bool) -> Result<Idx, LookupError> {
        if path.len() >= PATH_MAX {
            return Err(LookupError::TooLong);
        }
        let mut todo: Vec<&str> = components(path).rev().collect();
        let mut stack: Vec<Idx> = Vec::new();
        let mut cur = ROOT;
        let mut links = 0u32;
        while let Some(c) = todo.pop() {
            if c == ".." {
                if self.nodes[cur as usize].kind != Kind::Dir {
                    return Err(LookupError::NotDir);
                }
                cur = stack.pop().unwrap_or(ROOT);
                continue;
            }
            if self.nodes[cur as usize].kind != Kind::Dir {
                return Err(LookupError::NotDir);
            }
            let next = self.child(cur, c).ok_or(LookupError::NotFound)?;
            if let Kind::Symlink(target) = &self.nodes[next as usize].kind {
                if todo.is_empty() && !follow_last {
                    return Ok(next);
                }
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(LookupError::Loop);
                }
                if target.starts_with('/') {
                    stack.clear();
                    cur = ROOT;
                }
                todo.extend(components(target).rev());
                continue;
            }
            stack.push(cur);
            cur = next;
        }
        Ok(cur)
    }

    /// Resolves `path` and requires a directory.
    pub fn lookup_dir(&self, path: &str) -> Result<Idx, LookupError> {
        let i = self.lookup(path, true)?;
        match self.nodes[i as usize].kind {
            Kind::Dir => Ok(i),
            _ => Err(LookupError::NotDir),
        }
    }
}

/// The components of a path that name something (not empty, not `.`).
pub fn components(p: &str) -> impl DoubleEndedIterator<Item = &str> {
    p.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// `/a/b` + `c` = `/a/b/c`; `/` + `c` = `/c`.
pub fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tree from `(path, kind)` lines: `d` directory, `f` file, `l:T`
    /// symlink to T, `o` other.
    pub(crate) fn tree(spec: &[(&str, &str)]) -> Snapshot {
        let mut s = Snapshot::new();
        let mut n = 1u64;
        for (path, kind) in spec {
            let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
            let parent = s.ensure_dir(dir).expect("parent is a directory");
            let kind = match *kind {
                "d" => Kind::Dir,
                "f" => Kind::File,
                "o" => Kind::Other,
                l => Kind::Symlink(l.strip_prefix("l:").expect("l:TARGET").into()),
            };
            n += 1;
            let meta = FileMeta {
                id: (1, n),
                ..FileMeta::default()
            };
            s.set_child(parent, name, kind, meta);
        }
        s
    }

    #[test]
    fn resolves_inside_the_root() {
        let s = tree(&[
            ("usr/lib/libc.so.6", "f"),
            ("lib", "l:usr/lib"),
            ("usr/lib/abs", "l:/usr/lib/libc.so.6"),
            ("usr/lib/up", "l:../../../../usr/lib/libc.so.6"),
            ("etc/loop1", "l:loop2"),
            ("etc/loop2", "l:loop1"),
            ("etc/file", "f"),
        ]);
        let libc = s.lookup("/usr/lib/libc.so.6", true).unwrap();
        assert_eq!(s.lookup("/lib/libc.so.6", true), Ok(libc));
        assert_eq!(s.lookup("/usr/lib/abs", true), Ok(libc));
        // `..` stops at the root: the link cannot leave it.
        assert_eq!(s.lookup("/usr/lib/up", true), Ok(libc));
        assert_eq!(s.lookup("/etc/loop1", true), Err(LookupError::Loop));
        assert_eq!(s.lookup("/etc/file/x", true), Err(LookupError::NotDir));
        assert_eq!(s.lookup("/nope", true), Err(LookupError::NotFound));
        let link = s.lookup("/usr/lib/abs", false).unwrap();
        assert_ne!(link, libc);
        assert_eq!(s.path_of(libc), "/usr/lib/libc.so.6");
        assert_eq!(s.path_of(ROOT), "/");
        let long = format!("/{}", "a/".repeat(PATH_MAX / 2));
        assert_eq!(s.lookup(&long, true), Err(LookupError::TooLong));
    }

    #[test]
    fn set_child_replaces_and_keeps_order() {
        let mut s = tree(&[("d/b", "f"), ("d/d", "f")]);
        let d = s.lookup_dir("/d").unwrap();
        s.set_child(d, "a", Kind::Symlink("b".into()), FileMeta::default());
        s.set_child(d, "c", Kind::File, FileMeta::default());
        let names: Vec<&str> = s
            .node(d)
            .children
            .iter()
            .map(|c| &*s.node(*c).name)
            .collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        let b = s.lookup("/d/b", true).unwrap();
        assert_eq!(s.lookup("/d/a", true), Ok(b));
        s.set_child(d, "a", Kind::File, FileMeta::default());
        assert_ne!(s.lookup("/d/a", true), Ok(b));
    }
}
