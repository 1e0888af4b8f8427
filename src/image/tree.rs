//! The image's final file tree (metadata only), built from the layers'
//! tar headers in layer order with the OCI whiteout rules
//! (image-spec layer.md, "Whiteouts"): a `.wh.NAME` entry deletes NAME from
//! the lower layers, `.wh..wh..opq` deletes every lower child of its
//! directory, and whiteouts never hide entries of their own layer. So a
//! layer's whiteouts are applied first, then its entries in archive order
//! (a later duplicate wins, as it does on extraction).

use super::budget::Deadline;
use super::error::ImageError;
use std::collections::BTreeMap;

/// Symlinks followed before giving up (Linux's MAXSYMLINKS is 40).
const MAX_HOPS: u32 = 40;

/// A normalized path relative to the image root (`usr/lib/x.so`; the root
/// is `""`): leading `/` and `./`, empty and `.` components dropped. None
/// when a `..` would climb above the root (docker refuses such entries as
/// a breakout, moby pkg/archive `UnpackLayer`).
pub fn normalize(path: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            c => out.push(c),
        }
    }
    Some(out.join("/"))
}

/// The components of a path that name something (not empty, not `.`).
fn components(p: &str) -> impl DoubleEndedIterator<Item = &str> {
    p.split('/').filter(|c| !c.is_empty() && *c != ".")
}

fn parent_and_name(p: &str) -> (&str, &str) {
    match p.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", p),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    /// The link target as written in the layer.
    Symlink(String),
    /// Devices, FIFOs, a hard link to nothing.
    Other,
}

/// Where a regular file's bytes are: layer index and entry index within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContentRef {
    pub layer: usize,
    pub entry: u64,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub kind: Kind,
    pub size: u64,
    pub mode: u32,
    /// The layer that put this path here.
    pub layer: usize,
    /// Regular files (hard links included): where the content is read from.
    pub content: Option<ContentRef>,
}

/// One tar entry as the header pass saw it.
#[derive(Clone, Debug)]
pub(crate) struct RawEntry {
    pub path: String,
    pub kind: RawKind,
    pub size: u64,
    pub mode: u32,
    pub index: u64,
}

#[derive(Clone, Debug)]
pub(crate) enum RawKind {
    File,
    Dir,
    Symlink(String),
    HardLink(String),
    Other,
}

/// Resolution steps between two looks at the deadline.
const STEPS_PER_CHECK: u32 = 4096;

/// The final view of the image's filesystem.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    nodes: BTreeMap<String, Node>,
    /// The image's deadline: applying layers and resolving paths stop there.
    deadline: Option<Deadline>,
}

impl Tree {
    pub(crate) fn with_deadline(deadline: Deadline) -> Tree {
        Tree {
            nodes: BTreeMap::new(),
            deadline: Some(deadline),
        }
    }

    fn check_time(&self) -> Result<(), ImageError> {
        self.deadline.as_ref().map_or(Ok(()), Deadline::check)
    }

    /// The node at a normalized path, without following a final symlink.
    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// Every path of the final tree, in order, with its node.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.nodes.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The paths that start with `prefix`, in order, with their nodes.
    pub(crate) fn under<'t>(
        &'t self,
        prefix: &'t str,
    ) -> impl Iterator<Item = (&'t str, &'t Node)> {
        self.nodes
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The regular files' paths.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.iter()
            .filter(|(_, n)| n.kind == Kind::File)
            .map(|(p, _)| p)
    }

    /// Resolves every symlink in `path` inside the image, as the kernel
    /// would with the image as root (RESOLVE_IN_ROOT: absolute targets start
    /// at the image root, `..` stops there). Returns the normalized real
    /// path, which need not exist (`usr/local/cuda/compat` ->
    /// `usr/local/cuda-12.4/compat`).
    pub fn resolve(&self, path: &str) -> Result<String, ImageError> {
        self.resolve_with(path, true)
    }

    /// Resolves the directory part of `path` and keeps its last component.
    fn resolve_parent(&self, path: &str) -> Result<String, ImageError> {
        self.resolve_with(path, false)
    }

    /// Walks `path` component by component, keeping the joined path as it
    /// goes (a component is appended, `..` truncates to where the last
    /// began), so the cost is linear in the components walked, the
    /// targets of the at most [`MAX_HOPS`] symlinks included.
    fn resolve_with(&self, path: &str, follow_last: bool) -> Result<String, ImageError> {
        self.check_time()?;
        // Still to walk, the next last; borrowed from `path` and targets.
        let mut todo: Vec<&str> = components(path).rev().collect();
        let mut cur = String::new();
        // Where each component of `cur` begins.
        let mut starts: Vec<usize> = Vec::new();
        let (mut hops, mut steps) = (0, 0u32);
        while let Some(c) = todo.pop() {
            steps += 1;
            if steps % STEPS_PER_CHECK == 0 {
                self.check_time()?;
            }
            if c == ".." {
                if let Some(at) = starts.pop() {
                    cur.truncate(at.saturating_sub(1));
                }
                continue;
            }
            starts.push(if cur.is_empty() { 0 } else { cur.len() + 1 });
            if !cur.is_empty() {
                cur.push('/');
            }
            cur.push_str(c);
            if todo.is_empty() && !follow_last {
                break;
            }
            if let Some(Node {
                kind: Kind::Symlink(target),
                ..
            }) = self.nodes.get(cur.as_str())
            {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err(ImageError::SymlinkLoop(path.to_string()));
                }
                if let Some(at) = starts.pop() {
                    cur.truncate(at.saturating_sub(1));
                }
                if target.starts_with('/') {
                    cur.clear();
                    starts.clear();
                }
                todo.extend(components(target).rev());
            }
        }
        Ok(cur)
    }

    fn remove_below(&mut self, dir: &str) {
        if dir.is_empty() {
            self.nodes.clear();
            return;
        }
        let prefix = format!("{dir}/");
        let doomed: Vec<String> = self
            .nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            self.nodes.remove(&k);
        }
    }

    /// Applies one layer's entries (its whiteouts first, then the rest in
    /// archive order).
    pub(crate) fn apply(&mut self, layer: usize, entries: &[RawEntry]) -> Result<(), ImageError> {
        for e in entries {
            self.check_time()?;
            let (dir, name) = parent_and_name(&e.path);
            let Some(hidden) = name.strip_prefix(".wh.") else {
                continue;
            };
            let dir = self.resolve(dir)?;
            if hidden == ".wh..opq" {
                if dir.is_empty() {
                    self.nodes.clear();
                } else {
                    self.remove_below(&dir);
                }
            } else if !hidden.starts_with(".wh.") && !hidden.is_empty() {
                // `.wh..wh.*` other than .opq is aufs bookkeeping (.wh..wh.plnk):
                // ignored, as containerd and docker do.
                let target = join(&dir, hidden);
                self.nodes.remove(&target);
                self.remove_below(&target);
            }
        }
        for e in entries {
            self.check_time()?;
            let (_, name) = parent_and_name(&e.path);
            if e.path.is_empty() || name.starts_with(".wh.") {
                continue;
            }
            // Extraction follows symlinks in the parent directories (a file
            // under `lib64/` lands in `usr/lib64/` when `lib64 -> usr/lib64`).
            let at = self.resolve_parent(&e.path)?;
            if at.is_empty() {
                continue;
            }
            let (kind, content, size) = match &e.kind {
                RawKind::File => (
                    Kind::File,
                    Some(ContentRef {
                        layer,
                        entry: e.index,
                    }),
                    e.size,
                ),
                RawKind::Dir => (Kind::Dir, None, 0),
                RawKind::Symlink(t) => (Kind::Symlink(t.clone()), None, 0),
                RawKind::Other => (Kind::Other, None, 0),
                RawKind::HardLink(target) => {
                    let target = self.resolve_parent(target)?;
                    match self.nodes.get(&target) {
                        Some(n) if n.kind == Kind::File => (Kind::File, n.content, n.size),
                        _ => (Kind::Other, None, 0),
                    }
                }
            };
            let was_dir = matches!(self.nodes.get(&at), Some(n) if n.kind == Kind::Dir);
            if was_dir && kind != Kind::Dir {
                // A file replacing a directory replaces its subtree too.
                self.remove_below(&at);
            }
            self.nodes.insert(
                at,
                Node {
                    kind,
                    size,
                    mode: e.mode,
                    layer,
                    content,
                },
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(path: &str, kind: RawKind, index: u64) -> RawEntry {
        RawEntry {
            path: path.to_string(),
            kind,
            size: 1,
            mode: 0o644,
            index,
        }
    }

    #[test]
    fn normalizes_and_refuses_escapes() {
        assert_eq!(
            normalize("./usr//lib/./x.so").as_deref(),
            Some("usr/lib/x.so")
        );
        assert_eq!(normalize("/etc/passwd").as_deref(), Some("etc/passwd"));
        assert_eq!(normalize("a/../b").as_deref(), Some("b"));
        assert_eq!(normalize("./").as_deref(), Some(""));
        assert_eq!(normalize("../etc/passwd"), None);
        assert_eq!(normalize("a/../../b"), None);
    }

    #[test]
    fn whiteouts_symlinks_and_resolution() {
        let mut t = Tree::default();
        t.apply(
            0,
            &[
                e("usr/local/cuda-12.4/compat/libcuda.so.1", RawKind::File, 0),
                e("usr/local/cuda", RawKind::Symlink("cuda-12.4".into()), 1),
                e("lib64", RawKind::Symlink("/usr/lib64".into()), 2),
                e("opt/a/x", RawKind::File, 3),
                e("opt/b", RawKind::File, 4),
                e("loop", RawKind::Symlink("loop".into()), 5),
            ],
        )
        .unwrap();
        assert_eq!(
            t.resolve("usr/local/cuda/compat").unwrap(),
            "usr/local/cuda-12.4/compat"
        );
        assert_eq!(t.resolve("/lib64/../etc").unwrap(), "usr/etc");
        assert!(matches!(
            t.resolve("loop/x"),
            Err(ImageError::SymlinkLoop(_))
        ));
        t.apply(
            1,
            &[
                e("lib64/libz.so", RawKind::File, 0),
                e("opt/.wh..wh..opq", RawKind::File, 1),
                e("opt/c", RawKind::File, 2),
                e("usr/local/.wh.cuda-12.4", RawKind::File, 3),
                e("opt/c2", RawKind::HardLink("opt/c".into()), 4),
            ],
        )
        .unwrap();
        let files: Vec<&str> = t.files().collect();
        assert_eq!(files, ["opt/c", "opt/c2", "usr/lib64/libz.so"]);
        assert_eq!(
            t.get("opt/c2").unwrap().content,
            Some(ContentRef { layer: 1, entry: 2 })
        );
    }

    /// One entry of 520k components resolved in a time linear in its
    /// length (a quadratic walk takes 20 minutes). Tested below the path
    /// cap of the layer reader, which refuses such a path first.
    #[test]
    fn resolution_is_linear_in_the_path() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let deep = "a/".repeat(520_000) + "f";
            let mut t = Tree::default();
            let r = t.apply(0, &[e(&deep, RawKind::File, 0)]);
            let _ = tx.send((r.is_ok(), t.len()));
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(30));
        assert_eq!(got.expect("resolving took over 30 s"), (true, 1));
    }

    /// The image's deadline holds inside applying a layer and resolving.
    #[test]
    fn applying_and_resolving_stop_at_the_deadline() {
        let limits = crate::image::Limits {
            max_time: std::time::Duration::ZERO,
            ..Default::default()
        };
        let over = crate::image::budget::Budget::new(&limits).deadline();
        let mut t = Tree::with_deadline(over);
        let r = t.apply(0, &[e("a/b", RawKind::File, 0)]);
        assert!(matches!(r, Err(ImageError::TimeBudget(0))), "{r:?}");
        assert!(matches!(t.resolve("a/b"), Err(ImageError::TimeBudget(0))));
        assert!(t.is_empty());
    }
}
