//! No Rust `unsafe` in gpu-guard outside one audited place.
//!
//! System calls go through `nix` and `std`, whose safe wrappers own the
//! raw-pointer contracts. Two exceptions have no safe wrapper in our
//! dependencies, and each is allowed exactly one unsafe block: the
//! dladdr(3) lookup in src/host/nvml.rs (`loaded_library_path`), and
//! setting SIGPIPE's disposition at the binary's start
//! (src/commands/process_start.rs; nix's `signal` is unsafe).
//! crates/fake-nvml is a C-ABI stand-in for libnvidia-ml and is exempt:
//! its `extern "C"` entry points take raw pointers by definition.
//!
//! The check is lexical: comments, string literals (raw and byte ones too)
//! and character literals are blanked out, then the keyword is matched as
//! a whole word. It cannot be fooled by the word in a comment or a
//! message, and `unsafe_code` or `my_unsafe` are other identifiers.

use std::path::{Path, PathBuf};

/// The keyword, spelled so that this file does not contain it as a token.
const NEEDLE: &str = concat!("un", "safe");

/// Files allowed to have the keyword, and how many times.
const ALLOWED: &[(&str, usize)] = &[
    ("src/host/nvml.rs", 1),
    ("src/commands/process_start.rs", 1),
];

/// Directories (relative to the crate root) not checked.
const EXEMPT_DIRS: &[&str] = &["crates/fake-nvml"];

/// Every `.rs` file under `dir`, skipping build output.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.map(|e| e.expect("readdir").path()).collect();
    entries.sort();
    for p in entries {
        let ft = std::fs::symlink_metadata(&p).expect("lstat").file_type();
        if ft.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out);
        } else if ft.is_file() && p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `src` with comments, string literals and character literals replaced
/// by spaces (newlines kept, so line numbers still hold). Block comments
/// nest, as in Rust.
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    // Blanks b[from..to] into `out`, keeping newlines.
    let blank = |out: &mut String, from: usize, to: usize| {
        for &c in &b[from..to.min(b.len())] {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        let end = if c == '/' && next == Some('/') {
            line_end(&b, i)
        } else if c == '/' && next == Some('*') {
            block_comment_end(&b, i)
        } else if let Some(end) = raw_string_end(&b, i) {
            end
        } else if c == '"' {
            // b"..." and c"...": the prefix letter stays, harmlessly.
            string_end(&b, i)
        } else if c == '\'' {
            char_literal_end(&b, i).unwrap_or(i)
        } else {
            i
        };
        if end > i {
            blank(&mut out, i, end);
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn ident_before(b: &[char], i: usize) -> bool {
    i > 0 && is_ident(b[i - 1])
}

/// End (exclusive) of the `//` comment at `i`: its newline stays.
fn line_end(b: &[char], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == '\n')
        .map_or(b.len(), |n| i + n)
}

/// End of the (nested) `/* */` comment at `i`.
fn block_comment_end(b: &[char], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < b.len() {
        if b[i] == '/' && b.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// End of the `"..."` literal whose opening quote is at `i`.
fn string_end(b: &[char], mut i: usize) -> usize {
    i += 1;
    while i < b.len() {
        match b[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// End of a raw string (`r"..."`, `r#"..."#`, `br##"..."##`) starting
/// at `i`, or `None` when none starts there.
fn raw_string_end(b: &[char], i: usize) -> Option<usize> {
    if ident_before(b, i) {
        return None;
    }
    let mut j = i;
    if b.get(j) == Some(&'b') || b.get(j) == Some(&'c') {
        j += 1;
    }
    if b.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == '#').count();
    j += hashes;
    if b.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < b.len() {
        if b[j] == '"'
            && b[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(b.len())
}

/// End of the character literal at `i` (`'x'`, `'\''`, `'\u{1b}'`), or
/// `None` for a lifetime or label (`'a`, `'static`).
fn char_literal_end(b: &[char], i: usize) -> Option<usize> {
    match b.get(i + 1)? {
        '\\' => {
            // The escaped character itself may be a quote: `'\''`.
            let close = b.get(i + 3..)?.iter().position(|&c| c == '\'')?;
            Some(i + 3 + close + 1)
        }
        _ if b.get(i + 2) == Some(&'\'') => Some(i + 3),
        _ => None,
    }
}

/// Line numbers (1-based) where the keyword is a whole word in code.
fn hits(src: &str) -> Vec<usize> {
    let code = strip(src);
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let needle: Vec<char> = NEEDLE.chars().collect();
        for at in 0..chars.len().saturating_sub(needle.len() - 1) {
            if chars[at..at + needle.len()] == needle[..]
                && (at == 0 || !is_ident(chars[at - 1]))
                && chars.get(at + needle.len()).map_or(true, |&c| !is_ident(c))
            {
                out.push(n + 1);
            }
        }
    }
    out
}

#[test]
fn no_unsafe_outside_the_audited_block() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "crates"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 10, "found only {files:?}");
    let mut problems = Vec::new();
    let mut seen_allowed = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if EXEMPT_DIRS
            .iter()
            .any(|d| rel.starts_with(&format!("{d}/")))
        {
            continue;
        }
        let src = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let lines = hits(&src);
        match ALLOWED.iter().find(|(p, _)| *p == rel) {
            Some(&(_, want)) => {
                seen_allowed.push(rel.clone());
                if lines.len() != want {
                    problems.push(format!(
                        "{rel}: {} `{NEEDLE}` (lines {lines:?}); exactly {want} allowed",
                        lines.len()
                    ));
                }
            }
            None => problems.extend(lines.iter().map(|l| format!("{rel}:{l}: `{NEEDLE}`"))),
        }
    }
    for (p, _) in ALLOWED {
        assert!(
            seen_allowed.iter().any(|s| s == p),
            "{p} is allowed `{NEEDLE}` but was not found"
        );
    }
    assert!(
        problems.is_empty(),
        "`{NEEDLE}` outside the audited block (use nix or std instead):\n{}",
        problems.join("\n")
    );
}

/// The stripper on sources where `@` stands for the keyword.
#[test]
fn the_check_ignores_comments_strings_and_other_identifiers() {
    let src = |s: &str| s.replace('@', NEEDLE);
    let none = [
        "// @ in a line comment",
        "/* @ /* nested @ */ still comment @ */",
        "/// doc: @ fn",
        r#"let s = "@ { }";"#,
        r#"let s = "escaped \" quote @";"#,
        r##"let s = r#"raw "quoted" @"#;"##,
        r#"let s = br"@";"#,
        r#"let s = b"@";"#,
        r#"let s = c"@";"#,
        "#![forbid(@_code)]",
        "let my_@ = 1; let @2 = 2;",
        "fn f<'a>(x: &'a str) -> &'a str { x } // @",
    ];
    for s in none {
        assert_eq!(hits(&src(s)), Vec::<usize>::new(), "{}", src(s));
    }
    let some = [
        ("@ fn f() {}", vec![1]),
        ("let x = @ { f() };", vec![1]),
        ("let q = '\"'; @ { g() }", vec![1]),
        ("let q = '\\''; @ { g() }", vec![1]),
        ("let q = ['\\'', 'x']; @ { g() }", vec![1]),
        ("let q = b'\\\\'; let s = \"@\"; @ { }", vec![1]),
        ("fn f<'a>(x: &'a u8) { @ { h(x) } }", vec![1]),
        ("let s = \"a\";\n/* x */ @ impl Send for X {}", vec![2]),
        ("x(r\"y\"); @ { }", vec![1]),
    ];
    for (s, want) in some {
        assert_eq!(hits(&src(s)), want, "{}", src(s));
    }
}
