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

use super::label_exprs::{self as lx, AxisRange, Dnf, Family, Point};
use super::labels;
use super::nodes::{self, NodeLabels, CC_GFD, COUNT, CUDA_NEW, DRIVER_NEW};
use super::selector::{self, Expr, Term};
use super::Subject;
use crate::core::decision::Verdict;
use crate::core::facts::BRANDS;
use crate::core::requirement::{Key, Operand};
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
/// Cells x brand values judged at most (a hostile requirement with
/// thousands of constants gets the strict fallback instead).
const MAX_JUDGED: usize = 400_000;
/// A driver-branch `In` list longer than this stays a range.
const MAX_BRANCHES: u64 = 64;
const U32: u64 = u32::MAX as u64;

/// Brand values: absent label, `mixed`, then each NVML brand.
const N_VALUES: usize = 2 + BRANDS.len();
const ALL: u32 = (1 << N_VALUES) - 1;
const ABSENT: u32 = 1;
const MIXED_BIT: u32 = 2;

/// One fact over `parts` numeric labels, cut at `cuts`; `absent`: the
/// labels may be missing (a slot of its own, before the intervals).
struct Axis {
    parts: usize,
    cuts: Vec<Point>,
    absent: bool,
}

impl Axis {
    fn new(parts: usize, absent: bool, raw: Vec<Point>) -> Axis {
        let mut cuts: Vec<Point> = raw
            .into_iter()
            .map(|mut p| {
                p.resize(parts, 0);
                p
            })
            .filter(|p| p.iter().any(|&x| x > 0))
            .collect();
        cuts.sort();
        cuts.dedup();
        Axis {
            parts,
            cuts,
            absent,
        }
    }
    fn slots(&self) -> usize {
        usize::from(self.absent) + self.cuts.len() + 1
    }
    /// The interval index of a slot; None for the absent slot.
    fn interval(&self, slot: usize) -> Option<usize> {
        match (self.absent, slot) {
            (true, 0) => None,
            (true, s) => Some(s - 1),
            (false, s) => Some(s),
        }
    }
    fn lo(&self, k: usize) -> Point {
        if k == 0 {
            vec![0; self.parts]
        } else {
            self.cuts[k - 1].clone()
        }
    }
    fn hi(&self, k: usize) -> Option<Point> {
        self.cuts.get(k).cloned()
    }
    /// The lowest and highest point of a slot a label can hold (parts of 32
    /// bits); empty when none can; `[None]` for the absent slot.
    fn samples(&self, slot: usize) -> Vec<Option<Point>> {
        let Some(k) = self.interval(slot) else {
            return vec![None];
        };
        let lo = self.lo(k);
        if lo.iter().any(|&x| x > U32) {
            return Vec::new();
        }
        let top = match self.hi(k) {
            None => vec![U32; self.parts],
            Some(h) => predecessor(&h),
        };
        if top <= lo {
            vec![Some(lo)]
        } else {
            vec![Some(lo), Some(top)]
        }
    }
    fn range(&self, a: usize, b: usize) -> AxisRange {
        let first = self.interval(a).unwrap_or(0);
        let interval = self.interval(b).map(|last| (self.lo(first), self.hi(last)));
        AxisRange {
            absent: self.absent && a == 0,
            interval,
            full: a == 0 && b + 1 == self.slots(),
        }
    }
}

/// The point just below `p` with parts of 32 bits.
fn predecessor(p: &[u64]) -> Point {
    let mut out = p.to_vec();
    for i in (0..out.len()).rev() {
        if out[i] > 0 {
            out[i] = (out[i] - 1).min(U32);
            return out;
        }
        out[i] = U32;
    }
    out
}

/// `v` cut to `parts`, and the point just after it: a comparison with `v`
/// changes only there.
fn cut_pair(v: &[u64], parts: usize) -> [Point; 2] {
    let mut t: Point = v.iter().copied().take(parts).collect();
    t.resize(parts, 0);
    let mut next = t.clone();
    if let Some(last) = next.last_mut() {
        *last += 1;
    }
    [t, next]
}

fn version_parts(v: &crate::core::version::Version) -> Point {
    (0..8).map(|i| v.part(i)).collect()
}

/// The constants the decision compares each axis with.
struct Cuts {
    driver: Vec<Point>,
    cuda: Vec<Point>,
    cc: Vec<Point>,
    count: Option<Vec<Point>>,
}

fn requirement_cuts(subject: &Subject, c: &mut Cuts) {
    for f in subject
        .requirements
        .iter()
        .flat_map(|r| &r.any_of)
        .flat_map(|a| &a.factors)
    {
        let (Operand::Version(v), Some(key)) = (&f.operand, f.key) else {
            continue;
        };
        let p = version_parts(v);
        match key {
            Key::Driver => c.driver.extend(cut_pair(&p, 3)),
            Key::Cuda => c.cuda.extend(cut_pair(&p, 2)),
            Key::Arch => c.cc.extend(cut_pair(&p, 2)),
            Key::Brand => {}
        }
    }
}

/// With a scanned image: its architectures (and the ones where NVIDIA's
/// binary-compatibility rules change: Tegra, the next major, a minor of
/// two digits gpu-guard cannot read), the CUDA its PTX needs, the CUDA
/// tables' driver minimums and branches, and the compat libraries' notes.
fn scan_cuts(subject: &Subject, c: &mut Cuts) {
    use crate::core::arch::{ptx_isa_needs, IsaNeed, PTX_ISA_TO_CUDA};
    let Some(s) = &subject.scanned else {
        return;
    };
    let images = s
        .libraries
        .iter()
        .filter_map(|l| l.outcome.as_ref().ok())
        .flatten();
    for i in images {
        let (x, y) = (u64::from(i.arch.major()), u64::from(i.arch.minor()));
        c.cc.extend([vec![x, y], vec![x, y + 1], vec![x + 1, 0], vec![x, 10]]);
        if let Some(isa) = i.ptx_isa {
            match ptx_isa_needs(isa) {
                IsaNeed::Cuda(a, b) => c.cuda.extend(cut_pair(&[a.into(), b.into()], 2)),
                IsaNeed::Unknown => {
                    let (a, b) = PTX_ISA_TO_CUDA.last().map(|(_, c)| *c).unwrap_or((0, 0));
                    c.cuda.extend(cut_pair(&[a.into(), b.into()], 2));
                }
            }
        }
    }
    for (x, y) in [
        (3, 2),
        (5, 3),
        (6, 2),
        (7, 2),
        (8, 7),
        (10, 1),
        (11, 0),
        (1, 0),
        (100, 0),
    ] {
        c.cc.extend(cut_pair(&[x, y], 2));
    }
    let tables = crate::core::cuda_tables::TOOLKIT_MIN_DRIVER
        .iter()
        .map(|(t, d)| (*t, *d));
    let family = crate::core::cuda_tables::MINOR_VERSION_FAMILY_MIN_DRIVER
        .iter()
        .map(|(_, d)| ("", *d));
    for (tk, d) in tables.chain(family) {
        if let Ok(v) = crate::core::version::Version::parse(d) {
            let p = version_parts(&v);
            c.driver.extend(cut_pair(&p, 3));
            c.driver.extend(cut_pair(&p[..1], 3));
        }
        if let Ok(v) = crate::core::version::Version::parse(tk) {
            c.cuda.extend(cut_pair(&version_parts(&v), 2));
        }
    }
}

fn compat_cuts(subject: &Subject, c: &mut Cuts) {
    let Some(scan) = &subject.compat else {
        return;
    };
    for lib in &scan.libs {
        if let Ok(v) = crate::core::version::Version::parse(&lib.version) {
            let p = version_parts(&v);
            c.driver.extend(cut_pair(&p, 3));
            c.driver.extend(cut_pair(&p[..1], 3));
        }
        let Ok(note) = &lib.note else {
            continue;
        };
        for b in note.driver.iter().flatten().filter(|b| **b >= 0) {
            c.driver.extend(cut_pair(&[*b as u64], 3));
        }
        if let Some(v) = note
            .cuda_version
            .as_deref()
            .and_then(|v| crate::core::version::Version::parse(v).ok())
        {
            c.cuda.extend(cut_pair(&version_parts(&v), 2));
        }
    }
}

/// A request naming GPUs by index needs that many: the count matters.
fn count_cuts(subject: &Subject) -> Option<Vec<Point>> {
    let req = &subject.detection.request;
    if req.all || req.devices.is_empty() {
        return None;
    }
    let mut cuts = vec![vec![65]];
    for d in &req.devices {
        let first = d.name.split(':').next().unwrap_or("");
        if let Ok(i) = first.parse::<u64>() {
            cuts.push(vec![i.saturating_add(1)]);
        }
    }
    Some(cuts)
}

/// The axes: driver, CUDA, compute capability and, when it matters, count.
fn axes(subject: &Subject) -> Vec<Axis> {
    let mut c = Cuts {
        driver: Vec::new(),
        cuda: Vec::new(),
        cc: Vec::new(),
        count: count_cuts(subject),
    };
    requirement_cuts(subject, &mut c);
    scan_cuts(subject, &mut c);
    compat_cuts(subject, &mut c);
    let mut out = vec![
        Axis::new(3, false, c.driver),
        Axis::new(2, true, c.cuda),
        Axis::new(2, true, c.cc),
    ];
    if let Some(count) = c.count {
        out.push(Axis::new(1, true, count));
    }
    out
}

/// The labels of a node at one point of every axis, with brand value `v`.
fn labels_for(point: &[Option<Point>], v: usize) -> NodeLabels {
    let mut l = BTreeMap::new();
    let mut put = |keys: &[&str], p: &Option<Point>| {
        if let Some(p) = p {
            for (k, x) in keys.iter().zip(p) {
                l.insert(k.to_string(), x.to_string());
            }
        }
    };
    put(&DRIVER_NEW, &point[0]);
    put(&CUDA_NEW, &point[1]);
    put(&CC_GFD, &point[2]);
    if let Some(count) = point.get(3) {
        put(&[COUNT], count);
    }
    let major = point[0].as_ref().map(|p| p[0]).unwrap_or(0);
    let brand = match v {
        0 => None,
        1 => Some(labels::MIXED),
        i => Some(BRANDS[i - 2]),
    };
    if let Some(b) = brand {
        l.insert(labels::BRAND.into(), b.into());
        l.insert(labels::DRIVER_BRANCH.into(), major.to_string());
    }
    NodeLabels {
        name: "gpu-guard-affinity-probe".into(),
        labels: l,
    }
}

/// Allowed on a node with these labels: the judgement `check --nodes` makes.
fn allowed(subject: &Subject, node: &NodeLabels) -> bool {
    match nodes::host_from_node(node) {
        Ok(h) => subject.judge_host(&h).verdict == Verdict::Allow,
        Err(_) => false,
    }
}

/// Every cell's mask of allowed brand values, and whether the two samples
/// of every cell agreed.
struct Grid {
    axes: Vec<Axis>,
    sizes: Vec<usize>,
    masks: Vec<u32>,
    consistent: bool,
}

impl Grid {
    fn cells(&self) -> usize {
        self.sizes.iter().product()
    }
    fn index(&self, coord: &[usize]) -> usize {
        coord
            .iter()
            .zip(&self.sizes)
            .fold(0, |acc, (c, s)| acc * s + c)
    }
    fn coord(&self, mut i: usize) -> Vec<usize> {
        let mut out = vec![0; self.sizes.len()];
        for (o, s) in out.iter_mut().zip(&self.sizes).rev() {
            *o = i % s;
            i /= s;
        }
        out
    }
}

/// Brand values the decision cannot tell apart, as masks: the absent
/// label and `mixed` give the same facts (brand unknown), and brands no
/// requirement names compare alike; with compat libraries (whose notes
/// list brands) every brand is its own.
fn brand_classes(subject: &Subject) -> Vec<u32> {
    let named: Vec<String> = subject
        .requirements
        .iter()
        .flat_map(|r| &r.any_of)
        .flat_map(|a| &a.factors)
        .filter_map(|f| match &f.operand {
            Operand::Brand(b) => Some(b.to_ascii_lowercase()),
            _ => None,
        })
        .collect();
    let mut classes = vec![ABSENT | MIXED_BIT];
    let mut others = 0u32;
    for (i, b) in BRANDS.iter().enumerate() {
        let bit = 1u32 << (i + 2);
        if subject.compat.is_some() || named.iter().any(|n| n == b) {
            classes.push(bit);
        } else {
            others |= bit;
        }
    }
    if others != 0 {
        classes.push(others);
    }
    classes
}

fn judge_grid(subject: &Subject, axes: Vec<Axis>) -> Option<Grid> {
    let sizes: Vec<usize> = axes.iter().map(Axis::slots).collect();
    let mut g = Grid {
        masks: Vec::new(),
        sizes,
        axes,
        consistent: true,
    };
    let classes = brand_classes(subject);
    if g.cells().saturating_mul(classes.len() * 2) > MAX_JUDGED {
        return None;
    }
    for i in 0..g.cells() {
        let coord = g.coord(i);
        let samples: Vec<Vec<Option<Point>>> = g
            .axes
            .iter()
            .zip(&coord)
            .map(|(a, &s)| a.samples(s))
            .collect();
        if samples.iter().any(Vec::is_empty) {
            g.masks.push(0);
            continue;
        }
        let low: Vec<Option<Point>> = samples.iter().map(|s| s[0].clone()).collect();
        let high: Vec<Option<Point>> = samples.iter().map(|s| s[s.len() - 1].clone()).collect();
        let mut mask = 0u32;
        for class in &classes {
            let v = class.trailing_zeros() as usize;
            let a = allowed(subject, &labels_for(&low, v));
            let b = low == high || allowed(subject, &labels_for(&high, v)) == a;
            g.consistent &= b;
            if a && b {
                mask |= class;
            }
        }
        g.masks.push(mask);
    }
    Some(g)
}

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
            for j in 0..g.cells() {
                if in_box(&g.coord(j), &b) {
                    covered[j] |= k;
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
