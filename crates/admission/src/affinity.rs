//! Node affinity algebra for the webhook's patch.
//!
//! Kubernetes ORs the `nodeSelectorTerms` of a required node affinity and
//! ANDs the expressions within one term (core/v1 `NodeSelector`; the
//! scheduler's `component-helpers/scheduling/corev1/nodeaffinity`). So
//! "the pod's own terms AND gpu-guard's" is the cross product: one term per
//! pair, holding both terms' expressions (and the pod's `matchFields`). The
//! product is simplified (duplicates, terms that can never match, terms
//! implied by a smaller one) and bounded: past [`MAX_TERMS`] the
//! combination is refused rather than written loosely.

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
use std::collections::BTreeSet;

/// The most terms a combined affinity may have.
pub const MAX_TERMS: usize = 256;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AffinityError {
    #[error("combining the pod's node affinity ({own} terms) with gpu-guard's ({ours} terms) gives {product} terms, more than {MAX_TERMS}")]
    TooLarge {
        own: usize,
        ours: usize,
        product: usize,
    },
}

/// One expression, as a comparable key.
type Expr = (String, String, Vec<String>);

fn expr_key(r: &NodeSelectorRequirement) -> Expr {
    let mut v = r.values.clone().unwrap_or_default();
    v.sort();
    v.dedup();
    (r.key.clone(), r.operator.clone(), v)
}

fn exprs(t: &NodeSelectorTerm) -> BTreeSet<Expr> {
    t.match_expressions.iter().flatten().map(expr_key).collect()
}

fn fields(t: &NodeSelectorTerm) -> BTreeSet<Expr> {
    t.match_fields.iter().flatten().map(expr_key).collect()
}

/// Whether a set of label expressions can never hold together: `In` lists
/// with no common value, `In`/`Exists` against `DoesNotExist`, or an `In`
/// whose every value a `NotIn` excludes.
fn contradictory(set: &BTreeSet<Expr>) -> bool {
    let keys: BTreeSet<&str> = set.iter().map(|e| e.0.as_str()).collect();
    for k in keys {
        let mine: Vec<&Expr> = set.iter().filter(|e| e.0 == k).collect();
        let absent = mine.iter().any(|e| e.1 == "DoesNotExist");
        let present = mine
            .iter()
            .any(|e| matches!(e.1.as_str(), "In" | "Exists" | "Gt" | "Lt"));
        if absent && present {
            return true;
        }
        let mut allowed: Option<BTreeSet<&String>> = None;
        for e in mine.iter().filter(|e| e.1 == "In") {
            let vals: BTreeSet<&String> = e.2.iter().collect();
            allowed = Some(match allowed {
                None => vals,
                Some(a) => a.intersection(&vals).copied().collect(),
            });
        }
        // Gt/Lt bounds (integers; a value that does not parse never matches).
        let bound = |op: &str| {
            mine.iter()
                .filter(|e| e.1 == op)
                .filter_map(|e| e.2.first()?.parse::<i64>().ok())
                .collect::<Vec<i64>>()
        };
        let lo = bound("Gt").into_iter().max();
        let hi = bound("Lt").into_iter().min();
        if let (Some(l), Some(h)) = (lo, hi) {
            if l.saturating_add(1) >= h {
                return true;
            }
        }
        let in_range = |v: &str| match v.parse::<i64>() {
            Ok(n) => lo.is_none_or(|l| n > l) && hi.is_none_or(|h| n < h),
            Err(_) => lo.is_none() && hi.is_none(),
        };
        if let Some(a) = allowed {
            let excluded: BTreeSet<&String> = mine
                .iter()
                .filter(|e| e.1 == "NotIn")
                .flat_map(|e| e.2.iter())
                .collect();
            if a.iter().all(|v| excluded.contains(v) || !in_range(v)) {
                return true;
            }
        }
    }
    false
}

fn to_term(ex: BTreeSet<Expr>, fl: BTreeSet<Expr>) -> NodeSelectorTerm {
    let req = |(key, operator, values): Expr| NodeSelectorRequirement {
        key,
        operator,
        values: (!values.is_empty()).then_some(values),
    };
    NodeSelectorTerm {
        match_expressions: (!ex.is_empty()).then(|| ex.into_iter().map(req).collect()),
        match_fields: (!fl.is_empty()).then(|| fl.into_iter().map(req).collect()),
    }
}

/// Drops duplicate and never-matching terms, and terms implied by another
/// (a term whose expressions include all of a smaller term's admits only
/// nodes that smaller term admits, so in an OR it adds nothing).
pub fn simplify(terms: &[NodeSelectorTerm]) -> Vec<NodeSelectorTerm> {
    let mut sets: Vec<(BTreeSet<Expr>, BTreeSet<Expr>)> = terms
        .iter()
        .map(|t| (exprs(t), fields(t)))
        // An empty term matches no node (core/v1 NodeSelectorTerm).
        .filter(|(e, f)| {
            let empty = e.is_empty() && f.is_empty();
            !(empty || contradictory(e) || contradictory(f))
        })
        .collect();
    sets.sort_by_key(|(e, f)| e.len() + f.len());
    let mut kept: Vec<(BTreeSet<Expr>, BTreeSet<Expr>)> = Vec::new();
    for (e, f) in sets {
        if kept
            .iter()
            .any(|(ke, kf)| ke.is_subset(&e) && kf.is_subset(&f))
        {
            continue;
        }
        kept.push((e, f));
    }
    kept.into_iter().map(|(e, f)| to_term(e, f)).collect()
}

/// The terms admitting a node exactly when both `own` and `ours` admit it.
/// An empty `own` means the pod had no required node affinity.
pub fn and(
    own: &[NodeSelectorTerm],
    ours: &[NodeSelectorTerm],
) -> Result<Vec<NodeSelectorTerm>, AffinityError> {
    if own.is_empty() {
        return Ok(simplify(ours));
    }
    let own = simplify(own);
    let ours = simplify(ours);
    let product = own.len().saturating_mul(ours.len());
    if product > MAX_TERMS * 4 {
        return Err(AffinityError::TooLarge {
            own: own.len(),
            ours: ours.len(),
            product,
        });
    }
    let mut out = Vec::with_capacity(product);
    for a in &own {
        for b in &ours {
            let mut e = exprs(a);
            e.extend(exprs(b));
            let mut f = fields(a);
            f.extend(fields(b));
            out.push(to_term(e, f));
        }
    }
    let out = simplify(&out);
    if out.len() > MAX_TERMS {
        return Err(AffinityError::TooLarge {
            own: own.len(),
            ours: ours.len(),
            product: out.len(),
        });
    }
    Ok(out)
}

/// The AND of several containers' term lists, each of which constrains
/// (an empty list here admits no node). Empty when no node satisfies them
/// all, whatever the number of lists: "no node" is never taken for "no
/// constraint yet".
pub fn and_all(lists: &[Vec<NodeSelectorTerm>]) -> Result<Vec<NodeSelectorTerm>, AffinityError> {
    let mut acc: Option<Vec<NodeSelectorTerm>> = None;
    for l in lists {
        let next = match &acc {
            None => simplify(l),
            Some(a) => and_terms(a, l)?,
        };
        if next.is_empty() {
            return Ok(next);
        }
        acc = Some(next);
    }
    Ok(acc.unwrap_or_default())
}

/// `and` of two constraining lists (an empty `a` admits no node, unlike
/// `and`'s `own`, where empty means the pod has no affinity).
fn and_terms(
    a: &[NodeSelectorTerm],
    b: &[NodeSelectorTerm],
) -> Result<Vec<NodeSelectorTerm>, AffinityError> {
    if a.is_empty() || b.is_empty() {
        return Ok(Vec::new());
    }
    and(a, b)
}

/// A label expression (for the judge's terms and the tests).
pub fn expr(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

pub fn term(exprs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(exprs),
        match_fields: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_product_simplified() {
        let own = vec![
            term(vec![expr("zone", "In", &["a"])]),
            term(vec![expr("zone", "In", &["b"])]),
        ];
        let ours = vec![
            term(vec![expr("drv", "Gt", &["549"])]),
            term(vec![
                expr("drv", "Gt", &["499"]),
                expr("brand", "In", &["tesla"]),
            ]),
        ];
        let r = and(&own, &ours).unwrap();
        assert_eq!(r.len(), 4);
        // Our list alone when the pod has none; implied terms dropped.
        let implied = vec![
            term(vec![expr("a", "Exists", &[])]),
            term(vec![expr("a", "Exists", &[]), expr("b", "Exists", &[])]),
        ];
        assert_eq!(and(&[], &implied).unwrap().len(), 1);
        // Contradictions vanish: zone In [a] AND zone In [b].
        let r = and(
            &[term(vec![expr("zone", "In", &["a"])])],
            &[
                term(vec![expr("zone", "In", &["b"])]),
                term(vec![expr("x", "Exists", &[])]),
            ],
        )
        .unwrap();
        assert_eq!(r.len(), 1);
        assert!(contradictory(&exprs(&term(vec![
            expr("k", "In", &["1"]),
            expr("k", "NotIn", &["1"])
        ]))));
        assert!(contradictory(&exprs(&term(vec![
            expr("k", "Exists", &[]),
            expr("k", "DoesNotExist", &[])
        ]))));
        assert!(!contradictory(&exprs(&term(vec![
            expr("k", "In", &["1", "2"]),
            expr("k", "NotIn", &["1"])
        ]))));
        let c = |v: Vec<NodeSelectorRequirement>| contradictory(&exprs(&term(v)));
        assert!(c(vec![
            expr("k", "In", &["470"]),
            expr("k", "Gt", &["524"])
        ]));
        assert!(!c(vec![expr("k", "Gt", &["5"]), expr("k", "Lt", &["7"])]));
        assert!(c(vec![expr("k", "Gt", &["5"]), expr("k", "Lt", &["6"])]));
        // Bounded.
        let many: Vec<NodeSelectorTerm> = (0..40)
            .map(|i| term(vec![expr("a", "In", &[&i.to_string()])]))
            .collect();
        let many2: Vec<NodeSelectorTerm> = (0..40)
            .map(|i| term(vec![expr("b", "In", &[&i.to_string()])]))
            .collect();
        assert!(matches!(
            and(&many, &many2),
            Err(AffinityError::TooLarge { .. })
        ));
    }

    #[test]
    fn no_node_stays_no_node_for_any_number_of_lists() {
        let a = vec![term(vec![expr("drv", "Gt", &["549"])])];
        let b = vec![term(vec![expr("drv", "In", &["470"])])];
        let c = vec![term(vec![expr("gpu", "Exists", &[])])];
        assert!(and_all(&[a.clone(), b.clone()]).unwrap().is_empty());
        assert!(and_all(&[a.clone(), b.clone(), c.clone()])
            .unwrap()
            .is_empty());
        assert!(and_all(&[a.clone(), b, c.clone(), c.clone()])
            .unwrap()
            .is_empty());
        assert_eq!(and_all(&[a.clone(), c.clone()]).unwrap().len(), 1);
        assert_eq!(and_all(&[c]).unwrap().len(), 1);
        // A list whose terms never match constrains to nothing.
        let never = vec![term(vec![
            expr("k", "Exists", &[]),
            expr("k", "DoesNotExist", &[]),
        ])];
        assert!(and_all(&[never, a]).unwrap().is_empty());
    }
}
