//! What an image's libraries need at start, resolved as glibc's ld.so
//! will resolve them in the GPU container.
//!
//! - [`snapshot`]: the container's file tree in memory, paths resolved
//!   inside it; [`walk`] reads it from a rootfs;
//! - [`content`]: ELF facts and small files, read through the safe resolver;
//! - [`platform`]: default directories, `$LIB`, `$PLATFORM`, glibc-hwcaps;
//! - [`conf`], [`ldconfig`]: the loader cache as NVIDIA's ldconfig rerun
//!   rebuilds it;
//! - [`loader`]: ld.so's search and breadth-first loading.

pub mod budget;
pub mod conf;
pub mod content;
pub mod cudart;
mod dst;
pub mod ldconfig;
pub mod loader;
mod missing;
pub mod platform;
pub mod resolve;
pub mod result_cache;
pub mod snapshot;
mod start_env;
pub mod tree;
pub mod walk;

use crate::core::libraries::LibraryScan;
use crate::core::policy::LibrariesConfig;
use crate::scan::rootfs::Root;
use content::{ReadLimits, RootContent};
use resolve::Resolved;
pub use start_env::StartEnv;
use std::path::Path;
use std::time::{Duration, Instant};

/// Entries (all kinds) one rootfs walk may read. Each costs the tree about
/// 170 bytes (its node, name and identity), so this bounds the walk's
/// memory at about 170 MiB; the largest framework images have a few
/// hundred thousand entries.
const MAX_ENTRIES: u64 = 1_000_000;

/// The cache key's inputs besides the walk. The CPU's glibc-hwcaps levels
/// (platform::cpu_hwcaps) are not among them: a cache directory belongs to
/// one host, whose CPU does not change, and asking the CPU costs a fresh
/// process more than the whole warm path.
fn key_inputs(inputs: &StartEnv, cfg: &LibrariesConfig) -> Vec<String> {
    let machine = inputs.machine.map(|m| m.to_string()).unwrap_or_default();
    vec![
        inputs
            .ld_library_path
            .clone()
            .unwrap_or_else(|| "\0unset".into()),
        inputs.cwd.clone(),
        inputs.gpu.to_string(),
        inputs
            .capabilities
            .clone()
            .unwrap_or_else(|| "\0unset".into()),
        inputs.driver_version.clone().unwrap_or_default(),
        machine,
        format!(
            "{} {} {} {} {}",
            cfg.max_dirs, cfg.max_files, cfg.max_bytes, cfg.max_file_bytes, cfg.time_budget_ms
        ),
    ]
}

/// Scans the rootfs at `rootfs` (a trusted host path) for what its
/// libraries need; the result comes from the cache when every input is
/// unchanged. `trees`: also the resolution trees (never cached).
pub fn scan_rootfs(
    rootfs: &Path,
    inputs: &StartEnv,
    cfg: &LibrariesConfig,
    trees: bool,
) -> Resolved {
    let deadline = Instant::now() + Duration::from_millis(cfg.time_budget_ms);
    let limits = walk::WalkLimits {
        max_dirs: cfg.max_dirs,
        max_entries: MAX_ENTRIES,
        deadline,
    };
    let failed = |e: String| Resolved {
        scan: LibraryScan {
            error: Some(e),
            ..LibraryScan::default()
        },
        ..Resolved::default()
    };
    let walked = match walk::walk(rootfs, &limits) {
        Ok(w) => w,
        Err(e) => return failed(e.to_string()),
    };
    let ki = key_inputs(inputs, cfg);
    let refs: Vec<&str> = ki.iter().map(String::as_str).collect();
    let key = result_cache::key(&walked.digest, &refs);
    let cache = result_cache::ResultCache::open(&cfg.cache_dir);
    if !trees {
        if let Some(hit) = cache.as_ref().and_then(|c| c.get(&key)) {
            return Resolved {
                scan: hit,
                ..Resolved::default()
            };
        }
    }
    let root = match Root::open(rootfs) {
        Ok(r) => r,
        Err(e) => return failed(e.to_string()),
    };
    let content = RootContent::new(
        &root,
        ReadLimits {
            max_files: cfg.max_files,
            max_bytes: cfg.max_bytes,
            max_file_bytes: cfg.max_file_bytes,
            deadline,
        },
    );
    let budget = budget::Budget::new(deadline, cfg.time_budget_ms);
    let mut r = resolve::resolve(walked.snap, &content, inputs, trees, &budget);
    note_budget(&mut r.scan, &budget);
    note_walk(
        &mut r.scan,
        walked.stopped,
        walked.unwalked,
        walked.unwalked_total,
    );
    for (path, why) in content.unread.borrow().iter() {
        r.scan.not_judged_total += 1;
        if r.scan.not_judged.len() < 64 {
            r.scan
                .not_judged
                .push(format!("{}: {why}", path.trim_start_matches('/')));
        }
        r.scan.incomplete.get_or_insert_with(|| why.clone());
    }
    if r.scan.incomplete.is_none() {
        if let Some(c) = &cache {
            c.put(&key, &r.scan);
        }
    }
    r
}

/// Why the model's budget stopped it, first among the reasons.
pub fn note_budget(scan: &mut LibraryScan, budget: &budget::Budget) {
    let Some(why) = budget.stopped() else {
        return;
    };
    scan.incomplete = Some(match scan.incomplete.take() {
        Some(prev) if prev != why => format!("{why}; {prev}"),
        _ => why,
    });
}

/// What the walk could not read joins what was not judged.
fn note_walk(scan: &mut LibraryScan, stopped: Option<String>, unwalked: Vec<String>, total: u64) {
    if total == 0 && stopped.is_none() {
        return;
    }
    scan.not_judged_total += total;
    for u in unwalked {
        if scan.not_judged.len() < 64 {
            scan.not_judged
                .push(format!("{} (not walked)", u.trim_start_matches('/')));
        }
    }
    let why = stopped.unwrap_or_else(|| format!("{total} directories could not be listed"));
    scan.incomplete = Some(match scan.incomplete.take() {
        Some(prev) => format!("{why}; {prev}"),
        None => why,
    });
}

/// [`resolve::trace`] over a rootfs directory (generous budgets): what the
/// model says `LD_TRACE_LOADED_OBJECTS=1 ld.so ROOT` prints in a container
/// started with `inputs`.
pub fn trace_rootfs(
    rootfs: &Path,
    inputs: &StartEnv,
    root: &str,
) -> Result<resolve::Trace, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let limits = walk::WalkLimits {
        max_dirs: 1 << 20,
        max_entries: MAX_ENTRIES,
        deadline,
    };
    let walked = walk::walk(rootfs, &limits).map_err(|e| e.to_string())?;
    let root_fd = Root::open(rootfs).map_err(|e| e.to_string())?;
    let content = RootContent::new(
        &root_fd,
        ReadLimits {
            max_files: u64::MAX,
            max_bytes: u64::MAX,
            max_file_bytes: 1 << 30,
            deadline,
        },
    );
    Ok(resolve::trace(walked.snap, &content, inputs, root))
}
