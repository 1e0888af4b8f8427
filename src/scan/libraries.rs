//! Finds the configured libraries inside a container's rootfs and scans
//! them within the container's budgets, through the cache.

use super::cache::Cache;
use super::fatbin::{self, Budget, FatbinError};
use super::glob::{self, Component, Pattern};
use super::read::SizedFile;
use super::rootfs::{self, DirEntry, Found, Root, RootfsError};
use crate::core::kernel_image::{Image, Library, Outcome, Scanned};
use crate::core::policy::KernelImageConfig;
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

/// Expands the globs inside the root, memoizing directory listings so
/// patterns that share directories list them once.
struct Walker<'a> {
    root: &'a Root,
    limits: &'a Limits,
    listings: HashMap<String, Option<Rc<Vec<DirEntry>>>>,
    dirs_listed: usize,
    out: Vec<String>,
    seen: HashSet<String>,
    stopped: Option<String>,
}

impl Walker<'_> {
    fn list(&mut self, dir: &str) -> Option<Rc<Vec<DirEntry>>> {
        if let Some(l) = self.listings.get(dir) {
            return l.clone();
        }
        self.dirs_listed += 1;
        let l = self.root.read_dir(dir).ok().map(Rc::new);
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

/// Paths inside the root that the patterns match (not yet opened), and why
/// the search stopped early, if it did.
pub fn expand(root: &Root, patterns: &[Pattern], limits: &Limits) -> (Vec<String>, Option<String>) {
    let mut w = Walker {
        root,
        limits,
        listings: HashMap::new(),
        dirs_listed: 0,
        out: Vec::new(),
        seen: HashSet::new(),
        stopped: None,
    };
    for p in patterns {
        w.walk(&p.components, String::new(), 0);
    }
    (w.out, w.stopped)
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
    let mut scanned = Scanned::default();
    let (candidates, stopped) = expand(root, &patterns(cfg), limits);
    let mut budget = Budget {
        entries_left: limits.max_entries,
        deadline: Some(limits.deadline),
    };
    let mut seen_inodes = HashSet::new();
    let mut files = 0u64;
    let mut bytes = 0u64;
    let mut rest = candidates.into_iter();
    for path in rest.by_ref() {
        let found = match root.find(&path) {
            Ok(f) => f,
            // A glob naming a path the image does not have is normal.
            Err(RootfsError::Resolve { ref source, .. })
                if matches!(
                    source.raw_os_error(),
                    Some(libc::ENOENT) | Some(libc::ENOTDIR)
                ) =>
            {
                continue
            }
            Err(e) => {
                scanned.libraries.push(Library {
                    path,
                    outcome: Err(e.to_string()),
                });
                continue;
            }
        };
        if !found.stat.is_regular() {
            // A directory matched by a wildcard is not a library; anything
            // else (FIFO, device, socket) under a library's name is suspect.
            if !found.stat.is_dir() {
                scanned.libraries.push(Library {
                    path,
                    outcome: Err(RootfsError::NotRegular {
                        path: found.path.clone(),
                    }
                    .to_string()),
                });
            }
            continue;
        }
        if !seen_inodes.insert((found.stat.dev, found.stat.ino)) {
            continue; // another name (symlink) of a library already seen
        }
        files += 1;
        bytes = bytes.saturating_add(found.stat.size);
        let over = if files > limits.max_files {
            Some(format!("more than {} libraries matched", limits.max_files))
        } else if bytes > limits.max_bytes {
            Some(format!(
                "the matched libraries exceed {} bytes",
                limits.max_bytes
            ))
        } else if limits.time_up() {
            Some(limits.time_reason())
        } else {
            None
        };
        if let Some(reason) = over {
            scanned.incomplete = Some(reason);
            scanned.not_scanned.push(path);
            break;
        }
        if let Some(hit) = cache.and_then(|c| c.get(&found.stat)) {
            scanned.libraries.push(Library { path, outcome: hit });
            continue;
        }
        let outcome: Outcome = match scan_found(&found, &mut budget) {
            Ok(images) => {
                if let Some(c) = cache {
                    c.put(&found.stat, &Ok(images.clone()));
                }
                Ok(images)
            }
            Err(ScanFailure::Parse(e)) if e.is_budget() => {
                scanned.incomplete = Some(match e {
                    FatbinError::EntryBudget => format!(
                        "entry budget of {} fatbin entries used up",
                        limits.max_entries
                    ),
                    _ => limits.time_reason(),
                });
                scanned.not_scanned.push(path);
                break;
            }
            Err(ScanFailure::Parse(e)) => {
                let msg = e.to_string();
                if let (Some(c), true) = (cache, cacheable(&e)) {
                    c.put(&found.stat, &Err(msg.clone()));
                }
                Err(msg)
            }
            Err(ScanFailure::Open(e)) => Err(e.to_string()),
        };
        scanned.libraries.push(Library { path, outcome });
    }
    if scanned.incomplete.is_some() {
        // Name what was left, skipping glob candidates the image lacks.
        scanned.not_scanned.extend(
            rest.filter(|p| root.find(p).is_ok_and(|f| f.stat.is_regular()))
                .take(MAX_NOT_SCANNED_LISTED),
        );
    }
    if scanned.incomplete.is_none() {
        scanned.incomplete = stopped;
    }
    scanned
}
