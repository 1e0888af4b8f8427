//! `check --affinity`: a Kubernetes `nodeAffinity`
//! (`requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`)
//! that admits the nodes where the container is allowed.
//!
//! The requirements are turned into label expressions: terms are ORed and
//! the expressions of a term ANDed (Kubernetes API, core/v1 NodeSelector).
//! `Gt`/`Lt` compare a label as an integer, so versions are compared part
//! by part on GFD's numeric major/minor/revision labels: `driver>=550.54.14`
//! is `major>550`, or `major=550, minor>54`, or `major=550, minor=54,
//! revision>13`; `x = n` is written `Gt n-1, Lt n+1` so that `07` and `7`
//! compare alike. A factor that labels cannot decide (brand without
//! gpu-guard labels, compute capability without GFD's) admits, because the
//! decision only warns there ("cannot judge").
//!
//! With `--nodes`, the expressions are checked against every node: a node
//! they admit but the decision refuses (the image's GPU code, a host fault)
//! is excluded by name, and a node allowed but not admitted (older GFD
//! label names) is admitted by name, so the result is exact on those nodes;
//! each such patch is noted.

use super::labels;
use super::nodes::NodeLabels;
use crate::core::requirement::{Factor, Key, Op, Operand, Requirement};
use crate::core::version::Version;
use std::collections::{BTreeMap, BTreeSet};

const DRIVER: [&str; 3] = [
    "nvidia.com/cuda.driver-version.major",
    "nvidia.com/cuda.driver-version.minor",
    "nvidia.com/cuda.driver-version.revision",
];
const CUDA: [&str; 2] = [
    "nvidia.com/cuda.runtime-version.major",
    "nvidia.com/cuda.runtime-version.minor",
];
const COMPUTE: [&str; 2] = [
    "nvidia.com/gpu.compute.major",
    "nvidia.com/gpu.compute.minor",
];
/// Past this many terms the expressions are not worth reading; the nodes
/// are then admitted by name.
const MAX_TERMS: usize = 64;
/// A node name cannot hold `/` (a DNS subdomain), so this admits nothing.
const NO_NODE: &str = "gpu-guard.io/no-node";

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Expr {
    pub key: String,
    pub operator: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl Expr {
    fn new(key: &str, operator: &'static str, values: &[String]) -> Expr {
        Expr {
            key: key.into(),
            operator,
            values: values.to_vec(),
        }
    }
    fn num(key: &str, operator: &'static str, n: i64) -> Expr {
        Expr::new(key, operator, &[n.to_string()])
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Term {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Expr>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_fields: Vec<Expr>,
}

/// The affinity and what it could not express.
#[derive(Clone, Debug, Default)]
pub struct Affinity {
    pub terms: Vec<Term>,
    pub notes: Vec<String>,
}

type Dnf = Vec<Vec<Expr>>;

/// `a AND b` in disjunctive normal form.
fn and(a: &Dnf, b: &Dnf) -> Dnf {
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

/// `label = n` as integers.
fn equals(key: &str, n: u64) -> Vec<Expr> {
    let n = n as i64;
    vec![Expr::num(key, "Gt", n - 1), Expr::num(key, "Lt", n + 1)]
}

/// Terms for `host <op> want` where the host version is spread over the
/// numeric `labels`; parts past the labels are zero on the host.
fn version_cmp(labels: &[&str], want: &Version, op: Op) -> Dnf {
    let n = labels.len();
    let tail_less = (n..8).any(|i| want.part(i) > 0);
    let prefix = |i: usize| -> Vec<Expr> {
        (0..i)
            .flat_map(|j| equals(labels[j], want.part(j)))
            .collect()
    };
    let mut gt = Dnf::new();
    let mut lt = Dnf::new();
    for (i, label) in labels.iter().enumerate() {
        let w = want.part(i) as i64;
        let mut g = prefix(i);
        g.push(Expr::num(label, "Gt", w));
        gt.push(g);
        if w > 0 {
            let mut l = prefix(i);
            l.push(Expr::num(label, "Lt", w));
            lt.push(l);
        }
    }
    let eq: Dnf = if tail_less {
        Vec::new()
    } else {
        vec![prefix(n)]
    };
    if tail_less {
        lt.push(prefix(n));
    }
    match op {
        Op::Gt => gt,
        Op::Ge => [gt, eq].concat(),
        Op::Lt => lt,
        Op::Le => [lt, eq].concat(),
        Op::Eq => eq,
        Op::Ne => [gt, lt].concat(),
    }
}

/// A factor as "does not definitely fail" on a node.
fn factor_dnf(f: &Factor) -> Dnf {
    let t = || vec!["true".to_string()];
    match (&f.operand, f.key) {
        (Operand::Version(v), Some(Key::Cuda)) => version_cmp(&CUDA, v, f.op),
        (Operand::Version(v), Some(Key::Driver)) => version_cmp(&DRIVER, v, f.op),
        (Operand::Version(v), Some(Key::Arch)) => {
            let mut d = version_cmp(&COMPUTE, v, f.op);
            d.push(vec![Expr::new(COMPUTE[0], "DoesNotExist", &[])]);
            d
        }
        (Operand::Brand(b), Some(Key::Brand)) => {
            let key = format!("{}{}", labels::BRAND_PREFIX, b.to_ascii_lowercase());
            if f.op == Op::Eq {
                // Unlabelled by gpu-guard: the brand is unknown, so it cannot fail.
                vec![
                    vec![Expr::new(&key, "In", &t())],
                    vec![Expr::new(labels::DRIVER_BRANCH, "DoesNotExist", &[])],
                ]
            } else {
                vec![vec![Expr::new(&key, "DoesNotExist", &[])]]
            }
        }
        _ => vec![Vec::new()],
    }
}

/// A requirement: one of its alternatives must not fail.
fn requirement_dnf(r: &Requirement) -> Option<Dnf> {
    let mut out = Dnf::new();
    for alt in &r.any_of {
        let mut d: Dnf = vec![Vec::new()];
        for f in &alt.factors {
            d = and(&d, &factor_dnf(f));
            d.retain(|t| simplify(t).is_some());
            if d.len() > MAX_TERMS * 8 {
                return None;
            }
        }
        out.extend(d);
    }
    Some(out)
}

/// A term in canonical form: an integer interval `(lo, hi)` (exclusive,
/// None = unbounded) per numeric label, and the other expressions.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Conj {
    bounds: BTreeMap<String, (Option<i64>, Option<i64>)>,
    rest: BTreeSet<Expr>,
}

/// Folds a term's numeric bounds per key; None when they leave no integer
/// (label values are never negative).
fn canon(t: &[Expr]) -> Option<Conj> {
    let mut c = Conj {
        bounds: BTreeMap::new(),
        rest: BTreeSet::new(),
    };
    for e in t {
        let n = e.values.first().and_then(|v| v.parse::<i64>().ok());
        let b = || (None, None);
        match (e.operator, n) {
            ("Gt", Some(n)) => {
                let v = c.bounds.entry(e.key.clone()).or_insert_with(b);
                v.0 = Some(v.0.map_or(n, |x| x.max(n)));
            }
            ("Lt", Some(n)) => {
                let v = c.bounds.entry(e.key.clone()).or_insert_with(b);
                v.1 = Some(v.1.map_or(n, |x| x.min(n)));
            }
            _ => {
                c.rest.insert(e.clone());
            }
        }
    }
    // `Exists` is implied by a bound on the same key.
    let bounded: BTreeSet<String> = c.bounds.keys().cloned().collect();
    c.rest
        .retain(|e| !(e.operator == "Exists" && bounded.contains(&e.key)));
    for (k, (lo, hi)) in &c.bounds {
        let lo = lo.unwrap_or(-1).max(-1);
        if hi.is_some_and(|h| h - lo <= 1) {
            return None;
        }
        if c.rest
            .iter()
            .any(|e| &e.key == k && e.operator == "DoesNotExist")
        {
            return None;
        }
    }
    Some(c)
}

/// `a OR b` as one term when they differ only in one label's interval and
/// the intervals touch; a union that is unbounded drops the label.
fn merge(a: &Conj, b: &Conj) -> Option<Conj> {
    if a.rest != b.rest {
        return None;
    }
    let keys: BTreeSet<&String> = a.bounds.keys().chain(b.bounds.keys()).collect();
    let none = (None, None);
    let differing: Vec<&String> = keys
        .into_iter()
        .filter(|k| a.bounds.get(*k).unwrap_or(&none) != b.bounds.get(*k).unwrap_or(&none))
        .collect();
    let [k] = differing[..] else {
        return None;
    };
    let (al, ah) = *a.bounds.get(k).unwrap_or(&none);
    let (bl, bh) = *b.bounds.get(k).unwrap_or(&none);
    // Integers in (al, ah) and (bl, bh) form one run when neither ends
    // before the other starts.
    let gap = |h: Option<i64>, l: Option<i64>| matches!((h, l), (Some(h), Some(l)) if h <= l);
    if gap(ah, bl) || gap(bh, al) {
        return None;
    }
    let lo = al.zip(bl).map(|(x, y)| x.min(y));
    let hi = ah.zip(bh).map(|(x, y)| x.max(y));
    let mut c = a.clone();
    if lo.unwrap_or(-1) < 0 && hi.is_none() {
        c.bounds.remove(k);
    } else {
        c.bounds.insert(k.clone(), (lo, hi));
    }
    Some(c)
}

/// Merges terms pairwise until nothing merges.
fn merge_all(mut cs: Vec<Conj>) -> Vec<Conj> {
    cs.sort();
    cs.dedup();
    'again: loop {
        for i in 0..cs.len() {
            for j in i + 1..cs.len() {
                if let Some(m) = merge(&cs[i], &cs[j]) {
                    cs.remove(j);
                    cs[i] = m;
                    continue 'again;
                }
            }
        }
        return cs;
    }
}

/// Back to expressions: `Gt`/`Lt` per bounded label (`Gt -1` is `Exists`).
fn exprs(c: &Conj) -> Vec<Expr> {
    let mut out = Vec::new();
    for (k, (lo, hi)) in &c.bounds {
        match lo {
            Some(l) if *l >= 0 => out.push(Expr::num(k, "Gt", *l)),
            _ if hi.is_none() => out.push(Expr::new(k, "Exists", &[])),
            _ => {}
        }
        if let Some(h) = hi {
            out.push(Expr::num(k, "Lt", *h));
        }
    }
    // `Exists` is implied by a bound on the same key.
    out.extend(
        c.rest
            .iter()
            .filter(|e| !(e.operator == "Exists" && c.bounds.contains_key(&e.key)))
            .cloned(),
    );
    out
}

fn simplify(t: &[Expr]) -> Option<Vec<Expr>> {
    canon(t).map(|c| exprs(&c))
}

/// The expressions for the requirements alone (every term also needs GFD's
/// driver label, so nodes without GPU facts are never admitted). None when
/// the requirements expand past [`MAX_TERMS`].
pub fn from_requirements(reqs: &[Requirement]) -> Option<Vec<Term>> {
    let mut d: Dnf = vec![vec![Expr::new(DRIVER[0], "Exists", &[])]];
    for r in reqs {
        d = and(&d, &requirement_dnf(r)?);
        let mut kept: Vec<Vec<Expr>> = d.iter().filter_map(|t| simplify(t)).collect();
        kept.sort();
        kept.dedup();
        if kept.len() > MAX_TERMS {
            return None;
        }
        d = kept;
    }
    let conj: Vec<Conj> = d.iter().filter_map(|t| canon(t)).collect();
    let terms = merge_all(conj)
        .iter()
        .map(|c| Term {
            match_expressions: exprs(c),
            match_fields: Vec::new(),
        })
        .collect();
    Some(terms)
}

/// Does one expression hold on a node (Kubernetes semantics: `Gt`/`Lt`
/// need the label to parse as an integer; `NotIn`/`DoesNotExist` hold when
/// the label is absent).
pub fn expr_holds(e: &Expr, node: &NodeLabels) -> bool {
    let v = if e.key == "metadata.name" {
        Some(&node.name)
    } else {
        node.labels.get(&e.key)
    };
    let int = |s: &str| s.trim().parse::<i64>().ok();
    let bound = e.values.first().and_then(|b| int(b));
    match e.operator {
        "In" => v.is_some_and(|v| e.values.contains(v)),
        "NotIn" => !v.is_some_and(|v| e.values.contains(v)),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        "Gt" => matches!((v.and_then(|v| int(v)), bound), (Some(a), Some(b)) if a > b),
        "Lt" => matches!((v.and_then(|v| int(v)), bound), (Some(a), Some(b)) if a < b),
        _ => false,
    }
}

pub fn admits(terms: &[Term], node: &NodeLabels) -> bool {
    terms.iter().any(|t| {
        t.match_expressions.iter().all(|e| expr_holds(e, node))
            && t.match_fields.iter().all(|e| expr_holds(e, node))
    })
}

/// What the expressions never cover, said with every affinity.
fn standing_notes(scanned: bool) -> Vec<String> {
    let mut n = vec![
        "uses GFD's nvidia.com/cuda.driver-version.* and runtime-version.* labels; nodes with only the deprecated cuda.driver.* names are not admitted by these expressions".to_string(),
        "brand= is judged only on nodes with gpu-guard.io/brand.* labels (gpu-guard host --node-labels); elsewhere it is unknown and admitted, as gpu-guard warns there".to_string(),
    ];
    if scanned {
        n.push("the image's compiled GPU code is not expressed; nodes it rules out are excluded by name".into());
    }
    n
}

/// The affinity from the requirements alone (no `--nodes`).
pub fn for_requirements(reqs: &[Requirement], scanned: bool) -> Affinity {
    let mut notes = standing_notes(scanned);
    let terms = match from_requirements(reqs) {
        Some(t) => t,
        None => {
            notes.push(format!(
                "the requirements expand to more than {MAX_TERMS} terms; only the driver label is required"
            ));
            vec![Term {
                match_expressions: vec![Expr::new(DRIVER[0], "Exists", &[])],
                match_fields: Vec::new(),
            }]
        }
    };
    Affinity { terms, notes }
}

/// The affinity for `--nodes`: the expressions, patched by node name so
/// that it admits exactly the nodes in `allowed` (by name).
pub fn for_nodes(
    reqs: &[Requirement],
    scanned: bool,
    nodes: &[NodeLabels],
    allowed: &BTreeMap<String, Option<String>>,
) -> Affinity {
    let mut a = for_requirements(reqs, scanned);
    let mut exclude = Vec::new();
    let mut include = Vec::new();
    for n in nodes {
        let admitted = admits(&a.terms, n);
        match allowed.get(&n.name) {
            Some(None) if !admitted => include.push(n.name.clone()),
            Some(Some(why)) if admitted => {
                a.notes
                    .push(format!("excluded by name: {} ({why})", n.name));
                exclude.push(n.name.clone());
            }
            None if admitted => {
                a.notes
                    .push(format!("excluded by name: {} (no GPU facts)", n.name));
                exclude.push(n.name.clone());
            }
            _ => {}
        }
    }
    if !exclude.is_empty() {
        let e = Expr::new("metadata.name", "NotIn", &exclude);
        for t in &mut a.terms {
            t.match_fields.push(e.clone());
        }
    }
    if !include.is_empty() {
        a.notes.push(format!(
            "admitted by name (their labels do not express it): {}",
            include.join(", ")
        ));
        a.terms.push(Term {
            match_expressions: Vec::new(),
            match_fields: vec![Expr::new("metadata.name", "In", &include)],
        });
    }
    if !nodes.iter().any(|n| admits(&a.terms, n)) {
        a.notes
            .push("the image is allowed on none of these nodes; this affinity admits none".into());
        a.terms = vec![Term {
            match_expressions: Vec::new(),
            match_fields: vec![Expr::new("metadata.name", "In", &[NO_NODE.to_string()])],
        }];
    }
    a
}

/// `{"nodeAffinity": {...}}` for `--json`.
pub fn to_json(a: &Affinity) -> serde_json::Value {
    serde_json::json!({
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": a.terms
            }
        }
    })
}

/// A YAML double-quoted scalar; JSON's string escapes are valid YAML.
fn q(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn yaml_exprs(out: &mut String, name: &str, exprs: &[Expr], first: &mut bool) {
    if exprs.is_empty() {
        return;
    }
    let lead = if *first { "      - " } else { "        " };
    *first = false;
    out.push_str(&format!("{lead}{name}:\n"));
    for e in exprs {
        out.push_str(&format!("        - key: {}\n", q(&e.key)));
        out.push_str(&format!("          operator: {}\n", e.operator));
        if !e.values.is_empty() {
            let v: Vec<String> = e.values.iter().map(|v| q(v)).collect();
            out.push_str(&format!("          values: [{}]\n", v.join(", ")));
        }
    }
}

/// The affinity as YAML, notes as comments, ready to paste under a pod
/// spec's `affinity:`.
pub fn to_yaml(a: &Affinity) -> String {
    let mut out = String::new();
    for n in &a.notes {
        out.push_str(&format!("# {}\n", crate::core::sanitize::one_line(n)));
    }
    out.push_str("nodeAffinity:\n  requiredDuringSchedulingIgnoredDuringExecution:\n    nodeSelectorTerms:\n");
    for t in &a.terms {
        let mut first = true;
        yaml_exprs(
            &mut out,
            "matchExpressions",
            &t.match_expressions,
            &mut first,
        );
        yaml_exprs(&mut out, "matchFields", &t.match_fields, &mut first);
    }
    out
}
