//! The libraries scan over one container's file tree: the driver
//! libraries NVIDIA's runtime injects, the loader cache ldconfig rebuilds,
//! then every ELF object that is a GPU library or needs one loaded as ld.so
//! loads it, with the well-known `dlopen` calls after ([`Resolved`]).
//!
//! Which objects are judged: a program or library nothing else in the
//! image loads (through `DT_NEEDED`) is judged as the program it is; one
//! that another object loads is judged where that one loads it, with the
//! search paths it inherits there (a cuDNN sub-library finds cuBLAS
//! through PyTorch's `RPATH`). An object in a Python `site-packages` is
//! opened by that Python's interpreter, whose own `RPATH` then applies too
//! (conda's `$ORIGIN/../lib`).
//!
//! Which objects are judged, and at what cost: each object is judged once.
//! The candidates are taken in the order of the names they need (one that
//! no other candidate names first, in path order; then what those name),
//! and a candidate some program already judged loads through `DT_NEEDED`
//! is judged there, not again: a `DT_NEEDED` chain of n libraries costs one
//! program of n objects, not n programs of n/2. (A candidate the judged
//! programs reach only through a path of their own, which the names alone
//! do not show, is judged as a program too: never fewer judgements.)
//! Each program is judged and let go before the next is loaded, and the
//! scan's [`Budget`] bounds the whole: what it leaves is named as not
//! judged.

use super::budget::Budget;
use super::content::{info_of, Content};
use super::ldconfig::{self, LdCache};
use super::loader::{Env, Outcome, RequestKind, Session};
use super::missing::collect_missing;
use super::platform::{cpu_hwcaps, Platform};
use super::snapshot::{components, FileMeta, Idx, Kind, Snapshot};
use super::tree::Tree;
use super::{conf, cudart};
use crate::core::dlopen_libs::{self, Opens, Rule, RULES};
use crate::core::driver_libs::{self, Capability};
use crate::core::libraries::{is_gpu_name, LibraryScan};
use crate::scan::elf_dynamic::{DynInfo, Fit, EM_AARCH64, EM_X86_64};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::sync::Arc;

/// Missing libraries listed in the result.
pub(super) const MAX_MISSING: usize = 256;
/// Files named as not judged.
const MAX_NOT_JUDGED: usize = 64;

/// What the container's spec says that the loader depends on.
#[derive(Clone, Debug, Default)]
pub struct StartEnv {
    pub ld_library_path: Option<String>,
    /// `process.cwd` (absolute; `/` when unset).
    pub cwd: String,
    /// The container is given GPUs: NVIDIA's runtime injects its libraries.
    pub gpu: bool,
    /// `NVIDIA_DRIVER_CAPABILITIES`, as set.
    pub capabilities: Option<String>,
    /// The host driver's version, for the injected files' names.
    pub driver_version: Option<String>,
    /// The image's machine (`EM_*`); None: from its loader, else this host's.
    pub machine: Option<u16>,
}

impl StartEnv {
    /// What a container's env and working directory give the loader; `gpu`:
    /// the container is given GPUs (NVIDIA's runtime injects its libraries).
    pub fn from_env(env: &crate::core::container::Env, cwd: Option<&str>, gpu: bool) -> StartEnv {
        StartEnv {
            ld_library_path: env.get("LD_LIBRARY_PATH").map(String::from),
            cwd: cwd
                .filter(|c| c.starts_with('/'))
                .unwrap_or("/")
                .to_string(),
            gpu,
            capabilities: env.get("NVIDIA_DRIVER_CAPABILITIES").map(String::from),
            driver_version: None,
            machine: None,
        }
    }
}

/// The scan's result, with the trees when asked for.
#[derive(Debug, Default)]
pub struct Resolved {
    pub scan: LibraryScan,
    pub trees: Vec<Tree>,
    /// Libraries injected, and ldconfig's cache size (for people).
    pub injected: Vec<String>,
    pub cache_entries: usize,
}

/// The image's machine: its loader's, else this host's.
fn machine_of(snap: &Snapshot, inputs: &StartEnv) -> u16 {
    if let Some(m) = inputs.machine {
        return m;
    }
    if snap.lookup("/lib64/ld-linux-x86-64.so.2", true).is_ok() {
        return EM_X86_64;
    }
    if snap.lookup("/lib/ld-linux-aarch64.so.1", true).is_ok() {
        return EM_AARCH64;
    }
    if cfg!(target_arch = "aarch64") {
        EM_AARCH64
    } else {
        EM_X86_64
    }
}

/// Facts for an injected library: a shared object of the loader's
/// platform with its SONAME and nothing it needs from the image.
fn injected_info(plat: &Platform, soname: String) -> Arc<DynInfo> {
    let mut ident = vec![0x7f, b'E', b'L', b'F', plat.class, 1, 1];
    ident.resize(16, 0);
    Arc::new(DynInfo {
        elf: true,
        head_len: 64,
        ident,
        e_type: crate::scan::elf_dynamic::ET_DYN,
        machine: plat.machine,
        e_version: 1,
        phentsize: 56,
        has_load: true,
        has_dynamic: true,
        has_strtab: true,
        soname: Some(soname),
        ..DynInfo::default()
    })
}

/// Mounts the driver libraries of the container's capabilities into the
/// tree, as NVIDIA's runtime does before ldconfig runs.
fn inject(snap: &mut Snapshot, plat: &Platform, inputs: &StartEnv) -> Vec<String> {
    if !inputs.gpu {
        return Vec::new();
    }
    let caps = driver_libs::capabilities(inputs.capabilities.as_deref());
    let Some(dir) = snap.ensure_dir(&plat.injected_dir) else {
        return Vec::new();
    };
    let driver = inputs
        .driver_version
        .as_deref()
        .unwrap_or(driver_libs::UNKNOWN_DRIVER);
    let mut out = Vec::new();
    for (k, lib) in driver_libs::injected(&caps).into_iter().enumerate() {
        let meta = FileMeta {
            id: (u64::MAX, k as u64),
            ..FileMeta::default()
        };
        let i = snap.set_child(dir, &lib.file_name(driver), Kind::File, meta);
        snap.set_virtual_info(i, injected_info(plat, lib.soname(driver)));
        out.push(lib.soname(driver));
    }
    if driver_libs::library_sets(&caps).contains(&Capability::Compute) {
        snap.set_child(
            dir,
            "libcuda.so",
            Kind::Symlink("libcuda.so.1".into()),
            FileMeta::default(),
        );
    }
    out
}

/// Every ELF object that may be judged, once per file, in path order.
fn candidates(snap: &Snapshot) -> Vec<Idx> {
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut out: Vec<(String, Idx)> = Vec::new();
    for i in 0..snap.len() as Idx {
        let n = snap.node(i);
        if n.kind != Kind::File || snap.virtual_info(i).is_some() {
            continue;
        }
        let parent = &*snap.node(n.parent).name;
        if !(n.name.contains(".so") || parent == "bin" || parent == "sbin") {
            continue;
        }
        if n.meta.id != (0, 0) && !seen.insert(n.meta.id) {
            continue;
        }
        out.push((snap.path_of(i), i));
    }
    out.sort();
    out.into_iter().map(|(_, i)| i).collect()
}

/// The interpreter that imports an extension in a Python package
/// directory: `<prefix>/bin/python3.X`, else `<prefix>/bin/python3`.
fn python_main(snap: &Snapshot, path: &str) -> Option<String> {
    let comps: Vec<&str> = components(path).collect();
    let at = comps
        .iter()
        .position(|c| *c == "site-packages" || *c == "dist-packages")?;
    if at < 2 || !comps[at - 1].starts_with("python3") || comps[at - 2] != "lib" {
        return None;
    }
    let prefix: String = comps[..at - 2].iter().map(|c| format!("/{c}")).collect();
    let py = comps[at - 1];
    [
        format!("{prefix}/bin/{py}"),
        format!("{prefix}/bin/python3"),
    ]
    .into_iter()
    .find(|p| {
        snap.lookup(p, true)
            .is_ok_and(|i| snap.node(i).kind == Kind::File)
    })
}

pub(super) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The version of TensorFlow in the site-packages an object lies in, from
/// its `tensorflow*-X.Y.Z.dist-info` directory name.
fn tensorflow_version(snap: &Snapshot, path: &str) -> Option<(u64, u64)> {
    let site = path
        .find("-packages/")
        .map(|i| &path[..i + "-packages".len()])?;
    let dir = snap.lookup_dir(site).ok()?;
    snap.node(dir).children.iter().find_map(|&c| {
        let name = &*snap.node(c).name;
        let rest = name.strip_suffix(".dist-info")?;
        let (pkg, ver) = rest.split_once('-')?;
        if !(pkg == "tensorflow" || pkg.starts_with("tensorflow_")) {
            return None;
        }
        let mut it = ver.split('.');
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    })
}

/// The names `rule` has object `obj` (at `path`) open, each with whether
/// its failures are optional.
fn opened(snap: &Snapshot, rule: &Rule, path: &str) -> Vec<(String, bool)> {
    let dir = path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    let names: Vec<String> = match rule.opens {
        Opens::Names(n) => n.iter().map(|s| s.to_string()).collect(),
        Opens::SameDir(n) => n.iter().map(|s| format!("{dir}/{s}")).collect(),
        Opens::TensorFlow => tensorflow_version(snap, path)
            .and_then(|(a, b)| dlopen_libs::tensorflow_libs(a, b))
            .unwrap_or_default(),
        Opens::JaxPlugin => dlopen_libs::jax_plugin_libs(file_name(dir)).unwrap_or_default(),
    };
    names
        .into_iter()
        .map(|n| {
            let opt = rule.optional.contains(&file_name(&n));
            (n, opt)
        })
        .collect()
}

/// The container's loader environment, prepared once.
struct Prepared {
    plat: Platform,
    cache: LdCache,
    injected: Vec<String>,
    caps: BTreeSet<Capability>,
}

fn prepare(
    snap: &mut Snapshot,
    content: &dyn Content,
    inputs: &StartEnv,
    budget: &Budget,
    scan: &mut LibraryScan,
) -> Prepared {
    let machine = machine_of(snap, inputs);
    let plat = Platform::detect(snap, machine, cpu_hwcaps(machine));
    let injected = inject(snap, &plat, inputs);
    // NVIDIA's stack reruns ldconfig only in GPU containers; any other
    // keeps the cache its image shipped, which is never read (a hostile
    // image controls it): it is modelled as absent.
    let cache = if inputs.gpu {
        let c = conf::read(snap, content, budget);
        // The cache is built from fewer directories than ldconfig's: what
        // is missing from it may be found there at start.
        for p in &c.problems {
            not_judged(scan, p.clone());
        }
        scan.not_judged_total += c.problems_total - c.problems.len() as u64;
        if let Some(first) = c.problems.first() {
            scan.incomplete = Some(format!("ld.so.conf was not read whole ({first})"));
        }
        // nvc_ldcache.c: the injected directory on ldconfig's command line
        // comes first, then ld.so.conf, then the system directories.
        let mut dirs = vec![plat.injected_dir.clone()];
        dirs.extend(c.dirs);
        dirs.extend(plat.ldconfig_system_dirs.iter().cloned());
        ldconfig::run(snap, content, &plat, &dirs, budget)
    } else {
        LdCache::default()
    };
    Prepared {
        plat,
        cache,
        injected,
        // The library sets the capabilities bring (video brings compute's,
        // display graphics'): a library of a set not brought is missing for
        // want of the capability that brings it.
        caps: driver_libs::library_sets(&driver_libs::capabilities(inputs.capabilities.as_deref())),
    }
}

/// Resolves every judged object of the tree, within `budget`.
pub fn resolve(
    mut snap: Snapshot,
    content: &dyn Content,
    inputs: &StartEnv,
    trees: bool,
    budget: &Budget,
) -> Resolved {
    let mut out = Resolved::default();
    let prep = prepare(&mut snap, content, inputs, budget, &mut out.scan);
    let cwd = if inputs.cwd.starts_with('/') {
        inputs.cwd.clone()
    } else {
        "/".to_string()
    };
    let env = Env {
        snap: &snap,
        content,
        plat: &prep.plat,
        cache: &prep.cache,
        ld_library_path: inputs.ld_library_path.as_deref(),
        cwd: &cwd,
        budget,
    };
    out.injected = prep.injected.clone();
    out.cache_entries = prep.cache.len();
    let roots = gpu_roots(&snap, content, &prep.plat, &mut out.scan, budget);
    let by_name = library_names(&snap);
    let mut judge = Judging {
        covered: HashSet::new(),
        seen: HashSet::new(),
    };
    for k in judging_order(&snap, &roots) {
        let root = roots[k].0;
        if judge.covered.contains(&identity(&snap, root)) {
            continue;
        }
        if !budget.ok() {
            let why = budget.stopped().unwrap_or_default();
            let path = snap.path_of(root);
            not_judged(
                &mut out.scan,
                format!("{}: {why}", path.trim_start_matches('/')),
            );
            continue;
        }
        let s = run_root(&env, &snap, root);
        judge.cover(&s, &snap);
        let ctx = (&by_name, inputs, &prep.caps);
        collect_missing(&s, &snap, ctx, &mut judge.seen, &mut out.scan);
        if trees {
            out.trees.push(super::tree::tree_of(&s, &snap));
        }
        out.scan.judged += 1;
    }
    out.scan.cuda_runtimes = cudart::find(&snap, content);
    out
}

/// What the programs judged so far have done.
struct Judging {
    /// Files some judged program loaded through `DT_NEEDED` (not as its
    /// root): judged there.
    covered: HashSet<(u64, u64)>,
    /// (missing name, needed by) reported.
    seen: HashSet<(String, String)>,
}

impl Judging {
    fn cover(&mut self, s: &Session, snap: &Snapshot) {
        for e in &s.edges[s.edges_before_root..] {
            if let (RequestKind::Needed, Outcome::Found(n)) = (e.via, &e.outcome) {
                if Some(*n) != s.root {
                    if let Some(node) = s.objs[*n].node {
                        self.covered.insert(identity(snap, node));
                    }
                }
            }
        }
    }
}

/// The order the roots are judged in: the roots no other root names in
/// its `DT_NEEDED` (by file name or SONAME) first, in path order; each
/// root after the roots that name it (Kahn's topological order, the
/// smallest path first); in a cycle, the smallest path first. A root
/// judged early loads those it names, which then need no program of
/// their own.
fn judging_order(snap: &Snapshot, roots: &[(Idx, Arc<DynInfo>)]) -> Vec<usize> {
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (k, (i, info)) in roots.iter().enumerate() {
        by_name.entry(&snap.node(*i).name).or_default().push(k);
        if let Some(so) = info.soname.as_deref() {
            if so != &*snap.node(*i).name {
                by_name.entry(so).or_default().push(k);
            }
        }
    }
    let mut named: Vec<Vec<usize>> = vec![Vec::new(); roots.len()];
    let mut indegree = vec![0usize; roots.len()];
    for (k, (_, info)) in roots.iter().enumerate() {
        let mut seen = HashSet::new();
        for n in &info.needed {
            let file = n.rsplit('/').next().unwrap_or(n);
            for &t in by_name.get(file).map(Vec::as_slice).unwrap_or_default() {
                if t != k && seen.insert(t) {
                    named[k].push(t);
                    indegree[t] += 1;
                }
            }
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> = (0..roots.len())
        .filter(|&k| indegree[k] == 0)
        .map(Reverse)
        .collect();
    let mut done = vec![false; roots.len()];
    let mut order = Vec::with_capacity(roots.len());
    let mut next_unplaced = 0;
    while order.len() < roots.len() {
        let k = match ready.pop() {
            Some(Reverse(k)) if !done[k] => k,
            Some(_) => continue,
            None => {
                // A cycle: its smallest path goes first.
                while done[next_unplaced] {
                    next_unplaced += 1;
                }
                next_unplaced
            }
        };
        done[k] = true;
        order.push(k);
        for &t in &named[k] {
            indegree[t] = indegree[t].saturating_sub(1);
            if indegree[t] == 0 && !done[t] {
                ready.push(Reverse(t));
            }
        }
    }
    order
}

/// The image's library files (and symlinks to files) by name, the first
/// in node order: where a missing library may be found instead.
fn library_names(snap: &Snapshot) -> HashMap<&str, Idx> {
    let mut out = HashMap::new();
    for i in 0..snap.len() as Idx {
        let n = snap.node(i);
        if !n.name.contains(".so") || snap.virtual_info(i).is_some() || out.contains_key(&*n.name) {
            continue;
        }
        let is_file = match n.kind {
            Kind::File => true,
            Kind::Symlink(_) => snap
                .lookup(&snap.path_of(i), true)
                .is_ok_and(|t| snap.node(t).kind == Kind::File),
            _ => false,
        };
        if is_file {
            out.insert(&*n.name, i);
        }
    }
    out
}

fn identity(snap: &Snapshot, i: Idx) -> (u64, u64) {
    let id = snap.node(i).meta.id;
    if id == (0, 0) {
        (0, i as u64 + 1)
    } else {
        id
    }
}

/// The objects to judge: loadable programs and libraries that are GPU
/// libraries, need one, or open them (the dlopen table).
fn gpu_roots(
    snap: &Snapshot,
    content: &dyn Content,
    plat: &Platform,
    scan: &mut LibraryScan,
    budget: &Budget,
) -> Vec<(Idx, Arc<DynInfo>)> {
    let mut roots = Vec::new();
    for i in candidates(snap) {
        let name = &*snap.node(i).name;
        if !budget.spend(1) {
            let why = budget.stopped().unwrap_or_default();
            let path = snap.path_of(i);
            not_judged(scan, format!("{}: {why}", path.trim_start_matches('/')));
            continue;
        }
        let info = match info_of(snap, content, i) {
            Ok(info) => info,
            Err(e) => {
                if is_gpu_name(name) || e.contains("budget") {
                    not_judged(
                        scan,
                        format!("{}: {e}", snap.path_of(i).trim_start_matches('/')),
                    );
                }
                continue;
            }
        };
        if !info.elf || info.fit(plat.class, plat.machine, true) != Fit::Usable {
            continue;
        }
        let gpu = is_gpu_name(name)
            || info.soname.as_deref().is_some_and(is_gpu_name)
            || info.needed.iter().any(|n| is_gpu_name(n))
            || RULES
                .iter()
                .any(|r| r.applies(name, info.soname.as_deref()));
        if gpu {
            roots.push((i, info));
        }
    }
    roots
}

pub(super) fn not_judged(scan: &mut LibraryScan, what: String) {
    scan.not_judged_total += 1;
    if scan.not_judged.len() < MAX_NOT_JUDGED {
        scan.not_judged.push(what);
    }
    if scan.incomplete.is_none() {
        scan.incomplete = Some("some files could not be read or judged".into());
    }
}

/// Loads one root as its program would, then the well-known dlopen calls.
fn run_root<'a>(env: &'a Env<'a>, snap: &Snapshot, root: Idx) -> Session<'a> {
    let path = snap.path_of(root);
    let main = python_main(snap, &path).filter(|m| *m != path);
    let mut s = Session::run(env, &path, main.as_deref());
    if s.root.is_none() && main.is_some() {
        s = Session::run(env, &path, None);
    }
    let Some(start) = s.root else { return s };
    let mut k = start;
    let mut asked: HashSet<(usize, String)> = HashSet::new();
    while k < s.objs.len() && s.fatal.is_none() && s.stopped.is_none() {
        let o = &s.objs[k];
        if o.faked || o.preloaded || o.injected {
            k += 1;
            continue;
        }
        let real = o.realname.clone();
        let soname = o.info.as_ref().and_then(|i| i.soname.clone());
        for rule in RULES
            .iter()
            .filter(|r| r.applies(file_name(&real), soname.as_deref()))
        {
            for (name, _) in opened(snap, rule, &real) {
                if asked.insert((k, name.clone())) {
                    s.dlopen(k, &name);
                }
            }
        }
        k += 1;
    }
    s
}

/// What `LD_TRACE_LOADED_OBJECTS=1 ld.so ROOT` would print for one object
/// run as the program: each object in load order with the name it was
/// first asked for and its path (None: not found), the loader and vDSO
/// left out; and the error that stops the program, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub loaded: Vec<(String, Option<String>)>,
    pub fatal: Option<String>,
}

/// Runs the model for one root as `ld.so ROOT` runs it, in a container
/// started with `inputs` (the differential test's side of the comparison).
pub fn trace(mut snap: Snapshot, content: &dyn Content, inputs: &StartEnv, root: &str) -> Trace {
    let budget = Budget::generous();
    let mut scan = LibraryScan::default();
    let prep = prepare(&mut snap, content, inputs, &budget, &mut scan);
    let env = Env {
        snap: &snap,
        content,
        plat: &prep.plat,
        cache: &prep.cache,
        ld_library_path: inputs.ld_library_path.as_deref(),
        cwd: &inputs.cwd,
        budget: &budget,
    };
    let s = Session::run(&env, root, None);
    let loaded = s
        .objs
        .iter()
        .enumerate()
        .filter(|(k, o)| !o.preloaded && Some(*k) != s.root)
        .map(|(_, o)| {
            let path = (!o.faked).then(|| o.realname.clone());
            (o.names[0].clone(), path)
        })
        .collect();
    Trace {
        loaded,
        fatal: s.fatal.clone(),
    }
}
