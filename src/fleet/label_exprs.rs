//! Label expressions for ranges of the facts node labels give: a range of
//! one of gpu-guard's integers ([`super::labels`]) is one `Gt` and one
//! `Lt`; a range of versions spread over GPU Feature Discovery's numeric
//! part labels (`major`, `minor`, `revision`) becomes `Gt`/`Lt` expressions
//! per fixed prefix; a set of compute capabilities is a range and a
//! `NotIn` list of the capabilities inside it that are not in the set
//! ([`cc_dnf`]).
//!
//! Versions compare part by part (libnvidia-container dsl.c; missing parts
//! are 0), so a range `[lo, hi)` of them is a union of pieces that fix a
//! prefix and bound one part. `Gt`/`Lt` compare labels as integers
//! (strconv.ParseInt), so `05` and `5` are alike; equality is written
//! `Gt n-1, Lt n+1` for that reason, never `In [n]`.

use super::labels::{self, SM_HIGHEST, SM_LOWEST};
use super::node_facts::{
    Source, CUDA_NEW, CUDA_OLD, DRIVER_INT_KEY, DRIVER_NEW, DRIVER_OLD, GFD_COUNT,
};
use super::selector::Expr;
use std::collections::BTreeSet;

/// A version as integers, one per part label.
pub type Point = Vec<u64>;
/// Expressions ORed: each inner list is ANDed.
pub type Dnf = Vec<Vec<Expr>>;

/// One part bounded to `[lo, hi)` (hi None: unbounded).
type Bound = (u64, Option<u64>);

/// `[lo, hi)` in part-by-part order as pieces, each a bound per part.
pub fn lex_pieces(lo: &[u64], hi: Option<&[u64]>) -> Vec<Vec<Bound>> {
    let Some((&a, rest_lo)) = lo.split_first() else {
        // Zero parts: one point, in the range only when it is unbounded.
        return if hi.is_none() {
            vec![Vec::new()]
        } else {
            Vec::new()
        };
    };
    let free: Vec<Bound> = rest_lo.iter().map(|_| (0, None)).collect();
    let prefixed = |part: Bound, pieces: Vec<Vec<Bound>>| -> Vec<Vec<Bound>> {
        pieces
            .into_iter()
            .map(|mut p| {
                p.insert(0, part);
                p
            })
            .collect()
    };
    if let Some(h) = hi {
        if h[0] == a {
            return prefixed((a, Some(a + 1)), lex_pieces(rest_lo, Some(&h[1..])));
        }
    }
    let mut out = Vec::new();
    let rest_zero = rest_lo.iter().all(|&x| x == 0);
    let start = if rest_zero { a } else { a + 1 };
    if !rest_zero {
        out.extend(prefixed((a, Some(a + 1)), lex_pieces(rest_lo, None)));
    }
    let end = hi.map(|h| h[0]);
    if end.map_or(true, |e| start < e) {
        let mut p = vec![(start, end)];
        p.extend(free.iter().copied());
        out.push(p);
    }
    if let Some(h) = hi {
        if h[1..].iter().any(|&x| x > 0) {
            let zeros = vec![0; rest_lo.len()];
            out.extend(prefixed(
                (h[0], Some(h[0] + 1)),
                lex_pieces(&zeros, Some(&h[1..])),
            ));
        }
    }
    out
}

/// One piece over `keys`. The major must exist (a bound implies it);
/// `opt_last`: the last label may be absent or empty and then reads as 0
/// (GFD's revision of a two-part driver version), so a piece admitting 0
/// there becomes three.
fn piece_exprs(keys: &[&str], piece: &[Bound], opt_last: bool) -> Dnf {
    let mut base = Vec::new();
    let mut last_alts: Option<Vec<Expr>> = None;
    for (i, (k, &(a, b))) in keys.iter().zip(piece).enumerate() {
        let is_last = opt_last && i + 1 == keys.len();
        if is_last && a == 0 && b.is_some() {
            last_alts = Some(vec![
                Expr::num(k, "Lt", b.unwrap_or(0)),
                Expr::absent(k),
                Expr::new(k, "In", &[String::new()]),
            ]);
            continue;
        }
        if a > 0 {
            base.push(Expr::num(k, "Gt", a - 1));
        }
        if let Some(b) = b {
            base.push(Expr::num(k, "Lt", b));
        }
        if i == 0 && a == 0 && b.is_none() {
            base.push(Expr::exists(k));
        }
    }
    match last_alts {
        None => vec![base],
        Some(alts) => alts
            .into_iter()
            .map(|e| {
                let mut t = base.clone();
                t.push(e);
                t
            })
            .collect(),
    }
}

/// `[lo, hi)` over `keys`.
pub fn range_dnf(keys: &[&str], lo: &[u64], hi: Option<&[u64]>, opt_last: bool) -> Dnf {
    lex_pieces(lo, hi)
        .iter()
        .flat_map(|p| piece_exprs(keys, p, opt_last))
        .collect()
}

/// The labels each fact of a source comes from.
impl Source {
    /// The driver's part labels (one for gpu-guard's integer).
    pub fn driver(self) -> &'static [&'static str] {
        match self {
            Source::Own => &DRIVER_INT_KEY,
            Source::Gfd => &DRIVER_NEW,
            Source::GfdDeprecated => &DRIVER_OLD,
        }
    }
    pub fn cuda(self) -> &'static [&'static str] {
        match self {
            Source::Own => &[labels::CUDA_INT],
            Source::Gfd => &CUDA_NEW,
            Source::GfdDeprecated => &CUDA_OLD,
        }
    }
    pub fn count(self) -> &'static str {
        match self {
            Source::Own => labels::COUNT,
            Source::Gfd | Source::GfdDeprecated => GFD_COUNT,
        }
    }
    /// What a node of this source has: its driver labels, and not those
    /// of the sources read before it (super::node_facts `label_facts`).
    pub fn guard(self) -> Vec<Expr> {
        match self {
            Source::Own => vec![Expr::exists(labels::DRIVER_INT)],
            Source::Gfd => vec![
                Expr::absent(labels::DRIVER_INT),
                Expr::exists(DRIVER_NEW[0]),
            ],
            Source::GfdDeprecated => vec![
                Expr::absent(labels::DRIVER_INT),
                Expr::absent(DRIVER_NEW[0]),
                Expr::exists(DRIVER_OLD[0]),
            ],
        }
    }
    /// GFD writes an empty revision for a two-part driver version.
    pub fn optional_last(self) -> bool {
        self != Source::Own
    }
}

/// A range of one axis: whether the absent slot is in it, and the interval
/// part (None: no interval).
pub struct AxisRange {
    pub absent: bool,
    pub interval: Option<(Point, Option<Point>)>,
    /// The range is every slot: no constraint.
    pub full: bool,
}

/// One-source facts (CUDA, the GPU count).
pub fn single_dnf(keys: &[&str], r: &AxisRange) -> Dnf {
    if r.full {
        return vec![Vec::new()];
    }
    let mut out = Dnf::new();
    if let Some((lo, hi)) = &r.interval {
        out.extend(range_dnf(keys, lo, hi.as_deref(), false));
    }
    if r.absent {
        out.push(vec![Expr::absent(keys[0])]);
    }
    out
}

/// How many capabilities a `NotIn` list may name before the set is split
/// into several terms.
const MAX_HOLES: usize = 48;

/// A set of compute capabilities, each run of it `[lo, hi)` (hi None: up
/// to the highest label value), and whether "unknown" (no label) is in it.
pub struct CcSet {
    pub runs: Vec<(u64, Option<u64>)>,
    pub absent: bool,
}

/// "Every GPU's compute capability is in `set`": over `sm.min` and
/// `sm.max` (`both`: at most two models, so they are the node's whole set;
/// min <= max), else over `sm` (one model). A run is a `Gt`/`Lt` pair; runs
/// close enough are one range with the capabilities between them in a
/// `NotIn` list; runs further apart are pairs of terms.
pub fn cc_dnf(set: &CcSet, both: bool) -> Dnf {
    let keys: &[&str] = if both {
        &[labels::SM_MIN, labels::SM_MAX]
    } else {
        &[labels::SM]
    };
    let mut out = Dnf::new();
    if set.absent {
        out.push(vec![Expr::absent(keys[0])]);
    }
    let groups = group_runs(&set.runs);
    for (i, gi) in groups.iter().enumerate() {
        if !both {
            out.push(group_exprs(keys[0], gi, true, true));
            continue;
        }
        for (j, gj) in groups.iter().enumerate().skip(i) {
            // min <= max: the min label needs no upper bound when both lie
            // in one group, the max label no lower one.
            let mut t = group_exprs(keys[0], gi, true, i != j);
            t.extend(group_exprs(keys[1], gj, i != j, true));
            out.push(t);
        }
    }
    out
}

/// Runs grouped while the capabilities between them stay few.
fn group_runs(runs: &[(u64, Option<u64>)]) -> Vec<Vec<(u64, Option<u64>)>> {
    let mut out: Vec<Vec<(u64, Option<u64>)>> = Vec::new();
    let mut holes = 0u64;
    for &r in runs {
        let gap = out
            .last()
            .and_then(|g| g.last())
            .and_then(|last| last.1)
            .map(|end| r.0.saturating_sub(end));
        match (out.last_mut(), gap) {
            (Some(g), Some(n)) if holes + n <= MAX_HOLES as u64 => {
                holes += n;
                g.push(r);
            }
            _ => {
                holes = 0;
                out.push(vec![r]);
            }
        }
    }
    out
}

/// One group of runs over `key`: from its first start (`lower`) to its
/// last end (`upper`), with the capabilities between runs excluded.
fn group_exprs(key: &str, g: &[(u64, Option<u64>)], lower: bool, upper: bool) -> Vec<Expr> {
    let lo = g[0].0;
    let mut t = Vec::new();
    if lower {
        t.push(Expr::num(key, "Gt", lo.max(SM_LOWEST) - 1));
    }
    if let Some(hi) = g[g.len() - 1].1.filter(|&h| upper && h <= SM_HIGHEST) {
        t.push(Expr::num(key, "Lt", hi));
    }
    let holes: Vec<String> = g
        .windows(2)
        .flat_map(|w| w[0].1.unwrap_or(w[1].0)..w[1].0)
        .map(|x| x.to_string())
        .collect();
    if !holes.is_empty() {
        t.push(Expr::new(key, "NotIn", &holes));
    }
    t
}

pub fn count_dnf(source: Source, r: &AxisRange) -> Dnf {
    single_dnf(&[source.count()], r)
}

/// `a AND b`.
pub fn and(a: &Dnf, b: &Dnf) -> Dnf {
    let mut out = Vec::with_capacity(a.len() * b.len());
    for x in a {
        for y in b {
            let mut t = x.clone();
            t.extend(y.iter().cloned());
            out.push(t);
        }
    }
    out
}

/// Sorts and dedupes a term's expressions, drops an `Exists` implied by
/// another expression on the key, and returns None for a term no node can
/// satisfy (a key both absent and required).
pub fn simplify(t: Vec<Expr>) -> Option<Vec<Expr>> {
    let set: BTreeSet<Expr> = t.into_iter().collect();
    let needs: BTreeSet<&str> = set
        .iter()
        .filter(|e| matches!(e.operator, "Gt" | "Lt" | "In" | "Exists"))
        .map(|e| e.key.as_str())
        .collect();
    let bounded: BTreeSet<&str> = set
        .iter()
        .filter(|e| matches!(e.operator, "Gt" | "Lt" | "In"))
        .map(|e| e.key.as_str())
        .collect();
    if set
        .iter()
        .any(|e| e.operator == "DoesNotExist" && needs.contains(e.key.as_str()))
    {
        return None;
    }
    Some(
        set.iter()
            .filter(|e| !(e.operator == "Exists" && bounded.contains(e.key.as_str())))
            .cloned()
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(t: &[Expr], vals: &[Option<&str>], keys: &[&str]) -> bool {
        let node = super::super::nodes::NodeLabels {
            name: "n".into(),
            labels: keys
                .iter()
                .zip(vals)
                .filter_map(|(k, v)| v.map(|v| (k.to_string(), v.to_string())))
                .collect(),
        };
        t.iter()
            .all(|e| super::super::selector::expr_holds(e, &node))
    }

    /// Every point of a small box: in the range exactly when the DNF holds.
    #[test]
    fn ranges_are_exact_on_every_point() {
        let keys = ["a", "b", "c"];
        let cases: &[(&[u64], Option<&[u64]>)] = &[
            (&[5, 4, 3], Some(&[7, 2, 1])),
            (&[5, 0, 0], Some(&[6, 0, 0])),
            (&[0, 0, 0], Some(&[5, 4, 3])),
            (&[5, 4, 3], None),
            (&[5, 4, 3], Some(&[5, 4, 4])),
            (&[5, 4, 3], Some(&[5, 6, 0])),
        ];
        for (lo, hi) in cases {
            for opt in [false, true] {
                let dnf = range_dnf(&keys, lo, *hi, opt);
                for x in 0..9u64 {
                    for y in 0..8u64 {
                        for z in 0..6u64 {
                            let p = [x, y, z];
                            let inside =
                                p.as_slice() >= *lo && hi.map_or(true, |h| p.as_slice() < h);
                            let s = [x.to_string(), y.to_string(), z.to_string()];
                            let v = [
                                Some(s[0].as_str()),
                                Some(s[1].as_str()),
                                Some(s[2].as_str()),
                            ];
                            assert_eq!(
                                dnf.iter().any(|t| holds(t, &v, &keys)),
                                inside,
                                "{lo:?} {hi:?} {p:?}"
                            );
                            if opt && z == 0 {
                                for last in [None, Some("")] {
                                    let v = [v[0], v[1], last];
                                    assert_eq!(
                                        dnf.iter().any(|t| holds(t, &v, &keys)),
                                        inside,
                                        "{p:?} {last:?}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
