//! The README and every page of docs/ (and BENCHMARKS.md) as a reader
//! follows them: every relative link names a file of the repository, and
//! its `#anchor` a heading of that file (GitHub's rule for heading ids);
//! every `gpu-guard` command they show, in a code block or an inline code
//! span, parses with the real binary (the checks of `readme_quickstart`,
//! applied to every page).

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use super::readme_quickstart::{blocks, commands, inline_invocations, invocations, parses, words};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// README.md, BENCHMARKS.md and docs/*.md, as paths relative to the repository.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md"), PathBuf::from("BENCHMARKS.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(REPO).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| p.strip_prefix(REPO).unwrap().to_path_buf())
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

fn read(rel: &Path) -> String {
    std::fs::read_to_string(Path::new(REPO).join(rel)).unwrap()
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A heading's id as GitHub makes it: lower case, punctuation other than
/// `-` and `_` dropped (backticks included), each space a `-`.
pub(super) fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The ids of a page's headings (outside code blocks); a repeated one
/// gets `-1`, `-2`, ... as on GitHub.
pub(super) fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in prose(text).lines() {
        let Some(h) = line.strip_prefix('#') else {
            continue;
        };
        let h = h.trim_start_matches('#');
        if !h.starts_with(' ') {
            continue;
        }
        let base = slug(h);
        let mut id = base.clone();
        let mut n = 0;
        while out.contains(&id) {
            n += 1;
            id = format!("{base}-{n}");
        }
        out.insert(id);
    }
    out
}

/// The targets of the inline links `[text](target)` of a page, outside
/// code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let p = prose(text);
    let outside_code: String = p.split('`').step_by(2).collect::<Vec<_>>().join(" ");
    outside_code
        .split("](")
        .skip(1)
        .filter_map(|s| s.split(')').next())
        .map(|t| t.trim().to_string())
        .collect()
}

/// `base/target` with `.` and `..` resolved; None when it leaves the repository.
fn resolve(base: &Path, target: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in base.join(target).components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

/// Why a link from `page` to `target` is broken, or None when it is not.
pub(super) fn broken(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        match resolve(page.parent().unwrap_or(Path::new("")), path) {
            Some(f) => f,
            None => return Some(format!("{target}: outside the repository")),
        }
    };
    let full = Path::new(REPO).join(&file);
    if !full.exists() {
        return Some(format!("{target}: no file {}", file.display()));
    }
    match anchor {
        Some(a) if file.extension().is_some_and(|x| x == "md") => {
            let ids = anchors(&std::fs::read_to_string(&full).unwrap());
            (!ids.contains(a)).then(|| format!("{target}: no heading #{a} in {}", file.display()))
        }
        Some(a) => Some(format!(
            "{target}: an anchor #{a} into a file that is not Markdown"
        )),
        None => None,
    }
}

#[test]
fn every_relative_link_of_the_readme_and_docs_resolves() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for target in links(&read(&page)) {
            if target.contains("://") {
                continue;
            }
            checked += 1;
            if let Some(why) = broken(&page, &target) {
                bad.push(format!("{}: {why}", page.display()));
            }
        }
    }
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
    assert!(checked >= 150, "only {checked} links found");
}

#[test]
fn the_readme_links_every_docs_page() {
    let readme = read(Path::new("README.md"));
    let linked: BTreeSet<String> = links(&readme)
        .into_iter()
        .map(|t| t.split('#').next().unwrap().to_string())
        .collect();
    for page in pages().iter().skip(1) {
        let p = page.to_str().unwrap();
        assert!(linked.contains(p), "README.md does not link {p}");
    }
}

#[test]
fn the_link_check_finds_broken_links() {
    // The check above can fail: a missing file, a missing heading, a path
    // out of the repository, an anchor into code are each reported.
    let readme = Path::new("README.md");
    assert!(broken(readme, "docs/no-such-page.md").is_some());
    assert!(broken(readme, "docs/design.md#no-such-heading").is_some());
    assert!(broken(readme, "../outside.md").is_some());
    assert!(broken(readme, "src/lib.rs#top").is_some());
    assert!(broken(readme, "docs/design.md#the-module-graph").is_none());
    assert!(broken(Path::new("docs/design.md"), "../src/lib.rs").is_none());
    assert!(broken(Path::new("docs/design.md"), "#the-layers").is_none());
    assert_eq!(
        slug("`gpu-guard install ENGINE` / `gpu-guard uninstall ENGINE`"),
        "gpu-guard-install-engine--gpu-guard-uninstall-engine"
    );
    assert_eq!(
        slug("Predicting \"no kernel image is available\""),
        "predicting-no-kernel-image-is-available"
    );
    let dup = anchors("# A\n## B\n```\n# not a heading\n```\n## B\n");
    assert_eq!(dup, BTreeSet::from(["a".into(), "b".into(), "b-1".into()]));
    assert_eq!(
        links("[x](a.md) `[y](b.md)`\n```\n[z](c.md)\n```\n"),
        ["a.md"]
    );
}

/// A command as a page shows it, made runnable: `[--flag ...]` optional
/// parts left out, `...` and `…` (more of the same) dropped, and the
/// placeholder `ENGINE` (or the DaemonSet's `$ENGINE`) one of the engines.
fn concrete(cmd: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut optional = 0;
    for w in cmd {
        if w.starts_with("[-") {
            optional += 1;
        }
        if optional > 0 {
            if w.ends_with(']') {
                optional -= 1;
            }
            continue;
        }
        match w.as_str() {
            "..." | "…" => {}
            "ENGINE" | "$ENGINE" => out.push("docker".to_string()),
            _ => out.push(w.clone()),
        }
    }
    out
}

/// Prose names a flag without its value (`gpu-guard check --bundle`): then
/// the command before the flag must parse, and the subcommand's help must
/// list the flag.
fn parses_or_names_a_flag(cmd: &[String]) -> Result<(), String> {
    let err = match parses(cmd) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    let (last, before) = cmd.split_last().unwrap();
    if !last.starts_with("--") || !err.contains("a value is required") {
        return Err(err);
    }
    parses(before)?;
    let help = std::process::Command::new(crate::support::gpu_guard())
        .args([cmd[1].as_str(), "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let listed = help.contains(&format!("{last} ")) || help.contains(&format!("{last}\n"));
    listed.then_some(()).ok_or(err)
}

#[test]
fn every_gpu_guard_command_in_the_readme_and_docs_parses() {
    let mut bad = Vec::new();
    let mut checked = BTreeSet::new();
    for page in pages() {
        let text = read(&page);
        let mut shown: Vec<Vec<String>> = blocks(&text)
            .iter()
            .flat_map(|b| commands(b))
            .flat_map(|c| invocations(&c))
            .collect();
        shown.extend(inline_invocations(&text));
        for cmd in shown {
            // `gpu-guard runtime ARGS` hands its arguments to the real
            // runtime unchanged: they are runc's, not gpu-guard's.
            if cmd[1] == "runtime" {
                continue;
            }
            let cmd = concrete(&cmd);
            if checked.insert(cmd.clone()) {
                if let Err(e) = parses_or_names_a_flag(&cmd) {
                    bad.push(format!("{}: {e}", page.display()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(checked.len() >= 50, "only {} commands found", checked.len());
    let subs: BTreeSet<&str> = checked.iter().map(|c| c[1].as_str()).collect();
    for s in [
        "check",
        "host",
        "scan",
        "install",
        "uninstall",
        "doctor",
        "admission",
        "hook",
    ] {
        assert!(
            subs.contains(s),
            "no `gpu-guard {s}` found in the docs: {subs:?}"
        );
    }
}

#[test]
fn placeholders_are_made_concrete_and_bad_flags_still_fail() {
    let c = concrete(&words(
        "gpu-guard check --image ./x.tar [--json] [--any] --host a.json",
    ));
    assert_eq!(c, words("gpu-guard check --image ./x.tar --host a.json"));
    let c = concrete(&words("gpu-guard install ENGINE --check ..."));
    assert_eq!(c, words("gpu-guard install docker --check"));
    assert!(parses(&concrete(&words("gpu-guard install ENGINE --check"))).is_ok());
    assert!(parses(&concrete(&words("gpu-guard check [--json] --no-such-flag"))).is_err());
    // A flag named without its value passes only when the subcommand has it.
    assert!(parses_or_names_a_flag(&words("gpu-guard check --bundle")).is_ok());
    assert!(parses_or_names_a_flag(&words("gpu-guard host --bundle")).is_err());
}
