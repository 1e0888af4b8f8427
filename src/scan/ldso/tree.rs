//! The resolution tree of one judged object, as `lddtree` prints one:
//! each dependency under the object that first loaded it, expanded once,
//! the injected driver libraries marked (`scan --rootfs DIR --libraries`).

use super::loader::{Outcome, Session};
use super::snapshot::Snapshot;
use crate::core::libraries::RequestKind;
use std::collections::HashSet;

/// One line of the resolution tree (`scan --rootfs --libraries`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Line {
    pub depth: usize,
    pub name: String,
    /// Where it was found (None: not found or refused).
    pub path: Option<String>,
    pub via: RequestKind,
    pub injected: bool,
    /// "not found", the loader's error, "shown above".
    pub note: Option<String>,
}

/// One judged object's tree.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Tree {
    pub root: String,
    pub lines: Vec<Line>,
}

/// Lines printed for one object before the rest is cut.
const MAX_LINES: usize = 2000;

/// The tree of a session's root.
pub fn tree_of(s: &Session, _snap: &Snapshot) -> Tree {
    let root = s
        .root
        .map(|r| s.objs[r].realname.clone())
        .unwrap_or_default();
    let mut t = Tree {
        root,
        lines: Vec::new(),
    };
    let Some(r) = s.root else {
        if let Some(f) = &s.fatal {
            t.lines.push(Line {
                depth: 1,
                name: String::new(),
                path: None,
                via: RequestKind::Needed,
                injected: false,
                note: Some(f.clone()),
            });
        }
        return t;
    };
    let mut expanded = HashSet::new();
    expand(s, r, 1, &mut expanded, &mut t.lines);
    t
}

fn expand(
    s: &Session,
    o: usize,
    depth: usize,
    expanded: &mut HashSet<usize>,
    lines: &mut Vec<Line>,
) {
    if !expanded.insert(o) || depth > 64 {
        return;
    }
    for e in s.edges[s.edges_before_root..]
        .iter()
        .filter(|e| e.from == o)
    {
        if lines.len() >= MAX_LINES {
            return;
        }
        let via = e.via;
        let (path, injected, note, next) = match &e.outcome {
            Outcome::Found(n) => {
                let obj = &s.objs[*n];
                (Some(obj.realname.clone()), obj.injected, None, Some(*n))
            }
            Outcome::NotFound { .. } => (None, false, Some("not found".into()), None),
            Outcome::Fatal(m) => (None, false, Some(m.clone()), None),
            Outcome::Unjudged(m) => (None, false, Some(format!("not judged: {m}")), None),
        };
        lines.push(Line {
            depth,
            name: e.name.rsplit('/').next().unwrap_or(&e.name).to_string(),
            path,
            via,
            injected,
            note,
        });
        if let Some(n) = next {
            if !s.objs[n].preloaded && !s.objs[n].injected {
                expand(s, n, depth + 1, expanded, lines);
            }
        }
    }
}
