//! docs/design.md draws the module graph; this holds the drawing to the
//! code. Its first `text` block lists each top-level module with every
//! module it imports, exactly the graph `module_graph` measures (plus
//! `main`, the binary, through `gpu_guard::` paths); its second gives each
//! module's level, which must be the longest import path from it down to
//! `core`, so every arrow of the drawing points down.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

fn design() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/design.md")).unwrap()
}

/// The bodies of the ```text blocks of `doc`, in order.
fn text_blocks(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in doc.lines() {
        let t = line.trim_start();
        match (&mut cur, t.starts_with("```")) {
            (None, true) if t == "```text" => cur = Some(String::new()),
            (Some(_), true) => out.push(cur.take().unwrap()),
            (Some(b), false) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    out
}

/// `a ─> b, c` lines (`(nothing)` for none) as a graph.
fn drawn_edges(block: &str) -> Graph {
    let mut g = Graph::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let (from, to) = line
            .split_once("─>")
            .unwrap_or_else(|| panic!("not `module ─> modules`: {line}"));
        let deps = to
            .split(',')
            .map(str::trim)
            .filter(|d| *d != "(nothing)" && !d.is_empty())
            .map(String::from)
            .collect();
        assert!(
            g.insert(from.trim().to_string(), deps).is_none(),
            "{from} drawn twice"
        );
    }
    g
}

/// `N  a, b   notes` lines as module -> level.
fn drawn_levels(block: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let (n, rest) = line.trim().split_once(' ').unwrap();
        let level: usize = n.parse().unwrap_or_else(|_| panic!("no level: {line}"));
        // The modules come first, separated by ", "; two spaces start a note.
        let names = rest.trim_start().split("  ").next().unwrap();
        for m in names.split(',') {
            out.insert(m.trim().to_string(), level);
        }
    }
    out
}

/// The real graph: the library's, and `main` with what main.rs names
/// through `gpu_guard::`.
fn real() -> Graph {
    let mut g = super::module_graph::graph();
    let main =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/main.rs")).unwrap();
    let uses = super::module_graph::referenced(
        &super::module_graph::code_only(&main).replace("gpu_guard::", "crate::"),
    );
    g.insert("main".to_string(), uses);
    g
}

/// Each module's longest import path down to a module that imports nothing.
fn levels(g: &Graph) -> BTreeMap<String, usize> {
    fn level(m: &str, g: &Graph, memo: &mut BTreeMap<String, usize>) -> usize {
        if let Some(l) = memo.get(m) {
            return *l;
        }
        let l = g
            .get(m)
            .into_iter()
            .flatten()
            .map(|d| level(d, g, memo) + 1)
            .max()
            .unwrap_or(0);
        memo.insert(m.to_string(), l);
        l
    }
    let mut memo = BTreeMap::new();
    for m in g.keys() {
        level(m, g, &mut memo);
    }
    memo
}

#[test]
fn the_design_page_draws_the_module_graph_the_code_has() {
    let blocks = text_blocks(&design());
    assert!(
        blocks.len() >= 2,
        "docs/design.md needs its two text blocks"
    );
    let drawn = drawn_edges(&blocks[0]);
    let real = real();
    let mut diff = Vec::new();
    for m in drawn.keys().chain(real.keys()).collect::<BTreeSet<_>>() {
        let (d, r) = (drawn.get(m), real.get(m));
        if d != r {
            diff.push(format!("{m}: drawn {d:?}, in the code {r:?}"));
        }
    }
    assert!(
        diff.is_empty(),
        "docs/design.md's module graph is not the code's:\n{}",
        diff.join("\n")
    );
    let want = levels(&real);
    let got = drawn_levels(&blocks[1]);
    assert_eq!(got, want, "docs/design.md's levels");
}

#[test]
fn the_diagram_check_reads_what_it_is_given() {
    let g = drawn_edges("a ─> b, c\nb ─> c\nc ─> (nothing)\n");
    assert_eq!(g["a"], BTreeSet::from(["b".into(), "c".into()]));
    assert!(g["c"].is_empty());
    let l = levels(&g);
    assert_eq!((l["a"], l["b"], l["c"]), (2, 1, 0));
    let d = drawn_levels("2  a        note, with a comma\n1  b, x\n0  c\n");
    assert_eq!(d["a"], 2);
    assert_eq!(d["x"], 1);
    assert_eq!(d.len(), 4);
    assert_eq!(
        text_blocks("x\n```text\nA\n```\n```sh\nB\n```\n```text\nC\n```\n"),
        ["A\n", "C\n"]
    );
}
