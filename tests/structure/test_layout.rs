//! The test layout stays fast, complete and honest (issue 16): at most six
//! test binaries, because each one links the whole library and a one-line
//! change relinks them all; every test file is a `mod` of its binary's
//! main.rs, because a file no main.rs names is silently never compiled nor
//! run; and only the `test_hooks` binary (built only with the feature) uses
//! what a `test-hooks` build alone reads, so plain `cargo test` neither
//! fails nor quietly tests the real host instead of a fake one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const MAX_BINARIES: usize = 6;

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn sorted(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("readdir").path())
        .collect();
    v.sort();
    v
}

/// The one test binary whose root is a file: tests/module_graph.rs, at the
/// path issue 16 names; its modules live in tests/structure/.
const ROOT_FILE_BINARY: &str = "module_graph.rs";
const ROOT_FILE_MODULES: &str = "structure";

/// The binary directories: tests/NAME/main.rs.
fn binary_dirs() -> Vec<PathBuf> {
    sorted(&tests_dir())
        .into_iter()
        .filter(|p| p.join("main.rs").is_file())
        .collect()
}

/// The `mod NAME;` declarations of a main.rs (attributes and `pub` aside).
fn declared_mods(main: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(main).expect("read main.rs");
    text.lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("pub ").or(Some(l)))
        .filter_map(|l| l.strip_prefix("mod "))
        .filter_map(|l| l.strip_suffix(';'))
        .map(|m| m.trim().to_string())
        .collect()
}

#[test]
fn at_most_six_test_binaries_and_no_loose_test_files() {
    let loose: Vec<String> = sorted(&tests_dir())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter(|p| !p.ends_with(ROOT_FILE_BINARY))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        loose.is_empty(),
        "each of these is a test binary of its own that links the whole library: \
         move it into the binary of its topic (tests/<binary>/, one `mod` line in \
         its main.rs; see the comment at the top of each main.rs): {loose:?}"
    );
    let mut bins = binary_dirs();
    bins.push(tests_dir().join(ROOT_FILE_BINARY));
    assert!(
        bins.len() <= MAX_BINARIES,
        "{} test binaries (at most {MAX_BINARIES}): {bins:?}",
        bins.len()
    );
    assert!(!bins.is_empty(), "no tests/*/main.rs found");
}

#[test]
fn every_test_file_is_a_module_of_its_binary() {
    let root_file = (
        tests_dir().join(ROOT_FILE_MODULES),
        tests_dir().join(ROOT_FILE_BINARY),
    );
    let dirs = binary_dirs()
        .into_iter()
        .map(|d| (d.clone(), d.join("main.rs")));
    for (dir, main) in dirs.chain([root_file]) {
        let mods = declared_mods(&main);
        for p in sorted(&dir) {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            if p.is_dir() || stem == "main" || !p.extension().is_some_and(|e| e == "rs") {
                continue;
            }
            assert!(
                mods.contains(&stem),
                "{} is not declared in {} (`mod {stem};`): it would never run",
                p.display(),
                main.display()
            );
        }
    }
}

/// The binary that Cargo.toml builds only with `--features test-hooks`.
const HOOKS_BINARY: &str = "test_hooks";

/// The variables only a `test-hooks` build reads: those named in src/
/// within a few lines after a cfg on the test-hooks feature.
fn test_only_variables() -> BTreeSet<String> {
    let cfg = concat!("feature = \"", "test-hooks\"");
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut vars = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read src file");
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if !l.contains(cfg) {
                continue;
            }
            for l in &lines[i..(i + 8).min(lines.len())] {
                for part in l.split('"').skip(1).step_by(2) {
                    if part.starts_with("GPU_GUARD_") {
                        vars.insert(part.to_string());
                    }
                }
            }
        }
    }
    vars
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for p in sorted(dir) {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn only_the_feature_gated_binary_uses_test_hooks() {
    let vars = test_only_variables();
    // The fake host's five paths at least; an empty list would check nothing.
    assert!(
        vars.len() >= 5,
        "test-only variables found in src/: {vars:?}"
    );
    let cfg = concat!("feature = \"", "test-hooks\"");
    let mut files = Vec::new();
    rust_files(&tests_dir(), &mut files);
    let hooks_dir = tests_dir().join(HOOKS_BINARY);
    assert!(
        hooks_dir.join("main.rs").is_file(),
        "{} is missing",
        hooks_dir.display()
    );
    for f in files.iter().filter(|f| !f.starts_with(&hooks_dir)) {
        let text = std::fs::read_to_string(f).expect("read test file");
        let used: Vec<&String> = vars.iter().filter(|v| text.contains(v.as_str())).collect();
        assert!(
            used.is_empty() && !text.contains(cfg),
            "{} uses what only a test-hooks build reads ({used:?}): move it into tests/{HOOKS_BINARY}/",
            f.display()
        );
    }
}
