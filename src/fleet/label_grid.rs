//! The grid behind the label-only affinity ([`super::label_affinity`]):
//! the facts node labels give, each an axis cut at every constant the
//! decision compares it with, so that the decision cannot change inside a
//! cell. The cuts are found once in version space (a driver of three
//! parts, a CUDA of two, a compute capability as its `sm` number) and laid
//! on each source's labels ([`Source`]): gpu-guard's integers
//! ([`super::labels::driver_int`]), or GPU Feature Discovery's part labels.

use super::label_exprs::{AxisRange, Point};
use super::labels::{self, SM_HIGHEST, SM_LOWEST};
use super::node_facts::Source;
use super::FleetContainer;
use crate::core::policy::MinorVersionCompat;
use crate::core::requirement::{Key, Op, Operand};
use crate::core::version::Version;

pub(super) const U32: u64 = u32::MAX as u64;

/// One fact over `parts` numeric labels, cut at `cuts`; `absent`: the
/// labels may be missing (a slot of its own, before the intervals). Each
/// part holds `lowest..=highest` (a label outside is an input error).
#[derive(Clone, Debug)]
pub(super) struct Axis {
    pub(super) parts: usize,
    cuts: Vec<Point>,
    pub(super) absent: bool,
    lowest: u64,
    highest: u64,
}

impl Axis {
    pub(super) fn new(parts: usize, absent: bool, raw: Vec<Point>) -> Axis {
        Axis::bounded(parts, absent, raw, 0, U32)
    }

    pub(super) fn bounded(parts: usize, absent: bool, raw: Vec<Point>, lo: u64, hi: u64) -> Axis {
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
            lowest: lo,
            highest: hi,
        }
    }

    /// The axis of a fact that is always absent (one slot).
    pub(super) fn only_absent() -> Axis {
        Axis {
            parts: 1,
            cuts: Vec::new(),
            absent: true,
            lowest: 1,
            highest: 0,
        }
    }

    pub(super) fn slots(&self) -> usize {
        usize::from(self.absent) + self.intervals()
    }

    fn intervals(&self) -> usize {
        if self.lowest > self.highest {
            0
        } else {
            self.cuts.len() + 1
        }
    }

    /// The interval index of a slot; None for the absent slot.
    pub(super) fn interval(&self, slot: usize) -> Option<usize> {
        match (self.absent, slot) {
            (true, 0) => None,
            (true, s) => Some(s - 1),
            (false, s) => Some(s),
        }
    }

    pub(super) fn lo(&self, k: usize) -> Point {
        if k == 0 {
            vec![0; self.parts]
        } else {
            self.cuts[k - 1].clone()
        }
    }

    pub(super) fn hi(&self, k: usize) -> Option<Point> {
        self.cuts.get(k).cloned()
    }

    /// The lowest and highest point of a slot a label can hold; empty when
    /// none can; `[None]` for the absent slot.
    pub(super) fn samples(&self, slot: usize) -> Vec<Option<Point>> {
        let Some(k) = self.interval(slot) else {
            return vec![None];
        };
        let mut lo = self.lo(k);
        if self.parts == 1 {
            lo[0] = lo[0].max(self.lowest);
        }
        if lo.iter().any(|&x| x > self.highest) {
            return Vec::new();
        }
        let mut top = match self.hi(k) {
            None => vec![self.highest; self.parts],
            Some(h) => predecessor(&h, self.highest),
        };
        if self.parts == 1 {
            top[0] = top[0].min(self.highest);
        }
        if top < lo {
            Vec::new()
        } else if top == lo {
            vec![Some(lo)]
        } else {
            vec![Some(lo), Some(top)]
        }
    }

    /// True when no label value lies in the slot.
    pub(super) fn empty(&self, slot: usize) -> bool {
        self.samples(slot).is_empty()
    }

    /// The range of slots `a..=b`, the empty slots around it taken in (no
    /// label value lies there): from the start when every slot before `a`
    /// is empty, unbounded when every slot after `b` is.
    pub(super) fn range(&self, a: usize, b: usize) -> AxisRange {
        let from_start = (0..a).all(|s| self.empty(s) && self.interval(s).is_some());
        let to_end = (b + 1..self.slots()).all(|s| self.empty(s));
        let absent = self.absent && a == 0;
        let interval = self.interval(b).map(|last| {
            let first = self.interval(a).unwrap_or(0);
            let lo = if from_start {
                vec![0; self.parts]
            } else {
                self.lo(first)
            };
            (lo, if to_end { None } else { self.hi(last) })
        });
        let full = (a == 0 || (!self.absent && from_start)) && to_end;
        AxisRange {
            absent,
            interval,
            full,
        }
    }

    /// For each slot of `fine`, the slot of this axis it lies in; None
    /// unless every cut of this axis is one of `fine`'s.
    pub(super) fn project(&self, fine: &Axis) -> Option<Vec<usize>> {
        let subset = self.cuts.iter().all(|c| fine.cuts.binary_search(c).is_ok());
        if !subset || self.absent != fine.absent || self.parts != fine.parts {
            return None;
        }
        let absent = usize::from(self.absent);
        let slot = |s: usize| match fine.interval(s) {
            None => 0,
            Some(k) => {
                let lo = fine.lo(k);
                absent + self.cuts.partition_point(|c| *c <= lo)
            }
        };
        Some((0..fine.slots()).map(slot).collect())
    }
}

/// The point just below `p` with parts of at most `top`.
fn predecessor(p: &[u64], top: u64) -> Point {
    let mut out = p.to_vec();
    for i in (0..out.len()).rev() {
        if out[i] > 0 {
            out[i] = (out[i] - 1).min(top);
            return out;
        }
        out[i] = top;
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

fn version_parts(v: &Version) -> Point {
    (0..8).map(|i| v.part(i)).collect()
}

/// The constants the decision compares each fact with, in version space:
/// drivers of three parts, CUDA versions of two, compute capabilities as
/// `sm` numbers, GPU counts.
#[derive(Default)]
pub(super) struct Cuts {
    pub(super) driver: Vec<Point>,
    pub(super) cuda: Vec<Point>,
    pub(super) sm: Vec<u64>,
    pub(super) count: Option<Vec<Point>>,
}

/// The cuts of `subject`; `images`: with those of its scanned GPU code
/// ([`image_cuts`]). Without them every cut is still one of the cuts with
/// them, so each cell of the finer grid lies in one cell of the coarser.
pub(super) fn cuts(subject: &FleetContainer, images: bool) -> Cuts {
    let mut c = Cuts {
        count: count_cuts(subject),
        ..Cuts::default()
    };
    requirement_cuts(subject, &mut c);
    if let Some(s) = subject.scanned().filter(|_| images || minor_allow(subject)) {
        image_cuts(s, &mut c);
    }
    if minor_allow(subject) {
        family_minimums(&mut c);
    }
    compat_cuts(subject, &mut c);
    runtime_cuts(subject, &mut c);
    if reads_majors(subject) {
        let majors: Vec<Point> = c
            .cuda
            .iter()
            .flat_map(|p| [vec![p[0], 0], vec![p[0] + 1, 0]])
            .collect();
        c.cuda.extend(majors);
    }
    c
}

fn minor_allow(subject: &FleetContainer) -> bool {
    subject.config().requirements.minor_version_compatibility == MinorVersionCompat::Allow
}

/// The decision compares CUDA majors too: minor-version compatibility
/// (any mode but "off" words a finding from it), a scanned image (its
/// compat and runtime rules).
fn reads_majors(subject: &FleetContainer) -> bool {
    subject.scanned().is_some()
        || subject.libraries().is_some()
        || subject.config().requirements.minor_version_compatibility != MinorVersionCompat::Off
}

fn requirement_cuts(subject: &FleetContainer, c: &mut Cuts) {
    let every = reads_majors(subject);
    let image_cuda = subject
        .container()
        .env
        .get("CUDA_VERSION")
        .and_then(crate::core::requirement::cuda_version_major_minor);
    if let Some(v) = image_cuda {
        c.cuda.extend(cut_pair(&version_parts(&v), 2));
    }
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
            Key::Driver => c.driver.extend(op_cuts(&p, 3, f.op, every)),
            Key::Cuda => c.cuda.extend(op_cuts(&p, 2, f.op, every)),
            Key::Arch => {
                c.sm.extend(op_cuts(&p, 2, f.op, true).iter().map(|p| sm_ceil(p)))
            }
            Key::Brand => {}
        }
    }
}

/// The smallest `sm` number at or above the capability `p` (`8.10` is 90:
/// no label holds a minor of two digits).
fn sm_ceil(p: &[u64]) -> u64 {
    let (major, minor) = (p[0], p.get(1).copied().unwrap_or(0));
    if minor > 9 {
        (major + 1).saturating_mul(10)
    } else {
        major.saturating_mul(10) + minor
    }
}

/// Where `x op v` can change over points of `parts` parts: `>=`/`<` at
/// `v`, `>`/`<=` just after it, `=`/`!=` at both; both too when `v` has
/// more parts than the labels or `every` (the decision also relaxes or
/// re-reads the factor).
fn op_cuts(v: &[u64], parts: usize, op: Op, every: bool) -> Vec<Point> {
    let [at, after] = cut_pair(v, parts);
    let longer = v.iter().skip(parts).any(|&x| x > 0);
    match op {
        _ if every || longer => vec![at, after],
        Op::Ge | Op::Lt => vec![at],
        Op::Gt | Op::Le => vec![after],
        Op::Eq | Op::Ne => vec![at, after],
    }
}

/// A scanned image's architectures and where NVIDIA's binary-compatibility
/// rules change around them (crate::core::arch `sass_runs_on`,
/// `ptx_jits_on`): at the architecture, the next minor and the next major;
/// Tegra parts (exact match only) on the majors it has machine code for;
/// and the CUDA its PTX needs (`ptx_isa_supported`).
fn image_cuts(s: &crate::core::kernel_image::Scanned, c: &mut Cuts) {
    use crate::core::arch::{ptx_isa_needs, IsaNeed, Kind, PTX_ISA_TO_CUDA};
    let images = s
        .libraries
        .iter()
        .filter_map(|l| l.outcome.as_ref().ok())
        .flatten();
    let mut sass_majors = Vec::new();
    for i in images {
        let (x, y) = (u64::from(i.arch.major()), u64::from(i.arch.minor()));
        c.sm.extend([10 * x + y, 10 * x + y + 1, 10 * (x + 1)]);
        if i.kind == Kind::Sass {
            sass_majors.push(x);
        }
        if let Some(isa) = i.ptx_isa {
            let (a, b) = match ptx_isa_needs(isa) {
                IsaNeed::Cuda(a, b) => (a, b),
                IsaNeed::Unknown => PTX_ISA_TO_CUDA.last().map(|(_, c)| *c).unwrap_or((0, 0)),
            };
            c.cuda.extend(cut_pair(&[a.into(), b.into()], 2));
        }
    }
    // crate::core::arch TEGRA.
    for (x, y) in [(3, 2), (5, 3), (6, 2), (7, 2), (8, 7), (10, 1), (11, 0)] {
        if sass_majors.contains(&x) {
            c.sm.extend([10 * x + y, 10 * x + y + 1]);
        }
    }
}

/// The family minimum drivers minor-version compatibility "allow" compares
/// a driver with (crate::core::compat_check `minor_version`).
fn family_minimums(c: &mut Cuts) {
    for (_, d) in crate::core::cuda_tables::MINOR_VERSION_FAMILY_MIN_DRIVER {
        if let Ok(v) = Version::parse(d) {
            c.driver.extend(cut_pair(&version_parts(&v), 3));
        }
    }
}

/// The image's compat libraries: their versions, the branches and the
/// CUDA version their notes name (crate::core::compat `judge_gpu`).
fn compat_cuts(subject: &FleetContainer, c: &mut Cuts) {
    let Some(scan) = subject.compat() else {
        return;
    };
    for lib in &scan.libs {
        if let Ok(v) = Version::parse(&lib.version) {
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
            .and_then(|v| Version::parse(v).ok())
        {
            c.cuda.extend(cut_pair(&version_parts(&v), 2));
        }
    }
}

/// The CUDA runtimes the image ships (crate::core::libraries
/// `runtime_finding`): the host's CUDA against each runtime's major and
/// minor, the driver against its family minimum.
fn runtime_cuts(subject: &FleetContainer, c: &mut Cuts) {
    let Some(scan) = subject.libraries() else {
        return;
    };
    for rt in &scan.cuda_runtimes {
        let Ok(v) = Version::parse(&rt.version) else {
            continue;
        };
        let p = version_parts(&v);
        c.cuda.extend(cut_pair(&p, 2));
        c.cuda.extend([vec![p[0], 0], vec![p[0] + 1, 0]]);
        if let Some(d) = rt
            .min_driver
            .as_deref()
            .and_then(|d| Version::parse(d).ok())
        {
            c.driver.extend(cut_pair(&version_parts(&d), 3));
        }
    }
}

/// A request naming GPUs by index needs that many: the count matters.
fn count_cuts(subject: &FleetContainer) -> Option<Vec<Point>> {
    let req = &subject.detection().request;
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

/// The smallest integer label value at or above the version `p`, under an
/// encoding whose parts after the first are below `radix` ([`labels`]).
fn int_ceil(p: &[u64], radix: &[u64]) -> Point {
    let mut parts = p.to_vec();
    parts.resize(radix.len() + 1, 0);
    for i in (1..parts.len()).rev() {
        if parts[i] >= radix[i - 1] {
            parts[i] = 0;
            parts[i - 1] = parts[i - 1].saturating_add(1);
            for x in parts.iter_mut().skip(i + 1) {
                *x = 0;
            }
        }
    }
    let n = parts
        .iter()
        .zip(std::iter::once(&1).chain(radix.iter()))
        .fold(0u64, |acc, (x, r)| {
            acc.saturating_mul(*r).saturating_add(*x)
        });
    vec![n.min(U32 + 1)]
}

/// The axes of one source's nodes: driver, CUDA and (when it matters)
/// GPU count; and the compute-capability axis.
pub(super) struct Axes {
    pub(super) node: Vec<Axis>,
    pub(super) cc: Axis,
}

/// The axes of `source` from `cuts`.
pub(super) fn axes(source: Source, c: &Cuts) -> Axes {
    let mut node = match source {
        Source::Own => vec![
            Axis::new(
                1,
                false,
                c.driver
                    .iter()
                    .map(|p| int_ceil(p, &[1000, 1000]))
                    .collect(),
            ),
            Axis::new(
                1,
                true,
                c.cuda.iter().map(|p| int_ceil(p, &[100])).collect(),
            ),
        ],
        Source::Gfd | Source::GfdDeprecated => vec![
            Axis::new(3, false, c.driver.clone()),
            Axis::new(2, true, c.cuda.clone()),
        ],
    };
    if let Some(count) = &c.count {
        node.push(Axis::new(1, true, count.clone()));
    }
    let cc = match source {
        Source::Own => {
            let mut sm: Vec<Point> = c.sm.iter().map(|&x| vec![x]).collect();
            sm.extend([vec![SM_LOWEST], vec![SM_HIGHEST + 1]]);
            Axis::bounded(1, true, sm, SM_LOWEST, SM_HIGHEST)
        }
        Source::Gfd | Source::GfdDeprecated => Axis::only_absent(),
    };
    Axes { node, cc }
}

/// The labels of the compute-capability axis's point: all three of
/// gpu-guard's (one model) or none.
pub(super) fn cc_labels(sm: Option<u64>) -> Vec<(&'static str, String)> {
    match sm {
        Some(x) => [labels::SM, labels::SM_MIN, labels::SM_MAX]
            .into_iter()
            .map(|k| (k, x.to_string()))
            .collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_ceilings_order_as_versions() {
        assert_eq!(int_ceil(&[535, 104, 5], &[1000, 1000]), vec![535_104_005]);
        assert_eq!(int_ceil(&[535, 1000, 0], &[1000, 1000]), vec![536_000_000]);
        assert_eq!(
            int_ceil(&[535, 104, 1000], &[1000, 1000]),
            vec![535_105_000]
        );
        assert_eq!(int_ceil(&[12, 4], &[100]), vec![1204]);
        assert_eq!(int_ceil(&[12, 100], &[100]), vec![1300]);
        assert_eq!(sm_ceil(&[8, 10]), 90);
        assert_eq!(sm_ceil(&[8, 6]), 86);
    }

    #[test]
    fn samples_stay_in_the_labels_range() {
        let a = Axis::bounded(1, true, vec![vec![10], vec![80], vec![1000]], 10, 999);
        assert_eq!(a.samples(0), vec![None]);
        assert!(a.samples(1).is_empty());
        assert_eq!(a.samples(2), vec![Some(vec![10]), Some(vec![79])]);
        assert_eq!(a.samples(3), vec![Some(vec![80]), Some(vec![999])]);
        assert!(a.samples(4).is_empty());
        let none = Axis::only_absent();
        assert_eq!(none.slots(), 1);
    }
}
