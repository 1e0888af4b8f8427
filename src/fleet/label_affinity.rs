//! The label-only node affinity (`check --affinity` without `--nodes`, and
//! the admission webhook): `nodeSelectorTerms` over node labels alone (GPU
//! Feature Discovery's `nvidia.com/...` and gpu-guard's `gpu-guard.io/...`,
//! never `matchFields`) that admit exactly the labelled nodes `check
//! --nodes` allows.
//!
//! Exact by construction, not by translating requirement syntax: the facts
//! a node's labels give ([`super::nodes`]) are a driver version, a CUDA
//! version, a compute capability (each a tuple of integers or absent), a
//! GPU count and a brand. Every comparison the decision makes against
//! them is against a constant (the requirements' versions; with a scanned
//! image, its architectures, PTX ISA versions and compat libraries; the
//! CUDA tables), so cutting each axis at those constants leaves cells on
//! which the decision cannot change. Each cell is judged once per brand
//! value by the real per-node judgement ([`super::Subject::judge_host`]) on
//! labels built for it and read back by the node reader, at its lowest
//! point and at its highest; a cell where the two disagree (a constant
//! missed) is taken as refused and the affinity is marked not exact. The
//! allowed cells are then covered by boxes, grown per brand set, and the
//! boxes written as label expressions ([`super::label_exprs`]), a brand set
//! as one `gpu-guard.io/brand In` list and a set of whole driver branches
//! as one `gpu-guard.io/driver.branch In` list. Every term admits only
//! allowed cells, so dropping terms (past [`MAX_TERMS`]) only narrows it.

use super::label_exprs::{self as lx, Dnf, Family};
use super::label_grid::{axes, judge_grid, Axis, Grid, ABSENT, ALL, MIXED_BIT, N_VALUES};
use super::labels;
use super::selector::{self, Expr, Term};
use super::Subject;
use crate::core::facts::BRANDS;
use std::collections::BTreeMap;

/// The label affinity and how far it can be trusted.
#[derive(Clone, Debug)]
pub struct LabelAffinity {
    pub terms: Vec<Term>,
    /// True when the terms admit exactly the labelled nodes `check
    /// --nodes` allows; false when they admit fewer (never more).
    pub exact: bool,
    pub notes: Vec<String>,
}

/// At most this many terms, and [`MAX_EXPRESSIONS`] expressions in all:
/// the API server sets no count, but the pod object must stay far below
/// etcd's 1.5 MiB request limit (`--max-request-bytes`) with the pod's
/// own spec, and the scheduler evaluates every term on every node for
/// every pod. 64 terms of a few expressions are a few KiB; NVIDIA's
/// official images need at most six.
pub const MAX_TERMS: usize = 64;
pub const MAX_EXPRESSIONS: usize = 1024;
/// A driver-branch `In` list longer than this stays a range.
const MAX_BRANCHES: u64 = 64;
/// A box of slots (inclusive) on every axis, for one brand set.
type SlotBox = Vec<(usize, usize)>;

fn box_ok(g: &Grid, b: &SlotBox, s: u32) -> bool {
    let mut coord: Vec<usize> = b.iter().map(|r| r.0).collect();
    loop {
        if g.masks[g.index(&coord)] & s != s {
            return false;
        }
        let mut axis = coord.len();
        loop {
            if axis == 0 {
                return true;
            }
            axis -= 1;
            if coord[axis] < b[axis].1 {
                coord[axis] += 1;
                break;
            }
            coord[axis] = b[axis].0;
        }
    }
}

/// Grows a box from `start` while it stays within the cells allowing all
/// of `s`: the last axes first (compute capability, CUDA), then drivers.
fn grow(g: &Grid, start: &[usize], s: u32) -> SlotBox {
    let mut b: SlotBox = start.iter().map(|&c| (c, c)).collect();
    for axis in (0..b.len()).rev() {
        loop {
            let mut t = b.clone();
            if t[axis].1 + 1 >= g.sizes[axis] {
                break;
            }
            t[axis].1 += 1;
            if !box_ok(g, &t, s) {
                break;
            }
            b = t;
        }
        loop {
            let mut t = b.clone();
            if t[axis].0 == 0 {
                break;
            }
            t[axis].0 -= 1;
            if !box_ok(g, &t, s) {
                break;
            }
            b = t;
        }
    }
    b
}

fn in_box(coord: &[usize], b: &SlotBox) -> bool {
    coord.iter().zip(b).all(|(c, (lo, hi))| lo <= c && c <= hi)
}

/// Boxes covering every allowed (cell, brand value). Cells allowing every
/// value first (no brand expression); then the brand values grouped by the
/// cells that allow them (NVIDIA's lists name the same brands on every
/// forward-compatibility branch), each group's cells covered by boxes.
fn cover(g: &Grid) -> Vec<(SlotBox, u32)> {
    let mut classes: BTreeMap<Vec<usize>, u32> = BTreeMap::new();
    for v in 0..N_VALUES {
        let cells: Vec<usize> = (0..g.cells())
            .filter(|&i| g.masks[i] >> v & 1 == 1)
            .collect();
        if !cells.is_empty() {
            *classes.entry(cells).or_default() |= 1 << v;
        }
    }
    let mut order: Vec<(Vec<usize>, u32)> = classes.into_iter().collect();
    order.sort_by_key(|(_, k)| (std::cmp::Reverse(k.count_ones()), *k));
    let mut covered = vec![0u32; g.cells()];
    let mut out = Vec::new();
    let sets = std::iter::once((Vec::new(), ALL)).chain(order);
    for (cells, k) in sets {
        let targets: Vec<usize> = if k == ALL {
            (0..g.cells()).filter(|&i| g.masks[i] == ALL).collect()
        } else {
            cells
        };
        for i in targets {
            if covered[i] & k == k {
                continue;
            }
            let b = grow(g, &g.coord(i), k);
            for (j, c) in covered.iter_mut().enumerate() {
                if in_box(&g.coord(j), &b) {
                    *c |= k;
                }
            }
            out.push((b, k));
        }
    }
    out
}

/// The brand expression for a set of brand values.
fn brand_expr(s: u32) -> Option<Expr> {
    let value = |i: usize| -> &'static str {
        if i == 1 {
            labels::MIXED
        } else {
            BRANDS[i - 2]
        }
    };
    if s == ALL {
        return None;
    }
    let pick = |inside: bool| -> Vec<&str> {
        (1..N_VALUES)
            .filter(|i| (s >> i & 1 == 1) == inside)
            .map(value)
            .collect()
    };
    Some(if s & ABSENT != 0 {
        Expr::new(
            labels::BRAND,
            "NotIn",
            &pick(false)
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>(),
        )
    } else {
        Expr::is_in(labels::BRAND, &pick(true))
    })
}

/// A box's driver range as whole branches `[a, b)`, when it is one.
fn whole_branches(axis: &Axis, r: (usize, usize)) -> Option<(u64, u64)> {
    let (lo, hi) = (axis.lo(r.0), axis.hi(r.1)?);
    let whole = lo[1..].iter().chain(&hi[1..]).all(|&x| x == 0);
    (whole && hi[0] > lo[0] && hi[0] - lo[0] <= MAX_BRANCHES).then_some((lo[0], hi[0]))
}

/// A logical term: a box (its driver axis possibly a branch list) and a
/// brand set.
struct Logical {
    b: SlotBox,
    s: u32,
    branches: Option<Vec<u64>>,
}

/// Merges boxes that differ only in whole driver branches into one
/// `gpu-guard.io/driver.branch In` list (only where the brand label, and
/// so the branch label, must exist).
fn merge_branches(g: &Grid, boxes: Vec<(SlotBox, u32)>) -> Vec<Logical> {
    let mut out: Vec<Logical> = Vec::new();
    for (b, s) in boxes {
        let branches = (s & (ABSENT | MIXED_BIT) == 0)
            .then(|| whole_branches(&g.axes[0], b[0]))
            .flatten();
        let Some((lo, hi)) = branches else {
            out.push(Logical {
                b,
                s,
                branches: None,
            });
            continue;
        };
        let same = out
            .iter_mut()
            .find(|l| l.s == s && l.branches.is_some() && l.b[1..] == b[1..]);
        match same {
            Some(l) => l.branches.get_or_insert_with(Vec::new).extend(lo..hi),
            None => out.push(Logical {
                b,
                s,
                branches: Some((lo..hi).collect()),
            }),
        }
    }
    out
}

/// A logical term as label terms, once per driver-label family.
fn write(g: &Grid, l: &Logical) -> Vec<Vec<Expr>> {
    let range = |i: usize| g.axes[i].range(l.b[i].0, l.b[i].1);
    let mut rest: Dnf = lx::and(
        &lx::cc_dnf(&range(2)),
        &match g.axes.get(3) {
            Some(_) => lx::count_dnf(&range(3)),
            None => vec![Vec::new()],
        },
    );
    if let Some(e) = brand_expr(l.s) {
        rest = lx::and(&rest, &vec![vec![e]]);
    }
    let mut out = Vec::new();
    for f in Family::ALL {
        let driver: Dnf = match &l.branches {
            Some(br) => {
                let v: Vec<String> = br.iter().map(u64::to_string).collect();
                vec![vec![Expr::new(labels::DRIVER_BRANCH, "In", &v)]]
            }
            None => {
                let r = range(0);
                match (r.full, r.interval) {
                    (false, Some((lo, hi))) => lx::range_dnf(f.driver(), &lo, hi.as_deref(), true),
                    _ => vec![Vec::new()],
                }
            }
        };
        let cuda = lx::single_dnf(f.cuda(), &range(1));
        let fam = lx::and(&lx::and(&vec![f.guard()], &driver), &cuda);
        out.extend(lx::and(&fam, &rest).into_iter().filter_map(lx::simplify));
    }
    out
}

/// The label affinity for `subject`.
pub fn label_terms(subject: &Subject) -> LabelAffinity {
    let mut notes = vec![format!(
        "over node labels only: GPU Feature Discovery's nvidia.com/cuda.driver-version.*, cuda.runtime-version.* (or the deprecated cuda.driver.*, cuda.runtime.*) and gpu.compute.*, and gpu-guard's {} and {} (gpu-guard host --node-labels); a node without them is not admitted",
        labels::BRAND,
        labels::DRIVER_BRANCH
    )];
    let Some(grid) = judge_grid(subject, axes(subject)) else {
        notes.push("the requirements compare with too many versions to judge; this affinity admits no node (stricter than gpu-guard, not exact)".into());
        return LabelAffinity {
            terms: vec![selector::admits_none()],
            exact: false,
            notes,
        };
    };
    let mut exact = grid.consistent;
    if !exact {
        notes.push("some nodes could not be judged alike within a range; they are not admitted (stricter than gpu-guard, not exact)".into());
    }
    let logical = merge_branches(&grid, cover(&grid));
    let mut terms: Vec<Term> = Vec::new();
    let mut exprs = 0usize;
    for t in logical.iter().flat_map(|l| write(&grid, l)) {
        let term = Term {
            match_expressions: t,
            match_fields: Vec::new(),
        };
        if terms.contains(&term) {
            continue;
        }
        if terms.len() == MAX_TERMS || exprs + term.match_expressions.len() > MAX_EXPRESSIONS {
            exact = false;
            notes.push(format!("more than {MAX_TERMS} terms or {MAX_EXPRESSIONS} expressions; the rest are left out, so this affinity admits fewer nodes than gpu-guard allows (not exact)"));
            break;
        }
        exprs += term.match_expressions.len();
        terms.push(term);
    }
    if terms.is_empty() {
        notes
            .push("the container is allowed on no labelled node; this affinity admits none".into());
        terms.push(selector::admits_none());
    }
    if let Err(e) = selector::validate(&terms) {
        notes.push(format!(
            "internal: the terms fail the API server's rules ({e}); this affinity admits none"
        ));
        return LabelAffinity {
            terms: vec![selector::admits_none()],
            exact: false,
            notes,
        };
    }
    LabelAffinity {
        terms,
        exact,
        notes,
    }
}
