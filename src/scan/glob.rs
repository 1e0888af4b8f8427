//! Library globs of `kernel_image.libraries`: paths relative to the
//! container's rootfs with `*` and `?` (within one path component),
//! `[abc]`/`[a-z]`/`[!x]` classes, `{a,b}` alternatives and `**` (any number
//! of directories). Pure pattern logic; rootfs.rs walks the directories.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

/// The most patterns one config entry may expand to through `{...}`.
const MAX_EXPANSIONS: usize = 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GlobError {
    #[error("glob `{0}` has an unbalanced `{{` or `}}`")]
    Braces(String),
    #[error("glob `{0}` expands to more than {MAX_EXPANSIONS} patterns")]
    TooMany(String),
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
pub struct Names(HashSet<Rc<str>, BuildHasherDefault<Fnv1a>>);

/// FNV-1a, 64 bits (IETF draft-eastlake-fnv, "FNV-1a"): the names are the
/// config's own, a few bytes each, where SipHash's guard against chosen
/// collisions is not needed and was most of the cost of a lookup.
#[derive(Default)]
pub struct Fnv1a(u64);

impl Hasher for Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

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
    expand_into(glob, glob, &mut 0, &mut |p| {
        out.push(p.to_string());
        Ok(())
    })?;
    Ok(out)
}

/// Calls `each` on every expansion of `s` (part of the config glob
/// `whole`), in order; `count` is how many came before.
fn expand_into(
    whole: &str,
    s: &str,
    count: &mut usize,
    each: &mut dyn FnMut(&str) -> Result<(), GlobError>,
) -> Result<(), GlobError> {
    let Some(open) = s.find('{') else {
        if s.contains('}') {
            return Err(GlobError::Braces(shown(whole)));
        }
        if *count >= MAX_EXPANSIONS {
            return Err(GlobError::TooMany(shown(whole)));
        }
        *count += 1;
        return each(s);
    };
    if s[..open].contains('}') {
        return Err(GlobError::Braces(shown(whole)));
    }
    // Find the matching close brace and the top-level commas.
    let mut depth = 0usize;
    let mut close = None;
    let mut commas = Vec::new();
    for (i, &c) in s.as_bytes().iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            b',' if depth == 1 => commas.push(i),
            _ => {}
        }
    }
    let close = close.ok_or_else(|| GlobError::Braces(shown(whole)))?;
    let (head, tail) = (&s[..open], &s[close + 1..]);
    let mut start = open + 1;
    // Every GPU container's start expands the shipped globs (about 170
    // patterns): one buffer, no formatting machinery.
    let mut joined = String::with_capacity(s.len());
    for end in commas.into_iter().chain(std::iter::once(close)) {
        joined.clear();
        joined.push_str(head);
        joined.push_str(&s[start..end]);
        joined.push_str(tail);
        expand_into(whole, &joined, count, each)?;
        start = end + 1;
    }
    Ok(())
}

/// Splits a brace-free pattern. A leading `/` means the rootfs root, as
/// every pattern is relative to it anyway.
#[cfg(test)]
fn compile(pattern: &str) -> Result<Pattern, GlobError> {
    compile_named(pattern, &mut Names::default())
}

fn compile_named(pattern: &str, names: &mut Names) -> Result<Pattern, GlobError> {
    if pattern.contains('\0') {
        return Err(GlobError::Nul(shown(pattern)));
    }
    let mut components = Vec::with_capacity(pattern.bytes().filter(|&b| b == b'/').count() + 1);
    for part in pattern.split('/') {
        match part {
            "" | "." => continue,
            ".." => return Err(GlobError::DotDot(shown(pattern))),
            "**" => {
                if components.last() != Some(&Component::AnyDepth) {
                    components.push(Component::AnyDepth);
                }
            }
            p if p.contains(['*', '?', '[']) => {
                check_classes(pattern, p)?;
                components.push(Component::Wild(names.get(p)));
            }
            p => components.push(Component::Literal(names.get(p))),
        }
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
    expand_into(glob, glob, &mut 0, &mut |p| {
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
