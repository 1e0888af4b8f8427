//! Library globs of `kernel_image.libraries`: paths relative to the
//! container's rootfs with `*` and `?` (within one path component),
//! `[abc]`/`[a-z]`/`[!x]` classes, `{a,b}` alternatives and `**` (any number
//! of directories). Pure pattern logic; rootfs.rs walks the directories.

use crate::sys::word_hash::WordHasher;
use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::rc::Rc;

/// The most patterns one config entry may expand to through `{...}`.
const MAX_EXPANSIONS: usize = 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GlobError {
    #[error("glob `{0}` has an unbalanced `{{` or `}}`")]
    Braces(String),
    #[error("glob `{0}` expands to more than {MAX_EXPANSIONS} patterns")]
    TooMany(String),
    #[error("glob `{0}` has more than {MAX_GROUPS} `{{...}}` groups")]
    Groups(String),
    #[error("glob `{0}` is empty")]
    Empty(String),
    #[error("glob `{0}` has a `..` component; globs stay inside the rootfs")]
    DotDot(String),
    #[error("glob `{0}` has an unterminated `[`")]
    Class(String),
    #[error("glob `{0}` has a NUL character")]
    Nul(String),
}

/// One path component of a pattern. Names are shared ([`Names`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Component {
    /// Matched by name, no directory listing needed.
    Literal(Rc<str>),
    /// Has `*`, `?` or `[`: the directory is listed and names matched.
    Wild(Rc<str>),
    /// `**`: zero or more directories.
    AnyDepth,
}

/// A brace-free pattern split into components.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    pub components: Vec<Component>,
}

impl Pattern {
    /// How loosely the pattern names files, lower first: `**` anywhere,
    /// then a wildcard in the file name, then the number of wildcard
    /// directories. Of one config glob's `{a,b}` expansions, the paths that
    /// name a library outright are scanned before those a wildcard finds.
    pub fn looseness(&self) -> (usize, bool, usize) {
        let any = self
            .components
            .iter()
            .filter(|c| matches!(c, Component::AnyDepth))
            .count();
        let wild_name = !matches!(self.components.last(), Some(Component::Literal(_)));
        let wild = self
            .components
            .iter()
            .filter(|c| matches!(c, Component::Wild(_)))
            .count();
        (any, wild_name, wild)
    }
}

/// A glob as error messages quote it: one line, control characters escaped.
fn shown(s: &str) -> String {
    s.escape_debug().to_string()
}

/// The component names of the patterns parsed with it, each kept once:
/// every GPU container's start parses the shipped globs, about 170
/// patterns of mostly the same few names, and a name of its own for each
/// was most of what parsing them cost.
#[derive(Default)]
pub struct Names(HashSet<Rc<str>, BuildHasherDefault<WordHasher>>);

impl Names {
    fn get(&mut self, name: &str) -> Rc<str> {
        if let Some(n) = self.0.get(name) {
            return n.clone();
        }
        let n: Rc<str> = name.into();
        self.0.insert(n.clone());
        n
    }
}

/// Expands `{a,b}` alternatives (nested allowed), e.g. `{usr,opt}/lib` into
/// `usr/lib` and `opt/lib`.
#[cfg(test)]
fn expand_braces(glob: &str) -> Result<Vec<String>, GlobError> {
    let mut out = Vec::new();
    expand(glob, &mut |p| {
        out.push(p.to_string());
        Ok(())
    })?;
    Ok(out)
}

/// The most `{...}` groups one config glob may have: the expansion below
/// recurses once per group and text run, so this bounds its depth.
const MAX_GROUPS: usize = 64;

/// A glob read as text runs and `{...}` groups.
enum Piece<'a> {
    Text(&'a str),
    /// The alternatives of one group, each a sequence of pieces.
    Group(Vec<Vec<Piece<'a>>>),
}

/// Reads `glob` into pieces: every `{` must close and every `}` open; a
/// comma outside braces is text.
fn pieces(glob: &str) -> Result<Vec<Piece<'_>>, GlobError> {
    // The groups still open, each with its alternatives so far and the
    // sequence it interrupts.
    let mut open: Vec<(Vec<Vec<Piece>>, Vec<Piece>)> = Vec::new();
    let mut seq = Vec::new();
    let (mut start, mut groups) = (0, 0);
    for (i, c) in glob.bytes().enumerate() {
        if !matches!(c, b'{' | b'}') && (c != b',' || open.is_empty()) {
            continue;
        }
        if start < i {
            seq.push(Piece::Text(&glob[start..i]));
        }
        start = i + 1;
        match c {
            b'{' => {
                groups += 1;
                if groups > MAX_GROUPS {
                    return Err(GlobError::Groups(shown(glob)));
                }
                open.push((Vec::new(), std::mem::take(&mut seq)));
            }
            b',' => open
                .last_mut()
                .map_or((), |(alts, _)| alts.push(std::mem::take(&mut seq))),
            _ => {
                let Some((mut alts, outer)) = open.pop() else {
                    return Err(GlobError::Braces(shown(glob)));
                };
                alts.push(std::mem::replace(&mut seq, outer));
                seq.push(Piece::Group(alts));
            }
        }
    }
    if !open.is_empty() {
        return Err(GlobError::Braces(shown(glob)));
    }
    if start < glob.len() {
        seq.push(Piece::Text(&glob[start..]));
    }
    Ok(seq)
}

/// Calls `each` on every expansion of the config glob `glob`, in order
/// (the leftmost group varies slowest). Every GPU container's start
/// expands the shipped globs (about 170 patterns): each expansion is
/// written into one buffer, nothing else is allocated per pattern.
fn expand(
    glob: &str,
    each: &mut dyn FnMut(&str) -> Result<(), GlobError>,
) -> Result<(), GlobError> {
    let seq = pieces(glob)?;
    let mut out = Emit {
        glob,
        count: 0,
        each,
    };
    emit(
        &mut vec![&seq[..]],
        &mut String::with_capacity(glob.len()),
        &mut out,
    )
}

/// Where [`emit`] hands finished expansions.
struct Emit<'e> {
    glob: &'e str,
    count: usize,
    each: &'e mut dyn FnMut(&str) -> Result<(), GlobError>,
}

/// Emits every way to finish `buf` with the sequences in `todo` (the next
/// one last); leaves `todo` and `buf` as it found them.
fn emit<'p>(
    todo: &mut Vec<&'p [Piece<'p>]>,
    buf: &mut String,
    out: &mut Emit,
) -> Result<(), GlobError> {
    let Some(seq) = todo.pop() else {
        if out.count >= MAX_EXPANSIONS {
            return Err(GlobError::TooMany(shown(out.glob)));
        }
        out.count += 1;
        return (out.each)(buf);
    };
    let r = match seq.split_first() {
        None => emit(todo, buf, out),
        Some((Piece::Text(t), rest)) => {
            let len = buf.len();
            buf.push_str(t);
            todo.push(rest);
            let r = emit(todo, buf, out);
            todo.pop();
            buf.truncate(len);
            r
        }
        Some((Piece::Group(alts), rest)) => {
            todo.push(rest);
            let r = alts.iter().try_for_each(|alt| {
                todo.push(alt);
                let r = emit(todo, buf, out);
                todo.pop();
                r
            });
            todo.pop();
            r
        }
    };
    todo.push(seq);
    r
}

/// Splits a brace-free pattern. A leading `/` means the rootfs root, as
/// every pattern is relative to it anyway.
#[cfg(test)]
fn compile(pattern: &str) -> Result<Pattern, GlobError> {
    compile_named(pattern, &mut Names::default())
}

fn compile_named(pattern: &str, names: &mut Names) -> Result<Pattern, GlobError> {
    let b = pattern.as_bytes();
    if b.contains(&0) {
        return Err(GlobError::Nul(shown(pattern)));
    }
    let mut components = Vec::with_capacity(b.iter().filter(|&&c| c == b'/').count() + 1);
    // Split by hand: the components are a few bytes each, too short for
    // `str::split`'s memchr to pay for itself.
    let mut start = 0;
    while start <= b.len() {
        let end = b[start..]
            .iter()
            .position(|&c| c == b'/')
            .map_or(b.len(), |k| start + k);
        match &pattern[start..end] {
            "" | "." => {}
            ".." => return Err(GlobError::DotDot(shown(pattern))),
            "**" => {
                if components.last() != Some(&Component::AnyDepth) {
                    components.push(Component::AnyDepth);
                }
            }
            p if p.bytes().any(|c| matches!(c, b'*' | b'?' | b'[')) => {
                check_classes(pattern, p)?;
                components.push(Component::Wild(names.get(p)));
            }
            p => components.push(Component::Literal(names.get(p))),
        }
        start = end + 1;
    }
    if components.is_empty() {
        return Err(GlobError::Empty(shown(pattern)));
    }
    Ok(Pattern { components })
}

/// Parses and expands a config glob, reporting its first problem.
pub fn parse(glob: &str) -> Result<Vec<Pattern>, GlobError> {
    parse_named(glob, &mut Names::default())
}

/// [`parse`], the names shared with the other globs parsed with `names`.
pub fn parse_named(glob: &str, names: &mut Names) -> Result<Vec<Pattern>, GlobError> {
    let mut out = Vec::new();
    expand(glob, &mut |p| {
        out.push(compile_named(p, names)?);
        Ok(())
    })?;
    Ok(out)
}

fn check_classes(whole: &str, p: &str) -> Result<(), GlobError> {
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' {
            match class_end(b, i) {
                Some(end) => i = end,
                None => return Err(GlobError::Class(shown(whole))),
            }
        }
        i += 1;
    }
    Ok(())
}

/// Index of the `]` closing the class that opens at `open`.
fn class_end(p: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    if p.get(i) == Some(&b'!') {
        i += 1;
    }
    // A `]` right after `[` or `[!` is a literal member.
    if p.get(i) == Some(&b']') {
        i += 1;
    }
    while i < p.len() {
        if p[i] == b']' {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn class_matches(class: &[u8], c: u8) -> bool {
    let (negate, body) = match class.first() {
        Some(b'!') => (true, &class[1..]),
        _ => (false, class),
    };
    let mut hit = false;
    let mut i = 0;
    while i < body.len() {
        if i + 2 < body.len() && body[i + 1] == b'-' {
            if body[i] <= c && c <= body[i + 2] {
                hit = true;
            }
            i += 3;
        } else {
            if body[i] == c {
                hit = true;
            }
            i += 1;
        }
    }
    hit != negate
}

/// Matches one name against one component pattern. Greedy `*` with a
/// single backtrack point: linear in practice, never exponential.
pub fn match_name(pattern: &str, name: &[u8]) -> bool {
    let p = pattern.as_bytes();
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < name.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                b'[' => {
                    if let Some(end) = class_end(p, pi) {
                        if class_matches(&p[pi + 1..end], name[ni]) {
                            pi = end + 1;
                            ni += 1;
                            continue;
                        }
                    } else if name[ni] == b'[' {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
                c if c == name[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// Matches a whole normalized path (`usr/lib/x.so`, no leading `/`)
/// against a pattern, for file lists that are not directories to walk
/// (an image's file tree). `**` spans zero or more components, as the
/// rootfs walker's does (which also stops at 24 levels).
pub fn match_path(pattern: &Pattern, path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    match_parts(&pattern.components, &parts, 0)
}

fn match_parts(comps: &[Component], parts: &[&str], depth: usize) -> bool {
    let Some((first, rest)) = comps.split_first() else {
        return parts.is_empty();
    };
    match first {
        Component::Literal(l) => {
            parts.first().is_some_and(|p| *p == &**l) && match_parts(rest, &parts[1..], depth)
        }
        Component::Wild(w) => {
            parts.first().is_some_and(|p| match_name(w, p.as_bytes()))
                && match_parts(rest, &parts[1..], depth)
        }
        Component::AnyDepth => (0..parts.len().min(24 - depth.min(24)) + 1)
            .any(|skip| match_parts(rest, &parts[skip..], depth + skip)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces() {
        assert_eq!(
            expand_braces("{usr,opt/conda}/lib/{a,b{1,2}}.so").unwrap(),
            [
                "usr/lib/a.so",
                "usr/lib/b1.so",
                "usr/lib/b2.so",
                "opt/conda/lib/a.so",
                "opt/conda/lib/b1.so",
                "opt/conda/lib/b2.so"
            ]
        );
        assert_eq!(expand_braces("plain").unwrap(), ["plain"]);
        assert_eq!(expand_braces("{}x").unwrap(), ["x"]);
        for bad in ["{a,b", "a}b", "}{", "x{a}}"] {
            assert!(
                matches!(expand_braces(bad), Err(GlobError::Braces(_))),
                "{bad}"
            );
        }
        let bomb = "{a,b}".repeat(11);
        assert!(matches!(expand_braces(&bomb), Err(GlobError::TooMany(_))));
        // Depth is bounded by the number of groups, nested or in a row.
        let deep = format!("{}x{}", "{".repeat(65), "}".repeat(65));
        assert!(matches!(expand_braces(&deep), Err(GlobError::Groups(_))));
        assert!(matches!(
            expand_braces(&"{}".repeat(65)),
            Err(GlobError::Groups(_))
        ));
        assert_eq!(expand_braces(&"{}".repeat(64)).unwrap(), [""]);
        // Commas outside braces are text; empty alternatives are kept.
        assert_eq!(expand_braces("a,b{c,}").unwrap(), ["a,bc", "a,b"]);
        assert_eq!(expand_braces("{a,{b,c}d}e").unwrap(), ["ae", "bde", "cde"]);
    }

    #[test]
    fn looseness_orders_literal_names_first() {
        let l = |g: &str| compile(g).unwrap().looseness();
        assert!(l("usr/lib/libcublasLt.so.13") < l("usr/lib/libcublas*.so.*"));
        assert!(l("usr/*/lib/libx.so") < l("usr/lib/lib*.so"));
        assert!(l("usr/lib/lib*.so") < l("usr/*/lib/lib*.so"));
        assert!(l("usr/*/*/lib/lib*.so") < l("**/libx.so"));
    }

    #[test]
    fn components() {
        let p = compile("/usr//lib/python3*/**/**/torch/lib/libtorch_cuda*.so").unwrap();
        assert_eq!(
            p.components,
            [
                Component::Literal("usr".into()),
                Component::Literal("lib".into()),
                Component::Wild("python3*".into()),
                Component::AnyDepth,
                Component::Literal("torch".into()),
                Component::Literal("lib".into()),
                Component::Wild("libtorch_cuda*.so".into()),
            ]
        );
        assert!(matches!(compile("usr/../etc"), Err(GlobError::DotDot(_))));
        assert!(matches!(compile("/"), Err(GlobError::Empty(_))));
        assert!(matches!(compile("lib[abc"), Err(GlobError::Class(_))));
        assert!(matches!(compile("lib\0.so"), Err(GlobError::Nul(_))));
    }

    #[test]
    fn names() {
        let cases = [
            ("*", "anything", true),
            ("lib*.so", "libtorch_cuda.so", true),
            ("lib*.so", "libtorch_cuda.so.1", false),
            ("libcudnn*.so.*", "libcudnn_ops.so.9", true),
            ("libcudnn*.so.*", "libcudnn.so", false),
            ("python3*", "python3.12", true),
            ("python3*", "python2.7", false),
            ("?.so", "a.so", true),
            ("?.so", "ab.so", false),
            ("lib[ab].so", "liba.so", true),
            ("lib[!ab].so", "liba.so", false),
            ("lib[!ab].so", "libc.so", true),
            ("lib[0-9].so", "lib7.so", true),
            ("a*b*c", "aXXbYYbZZc", true),
            ("a*b*c", "aXXbYYbZZ", false),
            ("*.so*", ".so", true),
            ("", "", true),
            ("x", "", false),
        ];
        for (p, n, want) in cases {
            assert_eq!(match_name(p, n.as_bytes()), want, "{p} vs {n}");
        }
        // No exponential blow-up on adversarial names.
        let name = "a".repeat(10_000);
        assert!(!match_name("*a*a*a*a*a*a*a*a*b", name.as_bytes()));
    }

    #[test]
    fn whole_paths_match() {
        let m = |g: &str, p: &str| parse(g).unwrap().iter().any(|x| match_path(x, p));
        assert!(m(
            "usr/local/cuda*/{lib64,targets/*/lib}/lib{cublas,cudnn}*.so.*",
            "usr/local/cuda-12.4/targets/x86_64-linux/lib/libcublasLt.so.12"
        ));
        assert!(!m(
            "usr/local/cuda*/lib64/libcublas*.so.*",
            "usr/local/cuda-12.4/lib64/sub/libcublas.so.12"
        ));
        assert!(m("opt/**/lib*.so", "opt/a/b/c/libx.so"));
        assert!(m("opt/**/lib*.so", "opt/libx.so"));
        assert!(!m("opt/**/lib*.so", "usr/libx.so"));
        assert!(!m("usr/lib", "usr/lib/x"));
    }
}
