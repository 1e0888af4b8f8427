//! The grid behind the label-only affinity ([`super::label_affinity`]):
//! the axes of the facts node labels give (driver, CUDA, compute
//! capability, and the GPU count when a request names GPUs), cut at every
//! constant the decision compares them with, and each cell judged for each
//! brand value by the per-node judgement `check --nodes` makes.

use super::label_exprs::{AxisRange, Point};
use super::labels;
use super::nodes::{self, NodeLabels, CC_GFD, COUNT, CUDA_NEW, DRIVER_NEW};
use super::Subject;
use crate::core::decision::Verdict;
use crate::core::facts::BRANDS;
use crate::core::requirement::{Key, Op, Operand};
use std::collections::BTreeMap;

/// Cells x brand values judged at most (a hostile requirement with
/// thousands of constants gets the strict fallback instead).
const MAX_JUDGED: usize = 400_000;
pub(super) const U32: u64 = u32::MAX as u64;

/// Brand values: absent label, `mixed`, then each NVML brand.
pub(super) const N_VALUES: usize = 2 + BRANDS.len();
pub(super) const ALL: u32 = (1 << N_VALUES) - 1;
pub(super) const ABSENT: u32 = 1;
pub(super) const MIXED_BIT: u32 = 2;

/// One fact over `parts` numeric labels, cut at `cuts`; `absent`: the
/// labels may be missing (a slot of its own, before the intervals).
pub(super) struct Axis {
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
    pub(super) fn slots(&self) -> usize {
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
    pub(super) fn range(&self, a: usize, b: usize) -> AxisRange {
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

/// CUDA versions are also compared by major alone (minor-version
/// compatibility holds within one major; compat_check), so each CUDA cut
/// brings its major's start and the next one.
fn with_majors(cuda: &mut Vec<Point>) {
    let majors: Vec<Point> = cuda
        .iter()
        .flat_map(|p| [vec![p[0], 0], vec![p[0] + 1, 0]])
        .collect();
    cuda.extend(majors);
}

fn requirement_cuts(subject: &Subject, c: &mut Cuts) {
    let every = reads_more(subject);
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
        let (axis, parts) = match key {
            Key::Driver => (&mut c.driver, 3),
            Key::Cuda => (&mut c.cuda, 2),
            Key::Arch => (&mut c.cc, 2),
            Key::Brand => continue,
        };
        axis.extend(op_cuts(&p, parts, f.op, every));
    }
}

/// Where `x op v` can change over points of `parts` parts: `>=`/`<` at
/// `v`, `>`/`<=` just after it, `=`/`!=` at both; both too when `v` has
/// more parts than the labels (`535.104.05.1`) or `every` (the decision
/// also relaxes or re-reads the factor: minor-version compatibility, a
/// scanned image's compat rules).
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

/// The decision reads requirements beyond their plain judgement: CUDA
/// minor-version compatibility (any mode but "off" words a finding from
/// it) and a scanned image (kernel-image and compat rules compare CUDA
/// majors).
fn reads_more(subject: &Subject) -> bool {
    subject.scanned().is_some()
        || subject.config().requirements.minor_version_compatibility
            != crate::core::policy::MinorVersionCompat::Off
}

/// With a scanned image: its architectures and where NVIDIA's
/// binary-compatibility rules change around them (the next minor and
/// major; Tegra parts, exact-match only, on the majors the image has
/// machine code for), every major's minor 10 (gpu-guard reads one-digit
/// minors, sm_XY), the CUDA its PTX needs; and, where the decision uses
/// them (minor-version compatibility "allow", compat libraries), the CUDA
/// tables' driver minimums.
fn scan_cuts(subject: &Subject, c: &mut Cuts) {
    use crate::core::arch::{ptx_isa_needs, IsaNeed, Kind, PTX_ISA_TO_CUDA};
    let Some(s) = subject.scanned() else {
        return;
    };
    let images: Vec<_> = s
        .libraries
        .iter()
        .filter_map(|l| l.outcome.as_ref().ok())
        .flatten()
        .collect();
    let mut sass_majors = Vec::new();
    let mut top = 13u64;
    for i in &images {
        let (x, y) = (u64::from(i.arch.major()), u64::from(i.arch.minor()));
        top = top.max(x + 1);
        c.cc.extend([vec![x, y], vec![x, y + 1], vec![x + 1, 0]]);
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
    // crate::core::arch TEGRA, and Cc::parse's range (majors 1 to 99).
    for (x, y) in [(3, 2), (5, 3), (6, 2), (7, 2), (8, 7), (10, 1), (11, 0)] {
        if sass_majors.contains(&x) {
            c.cc.extend(cut_pair(&[x, y], 2));
        }
    }
    for x in 1..=top {
        c.cc.extend([vec![x, 0], vec![x, 10]]);
    }
    c.cc.push(vec![100, 0]);
    let allow = subject.config().requirements.minor_version_compatibility
        == crate::core::policy::MinorVersionCompat::Allow;
    if allow || has_compat(subject) {
        table_cuts(c);
    }
}

/// The image has compat libraries (their notes name driver branches and brands).
fn has_compat(subject: &Subject) -> bool {
    subject.compat().is_some_and(|c| !c.libs.is_empty())
}

fn table_cuts(c: &mut Cuts) {
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
    let Some(scan) = subject.compat() else {
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

/// The CUDA runtimes the image ships (core::libraries): the decision
/// compares the host's CUDA with each runtime's major and, within it, its
/// minor (minor-version compatibility), so both are cuts; a shipped CUDA 13
/// runtime is a driver bound on nodes.
fn runtime_cuts(subject: &Subject, c: &mut Cuts) {
    let Some(scan) = subject.libraries() else {
        return;
    };
    for rt in &scan.cuda_runtimes {
        let Ok(v) = crate::core::version::Version::parse(&rt.version) else {
            continue;
        };
        let p = version_parts(&v);
        c.cuda.extend(cut_pair(&p, 2));
        c.cuda.extend([vec![p[0], 0], vec![p[0] + 1, 0]]);
    }
    let allow = subject.config().requirements.minor_version_compatibility
        == crate::core::policy::MinorVersionCompat::Allow;
    if allow && !scan.cuda_runtimes.is_empty() {
        table_cuts(c);
    }
}

/// A request naming GPUs by index needs that many: the count matters.
fn count_cuts(subject: &Subject) -> Option<Vec<Point>> {
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

/// The axes: driver, CUDA, compute capability and, when it matters, count.
pub(super) fn axes(subject: &Subject) -> Vec<Axis> {
    let mut c = Cuts {
        driver: Vec::new(),
        cuda: Vec::new(),
        cc: Vec::new(),
        count: count_cuts(subject),
    };
    requirement_cuts(subject, &mut c);
    scan_cuts(subject, &mut c);
    compat_cuts(subject, &mut c);
    runtime_cuts(subject, &mut c);
    if reads_more(subject) {
        with_majors(&mut c.cuda);
    }
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
pub(super) struct Grid {
    pub(super) axes: Vec<Axis>,
    pub(super) sizes: Vec<usize>,
    pub(super) masks: Vec<u32>,
    pub(super) consistent: bool,
}

impl Grid {
    pub(super) fn cells(&self) -> usize {
        self.sizes.iter().product()
    }
    pub(super) fn index(&self, coord: &[usize]) -> usize {
        coord
            .iter()
            .zip(&self.sizes)
            .fold(0, |acc, (c, s)| acc * s + c)
    }
    pub(super) fn coord(&self, mut i: usize) -> Vec<usize> {
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
        if has_compat(subject) || named.iter().any(|n| n == b) {
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

pub(super) fn judge_grid(subject: &Subject, axes: Vec<Axis>) -> Option<Grid> {
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
