//! The image's `/etc/ld.so.conf` as ldconfig reads it (elf/ldconfig.c
//! `parse_conf`, `parse_conf_include`, `add_dir_1`):
//! - `#` starts a comment anywhere on a line; leading white space is
//!   skipped; blank lines are ignored;
//! - `include PATTERN...`: each blank-separated word is a glob(3) pattern,
//!   relative to the directory of the file that includes it, expanded in
//!   byte order (ldconfig sets `LC_COLLATE=C`), each match read in turn;
//!   `*`, `?` and `[...]` do not match a leading `.` (no `GLOB_PERIOD`);
//! - `hwcap ...` lines are ignored (glibc 2.37 dropped them);
//! - any other line names one directory: trailing white space and slashes
//!   are removed.
//!
//! A file that does not exist is passed over, as ldconfig does. A file is
//! read once, however often it is included: ldconfig recurses into a file
//! that includes itself until it runs out of file descriptors, and a second
//! reading adds only directories already listed, so the directories and
//! their order are the same. Bounds ldconfig does not have: [`MAX_DEPTH`]
//! levels of includes, [`MAX_FILES`] files, [`MAX_CONF_BYTES`] read from
//! each, [`MAX_GLOB_PATHS`] paths from one pattern, and the scan's
//! [`Budget`] (every directory entry a pattern is matched against is a
//! step). Past one the reading stops, and [`Conf::problems`] says so: the
//! loader cache is then built from fewer directories than ldconfig's, so
//! the scan is incomplete.

use super::budget::Budget;
use super::content::Content;
use super::snapshot::{components, Idx, Kind, Snapshot};
use crate::scan::glob::match_name;
use std::collections::HashSet;

pub const LD_SO_CONF: &str = "/etc/ld.so.conf";
const MAX_DEPTH: usize = 64;
const MAX_FILES: usize = 512;
const MAX_CONF_BYTES: usize = 64 << 10;
const MAX_DIRS: usize = 4096;
/// Paths one `include` pattern may match, at any of its components.
const MAX_GLOB_PATHS: usize = 4096;
/// Problems named; the rest are counted.
const MAX_PROBLEMS: usize = 8;

/// The directories ld.so.conf names, in order, and what could not be read.
#[derive(Debug, Default)]
pub struct Conf {
    pub dirs: Vec<String>,
    /// What stopped or cut the reading (bounded; see `problems_total`).
    pub problems: Vec<String>,
    pub problems_total: u64,
    /// Files read, by node: each is read once.
    read: HashSet<Idx>,
    /// A bound was reached: nothing more is read.
    stopped: bool,
}

impl Conf {
    fn problem(&mut self, p: String) {
        self.problems_total += 1;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(p);
        }
    }
}

/// Reads `/etc/ld.so.conf` and everything it includes, within `budget`.
pub fn read(snap: &Snapshot, content: &dyn Content, budget: &Budget) -> Conf {
    let mut c = Conf::default();
    parse_file(snap, content, budget, LD_SO_CONF, 0, &mut c);
    c
}

fn parse_file(
    snap: &Snapshot,
    content: &dyn Content,
    budget: &Budget,
    file: &str,
    depth: usize,
    c: &mut Conf,
) {
    if c.stopped || !budget.spend(1) {
        return;
    }
    let Ok(i) = snap.lookup(file, true) else {
        return; // ENOENT: ldconfig passes over it in silence
    };
    if snap.node(i).kind != Kind::File || c.read.contains(&i) {
        return; // a directory reads as empty (getline fails); read already
    }
    if depth > MAX_DEPTH || c.read.len() >= MAX_FILES {
        c.problem(format!(
            "{file}: includes nested deeper than {MAX_DEPTH} levels or more than {MAX_FILES} files; the rest of ld.so.conf was not read"
        ));
        c.stopped = true;
        return;
    }
    c.read.insert(i);
    let bytes = match content.read_small(snap, i, MAX_CONF_BYTES) {
        Ok(b) => b,
        Err(e) => {
            c.problem(format!("{file}: {e}"));
            return;
        }
    };
    for raw in bytes.split(|&b| b == b'\n') {
        if c.stopped {
            return;
        }
        let raw = raw.split(|&b| b == 0).next().unwrap_or_default();
        let line = String::from_utf8_lossy(raw);
        let line = line.split('#').next().unwrap_or_default();
        let cp = line.trim_start_matches(is_c_space);
        if cp.is_empty() {
            continue;
        }
        if let Some(rest) = keyword(cp, "include", false) {
            for pattern in rest.split([' ', '\t']).filter(|w| !w.is_empty()) {
                include(snap, content, budget, file, pattern, depth, c);
            }
        } else if keyword(cp, "hwcap", true).is_some() {
            continue;
        } else if c.dirs.len() < MAX_DIRS {
            let d = cp.trim_end_matches(is_c_space).trim_end_matches('/');
            if !d.is_empty() {
                c.dirs.push(d.to_string());
            }
        } else {
            c.problem(format!(
                "{file}: more than {MAX_DIRS} directories; the rest were not read"
            ));
            c.stopped = true;
        }
    }
}

/// `isspace` in the C locale.
fn is_c_space(ch: char) -> bool {
    matches!(ch, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// The text after `word` when the line starts with it and a blank.
fn keyword<'a>(cp: &'a str, word: &str, any_case: bool) -> Option<&'a str> {
    let head = cp.get(..word.len())?;
    let same = if any_case {
        head.eq_ignore_ascii_case(word)
    } else {
        head == word
    };
    let rest = &cp[word.len()..];
    (same && rest.starts_with([' ', '\t'])).then(|| &rest[1..])
}

fn include(
    snap: &Snapshot,
    content: &dyn Content,
    budget: &Budget,
    from: &str,
    pattern: &str,
    depth: usize,
    c: &mut Conf,
) {
    let full = if !pattern.starts_with('/') && from.contains('/') {
        let dir = from.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        format!("{dir}/{pattern}")
    } else {
        pattern.to_string()
    };
    let (paths, cut) = glob_within(snap, &full, budget);
    if cut {
        c.problem(format!(
            "{from}: include {pattern} matches more than {MAX_GLOB_PATHS} paths; the rest of ld.so.conf was not read"
        ));
        c.stopped = true;
    }
    for path in paths {
        parse_file(snap, content, budget, &path, depth + 1, c);
    }
}

fn has_magic(c: &str) -> bool {
    c.contains(['*', '?', '['])
}

/// glob(3) over the tree: the paths that exist (a dangling symlink
/// included), sorted by bytes.
pub fn glob(snap: &Snapshot, pattern: &str) -> Vec<String> {
    glob_within(snap, pattern, &Budget::generous()).0
}

/// [`glob`] within `budget` (a step per directory entry matched) and
/// [`MAX_GLOB_PATHS`] paths at each component; true when it was cut
/// short (what it found so far is returned).
fn glob_within(snap: &Snapshot, pattern: &str, budget: &Budget) -> (Vec<String>, bool) {
    let comps: Vec<&str> = components(pattern).collect();
    let mut found: Vec<String> = vec![String::new()];
    let mut cut = false;
    'comps: for (k, comp) in comps.iter().enumerate() {
        let last = k + 1 == comps.len();
        let mut next = Vec::new();
        for base in &found {
            if !budget.spend(1) {
                cut = true;
                break 'comps;
            }
            if has_magic(comp) {
                let Some(dir) = dir_of(snap, base) else {
                    continue;
                };
                for &ch in &snap.node(dir).children {
                    if !budget.spend(1) || next.len() >= MAX_GLOB_PATHS {
                        cut = true;
                        break 'comps;
                    }
                    let name = &*snap.node(ch).name;
                    let dot_ok = !name.starts_with('.') || comp.starts_with('.');
                    if dot_ok && match_name(comp, name.as_bytes()) {
                        next.push(format!("{base}/{name}"));
                    }
                }
            } else {
                let p = format!("{base}/{comp}");
                if !last || snap.lookup(&p, false).is_ok() {
                    next.push(p);
                }
            }
        }
        found = next;
    }
    if cut {
        found.clear();
    }
    found.retain(|p| !p.is_empty() && snap.lookup(p, false).is_ok());
    found.sort();
    (found, cut)
}

fn dir_of(snap: &Snapshot, path: &str) -> Option<Idx> {
    let p = if path.is_empty() { "/" } else { path };
    snap.lookup_dir(p).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::ldso::budget::Budget;
    use crate::scan::ldso::content::tests::TextContent;
    use crate::scan::ldso::snapshot::tests::tree;

    #[test]
    fn reads_includes_comments_and_trailing_slashes() {
        let snap = tree(&[
            ("etc/ld.so.conf", "f"),
            ("etc/ld.so.conf.d/b.conf", "f"),
            ("etc/ld.so.conf.d/a.conf", "f"),
            ("etc/ld.so.conf.d/.hidden.conf", "f"),
            ("etc/ld.so.conf.d/z.txt", "f"),
            ("etc/ld.so.conf.d/loop.conf", "f"),
        ]);
        let content = TextContent::new(&[
            (
                "/etc/ld.so.conf",
                "# comment\n  /first/ \t\ninclude ld.so.conf.d/*.conf\nhwcap 1 x\n/last#c\n",
            ),
            ("/etc/ld.so.conf.d/a.conf", "/usr/local/cuda/lib64//\n\n"),
            (
                "/etc/ld.so.conf.d/b.conf",
                "include\t/etc/none/*.conf   /etc/x\n/b\n",
            ),
            ("/etc/ld.so.conf.d/.hidden.conf", "/hidden\n"),
            ("/etc/ld.so.conf.d/z.txt", "/z\n"),
            (
                "/etc/ld.so.conf.d/loop.conf",
                "include /etc/ld.so.conf.d/loop.conf\n",
            ),
        ]);
        let c = read(&snap, &content, &Budget::generous());
        assert_eq!(c.dirs, ["/first", "/usr/local/cuda/lib64", "/b", "/last"]);
        // The file that includes itself is read once, as ldconfig's
        // recursion would list its directories once.
        assert!(c.problems.is_empty(), "{:?}", c.problems);
    }

    #[test]
    fn self_includes_and_globs_through_links_to_the_root_stay_bounded() {
        // ld.so.conf includes itself thousands of times, and a glob that
        // matches it again through symlinks to `/`.
        let mut spec = vec![("etc/ld.so.conf", "f"), ("etc/x.conf", "f")];
        let links: Vec<String> = (0..16).map(|k| format!("l{k}")).collect();
        for l in &links {
            spec.push((l.as_str(), "l:/"));
        }
        let snap = tree(&spec);
        let selfinc = "include ld.so.conf\n/a\n".repeat(2900);
        let content = TextContent::new(&[
            ("/etc/ld.so.conf", selfinc.as_str()),
            ("/etc/x.conf", "include /*/*/*/*/*/*/*/*\n/b\n"),
        ]);
        let c = read(&snap, &content, &Budget::generous());
        assert_eq!(c.dirs.len(), 2900, "each line of the one file read once");
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let content = TextContent::new(&[
            ("/etc/ld.so.conf", "include /*/*/*/*/*/*/*/*\n/a\n"),
            ("/etc/x.conf", "/b\n"),
        ]);
        let c = read(&snap, &content, &Budget::generous());
        assert_eq!(c.problems_total, 1, "{:?}", c.problems);
        assert!(
            c.problems[0].contains("more than 4096 paths"),
            "{:?}",
            c.problems
        );
        // The time budget spent: nothing more is read, and it says so.
        let spent = Budget::with_steps(std::time::Instant::now(), 1, 3);
        let c = read(&snap, &content, &spent);
        assert!(spent.stopped().is_some());
        assert!(c.dirs.is_empty());
    }

    #[test]
    fn glob_sorts_and_hides_dot_files() {
        let snap = tree(&[
            ("d/b.conf", "f"),
            ("d/a.conf", "f"),
            ("d/.c.conf", "f"),
            ("d/dangling.conf", "l:/nowhere"),
            ("e", "l:d"),
        ]);
        assert_eq!(
            glob(&snap, "/e/*.conf"),
            ["/e/a.conf", "/e/b.conf", "/e/dangling.conf"]
        );
        assert_eq!(glob(&snap, "/d/.*.conf"), ["/d/.c.conf"]);
        assert!(glob(&snap, "/nope/*.conf").is_empty());
        assert_eq!(glob(&snap, "/d/a.conf"), ["/d/a.conf"]);
    }
}
