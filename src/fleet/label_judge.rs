//! The label grid of one source judged: for every cell of the node axes
//! (driver, CUDA, count) and every brand value, the compute capabilities
//! ([`super::label_grid::Axes::cc`] slots) on which a node with one GPU
//! model is allowed, by the per-node judgement `check --nodes` makes
//! ([`super::FleetContainer::judge_host`]) on labels written for that point and
//! read back by the node reader.
//!
//! Two parts, judged apart, on grids of their own: the judgement of the
//! GPU code ([`super::FleetContainer::kernel_judgement`]: the kernel-image findings
//! and the refusal of code labels cannot judge) reads only the visible
//! GPUs (their count and compute capability) and the driver's CUDA
//! version (crate::core::kernel_image `assess_on_host`), never the driver
//! version or the brand; the rest of the decision reads the image's code
//! only through minor-version compatibility "allow" (then the rest is cut
//! at its architectures too). `core::decide` adds the kernel-image
//! findings to the others and reads them nowhere else, and placement
//! refuses exactly when a finding is an error or predicts a failure
//! (super::placement), so a node is allowed exactly when the rest allows
//! it and no finding of the code's judgement is an error or predicts a
//! failure. Each part is judged at the lowest and the highest point of its
//! cells; a cell whose two ends disagree (a constant missed) is refused and
//! the grid marked inconsistent: stricter, never looser.
//!
//! A node with two GPU models runs the container when it runs on each:
//! every check judges each visible GPU and refuses when one fails, so the
//! allowed set of one-model nodes is all the writer needs
//! ([`super::label_exprs`] writes "`sm.min` and `sm.max` in the set").

use super::label_exprs::Point;
use super::label_grid::{axes, cc_labels, Axes, Axis, Cuts};
use super::labels;
use super::node_facts::{Source, CUDA_NEW, CUDA_OLD, DRIVER_NEW, DRIVER_OLD, GFD_COUNT};
use super::nodes::{self, NodeLabels};
use super::{FleetContainer, Host};
use crate::core::decision::Verdict;
use crate::core::facts::BRANDS;
use crate::core::requirement::Operand;
use std::collections::BTreeMap;

/// Judgements at most (a hostile requirement with thousands of constants
/// gets the strict fallback instead).
const MAX_JUDGED: usize = 400_000;

/// Brand values: absent label, `mixed`, then each NVML brand.
pub(super) const N_VALUES: usize = 2 + BRANDS.len();
pub(super) const ALL: u32 = (1 << N_VALUES) - 1;
pub(super) const ABSENT: u32 = 1;
/// The brand value `mixed`.
const MIXED_BIT: u32 = 2;

/// A set of compute-capability slots.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Bits(Vec<u64>);

impl Bits {
    pub(super) fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    pub(super) fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    pub(super) fn get(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }
    pub(super) fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    pub(super) fn contains(&self, other: &Bits) -> bool {
        self.0.iter().zip(&other.0).all(|(a, b)| a & b == *b)
    }
}

/// The judged grid of one source.
pub(super) struct Judged {
    pub(super) source: Source,
    pub(super) axes: Axes,
    pub(super) sizes: Vec<usize>,
    /// Per node cell, per brand value: the compute-capability slots allowed.
    pub(super) allowed: Vec<Vec<Bits>>,
    /// Per node cell: no label value lies in it (nothing to place there).
    pub(super) empty: Vec<bool>,
    pub(super) consistent: bool,
}

impl Judged {
    pub(super) fn cells(&self) -> usize {
        self.sizes.iter().product()
    }
    pub(super) fn coord(&self, i: usize) -> Vec<usize> {
        coord_in(&self.sizes, i)
    }
    pub(super) fn index(&self, coord: &[usize]) -> usize {
        index_in(&self.sizes, coord)
    }
}

/// The index of a cell of a grid of `sizes` slots, the last axis fastest.
pub(super) fn index_in(sizes: &[usize], coord: &[usize]) -> usize {
    coord.iter().zip(sizes).fold(0, |acc, (c, s)| acc * s + c)
}

/// The slots of cell `i` of a grid of `sizes` slots.
pub(super) fn coord_in(sizes: &[usize], mut i: usize) -> Vec<usize> {
    let mut out = vec![0; sizes.len()];
    for (o, s) in out.iter_mut().zip(sizes).rev() {
        *o = i % s;
        i /= s;
    }
    out
}

/// The labels of a node of `source` at one point (driver, CUDA, count),
/// with one GPU model `sm` and brand value `v`.
fn labels_for(source: Source, point: &[Option<Point>], sm: Option<u64>, v: usize) -> NodeLabels {
    let mut l = BTreeMap::new();
    let mut put = |keys: &[&str], p: &Option<Point>| {
        if let Some(p) = p {
            for (k, x) in keys.iter().zip(p) {
                l.insert(k.to_string(), x.to_string());
            }
        }
    };
    let major = match source {
        Source::Own => {
            put(&[labels::DRIVER_INT], &point[0]);
            put(&[labels::CUDA_INT], &point[1]);
            put(&[labels::COUNT], point.get(2).unwrap_or(&None));
            point[0].as_ref().map(|p| p[0] / 1_000_000)
        }
        Source::Gfd | Source::GfdDeprecated => {
            let (d, c) = match source {
                Source::Gfd => (&DRIVER_NEW, &CUDA_NEW),
                _ => (&DRIVER_OLD, &CUDA_OLD),
            };
            put(d, &point[0]);
            put(c, &point[1]);
            put(&[GFD_COUNT], point.get(2).unwrap_or(&None));
            point[0].as_ref().map(|p| p[0])
        }
    };
    for (k, x) in cc_labels(sm) {
        l.insert(k.to_string(), x);
    }
    let brand = match v {
        0 => None,
        1 => Some(labels::MIXED),
        i => Some(BRANDS[i - 2]),
    };
    if let Some(b) = brand {
        l.insert(labels::BRAND.into(), b.into());
    }
    if source == Source::Own || brand.is_some() {
        l.insert(labels::DRIVER_BRANCH.into(), major.unwrap_or(0).to_string());
    }
    NodeLabels {
        name: "gpu-guard-affinity-probe".into(),
        labels: l,
    }
}

fn host_for(source: Source, point: &[Option<Point>], sm: Option<u64>, v: usize) -> Option<Host> {
    nodes::host_from_node(&labels_for(source, point, sm, v)).ok()
}

/// A cell's lowest and highest point on every axis; None when some axis
/// holds no label value there.
struct Ends {
    low: Vec<Option<Point>>,
    high: Vec<Option<Point>>,
}

fn ends<'a>(slots: impl Iterator<Item = (&'a Axis, usize)>) -> Option<Ends> {
    let mut e = Ends {
        low: Vec::new(),
        high: Vec::new(),
    };
    for (axis, slot) in slots {
        let s = axis.samples(slot);
        e.low.push(s.first()?.clone());
        e.high.push(s.last()?.clone());
    }
    Some(e)
}

impl Ends {
    /// (allowed at both ends, the ends agree).
    fn judge(&self, allowed: impl Fn(&[Option<Point>]) -> bool) -> (bool, bool) {
        let a = allowed(&self.low);
        let agree = self.low == self.high || allowed(&self.high) == a;
        (a && agree, agree)
    }
}

/// Brand values the decision cannot tell apart, as masks: the absent
/// label and `mixed` give the same facts (brand unknown), and brands no
/// requirement names compare alike; with compat libraries (whose notes
/// list brands) every brand is its own.
fn brand_classes(subject: &FleetContainer) -> Vec<u32> {
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
    let compat = subject.compat().is_some_and(|c| !c.libs.is_empty());
    let mut classes = vec![ABSENT | MIXED_BIT];
    let mut others = 0u32;
    for (i, b) in BRANDS.iter().enumerate() {
        let bit = 1u32 << (i + 2);
        if compat || named.iter().any(|n| n == b) {
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

/// A cell of the rest, per brand class: (allowed, ends agree) as masks.
type Rest = Option<(u32, u32)>;
/// A cell of the code's judgement: (no refusal, ends agree).
type Kernel = Option<(bool, bool)>;

/// The grid of `source` judged, or None when it has too many cells.
pub(super) fn judge(
    subject: &FleetContainer,
    source: Source,
    fine: &Cuts,
    coarse: &Cuts,
) -> Option<Judged> {
    let f = axes(source, fine);
    let c = axes(source, coarse);
    let to_coarse: Vec<Vec<usize>> = c
        .node
        .iter()
        .chain([&c.cc])
        .zip(f.node.iter().chain([&f.cc]))
        .map(|(c, f)| c.project(f))
        .collect::<Option<_>>()?;
    let classes = brand_classes(subject);
    let c_sizes: Vec<usize> = c.node.iter().map(Axis::slots).collect();
    let rest_cost = c_sizes.iter().product::<usize>() * c.cc.slots() * classes.len() * 2;
    let kernel_sizes: Vec<usize> = f.node[1..].iter().chain([&f.cc]).map(Axis::slots).collect();
    let kernel_cost = kernel_sizes.iter().product::<usize>() * 2;
    if rest_cost.saturating_add(kernel_cost) > MAX_JUDGED {
        return None;
    }
    let rest = judge_rest(subject, source, &c, &classes);
    let kernel = subject
        .scanned()
        .is_some()
        .then(|| judge_kernel(subject, source, &f));
    let parts = Parts {
        c_sizes: &c_sizes,
        c_cc: c.cc.slots(),
        to_coarse: &to_coarse,
        rest: &rest,
        kernel: kernel.as_deref(),
    };
    Some(combine(source, f, &parts, &classes))
}

/// The rest of the decision on every cell of the coarse grid (node axes x
/// compute capability), at both ends, for each brand class.
fn judge_rest(subject: &FleetContainer, source: Source, c: &Axes, classes: &[u32]) -> Vec<Rest> {
    let allows = |p: &[Option<Point>], v: usize| {
        let (node, sm) = p.split_at(p.len() - 1);
        let sm = sm[0].as_ref().map(|x| x[0]);
        host_for(source, node, sm, v)
            .is_some_and(|h| subject.judge_host_without_kernel_image(&h).verdict == Verdict::Allow)
    };
    let mut sizes: Vec<usize> = c.node.iter().map(Axis::slots).collect();
    sizes.push(c.cc.slots());
    (0..sizes.iter().product())
        .map(|i| {
            let coord = coord_in(&sizes, i);
            let e = ends(c.node.iter().chain([&c.cc]).zip(coord))?;
            let (mut ok, mut agree) = (0u32, 0u32);
            for &class in classes {
                let v = class.trailing_zeros() as usize;
                let (o, a) = e.judge(|p| allows(p, v));
                ok |= if o { class } else { 0 };
                agree |= if a { class } else { 0 };
            }
            Some((ok, agree))
        })
        .collect()
}

/// The code's judgement on every cell of the fine grid's CUDA (and count)
/// x compute capability, at both ends: on a node with the lowest driver
/// and no brand label, which it does not read.
fn judge_kernel(subject: &FleetContainer, source: Source, f: &Axes) -> Vec<Kernel> {
    let driver = f.node[0].samples(0).first().cloned().flatten();
    let axes: Vec<&Axis> = f.node[1..].iter().chain([&f.cc]).collect();
    let sizes: Vec<usize> = axes.iter().map(|a| a.slots()).collect();
    let no_refusal = |p: &[Option<Point>]| {
        let mut node = vec![driver.clone()];
        node.extend(p[..p.len() - 1].iter().cloned());
        let sm = p[p.len() - 1].as_ref().map(|x| x[0]);
        host_for(source, &node, sm, 0).is_some_and(|h| {
            !subject
                .kernel_judgement(&h)
                .iter()
                .any(|f| f.predicts_failure || f.severity == crate::core::decision::Severity::Error)
        })
    };
    (0..sizes.iter().product())
        .map(|i| {
            let e = ends(axes.iter().copied().zip(coord_in(&sizes, i)))?;
            Some(e.judge(no_refusal))
        })
        .collect()
}

/// What [`combine`] reads.
struct Parts<'a> {
    c_sizes: &'a [usize],
    c_cc: usize,
    /// Per axis (node axes, then compute capability), each fine slot's
    /// coarse slot.
    to_coarse: &'a [Vec<usize>],
    rest: &'a [Rest],
    kernel: Option<&'a [Kernel]>,
}

/// Every fine cell's allowed compute capabilities per brand value.
fn combine(source: Source, f: Axes, parts: &Parts, classes: &[u32]) -> Judged {
    let sizes: Vec<usize> = f.node.iter().map(Axis::slots).collect();
    let n_cc = f.cc.slots();
    let mut out = Judged {
        source,
        sizes: sizes.clone(),
        allowed: Vec::new(),
        empty: Vec::new(),
        consistent: true,
        axes: f,
    };
    let k_sizes: Vec<usize> = sizes[1..].iter().copied().chain([n_cc]).collect();
    for i in 0..out.cells() {
        let coord = out.coord(i);
        let mut per_value = vec![Bits::new(n_cc); N_VALUES];
        let empty = coord.iter().zip(&out.axes.node).any(|(&s, a)| a.empty(s));
        for k in (0..n_cc).filter(|&k| !empty && !out.axes.cc.empty(k)) {
            let c: Vec<usize> = coord
                .iter()
                .chain([&k])
                .zip(parts.to_coarse)
                .map(|(&s, m)| m[s])
                .collect();
            let ci = index_in(parts.c_sizes, &c[..c.len() - 1]) * parts.c_cc + c[c.len() - 1];
            let Some((mut ok, mut agree)) = parts.rest[ci] else {
                continue;
            };
            if let Some(kernel) = parts.kernel {
                let mut kc = coord[1..].to_vec();
                kc.push(k);
                let Some((k_ok, k_agree)) = kernel[index_in(&k_sizes, &kc)] else {
                    continue;
                };
                if !k_agree {
                    agree &= !ok;
                }
                if !k_ok {
                    ok = 0;
                }
            }
            out.consistent &= classes.iter().all(|&m| agree & m == m);
            for (v, bits) in per_value.iter_mut().enumerate() {
                if ok >> v & 1 == 1 {
                    bits.set(k);
                }
            }
        }
        out.allowed.push(per_value);
        out.empty.push(empty);
    }
    out
}
