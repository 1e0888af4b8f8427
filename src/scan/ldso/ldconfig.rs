//! The loader cache the container starts with: what `ldconfig` builds
//! when NVIDIA's stack reruns it inside the GPU container
//! (libnvidia-container `src/nvc_ldcache.c`: `ldconfig -f /etc/ld.so.conf
//! -C /etc/ld.so.cache <libs_dir> <libs32_dir>` chrooted into the rootfs;
//! the toolkit's `internal/ldconfig` the same with the directories as
//! ld.so.conf.d drop-ins), including the SONAME links it creates. A cache
//! the image shipped is never read: it is rebuilt before the program runs.
//!
//! From glibc's elf/ldconfig.c:
//! - directories (`add_dir_1`, `add_single_dir`): the command line's,
//!   then ld.so.conf's, then the system directories; one that cannot be
//!   stat'ed is dropped; the same directory twice (by device and inode, so
//!   `/lib` and `/usr/lib` on a merged-/usr image) is scanned once, at its
//!   first place and under its first spelling; a `glibc-hwcaps/<name>`
//!   subdirectory of each is scanned as that hwcaps level
//!   (`add_glibc_hwcaps_subdirectories`);
//! - each directory (`search_dir`): entries whose name looks like a
//!   library (`_dl_is_dso`: `lib*.so*`, `ld-*.so*`, `ld.so.*`,
//!   `ld64.so.*`), not a package manager's temporary file
//!   (`skip_dso_based_on_name`), regular files and symlinks to regular
//!   files that are ELF shared objects with a dynamic string table
//!   (elf/readelflib.c); the SONAME is the file's `DT_SONAME`, else its
//!   name; a symlink named like its SONAME, or a `.so` link whose name
//!   starts its SONAME, is a link, any other symlink counts as a file; of
//!   several with one SONAME a file beats a link, else the greater name in
//!   `_dl_cache_libcmp` order;
//! - links (`create_links`): outside glibc-hwcaps directories, for the
//!   chosen file `dir/SONAME` is made a symlink to it, unless it already
//!   is that file or is something other than a symlink;
//! - the cache (elf/cache.c `add_to_cache`, `compare`): `dir/SONAME` (the
//!   file's own name in glibc-hwcaps directories) per SONAME, earlier
//!   directories first; the loader (elf/dl-cache.c `search_cache`) takes
//!   the usable glibc-hwcaps entry of highest priority, else the first
//!   other entry whose flags are its own (64-bit x86-64 or aarch64; the
//!   32-bit entries of the same cache are skipped).

use super::budget::Budget;
use super::content::{info_of, Content};
use super::platform::Platform;
use super::snapshot::{join, FileMeta, Idx, Kind, Snapshot};
use crate::scan::elf_dynamic::{ELFCLASS32, ELFCLASS64, EM_386, EM_X86_64};
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

/// Most directories ldconfig is given (ld.so.conf can list any number).
const MAX_DIRS: usize = 4096;

/// One directory ldconfig scans.
#[derive(Clone, Debug)]
struct DirEntry {
    /// As written (trailing white space and slashes removed): the cache
    /// records paths under this spelling.
    path: String,
    idx: Idx,
    hwcaps: Option<String>,
}

/// One cache entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    pub path: String,
    pub hwcaps: Option<String>,
    /// The entry's flags are the loader's (right class and machine).
    pub usable: bool,
}

/// The rebuilt cache, and what ldconfig did to the tree.
#[derive(Debug, Default)]
pub struct LdCache {
    by_name: HashMap<String, Vec<CacheEntry>>,
    /// The directories scanned, in order.
    pub dirs: Vec<String>,
    /// `dir/SONAME -> file` links created.
    pub links: Vec<(String, String)>,
}

impl LdCache {
    /// The path the loader gets for `name` (elf/dl-cache.c `search_cache`).
    pub fn lookup(&self, name: &str, plat: &Platform) -> Option<&str> {
        let entries = self.by_name.get(name)?;
        let best = entries
            .iter()
            .filter(|e| e.usable)
            .filter_map(|e| {
                let h = e.hwcaps.as_deref()?;
                plat.hwcaps_priority(h).map(|p| (p, e))
            })
            .min_by_key(|(p, _)| *p);
        if let Some((_, e)) = best {
            return Some(&e.path);
        }
        entries
            .iter()
            .find(|e| e.usable && e.hwcaps.is_none())
            .map(|e| e.path.as_str())
    }

    pub fn len(&self) -> usize {
        self.by_name.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// elf/dl-is_dso.h `_dl_is_dso`.
pub fn is_dso(name: &str) -> bool {
    ((name.starts_with("lib") || name.starts_with("ld-")) && name.contains(".so"))
        || name.starts_with("ld.so.")
        || name.starts_with("ld64.so.")
}

/// elf/ldconfig.c `skip_dso_based_on_name`: prelink, RPM and dpkg
/// temporary files.
fn skip_by_name(name: &str) -> bool {
    if name.ends_with(".#prelink#") {
        return true;
    }
    if let Some(at) = name.len().checked_sub(".#prelink#.XXXXXX".len()) {
        if name.get(at..at + ".#prelink#.".len()) == Some(".#prelink#.") {
            return true;
        }
    }
    name.contains(';') || name.ends_with(".dpkg-new") || name.ends_with(".dpkg-tmp")
}

/// elf/dl-cache.c `_dl_cache_libcmp`: digit runs compare as numbers.
pub fn libcmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() {
        if a[i].is_ascii_digit() {
            if j < b.len() && b[j].is_ascii_digit() {
                let (mut v1, mut v2) = (0u128, 0u128);
                while i < a.len() && a[i].is_ascii_digit() {
                    v1 = v1.saturating_mul(10).saturating_add((a[i] - b'0') as u128);
                    i += 1;
                }
                while j < b.len() && b[j].is_ascii_digit() {
                    v2 = v2.saturating_mul(10).saturating_add((b[j] - b'0') as u128);
                    j += 1;
                }
                if v1 != v2 {
                    return v1.cmp(&v2);
                }
                continue;
            }
            return Ordering::Greater;
        }
        let cb = b.get(j).copied().unwrap_or(0);
        if cb.is_ascii_digit() {
            return Ordering::Less;
        }
        if a[i] != cb {
            return a[i].cmp(&cb);
        }
        i += 1;
        j += 1;
    }
    0u8.cmp(&b.get(j).copied().unwrap_or(0))
}

/// Two nodes are one file (hard links have one identity).
fn same_file(snap: &Snapshot, a: Idx, b: Idx) -> bool {
    let (ia, ib) = (snap.node(a).meta.id, snap.node(b).meta.id);
    a == b || (ia != (0, 0) && ia == ib)
}

/// The directory list, deduplicated as `add_single_dir` does.
fn directories(snap: &Snapshot, lines: &[String], budget: &Budget) -> Vec<DirEntry> {
    let mut out: Vec<DirEntry> = Vec::new();
    let mut listed: HashSet<Idx> = HashSet::new();
    for line in lines {
        if out.len() >= MAX_DIRS || !budget.spend(1) {
            break;
        }
        let path = line
            .trim_end_matches(|c: char| c.is_ascii_whitespace())
            .trim_end_matches('/');
        if path.is_empty() {
            continue;
        }
        let Ok(idx) = snap.lookup_dir(path) else {
            continue;
        };
        if !listed.insert(idx) {
            continue;
        }
        out.push(DirEntry {
            path: path.to_string(),
            idx,
            hwcaps: None,
        });
        let sub = format!("{path}/glibc-hwcaps");
        let Ok(h) = snap.lookup_dir(&sub) else {
            continue;
        };
        for &c in &snap.node(h).children {
            let n = snap.node(c);
            if n.name.starts_with('.') || n.kind == Kind::File || n.name.contains(':') {
                continue;
            }
            let p = format!("{sub}/{}", n.name);
            if let Ok(d) = snap.lookup_dir(&p) {
                if listed.insert(d) {
                    out.push(DirEntry {
                        path: p,
                        idx: d,
                        hwcaps: Some(n.name.to_string()),
                    });
                }
            }
        }
    }
    out
}

/// One library of a directory, as `search_dir` keeps it.
struct DLib {
    name: String,
    soname: String,
    is_link: bool,
    usable: bool,
}

/// Runs the model of ldconfig over `dirs` (command line, ld.so.conf and
/// system directories, in that order), each directory entry a step of
/// `budget` (past it the cache lacks the rest, and the budget says why):
/// returns the cache and adds the links it creates to `snap`.
pub fn run(
    snap: &mut Snapshot,
    content: &dyn Content,
    plat: &Platform,
    dirs: &[String],
    budget: &Budget,
) -> LdCache {
    let entries = directories(snap, dirs, budget);
    let mut cache = LdCache::default();
    for d in &entries {
        if !budget.ok() {
            break;
        }
        cache.dirs.push(d.path.clone());
        let libs = scan_dir(snap, content, plat, d, budget);
        for lib in libs {
            let filename = if d.hwcaps.is_none() {
                if !lib.is_link {
                    if let Some(link) = create_link(snap, d, &lib.name, &lib.soname) {
                        cache.links.push(link);
                    }
                }
                lib.soname.clone()
            } else {
                lib.name.clone()
            };
            cache
                .by_name
                .entry(lib.soname)
                .or_default()
                .push(CacheEntry {
                    path: format!("{}/{filename}", d.path),
                    hwcaps: d.hwcaps.clone(),
                    usable: lib.usable,
                });
        }
    }
    cache
}

/// The libraries of one directory (`search_dir`'s list).
fn scan_dir(
    snap: &Snapshot,
    content: &dyn Content,
    plat: &Platform,
    d: &DirEntry,
    budget: &Budget,
) -> Vec<DLib> {
    let mut libs: Vec<DLib> = Vec::new();
    let mut by_soname: HashMap<String, usize> = HashMap::new();
    for &c in &snap.node(d.idx).children {
        if !budget.spend(1) {
            break;
        }
        let n = snap.node(c);
        let is_reg = n.kind == Kind::File;
        let is_symlink = matches!(n.kind, Kind::Symlink(_));
        if !is_reg && !is_symlink {
            continue;
        }
        let name = &*n.name;
        if (!is_dso(name) && (is_reg || d.hwcaps.is_none())) || skip_by_name(name) {
            continue;
        }
        let target = if is_symlink {
            match snap.lookup(&join(&d.path, name), true) {
                Ok(t) if snap.node(t).kind == Kind::File => t,
                _ => continue, // stale, or not a file: process_file fails
            }
        } else {
            c
        };
        let Ok(info) = info_of(snap, content, target) else {
            continue;
        };
        let x86 = plat.machine == EM_X86_64;
        let own = info.elf && info.class() == ELFCLASS64 && info.machine == plat.machine;
        let i386 = x86 && info.elf && info.class() == ELFCLASS32 && info.machine == EM_386;
        if !(own || i386) || info.e_type != crate::scan::elf_dynamic::ET_DYN {
            continue;
        }
        if !info.has_dynamic || !info.has_strtab {
            continue;
        }
        let mut soname = info.soname.clone().unwrap_or_else(|| name.to_string());
        let mut is_link = is_symlink;
        if is_link && name != soname {
            let dev_link = name.ends_with(".so") && soname.starts_with(name);
            if !dev_link {
                is_link = false;
            }
        }
        if is_link {
            soname = name.to_string();
        }
        match by_soname.get(&soname) {
            Some(&k) => {
                let old = &mut libs[k];
                let newer = (!is_link && old.is_link)
                    || (is_link == old.is_link && libcmp(&old.name, name) == Ordering::Less);
                if newer {
                    old.name = name.to_string();
                    old.is_link = is_link;
                    old.usable = own;
                }
            }
            None => {
                by_soname.insert(soname.clone(), libs.len());
                libs.push(DLib {
                    name: name.to_string(),
                    soname,
                    is_link,
                    usable: own,
                });
            }
        }
    }
    libs
}

/// `create_links`: makes `dir/soname` a symlink to `libname` unless it
/// already is that file or is not a symlink. Returns the link made.
fn create_link(
    snap: &mut Snapshot,
    d: &DirEntry,
    libname: &str,
    soname: &str,
) -> Option<(String, String)> {
    if libname == soname {
        return None;
    }
    let full_so = join(&d.path, soname);
    let full_lib = join(&d.path, libname);
    let so_is_symlink = snap
        .lookup(&full_so, false)
        .is_ok_and(|i| matches!(snap.node(i).kind, Kind::Symlink(_)));
    if let Ok(so) = snap.lookup(&full_so, true) {
        let lib = snap.lookup(&full_lib, true).ok()?;
        if same_file(snap, so, lib) || !so_is_symlink {
            return None;
        }
    }
    // The directory's entry itself (not a path through symlinks): the
    // link is created in the directory ldconfig scanned.
    snap.set_child(
        d.idx,
        soname,
        Kind::Symlink(libname.into()),
        FileMeta::default(),
    );
    Some((full_so, libname.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::elf_dynamic::DynInfo;
    use crate::scan::ldso::budget::Budget;
    use crate::scan::ldso::content::tests::TextContent;
    use crate::scan::ldso::platform::Platform;
    use crate::scan::ldso::snapshot::tests::tree;
    use std::sync::Arc;

    fn so(soname: Option<&str>) -> Arc<DynInfo> {
        Arc::new(DynInfo {
            elf: true,
            head_len: 64,
            ident: vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            e_type: 3,
            machine: EM_X86_64,
            e_version: 1,
            phentsize: 56,
            has_load: true,
            has_dynamic: true,
            has_strtab: true,
            soname: soname.map(String::from),
            ..DynInfo::default()
        })
    }

    #[test]
    fn libcmp_is_numeric() {
        assert_eq!(libcmp("libfoo.so.1.10", "libfoo.so.1.9"), Ordering::Greater);
        assert_eq!(libcmp("libfoo.so.1", "libfoo.so.1"), Ordering::Equal);
        assert_eq!(libcmp("libfoo.so.1", "libfoo.so.1.0"), Ordering::Less);
        assert_eq!(libcmp("libfoo.so.580.65", "libfoo.so.1"), Ordering::Greater);
        assert_eq!(libcmp("libfoo.so.x", "libfoo.so.1"), Ordering::Less);
    }

    #[test]
    fn links_cache_and_dedup() {
        let mut snap = tree(&[
            ("etc/debian_version", "f"),
            ("usr/lib/x86_64-linux-gnu/libfoo.so.1.2", "f"),
            ("usr/lib/x86_64-linux-gnu/libfoo.so.1.10", "f"),
            ("usr/lib/x86_64-linux-gnu/libfoo.so", "l:libfoo.so.1.10"),
            ("usr/lib/x86_64-linux-gnu/libbar.so.2", "f"),
            ("usr/lib/x86_64-linux-gnu/libreg.so.3.0", "f"),
            ("usr/lib/x86_64-linux-gnu/libreg.so.3", "f"),
            ("usr/lib/x86_64-linux-gnu/notalib.so", "f"),
            ("lib", "l:usr/lib"),
        ]);
        let d = "/usr/lib/x86_64-linux-gnu";
        let mut c = TextContent::default();
        c.infos
            .insert(format!("{d}/libfoo.so.1.2"), so(Some("libfoo.so.1")));
        c.infos
            .insert(format!("{d}/libfoo.so.1.10"), so(Some("libfoo.so.1")));
        c.infos.insert(format!("{d}/libbar.so.2"), so(None));
        c.infos
            .insert(format!("{d}/libreg.so.3.0"), so(Some("libreg.so.3")));
        c.infos
            .insert(format!("{d}/libreg.so.3"), so(Some("libreg.so.3")));
        c.infos
            .insert(format!("{d}/notalib.so"), so(Some("notalib.so")));
        let plat = Platform::detect(&snap, EM_X86_64, vec![]);
        let lines = vec![
            "/lib/x86_64-linux-gnu/".to_string(),
            d.to_string(),
            "/does/not/exist".into(),
        ];
        let cache = run(&mut snap, &c, &plat, &lines, &Budget::generous());
        // Scanned once, under its first spelling.
        assert_eq!(cache.dirs, ["/lib/x86_64-linux-gnu"]);
        assert_eq!(
            cache.lookup("libfoo.so.1", &plat),
            Some("/lib/x86_64-linux-gnu/libfoo.so.1")
        );
        // The newer file (numerically) got the link.
        let link = snap.lookup(&format!("{d}/libfoo.so.1"), false).unwrap();
        assert_eq!(snap.node(link).kind, Kind::Symlink("libfoo.so.1.10".into()));
        // A dev link is cached under its own name; no SONAME: the file name.
        assert!(cache.lookup("libfoo.so", &plat).is_some());
        assert!(cache.lookup("libbar.so.2", &plat).is_some());
        // A regular file named like the SONAME is left alone.
        let reg = snap.lookup(&format!("{d}/libreg.so.3"), false).unwrap();
        assert_eq!(snap.node(reg).kind, Kind::File);
        // Not a library name: not cached.
        assert_eq!(cache.lookup("notalib.so", &plat), None);
    }
}
