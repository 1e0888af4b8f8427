//! The test layout stays fast, complete and honest: at most six test
//! binaries in the whole workspace (crates included), because each one
//! links the whole library and a one-line change relinks them all; every
//! test file is a `mod` of its binary's
//! main.rs, because a file no main.rs names is silently never compiled nor
//! run; and only the `test_hooks` binary (built only with the feature) uses
//! what a `test-hooks` build alone reads, so plain `cargo test` neither
//! fails nor quietly tests the real host instead of a fake one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const MAX_BINARIES: usize = 6;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn tests_dir() -> PathBuf {
    workspace().join("tests")
}

fn sorted(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("readdir").path())
        .collect();
    v.sort();
    v
}

/// The workspace's packages: the root and every crates/NAME with a
/// Cargo.toml.
fn packages(root: &Path) -> Vec<PathBuf> {
    let mut v = vec![root.to_path_buf()];
    let crates = root.join("crates");
    if crates.is_dir() {
        v.extend(
            sorted(&crates)
                .into_iter()
                .filter(|p| p.join("Cargo.toml").is_file()),
        );
    }
    v
}

/// The integration test binaries of one package, as Cargo finds them:
/// each tests/NAME.rs, each tests/NAME/main.rs, and each `[[test]]` of
/// its Cargo.toml (named by `path`, so a target declared and
/// auto-discovered counts once).
fn package_binaries(pkg: &Path) -> BTreeSet<PathBuf> {
    let mut bins = BTreeSet::new();
    let tests = pkg.join("tests");
    if tests.is_dir() {
        for p in sorted(&tests) {
            if p.extension().is_some_and(|e| e == "rs") {
                bins.insert(p);
            } else if p.join("main.rs").is_file() {
                bins.insert(p.join("main.rs"));
            }
        }
    }
    let manifest = std::fs::read_to_string(pkg.join("Cargo.toml")).expect("read Cargo.toml");
    let mut in_test = false;
    for l in manifest.lines().map(str::trim) {
        if l.starts_with('[') {
            in_test = l == "[[test]]";
        } else if let Some(v) = l.strip_prefix("path").filter(|_| in_test) {
            let v = v
                .trim_start()
                .trim_start_matches('=')
                .trim()
                .trim_matches('"');
            bins.insert(pkg.join(v));
        }
    }
    bins
}

/// Every integration test binary of the workspace.
fn workspace_binaries(root: &Path) -> Vec<PathBuf> {
    packages(root)
        .iter()
        .flat_map(|p| package_binaries(p))
        .collect()
}

/// The `mod NAME;` declarations of a main.rs or mod.rs (attributes and
/// `pub` aside).
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
fn at_most_six_test_binaries_in_the_workspace() {
    let root = workspace();
    let loose: Vec<String> = sorted(&tests_dir())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        loose.is_empty(),
        "each of these is a test binary of its own that links the whole library: \
         move it into the binary of its topic (tests/<binary>/, one `mod` line in \
         its main.rs; see the comment at the top of each main.rs): {loose:?}"
    );
    let bins = workspace_binaries(&root);
    assert!(
        bins.len() <= MAX_BINARIES,
        "{} test binaries in the workspace (at most {MAX_BINARIES}; a crate's tests \
         go into an existing binary, as crates/admission/tests/it holds the registry \
         client's): {bins:?}",
        bins.len()
    );
    assert!(
        bins.contains(&tests_dir().join("decide/main.rs")),
        "{bins:?}"
    );
}

#[test]
fn the_binary_counter_counts_what_cargo_builds() {
    // The rule above can fail: a package with a loose file, a directory
    // binary and a declared target elsewhere has three.
    let d = crate::support::TempDir::new("test-layout");
    std::fs::create_dir_all(d.join("tests/it")).unwrap();
    std::fs::create_dir_all(d.join("crates/a/tests/more")).unwrap();
    std::fs::create_dir_all(d.join("crates/notes")).unwrap();
    std::fs::write(d.join("tests/loose.rs"), "").unwrap();
    std::fs::write(d.join("tests/it/main.rs"), "").unwrap();
    std::fs::write(d.join("tests/it/helper.rs"), "").unwrap();
    let manifest = "[package]\nname = \"x\"\n\n[[test]]\nname = \"t\"\npath = \"checks/t.rs\"\n\n[[test]]\nname = \"it\"\npath = \"tests/it/main.rs\"\n";
    std::fs::write(d.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(d.join("crates/a/Cargo.toml"), "[package]\n").unwrap();
    std::fs::write(d.join("crates/a/tests/more/main.rs"), "").unwrap();
    let bins = workspace_binaries(d.path());
    assert_eq!(
        bins,
        [
            d.join("checks/t.rs"),
            d.join("tests/it/main.rs"),
            d.join("tests/loose.rs"),
            d.join("crates/a/tests/more/main.rs"),
        ]
    );
}

/// The directories whose files are modules of one root file: every
/// tests/NAME/ with a main.rs in every package, and below them (and in
/// tests/) every directory with a mod.rs.
fn module_dirs(root: &Path) -> Vec<(PathBuf, PathBuf)> {
    fn with_subdirs(dir: &Path, root_file: PathBuf, out: &mut Vec<(PathBuf, PathBuf)>) {
        out.push((dir.to_path_buf(), root_file));
        for p in sorted(dir) {
            if p.join("mod.rs").is_file() {
                with_subdirs(&p, p.join("mod.rs"), out);
            }
        }
    }
    let mut out = Vec::new();
    for pkg in packages(root) {
        let tests = pkg.join("tests");
        if !tests.is_dir() {
            continue;
        }
        for p in sorted(&tests) {
            if p.join("main.rs").is_file() {
                with_subdirs(&p, p.join("main.rs"), &mut out);
            } else if p.join("mod.rs").is_file() {
                with_subdirs(&p, p.join("mod.rs"), &mut out);
            }
        }
    }
    out
}

#[test]
fn every_test_file_is_a_module_of_its_binary() {
    let dirs = module_dirs(&workspace());
    assert!(
        dirs.iter().any(|(d, _)| d.ends_with("tests/structure")),
        "{dirs:?}"
    );
    for (dir, main) in dirs {
        let mods = declared_mods(&main);
        for p in sorted(&dir) {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            if p.is_dir() || p == main || !p.extension().is_some_and(|e| e == "rs") {
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
