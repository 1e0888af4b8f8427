//! The allowed cells of a judged label grid ([`super::label_judge`])
//! covered by boxes, and the boxes written as node-selector terms.
//!
//! A cell of the node axes (driver, CUDA, count) allows, per brand value,
//! a set of compute capabilities. Cells and brand values that allow the
//! same set are covered by boxes, grown as far as every cell inside allows
//! at least that set for every brand value of the box; a box becomes one
//! term: a range per axis, a brand list and the set of capabilities
//! ([`super::label_exprs::cc_dnf`]). Every term admits only allowed nodes,
//! and every allowed (cell, brand, capability) is in some term. Boxes that
//! differ only in whole driver branches become one
//! `gpu-guard.io/driver.branch In` list.

use super::label_exprs::{self as lx, CcSet, Dnf};
use super::label_grid::Axis;
use super::label_judge::{Bits, Judged, ABSENT, ALL, N_VALUES};
use super::labels;
use super::node_facts::Source;
use super::selector::Expr;
use crate::core::facts::BRANDS;
use std::collections::{BTreeMap, BTreeSet};

/// A box of slots (inclusive) on every node axis.
type SlotBox = Vec<(usize, usize)>;
/// A driver-branch `In` list longer than this stays a range.
const MAX_BRANCHES: u64 = 64;

/// A logical term: a box (its driver axis possibly a branch list), a
/// brand set and the compute capabilities.
pub(super) struct Logical {
    b: SlotBox,
    s: u32,
    cc: Bits,
    branches: Option<Vec<u64>>,
}

/// Calls `f` with the index of every cell of box `b` until it returns
/// false; true when it never did.
fn all_in_box(j: &Judged, b: &SlotBox, mut f: impl FnMut(usize) -> bool) -> bool {
    let mut coord: Vec<usize> = b.iter().map(|r| r.0).collect();
    loop {
        if !f(j.index(&coord)) {
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

/// Grows a box from `start` while `ok` holds on every cell: the last axes
/// first (count, CUDA), then drivers.
fn grow(j: &Judged, start: &[usize], ok: &dyn Fn(usize) -> bool) -> SlotBox {
    let mut b: SlotBox = start.iter().map(|&c| (c, c)).collect();
    for axis in (0..b.len()).rev() {
        for up in [true, false] {
            loop {
                let mut t = b.clone();
                if up && t[axis].1 + 1 < j.sizes[axis] {
                    t[axis].1 += 1;
                } else if !up && t[axis].0 > 0 {
                    t[axis].0 -= 1;
                } else {
                    break;
                }
                if !all_in_box(j, &t, ok) {
                    break;
                }
                b = t;
            }
        }
    }
    b
}

/// The brand values of cell `i` whose allowed set contains `a` (every
/// value on a cell where no label value lies: nothing to place there).
fn ok_values(j: &Judged, i: usize, a: &Bits) -> u32 {
    if j.empty[i] {
        return ALL;
    }
    (0..N_VALUES)
        .filter(|&v| j.allowed[i][v].contains(a))
        .fold(0, |m, v| m | 1 << v)
}

/// Boxes covering every allowed (cell, brand value, capability).
fn cover(j: &Judged) -> Vec<(SlotBox, u32, Bits)> {
    let mut sets: BTreeMap<&Bits, usize> = BTreeMap::new();
    for per in &j.allowed {
        for a in per.iter().filter(|a| !a.is_empty()) {
            *sets.entry(a).or_default() += 1;
        }
    }
    let mut order: Vec<(&Bits, usize)> = sets.into_iter().collect();
    order.sort_by_key(|(a, n)| (std::cmp::Reverse(*n), (*a).clone()));
    let mut out = Vec::new();
    for (a, _) in order {
        out.extend(cover_set(j, a));
    }
    out
}

/// The boxes for the (cell, brand value) pairs that allow exactly `a`.
fn cover_set(j: &Judged, a: &Bits) -> Vec<(SlotBox, u32, Bits)> {
    let need: Vec<u32> = j
        .allowed
        .iter()
        .map(|per| {
            (0..N_VALUES)
                .filter(|&v| per[v] == *a)
                .fold(0, |m, v| m | 1 << v)
        })
        .collect();
    // Brand values grouped by the cells that need them (NVIDIA's lists
    // name the same brands on every forward-compatibility branch).
    let mut classes: BTreeMap<Vec<usize>, u32> = BTreeMap::new();
    for v in 0..N_VALUES {
        let cells: Vec<usize> = (0..j.cells()).filter(|&i| need[i] >> v & 1 == 1).collect();
        if !cells.is_empty() {
            *classes.entry(cells).or_default() |= 1 << v;
        }
    }
    let mut groups: Vec<(Vec<usize>, u32)> = classes.into_iter().collect();
    groups.sort_by_key(|(_, k)| (std::cmp::Reverse(k.count_ones()), *k));
    let all_cells: Vec<usize> = (0..j.cells())
        .filter(|&i| need[i] != 0 && ok_values(j, i, a) == ALL)
        .collect();
    let mut covered = vec![0u32; j.cells()];
    let mut out = Vec::new();
    for (cells, k) in std::iter::once((all_cells, ALL)).chain(groups) {
        for i in cells {
            let want = need[i] & k;
            if want == 0 || covered[i] & want == want {
                continue;
            }
            let ok = |c: usize| ok_values(j, c, a) & k == k;
            let b = grow(j, &j.coord(i), &ok);
            all_in_box(j, &b, |c| {
                covered[c] |= k;
                true
            });
            out.push((b, k, a.clone()));
        }
    }
    out
}

/// A box's driver range as whole branches `[a, b)`, when it is one.
fn whole_branches(source: Source, axis: &Axis, r: (usize, usize)) -> Option<(u64, u64)> {
    let (lo, hi) = (axis.lo(r.0), axis.hi(r.1)?);
    let (a, b) = match source {
        Source::Own => {
            let whole = lo[0] % 1_000_000 == 0 && hi[0] % 1_000_000 == 0;
            (whole.then_some((lo[0] / 1_000_000, hi[0] / 1_000_000)))?
        }
        Source::Gfd | Source::GfdDeprecated => {
            let whole = lo[1..].iter().chain(&hi[1..]).all(|&x| x == 0);
            (whole.then_some((lo[0], hi[0])))?
        }
    };
    (b > a && b - a <= MAX_BRANCHES).then_some((a, b))
}

/// The cover as logical terms, boxes that differ only in whole driver
/// branches merged into one branch list (only where the branch label
/// must exist: on gpu-guard's nodes, and with a brand label).
pub(super) fn logical_terms(j: &Judged) -> Vec<Logical> {
    let mut out: Vec<Logical> = Vec::new();
    for (b, s, cc) in cover(j) {
        let labelled = j.source == Source::Own || s & ABSENT == 0;
        let branches = labelled
            .then(|| whole_branches(j.source, &j.axes.node[0], b[0]))
            .flatten();
        let Some((lo, hi)) = branches else {
            out.push(Logical {
                b,
                s,
                cc,
                branches: None,
            });
            continue;
        };
        let same = out
            .iter_mut()
            .find(|l| l.s == s && l.cc == cc && l.branches.is_some() && l.b[1..] == b[1..]);
        match same {
            Some(l) => l.branches.get_or_insert_with(Vec::new).extend(lo..hi),
            None => out.push(Logical {
                b,
                s,
                cc,
                branches: Some((lo..hi).collect()),
            }),
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
    let pick = |inside: bool| -> Vec<String> {
        (1..N_VALUES)
            .filter(|i| (s >> i & 1 == 1) == inside)
            .map(|i| value(i).to_string())
            .collect()
    };
    Some(if s & ABSENT != 0 {
        Expr::new(labels::BRAND, "NotIn", &pick(false))
    } else {
        Expr::new(labels::BRAND, "In", &pick(true))
    })
}

/// The compute capabilities of a term as runs of `sm` numbers; None when
/// the set holds every capability a label can hold (no constraint).
fn cc_set(axis: &Axis, bits: &Bits) -> Option<CcSet> {
    let absent = axis.absent && bits.get(0);
    let mut runs: Vec<(u64, Option<u64>)> = Vec::new();
    let mut open: Option<u64> = None;
    let mut every = true;
    for slot in usize::from(axis.absent)..axis.slots() {
        if axis.empty(slot) {
            continue;
        }
        let k = axis.interval(slot).unwrap_or(0);
        if bits.get(slot) {
            open.get_or_insert(axis.lo(k)[0]);
        } else {
            every = false;
            if let Some(lo) = open.take() {
                runs.push((lo, Some(axis.lo(k)[0])));
            }
        }
    }
    if let Some(lo) = open {
        runs.push((lo, None));
    }
    if every && (absent || !axis.absent) {
        return None;
    }
    Some(CcSet { runs, absent })
}

/// What every term of one affinity shares.
pub(super) struct Writing {
    /// The container is given every GPU (else: GPUs by index or UUID).
    pub(super) all_gpus: bool,
    /// The pod's GPU count: nodes labelled with fewer healthy are left out.
    pub(super) wanted: u32,
}

/// A logical term as label terms.
pub(super) fn write(j: &Judged, l: &Logical, w: &Writing) -> Dnf {
    let src = j.source;
    let range = |i: usize| j.axes.node[i].range(l.b[i].0, l.b[i].1);
    let driver: Dnf = match &l.branches {
        Some(br) => {
            let v: Vec<String> = br.iter().map(u64::to_string).collect();
            vec![vec![Expr::new(labels::DRIVER_BRANCH, "In", &v)]]
        }
        None => {
            let r = range(0);
            match (r.full, r.interval) {
                (false, Some((lo, hi))) => {
                    lx::range_dnf(src.driver(), &lo, hi.as_deref(), src.optional_last())
                }
                _ => vec![Vec::new()],
            }
        }
    };
    let mut t = lx::and(&vec![src.guard()], &driver);
    t = lx::and(&t, &lx::single_dnf(src.cuda(), &range(1)));
    if j.axes.node.len() > 2 {
        t = lx::and(&t, &lx::count_dnf(src, &range(2)));
    }
    if let Some(e) = brand_expr(l.s) {
        t = lx::and(&t, &vec![vec![e]]);
    }
    if let Some(set) = cc_set(&j.axes.cc, &l.cc) {
        t = lx::and(&t, &lx::cc_dnf(&set, w.all_gpus));
    }
    let unhealthy: Vec<String> = (0..w.wanted).map(|n| n.to_string()).collect();
    if !unhealthy.is_empty() {
        t = lx::and(
            &t,
            &vec![vec![Expr::new(labels::HEALTHY, "NotIn", &unhealthy)]],
        );
    }
    let mut seen = BTreeSet::new();
    t.into_iter()
        .filter_map(lx::simplify)
        .filter(|e| seen.insert(e.clone()))
        .collect()
}
