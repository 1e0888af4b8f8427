//! The layout is the architecture (src/lib.rs): dependencies between the
//! top-level modules point one way, from the entry points down to the pure
//! core. This test reads every `crate::<module>` path in src/ and fails on
//! a cycle between top-level modules, on a cycle between the files of any
//! directory module, on the core reaching outside itself, on clap used outside
//! `commands` and `main`, and, in src/ and every crates/NAME/src, on a
//! source file over 700 lines before its unit tests ([`counted_lines`] says
//! how lines are counted) and on a function over 80 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file under src/ belongs to (`core` for
/// src/core/x.rs, `config` for src/config.rs); None for lib.rs and main.rs.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// Source text without comments, so a doc link such as
/// [`crate::config`] in a comment is not an import.
pub(super) fn code_only(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::name` (also inside `use crate::{a, b}` groups).
pub(super) fn referenced(code: &str) -> BTreeSet<String> {
    referenced_after(code, "crate::")
}

/// Every name after `prefix` (also inside `prefix{a, b}` groups).
fn referenced_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let after = &rest[i + prefix.len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
        rest = after;
    }
    out
}

pub(super) fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let Some(m) = module_of(&src, &f) else {
            continue;
        };
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        let deps = g.entry(m.clone()).or_default();
        for d in referenced(&code) {
            if d != m {
                deps.insert(d);
            }
        }
    }
    g
}

/// A cycle as a path of module names, if the graph has one.
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            match state.get(d.as_str()).copied().unwrap_or(0) {
                1 => {
                    let start = stack.iter().position(|s| s == d).unwrap();
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(d.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(d, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(n, g, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_cycle_between_top_level_modules() {
    let g = graph();
    assert!(
        g.contains_key("core") && g.contains_key("commands"),
        "{g:?}"
    );
    if let Some(c) = find_cycle(&g) {
        panic!("import cycle between top-level modules: {}", c.join(" -> "));
    }
}

#[test]
fn the_core_imports_nothing_outside_itself() {
    let g = graph();
    let deps = &g["core"];
    assert!(deps.is_empty(), "src/core imports {deps:?}");
}

#[test]
fn only_commands_know_the_entry_points() {
    // Nothing below the entry points may import them.
    for (m, deps) in graph() {
        if m != "commands" {
            assert!(!deps.contains("commands"), "{m} imports commands");
        }
    }
}

#[test]
fn clap_is_known_only_to_commands_and_main() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for f in files {
        let m = module_of(&src, &f);
        if m.is_none() || m.as_deref() == Some("commands") {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        assert!(!code.contains("clap"), "{} uses clap", f.display());
    }
}

#[test]
fn the_cycle_finder_finds_cycles() {
    // The test above can fail: a graph with a cycle is reported as one.
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_cycle(&g).unwrap(), ["a", "b", "c", "a"]);
    g.insert("c".to_string(), BTreeSet::new());
    assert!(find_cycle(&g).is_none());
    let code = code_only("use crate::{core::x, sys};\n// crate::commands\nlet a = crate::host::y;");
    assert_eq!(
        referenced(&code),
        BTreeSet::from(["core".to_string(), "sys".to_string(), "host".to_string()])
    );
}

/// The most lines a source file may have, tests excluded:
/// past this, a file is split at a natural seam.
const MAX_FILE_LINES: usize = 700;

/// The lines of a source file that count against [`MAX_FILE_LINES`]:
/// every line before its unit tests, that is before the first
/// `#[cfg(test)]` whose item (after any further attributes) is an inline
/// module (`mod tests {`). A `#[cfg(test)]` on anything else (a helper
/// function, an import) does not end the count, and a file without an
/// inline test module counts whole. Unit tests stay inline at the end of
/// their file, so a test module in a file of its own counts as code.
fn counted_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.trim() != "#[cfg(test)]" {
            continue;
        }
        let item = lines[i + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !l.starts_with("#["));
        let opens_module = item.is_some_and(|l| {
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub(super) "))
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            l.starts_with("mod ") && l.ends_with('{')
        });
        if opens_module {
            return i;
        }
    }
    lines.len()
}

/// Every file under `src` with more counted lines than `max`, with its count.
fn oversized(src: &Path, max: usize) -> Vec<(PathBuf, usize)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let n = counted_lines(&std::fs::read_to_string(&f).unwrap());
            (f, n)
        })
        .filter(|(_, n)| *n > max)
        .collect()
}

/// The source directories the size rules cover: src/ and every
/// crates/NAME/src.
fn source_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![root.join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    assert!(!crates.is_empty(), "no crates/*/src found");
    dirs.extend(crates);
    dirs
}

#[test]
fn no_source_file_is_over_700_lines_tests_excluded() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let list: Vec<String> = source_dirs()
        .iter()
        .flat_map(|src| oversized(src, MAX_FILE_LINES))
        .map(|(f, n)| format!("{} ({n} lines)", f.strip_prefix(root).unwrap().display()))
        .collect();
    assert!(
        list.is_empty(),
        "over {MAX_FILE_LINES} lines before their tests (split at a natural seam): {}",
        list.join(", ")
    );
}

#[test]
fn the_line_counter_counts_code_not_tests() {
    let code = "fn a() {}\n".repeat(10);
    let tests = "#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n";
    assert_eq!(counted_lines(&code), 10);
    assert_eq!(counted_lines(&format!("{code}{tests}")), 10);
    // Attributes between cfg(test) and the module, and visibility.
    let attrs = "#[cfg(test)]\n#[allow(dead_code)]\n\npub(crate) mod test_support {\n}\n";
    assert_eq!(counted_lines(&format!("{code}{attrs}")), 10);
    // cfg(test) on a function or an out-of-line module does not end the count.
    let helper = "#[cfg(test)]\nfn only_for_tests() {}\n#[cfg(test)]\nmod tests;\n";
    assert_eq!(counted_lines(&format!("{helper}{code}")), 14);
    assert_eq!(counted_lines(&format!("{helper}{code}{tests}")), 14);
    // The rule fails on a file over the limit and passes at it.
    let d = crate::support::tempdir("module-graph");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::write(d.join("ok.rs"), format!("{}{tests}", "//\n".repeat(700))).unwrap();
    std::fs::write(d.join("sub/big.rs"), "//\n".repeat(701)).unwrap();
    let big = oversized(&d, MAX_FILE_LINES);
    assert_eq!(big, vec![(d.join("sub/big.rs"), 701)]);
    let _ = std::fs::remove_dir_all(&d);
}

/// The files of one directory module as a graph: a node per file or
/// subdirectory of `dir` (a subdirectory is one node), an edge per path to
/// a sibling its code (before its unit tests; `tests.rs` files are unit
/// tests) names: `crate::<module>::<sibling>`, or `super::<sibling>` from a
/// file of `dir` (`super::super::` one level down).
fn dir_file_graph(src: &Path, dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let rel = dir.strip_prefix(src).unwrap();
    let module: Vec<&str> = rel.iter().map(|c| c.to_str().unwrap()).collect();
    let prefix = format!("crate::{}::", module.join("::"));
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let node = |f: &Path| module_of(dir, f).filter(|n| n != "mod");
    let nodes: BTreeSet<String> = files.iter().filter_map(|f| node(f)).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(n) = node(f) else { continue };
        if f.file_name().is_some_and(|x| x == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let body: Vec<&str> = text.lines().take(counted_lines(&text)).collect();
        let up = match f.strip_prefix(dir).unwrap().components().count() {
            1 => "super::",
            2 if f.ends_with("mod.rs") => "super::",
            2 => "super::super::",
            _ => "\u{0}",
        };
        let mut code = code_only(&body.join("\n"));
        if up == "super::" {
            // `super::super::x` is not a sibling.
            code = code.replace("super::super::", "\u{0}");
        }
        let names = referenced_after(&code, &prefix);
        let deps = g.entry(n.clone()).or_default();
        for d in names.into_iter().chain(referenced_after(&code, up)) {
            if d != n && nodes.contains(&d) {
                deps.insert(d);
            }
        }
    }
    g
}

/// Every directory module under src/ (src/ itself is the module graph).
fn module_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.push(p.clone());
            module_dirs(&p, out);
        }
    }
}

#[test]
fn no_cycle_between_the_files_of_a_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let core = dir_file_graph(&src, &src.join("core"));
    // The graph finds edges: `crate::core::policy` from profiles.rs, and
    // `super::` paths one level down.
    assert!(core["profiles"].contains("policy"), "{core:?}");
    let ldso = dir_file_graph(&src, &src.join("scan/ldso"));
    assert!(ldso["resolve"].contains("missing"), "{ldso:?}");
    let mut dirs = Vec::new();
    module_dirs(&src, &mut dirs);
    dirs.sort();
    let cycles: Vec<String> = dirs
        .iter()
        .filter_map(|d| {
            let c = find_cycle(&dir_file_graph(&src, d))?;
            Some(format!(
                "{}: {}",
                d.strip_prefix(&src).unwrap().display(),
                c.join(" -> ")
            ))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "import cycles between the files of a module (move the shared type to a file both can use):\n{}",
        cycles.join("\n")
    );
}

/// True when `code` builds a `core::decide::Inputs` value: a struct
/// literal `Inputs {` (also path-qualified, `decide::Inputs {`), not the
/// type's definition or another name ending in `Inputs`.
fn builds_inputs(code: &str) -> bool {
    let mut rest = code;
    while let Some(i) = rest.find("Inputs") {
        let before = rest[..i].chars().next_back();
        let after = rest[i + "Inputs".len()..].trim_start();
        let word_start = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
        let definition = rest[..i].trim_end().ends_with("struct");
        if word_start && !definition && after.starts_with('{') {
            return true;
        }
        rest = &rest[i + "Inputs".len()..];
    }
    false
}

#[test]
fn one_place_outside_the_core_builds_its_inputs() {
    // The decision pipeline is the one orchestration: every entry point
    // goes through it, so a field added to `Inputs` is filled in one place.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let builders: Vec<String> = files
        .iter()
        .filter(|f| module_of(&src, f).as_deref() != Some("core"))
        .filter(|f| builds_inputs(&code_only(&std::fs::read_to_string(f).unwrap())))
        .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert_eq!(
        builders,
        ["pipeline/mod.rs"],
        "files outside src/core that build core::decide::Inputs"
    );
}

#[test]
fn the_inputs_rule_finds_builders() {
    // The test above can fail: each of these builds the core's inputs.
    for code in [
        "decide::decide(&Inputs { container, detection })",
        "let i = crate::core::decide::Inputs{ container };",
        "Inputs\n    {",
    ] {
        assert!(builds_inputs(&code_only(code)), "{code}");
    }
    for code in [
        "pub struct Inputs<'a> {",
        "pub struct Inputs {",
        "use crate::core::decide::{self, Inputs};",
        "let x = MyInputs { a };",
        "// Inputs { in a comment }",
        "fn f(i: &Inputs) {}",
    ] {
        assert!(!builds_inputs(&code_only(code)), "{code}");
    }
}

/// No function is longer than this: past it, a function is
/// split at its natural seams; a parser may keep a table-driven loop.
const MAX_FN_LINES: usize = 80;

/// The functions of `text` (before its unit tests, as [`counted_lines`]
/// counts) longer than `max`: (first line, name, lines). A function runs
/// from its `fn` line to the closing brace at the `fn` line's indentation,
/// which is how rustfmt lays every function out; a declaration without a
/// body (`fn f();`) and a one-line function have none.
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.lines().take(counted_lines(text)).collect();
    let mut found = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let trimmed = l.trim_start();
        let indent = &l[..l.len() - trimmed.len()];
        let Some(name) = fn_name(trimmed) else {
            continue;
        };
        let Some(open) = (i..lines.len()).find(|&j| {
            let t = lines[j].trim_end();
            t.ends_with('{') || t.ends_with(';') || t.ends_with('}')
        }) else {
            continue;
        };
        if !lines[open].trim_end().ends_with('{') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j] == close) {
            if end - i + 1 > max {
                found.push((i + 1, name, end - i + 1));
            }
        }
    }
    found
}

/// The name when `line` (indentation removed) starts a function item.
fn fn_name(line: &str) -> Option<String> {
    let mut rest = line;
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let after = rest.strip_prefix("fn ")?;
    let name: String = after
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

#[test]
fn no_function_is_over_80_lines_tests_excluded() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for src in source_dirs() {
        rust_files(&src, &mut files);
    }
    files.sort();
    let long: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            long_functions(&text, MAX_FN_LINES)
                .into_iter()
                .map(move |(line, name, n)| {
                    format!(
                        "{}:{line} {name} ({n} lines)",
                        f.strip_prefix(root).unwrap().display()
                    )
                })
        })
        .collect();
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (split at a natural seam): {long:?}"
    );
}

#[test]
fn the_function_rule_measures_functions() {
    let body = "    x();\n".repeat(79);
    let long = format!("pub fn long() {{\n{body}    y();\n}}\n");
    let short = format!("fn short() {{\n{}}}\n", "    x();\n".repeat(78));
    let nested = format!(
        "impl A {{\n    pub(crate) fn m(\n        a: u8,\n    ) -> u8 {{\n{body}    }}\n}}\n"
    );
    assert_eq!(long_functions(&long, 80), vec![(1, "long".into(), 82)]);
    assert_eq!(long_functions(&short, 80), vec![]);
    assert_eq!(long_functions(&nested, 80), vec![(2, "m".into(), 83)]);
    // Declarations and one-line functions have no body to measure.
    assert_eq!(long_functions("fn f();\nfn g() {}\n", 0), vec![]);
    // Unit tests at the end of a file do not count.
    let tests = format!("#[cfg(test)]\nmod tests {{\n{long}}}\n");
    assert_eq!(long_functions(&tests, 80), vec![]);
}
