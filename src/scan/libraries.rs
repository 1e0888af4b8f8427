//! Finds the configured libraries inside a container's rootfs and scans
//! them within the container's budgets, through the cache.

use super::cache::Cache;
use super::fatbin::{self, Budget, FatbinError};
use super::glob::{self, Component, Pattern};
use super::read::SizedFile;
use super::rootfs::{self, DirEntry, EntriesTap, Found, Root, RootfsError};
use crate::core::kernel_image::{Image, Library, Outcome, Scanned};
use crate::core::policy::KernelImageConfig;
use nix::errno::Errno;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The most candidate paths the globs may produce before we stop looking.
const MAX_CANDIDATES: usize = 4096;
/// The most directories `**` may descend through, and how deep.
const MAX_DIRS_LISTED: usize = 10_000;
const MAX_ANY_DEPTH: usize = 24;
/// The most unscanned libraries named when a budget stops the scan.
const MAX_NOT_SCANNED_LISTED: usize = 64;

/// Budgets for one container, from the config.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_files: u64,
    pub max_bytes: u64,
    pub max_entries: u64,
    pub deadline: Instant,
    pub time_budget_ms: u64,
}

impl Limits {
    pub fn from_config(cfg: &KernelImageConfig) -> Limits {
        Limits {
            max_files: cfg.max_files,
            max_bytes: cfg.max_bytes,
            max_entries: cfg.max_entries,
            deadline: Instant::now() + Duration::from_millis(cfg.time_budget_ms),
            time_budget_ms: cfg.time_budget_ms,
        }
    }

    fn time_up(&self) -> bool {
        Instant::now() >= self.deadline
    }

    fn time_reason(&self) -> String {
        format!("time budget of {} ms used up", self.time_budget_ms)
    }
}

/// Is this the image simply not having the path (a glob naming a
/// directory or file the image lacks is normal), rather than a failure to
/// read what is there?
fn absent(e: &RootfsError) -> bool {
    match e {
        RootfsError::Resolve { source, .. } | RootfsError::ReadDir { source, .. } => matches!(
            source.raw_os_error().map(Errno::from_raw),
            Some(Errno::ENOENT | Errno::ENOTDIR)
        ),
        _ => false,
    }
}

/// Expands the globs inside the root, memoizing directory listings so
/// patterns that share directories list them once.
struct Walker<'a> {
    root: &'a Root,
    limits: &'a Limits,
    tap: EntriesTap<'a>,
    listings: HashMap<String, Option<Rc<Vec<DirEntry>>>>,
    dirs_listed: usize,
    out: Vec<String>,
    seen: HashSet<String>,
    stopped: Option<String>,
    unlisted: Vec<Library>,
}

impl Walker<'_> {
    /// The entries of `dir`, or `None` when it cannot be listed. A
    /// directory the image lacks is passed over in silence; any other
    /// failure (a readdir(3) error part way included) is kept as an
    /// unreadable "library" named by the directory, so it becomes a
    /// warning instead of a silently shorter search.
    fn list(&mut self, dir: &str) -> Option<Rc<Vec<DirEntry>>> {
        if let Some(l) = self.listings.get(dir) {
            return l.clone();
        }
        self.dirs_listed += 1;
        let l = match self.root.read_dir_tapped(dir, self.tap) {
            Ok(entries) => Some(Rc::new(entries)),
            Err(e) => {
                if !absent(&e) {
                    self.unlisted.push(Library {
                        path: if dir.is_empty() { "/" } else { dir }.to_string(),
                        outcome: Err(e.to_string()),
                    });
                }
                None
            }
        };
        self.listings.insert(dir.to_string(), l.clone());
        l
    }

    fn stop_if_over(&mut self) -> bool {
        if self.stopped.is_some() {
            return true;
        }
        if self.limits.time_up() {
            self.stopped = Some(self.limits.time_reason());
        } else if self.out.len() >= MAX_CANDIDATES {
            self.stopped = Some(format!(
                "the library globs matched more than {MAX_CANDIDATES} paths"
            ));
        } else if self.dirs_listed >= MAX_DIRS_LISTED {
            self.stopped = Some(format!(
                "the library globs listed more than {MAX_DIRS_LISTED} directories"
            ));
        }
        self.stopped.is_some()
    }

    fn walk(&mut self, comps: &[Component], dir: String, any_depth: usize) {
        if self.stop_if_over() {
            return;
        }
        let Some((first, rest)) = comps.split_first() else {
            if !dir.is_empty() && self.seen.insert(dir.clone()) {
                self.out.push(dir);
            }
            return;
        };
        match first {
            Component::Literal(name) => {
                let next = if dir.is_empty() {
                    name.clone()
                } else {
                    format!("{dir}/{name}")
                };
                self.walk(rest, next, any_depth);
            }
            Component::Wild(p) => {
                let Some(entries) = self.list(&dir) else {
                    return;
                };
                for e in entries.iter() {
                    if glob::match_name(p, e.name.as_encoded_bytes()) {
                        if let Some(next) = rootfs::join(&dir, &e.name) {
                            self.walk(rest, next, any_depth);
                        }
                    }
                }
            }
            Component::AnyDepth => {
                // Zero directories, then one more level (real directories
                // only, never symlinks, so `**` cannot loop).
                self.walk(rest, dir.clone(), any_depth);
                if any_depth >= MAX_ANY_DEPTH {
                    return;
                }
                let Some(entries) = self.list(&dir) else {
                    return;
                };
                for e in entries.iter().filter(|e| e.is_dir) {
                    if let Some(next) = rootfs::join(&dir, &e.name) {
                        self.walk(comps, next, any_depth + 1);
                    }
                }
            }
        }
    }
}

/// What the globs matched inside the root.
#[derive(Debug, Default)]
pub struct Expansion {
    /// Paths the patterns match (not yet opened), in pattern order.
    pub paths: Vec<String>,
    /// Why the search stopped early, if it did.
    pub stopped: Option<String>,
    /// Directories that could not be listed, as unreadable libraries.
    pub unlisted: Vec<Library>,
}

/// Expands `patterns` inside the root; `tap` sees every directory listing
/// ([`rootfs::no_tap`] outside tests).
pub fn expand(root: &Root, patterns: &[Pattern], limits: &Limits, tap: EntriesTap) -> Expansion {
    let mut w = Walker {
        root,
        limits,
        tap,
        listings: HashMap::new(),
        dirs_listed: 0,
        out: Vec::new(),
        seen: HashSet::new(),
        stopped: None,
        unlisted: Vec::new(),
    };
    for p in patterns {
        w.walk(&p.components, String::new(), 0);
    }
    Expansion {
        paths: w.out,
        stopped: w.stopped,
        unlisted: w.unlisted,
    }
}

/// Parses every configured glob; a bad one is skipped (config validation
/// reports it before we get here).
pub fn patterns(cfg: &KernelImageConfig) -> Vec<Pattern> {
    cfg.libraries
        .iter()
        .filter_map(|g| glob::parse(g).ok())
        .flatten()
        .collect()
}

/// Is a scan failure a property of the file's bytes (worth caching)?
fn cacheable(e: &FatbinError) -> bool {
    use super::elf::ElfError;
    let io_kind_ok = |e: &std::io::Error| e.kind() == std::io::ErrorKind::UnexpectedEof;
    match e {
        FatbinError::EntryBudget | FatbinError::TimeBudget => false,
        FatbinError::Io { source, .. } => io_kind_ok(source),
        FatbinError::Elf(ElfError::Io(source)) => io_kind_ok(source),
        _ => true,
    }
}

/// Scans one opened library into its distinct images.
pub fn scan_found(found: &Found, budget: &mut Budget) -> Result<Vec<Image>, ScanFailure> {
    let file = rootfs::open_regular(found).map_err(ScanFailure::Open)?;
    let reader = SizedFile::new(file, found.stat.size);
    let mut set = BTreeSet::new();
    fatbin::scan_image(&reader, budget, &mut |e| {
        set.insert(Image {
            kind: e.kind,
            arch: e.arch,
            ptx_isa: e.ptx_isa,
        });
    })
    .map_err(ScanFailure::Parse)?;
    Ok(set.into_iter().collect())
}

/// Why one library could not be scanned.
#[derive(Debug, thiserror::Error)]
pub enum ScanFailure {
    #[error(transparent)]
    Open(RootfsError),
    #[error(transparent)]
    Parse(FatbinError),
}

/// Finds and scans the configured libraries in `rootfs`.
pub fn scan_rootfs(rootfs: &Path, cfg: &KernelImageConfig) -> Scanned {
    let limits = Limits::from_config(cfg);
    let root = match Root::open(rootfs) {
        Ok(r) => r,
        Err(e) => {
            return Scanned {
                rootfs_error: Some(e.to_string()),
                ..Default::default()
            }
        }
    };
    scan_root(&root, cfg, &limits, Cache::open(&cfg.cache_dir).as_ref())
}

/// [`scan_rootfs`] on an open root with explicit limits and cache (tests).
pub fn scan_root(
    root: &Root,
    cfg: &KernelImageConfig,
    limits: &Limits,
    cache: Option<&Cache>,
) -> Scanned {
    scan_root_tapped(root, cfg, limits, cache, &rootfs::no_tap)
}

/// [`scan_root`] with `tap` between readdir(3) and every directory listing
/// (the fault-injection seam of the tests).
pub fn scan_root_tapped(
    root: &Root,
    cfg: &KernelImageConfig,
    limits: &Limits,
    cache: Option<&Cache>,
    tap: EntriesTap,
) -> Scanned {
    let expansion = expand(root, &patterns(cfg), limits, tap);
    let mut scanned = Scanned {
        libraries: expansion.unlisted,
        ..Scanned::default()
    };
    let mut scan = Scan {
        root,
        limits,
        cache,
        budget: Budget {
            entries_left: limits.max_entries,
            deadline: Some(limits.deadline),
        },
        seen_inodes: HashSet::new(),
        files: 0,
        bytes: 0,
    };
    let mut rest = expansion.paths.into_iter();
    for path in rest.by_ref() {
        match scan.candidate(&path) {
            Step::Skip => {}
            Step::Done(outcome) => scanned.libraries.push(Library { path, outcome }),
            Step::Stop(reason) => {
                scanned.incomplete = Some(reason);
                scanned.not_scanned.push(path);
                break;
            }
        }
    }
    if scanned.incomplete.is_some() {
        // Name what was left, skipping glob candidates the image lacks.
        scanned.not_scanned.extend(
            rest.filter(|p| root.find(p).is_ok_and(|f| f.stat.is_regular()))
                .take(MAX_NOT_SCANNED_LISTED),
        );
    } else {
        scanned.incomplete = expansion.stopped;
    }
    scanned
}

/// What became of one glob candidate.
enum Step {
    /// Not a library: absent, a directory, or another name of one seen.
    Skip,
    /// Scanned, or found unreadable.
    Done(Outcome),
    /// A budget ran out at this candidate (it is not scanned).
    Stop(String),
}

/// The state of one container's scan across its candidates.
struct Scan<'a> {
    root: &'a Root,
    limits: &'a Limits,
    cache: Option<&'a Cache>,
    budget: Budget,
    seen_inodes: HashSet<(u64, u64)>,
    files: u64,
    bytes: u64,
}

impl Scan<'_> {
    fn candidate(&mut self, path: &str) -> Step {
        let found = match self.root.find(path) {
            Ok(f) => f,
            // A glob naming a path the image does not have is normal.
            Err(e) if absent(&e) => return Step::Skip,
            Err(e) => return Step::Done(Err(e.to_string())),
        };
        if !found.stat.is_regular() {
            // A directory matched by a wildcard is not a library; anything
            // else (FIFO, device, socket) under a library's name is suspect.
            if found.stat.is_dir() {
                return Step::Skip;
            }
            let e = RootfsError::NotRegular {
                path: found.path.clone(),
            };
            return Step::Done(Err(e.to_string()));
        }
        if !self.seen_inodes.insert((found.stat.dev, found.stat.ino)) {
            return Step::Skip; // another name (symlink) of a library already seen
        }
        if let Some(reason) = self.over_budget(&found) {
            return Step::Stop(reason);
        }
        if let Some(hit) = self.cache.and_then(|c| c.get(&found.stat)) {
            return Step::Done(hit);
        }
        self.scan_uncached(&found)
    }

    /// Counts `found` against the file, byte and time budgets.
    fn over_budget(&mut self, found: &Found) -> Option<String> {
        let limits = self.limits;
        self.files += 1;
        self.bytes = self.bytes.saturating_add(found.stat.size);
        if self.files > limits.max_files {
            Some(format!("more than {} libraries matched", limits.max_files))
        } else if self.bytes > limits.max_bytes {
            Some(format!(
                "the matched libraries exceed {} bytes",
                limits.max_bytes
            ))
        } else if limits.time_up() {
            Some(limits.time_reason())
        } else {
            None
        }
    }

    /// Parses a library the cache did not know, caching what depends on
    /// its bytes alone.
    fn scan_uncached(&mut self, found: &Found) -> Step {
        let cache = self.cache;
        match scan_found(found, &mut self.budget) {
            Ok(images) => {
                if let Some(c) = cache {
                    c.put(&found.stat, &Ok(images.clone()));
                }
                Step::Done(Ok(images))
            }
            Err(ScanFailure::Parse(e)) if e.is_budget() => Step::Stop(match e {
                FatbinError::EntryBudget => format!(
                    "entry budget of {} fatbin entries used up",
                    self.limits.max_entries
                ),
                _ => self.limits.time_reason(),
            }),
            Err(ScanFailure::Parse(e)) => {
                let msg = e.to_string();
                if let (Some(c), true) = (cache, cacheable(&e)) {
                    c.put(&found.stat, &Err(msg.clone()));
                }
                Step::Done(Err(msg))
            }
            Err(ScanFailure::Open(e)) => Step::Done(Err(e.to_string())),
        }
    }
}
