//! The dynamic loader's search, as glibc's ld.so makes it at start
//! (elf/dl-load.c `_dl_map_new_object`, `open_path`, `open_verify`,
//! `fillin_rpath`, `_dl_dst_substitute`; elf/dl-deps.c
//! `_dl_map_object_deps`; elf/dl-object.c for `$ORIGIN`):
//!
//! - dependencies are loaded breadth first: each object's `DT_NEEDED`
//!   entries in order, each new object appended to the list;
//! - a name already loaded is not searched again: it matches an object's
//!   path, a name it was loaded under, or its SONAME (`_dl_lookup_map`);
//!   a file reached under two names (same device and inode) is one object;
//! - a name with a `/` is opened as it is (relative to the working
//!   directory), its dynamic string tokens expanded;
//! - any other name is searched, in order: `DT_RPATH` of the object that
//!   needs it, then of the object that loaded that one, and on up, then of
//!   the program, all only when the needing object has no `DT_RUNPATH`;
//!   `LD_LIBRARY_PATH` (`:` or `;` separated; `$ORIGIN` is the program's);
//!   the needing object's own `DT_RUNPATH`; the loader cache (not for an
//!   object with `DF_1_NODEFLIB` when the entry is in a default
//!   directory); the default directories (not with `DF_1_NODEFLIB`);
//! - in each directory every active glibc-hwcaps subdirectory is tried,
//!   then the directory; a file of another ELF class or machine is passed
//!   over; `ENOENT`, `EACCES` and `ENOTDIR` go on to the next directory,
//!   another error (`ELOOP`) ends that search path; a file that is no
//!   usable ELF object (bad header, a directory, an executable) stops the
//!   program ("error while loading shared libraries");
//! - search path elements: empty means the working directory; `$ORIGIN`
//!   (the directory of the path the object was loaded from, symlinks not
//!   resolved), `$LIB` and `$PLATFORM`, also as `${...}`, are expanded; an
//!   element whose token cannot be expanded is dropped; trailing slashes
//!   are trimmed and one is added; repeated elements are kept once.
//! - `dlopen` ([`Session::dlopen`], elf/dl-open.c): searched as a
//!   dependency of the caller (`__RTLD_CALLMAP`), but the object loaded
//!   has no loader of its own.
//!
//! Only the search is modelled: symbol versions, TLS, relocations are not
//! (a library found but lacking a symbol fails later, differently).
//!
//! Cost: a name already loaded is found by a hash lookup (glibc walks its
//! list of loaded objects, `_dl_lookup_map`: fine for the hundred objects a
//! process loads, quadratic for a `DT_NEEDED` chain thousands deep), and
//! every lookup and object loaded is a step of the scan's [`Budget`]: past
//! it, or past [`MAX_OBJECTS`] objects or [`MAX_EDGES`] requests, what is
//! left is not judged.

use super::budget::Budget;
use super::content::{info_of, Content};
use super::dst;
use super::ldconfig::LdCache;
use super::platform::Platform;
use super::snapshot::{Idx, Kind, Snapshot};
use crate::scan::elf_dynamic::{DynInfo, Fit, DF_1_NODEFLIB};
use std::collections::HashMap;
use std::sync::Arc;

/// Objects one root may load before the rest is left unjudged.
pub const MAX_OBJECTS: usize = 4096;
/// Path search attempts one root may make.
const MAX_TRIES: u64 = 1 << 20;
/// Requests (`DT_NEEDED` entries and dlopen calls) one root may make: an
/// object may name the same library thousands of times.
pub const MAX_EDGES: usize = 1 << 16;

/// How a library was asked for: the Decision JSON's own type.
pub use crate::core::library_scan::RequestKind;

/// What became of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The object loaded for it (new or already there).
    Found(usize),
    /// No directory had it; `other_class`: a file of another class or
    /// machine was passed over ("wrong ELF class").
    NotFound { other_class: bool },
    /// The loader stops the program with this message.
    Fatal(String),
    /// Not judged: a file could not be read, or a budget ran out.
    Unjudged(String),
}

/// One loaded (or, not found, faked) object.
#[derive(Clone, Debug)]
pub struct Obj {
    /// The path ld.so opened it by (`l_name`).
    pub realname: String,
    pub node: Option<Idx>,
    pub info: Option<Arc<DynInfo>>,
    /// The names it was asked for, first first (`l_libname`).
    pub names: Vec<String>,
    pub loader: Option<usize>,
    pub origin: String,
    /// Not found (ld.so's trace mode "fakes" an entry).
    pub faked: bool,
    /// The loader itself or the vDSO.
    pub preloaded: bool,
    /// Put there by NVIDIA's runtime, not the image.
    pub injected: bool,
    rpath: Option<Vec<String>>,
    runpath: Option<Vec<String>>,
}

/// One request and its outcome.
#[derive(Clone, Debug)]
pub struct Edge {
    pub from: usize,
    pub name: String,
    pub via: RequestKind,
    pub outcome: Outcome,
}

/// What the loader is given besides the file tree.
pub struct Env<'a> {
    pub snap: &'a Snapshot,
    pub content: &'a dyn Content,
    pub plat: &'a Platform,
    pub cache: &'a LdCache,
    /// The container's `LD_LIBRARY_PATH`, if set.
    pub ld_library_path: Option<&'a str>,
    /// The container's working directory (absolute).
    pub cwd: &'a str,
    /// The scan's time and work.
    pub budget: &'a Budget,
}

/// One program's loading: the objects in load order and every request.
pub struct Session<'a> {
    env: &'a Env<'a>,
    pub objs: Vec<Obj>,
    pub edges: Vec<Edge>,
    main: usize,
    llp: Vec<String>,
    tries: u64,
    /// Set when the loader stops the program.
    pub fatal: Option<String>,
    /// Set when a bound stopped the model (the rest is not judged).
    pub stopped: Option<String>,
    /// The object judged (the program, or what the program opened).
    pub root: Option<usize>,
    /// Requests made before the root was opened (the program's own).
    pub edges_before_root: usize,
    /// The first object (in load order) each name matches: a path it was
    /// opened by, a name it was asked for, its SONAME (`_dl_lookup_map`).
    by_name: HashMap<String, usize>,
    /// The object loaded from each file (node, or identity when known).
    by_file: HashMap<(u64, u64), usize>,
}

/// A search ended without a file.
enum Miss {
    Continue { other_class: bool },
    Stop,
    Fatal(String),
    Unjudged(String),
}

impl<'a> Session<'a> {
    /// Loads `root` (an absolute path in the tree) as the program, with
    /// its dependencies. With `main`, that program is loaded first and
    /// `root` is opened by it (a Python interpreter importing an extension).
    pub fn run(env: &'a Env<'a>, root: &str, main: Option<&str>) -> Session<'a> {
        let mut s = Session {
            env,
            objs: Vec::new(),
            edges: Vec::new(),
            main: 0,
            llp: Vec::new(),
            tries: 0,
            fatal: None,
            stopped: None,
            root: None,
            edges_before_root: 0,
            by_name: HashMap::new(),
            by_file: HashMap::new(),
        };
        s.preload();
        let program = main.unwrap_or(root);
        let Some(m) = s.load_program(program) else {
            return s;
        };
        s.main = m;
        s.llp = s.decompose(m, env.ld_library_path.unwrap_or(""), ":;");
        s.load_deps(m);
        if main.is_none() {
            s.root = Some(m);
        } else if s.fatal.is_none() {
            s.edges_before_root = s.edges.len();
            if let Outcome::Found(r) = s.dlopen(m, root) {
                s.root = Some(r);
            }
        }
        s
    }

    /// The vDSO and the loader are in every process before anything else.
    fn preload(&mut self) {
        let p = self.env.plat;
        for (real, names) in [
            ("linux-vdso.so.1", vec!["linux-vdso.so.1".to_string()]),
            (p.loader_path, vec![p.loader_soname.to_string()]),
        ] {
            let k = self.objs.len();
            self.name_obj(real, k);
            for n in &names {
                self.name_obj(n, k);
            }
            self.objs.push(Obj {
                realname: real.to_string(),
                node: None,
                info: None,
                names,
                loader: None,
                origin: "/".into(),
                faked: false,
                preloaded: true,
                injected: false,
                rpath: Some(Vec::new()),
                runpath: Some(Vec::new()),
            });
        }
    }

    /// The program, loaded by path as `ld.so PROGRAM` would.
    fn load_program(&mut self, path: &str) -> Option<usize> {
        let idx = match self.env.snap.lookup(path, true) {
            Ok(i) if self.env.snap.node(i).kind == Kind::File => i,
            _ => {
                self.fatal = Some(format!("{path}: cannot open the program"));
                return None;
            }
        };
        let info = match info_of(self.env.snap, self.env.content, idx) {
            Ok(i) => i,
            Err(e) => {
                self.fatal = Some(format!("{path}: {e}"));
                return None;
            }
        };
        let p = self.env.plat;
        match info.fit(p.class, p.machine, true) {
            Fit::Usable => Some(self.new_obj(path.to_string(), path, idx, info, None)),
            Fit::Fatal(m) => {
                self.fatal = Some(format!("{path}: {m}"));
                None
            }
            Fit::Skip => {
                self.fatal = Some(format!("{path}: not a program for this loader"));
                None
            }
        }
    }

    fn new_obj(
        &mut self,
        realname: String,
        name: &str,
        idx: Idx,
        info: Arc<DynInfo>,
        loader: Option<usize>,
    ) -> usize {
        let injected = self.env.snap.virtual_info(idx).is_some();
        let k = self.objs.len();
        self.name_obj(&realname, k);
        self.name_obj(name, k);
        if let Some(so) = info.soname.as_deref() {
            self.name_obj(so, k);
        }
        self.by_file.insert(self.file_key(idx), k);
        self.objs.push(Obj {
            origin: dst::origin_of(&realname, self.env.cwd),
            realname,
            node: Some(idx),
            info: Some(info),
            names: vec![name.to_string()],
            loader,
            faked: false,
            preloaded: false,
            injected,
            rpath: None,
            runpath: None,
        });
        self.objs.len() - 1
    }

    /// Breadth first from `start`: each object's DT_NEEDED in order.
    fn load_deps(&mut self, start: usize) {
        let mut queue = vec![start];
        let mut at = 0;
        while let Some(&o) = queue.get(at) {
            at += 1;
            let needed = self.objs[o]
                .info
                .as_ref()
                .map(|i| i.needed.clone())
                .unwrap_or_default();
            for raw in needed {
                if self.fatal.is_some() || self.stopped.is_some() {
                    return;
                }
                let name = match self.expand_needed(o, &raw) {
                    Ok(n) => n,
                    Err(m) => {
                        self.stop(o, &raw, RequestKind::Needed, m);
                        return;
                    }
                };
                let before = self.objs.len();
                let outcome = self.map_object(Some(o), &name);
                self.edges.push(Edge {
                    from: o,
                    name: name.clone(),
                    via: RequestKind::Needed,
                    outcome: outcome.clone(),
                });
                if let Outcome::Fatal(m) = &outcome {
                    self.fatal = Some(m.clone());
                    return;
                }
                // A new object is appended once, as dl-deps.c appends it
                // to its list.
                if let Outcome::Found(n) = outcome {
                    if n >= before {
                        queue.push(n);
                    }
                }
            }
        }
    }

    fn stop(&mut self, from: usize, name: &str, via: RequestKind, m: String) {
        self.edges.push(Edge {
            from,
            name: name.to_string(),
            via,
            outcome: Outcome::Fatal(m.clone()),
        });
        self.fatal = Some(format!("{name}: {m}"));
    }

    /// dl-deps.c `expand_dst`: a DT_NEEDED with dynamic string tokens.
    fn expand_needed(&self, o: usize, raw: &str) -> Result<String, String> {
        if !raw.contains('$') {
            return Ok(raw.to_string());
        }
        match self.substitute(o, raw) {
            Some(s) if !s.is_empty() => Ok(s),
            _ => Err("empty dynamic string token substitution".into()),
        }
    }

    /// `dlopen(name)` called by object `caller`; the object it loads and
    /// its dependencies join the session.
    pub fn dlopen(&mut self, caller: usize, name: &str) -> Outcome {
        let before = self.objs.len();
        let outcome = self.map_object(Some(caller), name);
        let outcome = match outcome {
            Outcome::Found(n) if n >= before => {
                // __RTLD_CALLMAP: the caller gave the search paths only.
                self.objs[n].loader = None;
                self.load_deps(n);
                Outcome::Found(n)
            }
            o => o,
        };
        self.edges.push(Edge {
            from: caller,
            name: name.to_string(),
            via: RequestKind::Dlopen,
            outcome: outcome.clone(),
        });
        outcome
    }

    /// `_dl_map_object`: an object already loaded under this name, else a
    /// search, else a faked (not found) entry.
    fn map_object(&mut self, loader: Option<usize>, name: &str) -> Outcome {
        if self.edges.len() >= MAX_EDGES {
            let why = format!("more than {MAX_EDGES} requests");
            self.stopped = Some(why.clone());
            return Outcome::Unjudged(why);
        }
        if !self.env.budget.spend(1) {
            let why = self.env.budget.stopped().unwrap_or_default();
            self.stopped = Some(why.clone());
            return Outcome::Unjudged(why);
        }
        if let Some(o) = self.loaded(name) {
            return Outcome::Found(o);
        }
        if self.objs.len() >= MAX_OBJECTS || self.tries >= MAX_TRIES {
            return Outcome::Unjudged(format!(
                "more than {MAX_OBJECTS} objects or {MAX_TRIES} file lookups"
            ));
        }
        let found = if name.contains('/') {
            let real = match loader {
                Some(l) if name.contains('$') => self.substitute(l, name).unwrap_or_default(),
                _ => name.to_string(),
            };
            if real.is_empty() {
                Err(Miss::Continue { other_class: false })
            } else {
                self.open_verify(&real).map(|i| (i, real))
            }
        } else {
            self.search(loader, name)
        };
        match found {
            Ok((idx, real)) => self.attach(idx, real, name, loader),
            Err(Miss::Fatal(m)) => Outcome::Fatal(m),
            Err(Miss::Unjudged(m)) => Outcome::Unjudged(m),
            Err(Miss::Continue { other_class }) => self.fake(name, loader, other_class),
            Err(Miss::Stop) => self.fake(name, loader, false),
        }
    }

    fn fake(&mut self, name: &str, loader: Option<usize>, other_class: bool) -> Outcome {
        self.objs.push(Obj {
            realname: name.to_string(),
            node: None,
            info: None,
            names: vec![name.to_string()],
            loader,
            origin: String::new(),
            faked: true,
            preloaded: false,
            injected: false,
            rpath: Some(Vec::new()),
            runpath: Some(Vec::new()),
        });
        Outcome::NotFound { other_class }
    }

    /// The key of a file: its identity (device and inode: two names of
    /// one file are one object), else its node.
    fn file_key(&self, idx: Idx) -> (u64, u64) {
        let id = self.env.snap.node(idx).meta.id;
        if id == (0, 0) {
            (u64::MAX - 1, idx as u64)
        } else {
            id
        }
    }

    /// Records that `name` leads to object `k`, unless an object earlier
    /// in load order has it.
    fn name_obj(&mut self, name: &str, k: usize) {
        if !self.by_name.contains_key(name) {
            self.by_name.insert(name.to_string(), k);
        }
    }

    /// Adds `name` to the names object `o` was asked for.
    fn add_name(&mut self, o: usize, name: &str) {
        if !self.objs[o].names.iter().any(|n| n == name) {
            self.objs[o].names.push(name.to_string());
        }
        self.name_obj(name, o);
    }

    /// A file found: the object already loaded from it, or a new one.
    fn attach(&mut self, idx: Idx, real: String, name: &str, loader: Option<usize>) -> Outcome {
        if let Some(&o) = self.by_file.get(&self.file_key(idx)) {
            self.add_name(o, name);
            return Outcome::Found(o);
        }
        match info_of(self.env.snap, self.env.content, idx) {
            Ok(info) => Outcome::Found(self.new_obj(real, name, idx, info, loader)),
            Err(e) => Outcome::Unjudged(e),
        }
    }

    /// `_dl_lookup_map`: by path, by a name it was loaded under, by SONAME
    /// (the first object in load order that has it; faked entries never
    /// match and are never recorded).
    fn loaded(&mut self, name: &str) -> Option<usize> {
        let i = *self.by_name.get(name)?;
        self.add_name(i, name);
        Some(i)
    }

    /// The search of `_dl_map_new_object` for a name without `/`.
    fn search(&mut self, loader: Option<usize>, name: &str) -> Result<(Idx, String), Miss> {
        let mut other_class = false;
        let l = loader.unwrap_or(self.main);
        if !self.has_runpath(l) {
            let mut did_main = false;
            let mut chain = loader;
            while let Some(c) = chain {
                let dirs = self.rpath(c);
                if !dirs.is_empty() {
                    match self.open_path(name, &dirs) {
                        Ok(f) => return Ok(f),
                        Err(m) => absorb(m, &mut other_class)?,
                    }
                    did_main |= c == self.main;
                }
                chain = self.objs[c].loader;
            }
            if !did_main {
                let dirs = self.rpath(self.main);
                if !dirs.is_empty() {
                    match self.open_path(name, &dirs) {
                        Ok(f) => return Ok(f),
                        Err(m) => absorb(m, &mut other_class)?,
                    }
                }
            }
        }
        let llp = self.llp.clone();
        if !llp.is_empty() {
            match self.open_path(name, &llp) {
                Ok(f) => return Ok(f),
                Err(m) => absorb(m, &mut other_class)?,
            }
        }
        if loader.is_some() {
            let dirs = self.runpath(l);
            if !dirs.is_empty() {
                match self.open_path(name, &dirs) {
                    Ok(f) => return Ok(f),
                    Err(m) => absorb(m, &mut other_class)?,
                }
            }
        }
        self.search_defaults(l, name, other_class)
    }

    /// The loader cache, then the default directories.
    fn search_defaults(
        &mut self,
        l: usize,
        name: &str,
        mut other_class: bool,
    ) -> Result<(Idx, String), Miss> {
        let nodeflib = self.objs[l]
            .info
            .as_ref()
            .is_some_and(|i| i.flags_1 & DF_1_NODEFLIB != 0);
        let plat = self.env.plat;
        if let Some(cached) = self.env.cache.lookup(name, plat) {
            let in_system = plat
                .system_dirs
                .iter()
                .any(|d| cached.starts_with(d.as_str()));
            if !(nodeflib && in_system) {
                let cached = cached.to_string();
                match self.open_verify(&cached) {
                    Ok(i) => return Ok((i, cached)),
                    Err(m) => absorb(m, &mut other_class)?,
                }
            }
        }
        if !nodeflib {
            let dirs = plat.system_dirs.clone();
            match self.open_path(name, &dirs) {
                Ok(f) => return Ok(f),
                Err(m) => absorb(m, &mut other_class)?,
            }
        }
        Err(Miss::Continue { other_class })
    }

    /// `open_path`: each directory, each hwcaps subdirectory, in order.
    fn open_path(&mut self, name: &str, dirs: &[String]) -> Result<(Idx, String), Miss> {
        let caps = self.env.plat.capstrs();
        let mut other_class = false;
        for dir in dirs {
            let mut last_stop = false;
            for cap in &caps {
                let path = format!("{dir}{cap}{name}");
                match self.open_verify(&path) {
                    Ok(i) => return Ok((i, path)),
                    Err(Miss::Continue { other_class: o }) => {
                        other_class |= o;
                        last_stop = false;
                    }
                    Err(Miss::Stop) => last_stop = true,
                    Err(m) => return Err(m),
                }
            }
            if last_stop && self.dir_exists(dir) {
                return Err(Miss::Stop);
            }
        }
        Err(Miss::Continue { other_class })
    }

    fn absolute(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            super::snapshot::join(self.env.cwd, path)
        }
    }

    fn dir_exists(&self, dir: &str) -> bool {
        let d = if dir.is_empty() { "." } else { dir };
        self.env.snap.lookup_dir(&self.absolute(d)).is_ok()
    }

    /// `open_verify` of one candidate path.
    fn open_verify(&mut self, path: &str) -> Result<Idx, Miss> {
        self.tries += 1;
        if !self.env.budget.spend(1) {
            return Err(Miss::Unjudged(
                self.env.budget.stopped().unwrap_or_default(),
            ));
        }
        let snap = self.env.snap;
        let idx = match snap.lookup(&self.absolute(path), true) {
            Ok(i) => i,
            Err(e) if e.continues() => return Err(Miss::Continue { other_class: false }),
            Err(_) => return Err(Miss::Stop),
        };
        match snap.node(idx).kind {
            Kind::File => {}
            Kind::Dir => {
                return Err(Miss::Fatal(format!(
                    "{path}: cannot read file data: Is a directory"
                )))
            }
            _ => {
                return Err(Miss::Fatal(format!(
                    "{path}: not a regular file (the loader would block or fail reading it)"
                )))
            }
        }
        let info = match info_of(snap, self.env.content, idx) {
            Ok(i) => i,
            Err(e) => return Err(Miss::Unjudged(format!("{path}: {e}"))),
        };
        let p = self.env.plat;
        match info.fit(p.class, p.machine, false) {
            Fit::Usable => Ok(idx),
            Fit::Skip => Err(Miss::Continue { other_class: true }),
            Fit::Fatal(m) => Err(Miss::Fatal(format!("{path}: {m}"))),
        }
    }

    fn has_runpath(&self, o: usize) -> bool {
        self.objs[o]
            .info
            .as_ref()
            .is_some_and(|i| i.runpath.is_some())
    }

    fn decompose(&self, o: usize, list: &str, seps: &str) -> Vec<String> {
        dst::decompose(list, seps, &self.objs[o].origin, self.env.plat)
    }

    fn substitute(&self, o: usize, input: &str) -> Option<String> {
        dst::substitute(input, &self.objs[o].origin, self.env.plat)
    }

    fn rpath(&mut self, o: usize) -> Vec<String> {
        if let Some(d) = &self.objs[o].rpath {
            return d.clone();
        }
        let raw = self.objs[o].info.as_ref().and_then(|i| i.rpath.clone());
        let d = raw.map(|r| self.decompose(o, &r, ":")).unwrap_or_default();
        self.objs[o].rpath = Some(d.clone());
        d
    }

    fn runpath(&mut self, o: usize) -> Vec<String> {
        if let Some(d) = &self.objs[o].runpath {
            return d.clone();
        }
        let raw = self.objs[o].info.as_ref().and_then(|i| i.runpath.clone());
        let d = raw.map(|r| self.decompose(o, &r, ":")).unwrap_or_default();
        self.objs[o].runpath = Some(d.clone());
        d
    }
}

/// A search path that ended without a file: a hard error ends the whole
/// search, else it goes on (remembering a file of another class).
fn absorb(m: Miss, other_class: &mut bool) -> Result<(), Miss> {
    match m {
        Miss::Continue { other_class: o } => {
            *other_class |= o;
            Ok(())
        }
        Miss::Stop => Ok(()),
        m => Err(m),
    }
}
