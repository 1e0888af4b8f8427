//! The README's quick starts: the first stays exactly two
//! commands; in the operator quick start every `gpu-guard` command shown
//! parses with the real binary (its subcommand and every flag exist: the
//! command with `--help` appended exits 0, and clap refuses an unknown flag
//! before it reaches `--help`), every repository path and link it names
//! exists, every `#anchor` is a heading of the page it names, and k3s's and
//! RKE2's containerd paths are there. `readme_docs` applies the same checks
//! to every page of docs/.

use std::path::Path;
use std::process::Command;

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);
const REPO: &str = env!("CARGO_MANIFEST_DIR");
const SUBCOMMANDS: [&str; 9] = [
    "check",
    "host",
    "scan",
    "install",
    "uninstall",
    "doctor",
    "admission",
    "hook",
    "runtime",
];

fn readme() -> String {
    std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap()
}

/// The text of `## TITLE` up to the next `## ` heading.
fn section<'a>(text: &'a str, title: &str) -> &'a str {
    let head = format!("\n## {title}\n");
    let start = text
        .find(&head)
        .unwrap_or_else(|| panic!("README has no section {title:?}"));
    let body = &text[start + head.len()..];
    &body[..body.find("\n## ").unwrap_or(body.len())]
}

/// The fenced code blocks of `text`, each as its lines.
pub(super) fn blocks(text: &str) -> Vec<Vec<&str>> {
    let mut out = Vec::new();
    let mut cur: Option<Vec<&str>> = None;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            match cur.take() {
                Some(b) => out.push(b),
                None => cur = Some(Vec::new()),
            }
        } else if let Some(b) = cur.as_mut() {
            b.push(line);
        }
    }
    out
}

/// The commands of a block: its `$ ` lines when it has any (the rest is
/// output), else every line that is not a comment; `\` continues a line.
pub(super) fn commands(block: &[&str]) -> Vec<String> {
    let prompted = block.iter().any(|l| l.starts_with("$ "));
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for line in block {
        let text = if open {
            line.trim()
        } else if prompted {
            match line.strip_prefix("$ ") {
                Some(t) => t,
                None => continue,
            }
        } else {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            t
        };
        let (text, more) = match text.strip_suffix('\\') {
            Some(t) => (t.trim_end(), true),
            None => (text, false),
        };
        match (open, out.last_mut()) {
            (true, Some(last)) => {
                last.push(' ');
                last.push_str(text);
            }
            _ => out.push(text.to_string()),
        }
        open = more;
    }
    out
}

/// Shell words, with '...' and "..." quoting (enough for the README).
pub(super) fn words(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in cmd.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The gpu-guard invocations in a shell line: each `gpu-guard SUBCOMMAND
/// ...` up to a pipe, `&&`, a redirection or a comment.
pub(super) fn invocations(line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for part in line.split(['|', ';']).flat_map(|p| p.split("&&")) {
        let part = part.split(" #").next().unwrap_or("");
        let part = part.split(['<', '>']).next().unwrap_or("");
        let w = words(part);
        if w.first().map(String::as_str) == Some("gpu-guard")
            && w.get(1).is_some_and(|s| SUBCOMMANDS.contains(&s.as_str()))
        {
            out.push(w);
        }
    }
    out
}

/// Inline code spans (`...`, across line breaks) that are gpu-guard commands.
pub(super) fn inline_invocations(text: &str) -> Vec<Vec<String>> {
    let prose: String = text.split("```").step_by(2).collect::<Vec<_>>().join(" ");
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|span| invocations(&span.replace('\n', " ")))
        .collect()
}

pub(super) fn parses(args: &[String]) -> Result<(), String> {
    let o = Command::new(*BIN)
        .args(&args[1..])
        .arg("--help")
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    match o.status.code() {
        Some(0) => Ok(()),
        c => Err(format!(
            "`{}` does not parse ({c:?}): {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
    }
}

#[test]
fn the_first_quick_start_stays_two_commands() {
    let text = readme();
    let quick = section(&text, "Quick start");
    let cmds: Vec<String> = blocks(quick).iter().flat_map(|b| commands(b)).collect();
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    for c in &cmds {
        let script = words(c)[0].clone();
        assert!(Path::new(REPO).join(&script).is_file(), "{script}");
    }
}

#[test]
fn every_gpu_guard_command_of_the_operator_quick_start_parses() {
    let text = readme();
    let ops = section(&text, "Operator quick start");
    let mut shown: Vec<Vec<String>> = blocks(ops)
        .iter()
        .flat_map(|b| commands(b))
        .flat_map(|c| invocations(&c))
        .collect();
    let in_blocks = shown.len();
    shown.extend(inline_invocations(ops));
    assert!(in_blocks >= 8, "too few commands found: {shown:?}");
    let subs: std::collections::BTreeSet<&str> = shown.iter().map(|w| w[1].as_str()).collect();
    for s in ["host", "install", "uninstall", "check", "doctor"] {
        assert!(
            subs.contains(s),
            "no `gpu-guard {s}` in the quick start: {subs:?}"
        );
    }
    let bad: Vec<String> = shown.iter().filter_map(|w| parses(w).err()).collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The check itself can fail: an unknown flag does not parse.
    assert!(parses(&words("gpu-guard install docker --no-such-flag")).is_err());
    assert!(parses(&words("gpu-guard install docker --dry-run")).is_ok());
}

#[test]
fn the_operator_quick_start_names_only_files_and_anchors_that_exist() {
    let text = readme();
    let ops = section(&text, "Operator quick start");
    let mut links = 0;
    for target in ops.split("](").skip(1).filter_map(|s| s.split(')').next()) {
        links += 1;
        assert!(
            !target.contains("://"),
            "a link outside the repository: {target}"
        );
        if let Some(why) = super::readme_docs::broken(Path::new("README.md"), target) {
            panic!("{why}");
        }
    }
    assert!(links >= 5, "{links} links");
    let roots = [
        "packaging/",
        "integration/",
        "tests/",
        "docs/",
        "config/",
        "crates/",
    ];
    let mut paths = 0;
    for tok in ops.split(|c: char| c.is_whitespace() || "`()[],;:\"'".contains(c)) {
        // A link's `#anchor` is checked with the links above.
        let tok = tok.split('#').next().unwrap_or(tok).trim_end_matches('.');
        if roots.iter().any(|r| tok.starts_with(r)) && !tok.contains('*') {
            paths += 1;
            assert!(Path::new(REPO).join(tok).exists(), "the README names {tok}");
        }
    }
    assert!(paths >= 8, "{paths} paths");
    for p in [
        "/var/lib/rancher/k3s/agent/etc/containerd/",
        "/var/lib/rancher/rke2/agent/etc/containerd/",
        "config.toml.tmpl",
        "runtimeClassName: gpu-guard",
        "gpu-guard.io/needs",
    ] {
        assert!(ops.contains(p), "the operator quick start lacks {p}");
    }
}
