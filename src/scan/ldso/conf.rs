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
//! A file that does not exist is passed over, as ldconfig does. Bounds
//! ldconfig does not have (it recurses without end on a file including
//! itself): [`MAX_DEPTH`] levels of includes, [`MAX_FILES`] files,
//! [`MAX_CONF_BYTES`] read from each.

use super::content::Content;
use super::snapshot::{components, Idx, Kind, Snapshot};
use crate::scan::glob::match_name;

pub const LD_SO_CONF: &str = "/etc/ld.so.conf";
const MAX_DEPTH: usize = 8;
const MAX_FILES: usize = 512;
const MAX_CONF_BYTES: usize = 64 << 10;
const MAX_DIRS: usize = 4096;

/// The directories ld.so.conf names, in order, and what could not be read.
#[derive(Debug, Default)]
pub struct Conf {
    pub dirs: Vec<String>,
    pub problems: Vec<String>,
    files: usize,
}

/// Reads `/etc/ld.so.conf` and everything it includes.
pub fn read(snap: &Snapshot, content: &dyn Content) -> Conf {
    let mut c = Conf::default();
    parse_file(snap, content, LD_SO_CONF, 0, &mut c);
    c
}

fn parse_file(snap: &Snapshot, content: &dyn Content, file: &str, depth: usize, c: &mut Conf) {
    if depth > MAX_DEPTH || c.files >= MAX_FILES {
        c.problems.push(format!(
            "{file}: includes nested deeper than {MAX_DEPTH} levels or more than {MAX_FILES} files; not read"
        ));
        return;
    }
    let Ok(i) = snap.lookup(file, true) else {
        return; // ENOENT: ldconfig passes over it in silence
    };
    if snap.node(i).kind != Kind::File {
        return; // a directory reads as empty (getline fails)
    }
    c.files += 1;
    let bytes = match content.read_small(snap, i, MAX_CONF_BYTES) {
        Ok(b) => b,
        Err(e) => {
            c.problems.push(format!("{file}: {e}"));
            return;
        }
    };
    for raw in bytes.split(|&b| b == b'\n') {
        let raw = raw.split(|&b| b == 0).next().unwrap_or_default();
        let line = String::from_utf8_lossy(raw);
        let line = line.split('#').next().unwrap_or_default();
        let cp = line.trim_start_matches(is_c_space);
        if cp.is_empty() {
            continue;
        }
        if let Some(rest) = keyword(cp, "include", false) {
            for pattern in rest.split([' ', '\t']).filter(|w| !w.is_empty()) {
                include(snap, content, file, pattern, depth, c);
            }
        } else if keyword(cp, "hwcap", true).is_some() {
            continue;
        } else if c.dirs.len() < MAX_DIRS {
            let d = cp.trim_end_matches(is_c_space).trim_end_matches('/');
            if !d.is_empty() {
                c.dirs.push(d.to_string());
            }
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
    for path in glob(snap, &full) {
        parse_file(snap, content, &path, depth + 1, c);
    }
}

fn has_magic(c: &str) -> bool {
    c.contains(['*', '?', '['])
}

/// glob(3) over the tree: the paths that exist (a dangling symlink
/// included), sorted by bytes.
pub fn glob(snap: &Snapshot, pattern: &str) -> Vec<String> {
    let comps: Vec<&str> = components(pattern).collect();
    let mut found: Vec<String> = vec![String::new()];
    for (k, comp) in comps.iter().enumerate() {
        let last = k + 1 == comps.len();
        let mut next = Vec::new();
        for base in &found {
            if has_magic(comp) {
                let Some(dir) = dir_of(snap, base) else {
                    continue;
                };
                for &ch in &snap.node(dir).children {
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
            if next.len() > MAX_FILES {
                break;
            }
        }
        found = next;
    }
    found.retain(|p| !p.is_empty() && snap.lookup(p, false).is_ok());
    found.sort();
    found
}

fn dir_of(snap: &Snapshot, path: &str) -> Option<Idx> {
    let p = if path.is_empty() { "/" } else { path };
    snap.lookup_dir(p).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let c = read(&snap, &content);
        assert_eq!(c.dirs, ["/first", "/usr/local/cuda/lib64", "/b", "/last"]);
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        assert!(c.problems[0].contains("nested deeper"), "{:?}", c.problems);
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
