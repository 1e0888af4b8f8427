//! Finds the configured libraries inside a container's rootfs and scans
//! them within the container's budgets, through the cache.
//!
//! How the budgets are spent (one hostile file must not decide
//! whether the libraries that matter are judged):
//!
//! - Order: candidates are taken in the order of the config's globs; of one
//!   glob's `{a,b}` expansions, literal file names before wildcard matches
//!   ([`Pattern::looseness`]); then in directory (name) order.
//! - What counts: `max_bytes` and `max_file_bytes` count the bytes the
//!   positioned reads return (ELF and fatbin headers), never file sizes, so
//!   a sparse 1 TiB file costs the few bytes read of it. `max_files` counts
//!   the files parsed: results from the cache are free, so a start after an
//!   unfinished one goes on with the rest.
//! - Fair shares: the libraries to parse are tried in rounds. In a round,
//!   each gets an equal share of what is left of each budget (bytes read,
//!   capped at `max_file_bytes`; entry headers; wall-clock time): left over
//!   / libraries still to try in the round, so what one leaves unused goes
//!   to the next. One that needs more than its share is stopped (nothing of
//!   it is kept) and retried in the next round with what the finished ones
//!   left. So with n libraries, each is judged if it needs at most 1/n of
//!   every budget, whatever the others hold; a library that needs more than
//!   `max_file_bytes` is not judged at all. The price: a retried library
//!   reads its headers twice (the second time from the page cache), and a
//!   budget too small for everything may judge fewer libraries than one
//!   scanning in order would. Rounds end when all are judged, the time is
//!   up, or a round judges nothing (the shares only shrink from there).
//! - What is left: every library not judged is named in `Scanned`
//!   (bounded), with the budgets that ran out; `kernel_image.on_incomplete`
//!   says whether that refuses the container under enforce.

use super::cache::Cache;
use super::fatbin::{self, Budget, FatbinError};
use super::glob::{self, Component, Pattern};
use super::read::{Meter, Metered, SizedFile, Stop};
use super::rootfs::{self, DirEntry, EntriesTap, Found, Root, RootfsError};
use crate::core::amd::AmdCode;
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

/// Where a candidate comes in the scan order: the index of the config glob
/// that matched it, then how loosely that glob's expansion names it.
type Rank = (usize, (usize, bool, usize));

/// Budgets for one container, from the config.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_files: u64,
    pub max_bytes: u64,
    pub max_file_bytes: u64,
    pub max_entries: u64,
    pub deadline: Instant,
    pub time_budget_ms: u64,
}

impl Limits {
    pub fn from_config(cfg: &KernelImageConfig) -> Limits {
        Limits {
            max_files: cfg.max_files,
            max_bytes: cfg.max_bytes,
            max_file_bytes: cfg.max_file_bytes,
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
    /// Matched paths with the rank of the most specific pattern that
    /// matched them.
    out: Vec<(String, Rank)>,
    /// Index in `out` of each path.
    seen: HashMap<String, usize>,
    /// The rank of the pattern being walked.
    rank: Rank,
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
            if dir.is_empty() {
                return;
            }
            match self.seen.get(&dir) {
                Some(&i) => self.out[i].1 = self.out[i].1.min(self.rank),
                None => {
                    self.seen.insert(dir.clone(), self.out.len());
                    self.out.push((dir, self.rank));
                }
            }
            return;
        };
        match first {
            Component::Literal(name) => {
                // The path grows in place: every GPU container's start walks
                // the shipped globs' 170 patterns.
                let mut next = dir;
                if !next.is_empty() {
                    next.push('/');
                }
                next.push_str(name);
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
struct Expansion {
    /// Paths the patterns match (not yet opened), in scan order: by config
    /// glob, literal names before wildcard matches, then as found.
    pub paths: Vec<String>,
    /// Why the search stopped early, if it did.
    pub stopped: Option<String>,
    /// Directories that could not be listed, as unreadable libraries.
    pub unlisted: Vec<Library>,
}

/// Expands `patterns` (each with the index of its config glob) inside the
/// root; `tap` sees every directory listing ([`rootfs::no_tap`] outside
/// tests).
fn expand(
    root: &Root,
    patterns: &[(usize, Pattern)],
    limits: &Limits,
    tap: EntriesTap,
) -> Expansion {
    let mut w = Walker {
        root,
        limits,
        tap,
        listings: HashMap::new(),
        dirs_listed: 0,
        out: Vec::new(),
        seen: HashMap::new(),
        rank: (0, (0, false, 0)),
        stopped: None,
        unlisted: Vec::new(),
    };
    for (glob, p) in patterns {
        w.rank = (*glob, p.looseness());
        w.walk(&p.components, String::new(), 0);
    }
    let mut out = w.out;
    out.sort_by_key(|(_, rank)| *rank); // stable: found order within a rank
    Expansion {
        paths: out.into_iter().map(|(p, _)| p).collect(),
        stopped: w.stopped,
        unlisted: w.unlisted,
    }
}

/// Parses every configured glob, each pattern with the index of its glob;
/// a bad one is skipped (config validation reports it before we get here).
pub fn patterns(cfg: &KernelImageConfig) -> Vec<(usize, Pattern)> {
    let mut names = glob::Names::default();
    cfg.libraries
        .iter()
        .enumerate()
        .filter_map(|(i, g)| glob::parse_named(g, &mut names).ok().map(|ps| (i, ps)))
        .flat_map(|(i, ps)| ps.into_iter().map(move |p| (i, p)))
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

/// The budget that stopped one attempt at a library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Hit {
    Bytes,
    Entries,
    Time,
}

/// Scans one opened library into its distinct CUDA images and AMD code
/// objects, its reads metered (both readers share the budget and meter).
fn scan_metered(
    found: &Found,
    budget: &mut Budget,
    meter: &Meter,
) -> Result<(Vec<Image>, Vec<AmdCode>), ScanFailure> {
    let file = rootfs::open_regular(found).map_err(ScanFailure::Open)?;
    let file = SizedFile::new(file, found.stat.size);
    let reader = Metered {
        inner: &file,
        meter,
    };
    let mut set = BTreeSet::new();
    fatbin::scan_image(&reader, budget, &mut |e| {
        set.insert(Image {
            kind: e.kind,
            arch: e.arch,
            ptx_isa: e.ptx_isa,
        });
    })
    .map_err(ScanFailure::Parse)?;
    let mut amd = BTreeSet::new();
    crate::scan::amd::scan_image(&reader, budget, &mut |c| {
        amd.insert(c);
    })
    .map_err(ScanFailure::Parse)?;
    Ok((set.into_iter().collect(), amd.into_iter().collect()))
}

/// Why one library could not be scanned.
#[derive(Debug, thiserror::Error)]
enum ScanFailure {
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
                on_incomplete: cfg.on_incomplete,
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

/// What became of one candidate library.
enum Slot {
    /// Judged: its CUDA outcome and AMD code objects.
    Done(Outcome, Vec<AmdCode>),
    /// To parse: not cached.
    Pending(Box<Found>),
    /// Matched, but a budget left it unjudged.
    Unjudged,
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
    let mut scan = Scan {
        root,
        limits,
        cache,
        seen_inodes: HashSet::new(),
        slots: Vec::new(),
        reasons: Vec::new(),
        bytes: 0,
        entries: 0,
    };
    if let Some(r) = expansion.stopped {
        scan.reason(r);
    }
    scan.resolve_all(expansion.paths);
    scan.parse_in_rounds();

    let mut scanned = Scanned {
        libraries: expansion.unlisted,
        on_incomplete: cfg.on_incomplete,
        bytes_read: scan.bytes,
        ..Scanned::default()
    };
    let mut amd = Vec::new();
    for (path, slot) in scan.slots {
        match slot {
            Slot::Done(outcome, codes) => {
                amd.push((path.clone(), codes));
                scanned.libraries.push(Library { path, outcome })
            }
            // Every Pending slot ends Done or Unjudged; listed defensively.
            Slot::Unjudged | Slot::Pending(_) => {
                scanned.not_scanned_total += 1;
                if scanned.not_scanned.len() < MAX_NOT_SCANNED_LISTED {
                    scanned.not_scanned.push(path);
                }
            }
        }
    }
    if !scan.reasons.is_empty() {
        scanned.incomplete = Some(scan.reasons.join("; "));
    }
    scanned.amd = crate::scan::amd::rootfs::libraries(root, amd);
    scanned.rocm = crate::scan::amd::rootfs::rocm_of_root(root);
    scanned
}

/// What resolving one glob candidate found.
enum Step {
    /// Not a library: absent, a directory, or another name of one seen.
    Skip,
    /// Found unreadable.
    Done(Outcome),
    /// A regular file, not yet known to the scan.
    File(Box<Found>),
}

/// The state of one container's scan across its candidates.
struct Scan<'a> {
    root: &'a Root,
    limits: &'a Limits,
    cache: Option<&'a Cache>,
    seen_inodes: HashSet<(u64, u64)>,
    /// Every library, in scan order.
    slots: Vec<(String, Slot)>,
    /// Why libraries were left unjudged, each once.
    reasons: Vec<String>,
    /// Bytes read and entry headers taken so far, over all attempts.
    bytes: u64,
    entries: u64,
}

impl Scan<'_> {
    fn reason(&mut self, r: String) {
        if !self.reasons.contains(&r) {
            self.reasons.push(r);
        }
    }

    fn resolve(&mut self, path: &str) -> Step {
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
        Step::File(Box::new(found))
    }

    /// Resolves every candidate, in order: what the cache knows is done,
    /// the first `max_files` others wait for a parse, the rest (and all
    /// once the time is up) are left unjudged.
    fn resolve_all(&mut self, paths: Vec<String>) {
        let limits = self.limits;
        let mut to_parse = 0u64;
        for path in paths {
            let slot = match self.resolve(&path) {
                Step::Skip => continue,
                Step::Done(outcome) => Slot::Done(outcome, Vec::new()),
                Step::File(found) => {
                    if limits.time_up() {
                        self.reason(limits.time_reason());
                        Slot::Unjudged
                    } else if let Some((hit, amd)) =
                        self.cache.and_then(|c| c.get_scan(&found.stat))
                    {
                        Slot::Done(hit, amd)
                    } else if to_parse >= limits.max_files {
                        self.reason(format!(
                            "more than {} libraries to parse (results from the cache do not count)",
                            limits.max_files
                        ));
                        Slot::Unjudged
                    } else {
                        to_parse += 1;
                        Slot::Pending(found)
                    }
                }
            };
            self.slots.push((path, slot));
        }
    }

    /// Parses the pending libraries in rounds of fair shares (see the
    /// module doc).
    fn parse_in_rounds(&mut self) {
        let mut pending: Vec<usize> = (0..self.slots.len())
            .filter(|&i| matches!(self.slots[i].1, Slot::Pending(_)))
            .collect();
        while !pending.is_empty() {
            let mut retry = Vec::new();
            let mut hits = BTreeSet::new();
            let mut progress = false;
            for (k, &i) in pending.iter().enumerate() {
                if self.limits.time_up() {
                    self.reason(self.limits.time_reason());
                    retry.extend_from_slice(&pending[k..]);
                    progress = false;
                    break;
                }
                let left = (pending.len() - k) as u64;
                match self.attempt(i, left) {
                    Ok(()) => progress = true,
                    Err(None) => progress = true, // dropped: over max_file_bytes
                    Err(Some(hit)) => {
                        hits.insert(hit);
                        retry.push(i);
                    }
                }
            }
            if !progress {
                for hit in hits {
                    let r = self.hit_reason(hit);
                    self.reason(r);
                }
                for i in retry {
                    self.slots[i].1 = Slot::Unjudged;
                }
                return;
            }
            pending = retry;
        }
    }

    /// One attempt at pending slot `i`, with a fair share of each budget
    /// for one of `left` libraries still to try in this round. `Ok`: done
    /// (judged or unreadable); `Err(Some(hit))`: stopped by its share, to
    /// retry; `Err(None)`: needs more than `max_file_bytes`, unjudged.
    fn attempt(&mut self, i: usize, left: u64) -> Result<(), Option<Hit>> {
        let limits = self.limits;
        let Slot::Pending(found) = &self.slots[i].1 else {
            return Ok(());
        };
        let found: &Found = found;
        let bytes_share = limits.max_bytes.saturating_sub(self.bytes) / left;
        let capped = bytes_share >= limits.max_file_bytes;
        let entries_share = limits.max_entries.saturating_sub(self.entries) / left;
        let now = Instant::now();
        let time_share = limits.deadline.saturating_duration_since(now)
            / u32::try_from(left).unwrap_or(u32::MAX);
        let meter = Meter::new(
            bytes_share.min(limits.max_file_bytes),
            Some(now + time_share),
        );
        let mut budget = Budget {
            entries_left: entries_share,
            deadline: Some(now + time_share),
        };
        let result = scan_metered(found, &mut budget, &meter);
        self.bytes = self.bytes.saturating_add(meter.read.get());
        self.entries = self
            .entries
            .saturating_add(entries_share - budget.entries_left);
        // The meter first: a parser may have turned its refusal into any
        // error (or passed over it), and the result is then not the file's.
        let hit = match (meter.hit.get(), &result) {
            (Some(Stop::Bytes), _) => Some(Hit::Bytes),
            (Some(Stop::Time), _) => Some(Hit::Time),
            (None, Err(ScanFailure::Parse(FatbinError::EntryBudget))) => Some(Hit::Entries),
            (None, Err(ScanFailure::Parse(FatbinError::TimeBudget))) => Some(Hit::Time),
            _ => None,
        };
        if let Some(hit) = hit {
            if hit == Hit::Bytes && capped {
                let r = format!(
                    "{} reads more than max_file_bytes ({} bytes)",
                    self.slots[i].0, limits.max_file_bytes
                );
                self.reason(r);
                self.slots[i].1 = Slot::Unjudged;
                return Err(None);
            }
            return Err(Some(hit));
        }
        let cache = self.cache;
        let stat = &found.stat;
        let mut amd = Vec::new();
        let outcome = match result {
            Ok((images, codes)) => {
                if let Some(c) = cache {
                    c.put_scan(stat, &Ok(images.clone()), &codes);
                }
                amd = codes;
                Ok(images)
            }
            Err(ScanFailure::Parse(e)) => {
                let msg = e.to_string();
                if let (Some(c), true) = (cache, cacheable(&e)) {
                    c.put(stat, &Err(msg.clone()));
                }
                Err(msg)
            }
            Err(ScanFailure::Open(e)) => Err(e.to_string()),
        };
        self.slots[i].1 = Slot::Done(outcome, amd);
        Ok(())
    }

    fn hit_reason(&self, hit: Hit) -> String {
        let limits = self.limits;
        match hit {
            Hit::Bytes => format!(
                "read budget of {} bytes (max_bytes) used up",
                limits.max_bytes
            ),
            Hit::Entries => format!(
                "entry budget of {} fatbin entries used up",
                limits.max_entries
            ),
            Hit::Time => limits.time_reason(),
        }
    }
}
