//! Kubernetes node-selector terms (core/v1 NodeSelector): their types as
//! gpu-guard prints them, how the scheduler matches them, and the API
//! server's validation of them. gpu-guard checks every affinity it prints
//! against both before printing it.
//!
//! Matching (k8s.io/component-helpers scheduling/corev1/nodeaffinity, which
//! builds apimachinery pkg/labels Requirements; Requirement.Matches): terms
//! are ORed, a term's expressions ANDed; `In` needs the label and one of the
//! values, `NotIn` holds when the label is absent or none of the values,
//! `Exists`/`DoesNotExist` test presence, `Gt`/`Lt` need the label and
//! compare it with strconv.ParseInt(value, 10, 64) (a label that does not
//! parse never matches). A term with no expression and no field matches no
//! node. `matchFields` take only `metadata.name`.
//!
//! Validation (kubernetes pkg/apis/core/validation ValidateNodeSelector,
//! ValidateNodeSelectorRequirement, ValidateNodeFieldSelectorRequirement;
//! apimachinery pkg/util/validation IsQualifiedName, IsValidLabelValue,
//! IsDNS1123Subdomain): at least one term; `In`/`NotIn` with values,
//! `Exists`/`DoesNotExist` without, `Gt`/`Lt` with exactly one (an integer,
//! or labels.NewRequirement fails the term at schedule time); keys are
//! qualified names, values label values; a field requirement is
//! `metadata.name` `In`/`NotIn` with exactly one value, a node name.

use super::node_labels::NodeLabels;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Expr {
    pub key: String,
    pub operator: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl Expr {
    pub fn new(key: &str, operator: &'static str, values: &[String]) -> Expr {
        Expr {
            key: key.into(),
            operator,
            values: values.to_vec(),
        }
    }
    pub fn exists(key: &str) -> Expr {
        Expr::new(key, "Exists", &[])
    }
    pub fn absent(key: &str) -> Expr {
        Expr::new(key, "DoesNotExist", &[])
    }
    pub fn num(key: &str, operator: &'static str, n: u64) -> Expr {
        Expr::new(key, operator, &[n.to_string()])
    }
    pub fn is_in(key: &str, values: &[&str]) -> Expr {
        let v: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        Expr::new(key, "In", &v)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Term {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Expr>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_fields: Vec<Expr>,
}

/// The key of the term that admits no node.
pub const NONE_KEY: &str = "gpu-guard.io/admits-none";

/// A term no node can satisfy, valid for the API server: a label both
/// present and absent.
pub fn admits_none() -> Term {
    Term {
        match_expressions: vec![Expr::exists(NONE_KEY), Expr::absent(NONE_KEY)],
        match_fields: Vec::new(),
    }
}

/// Go's strconv.ParseInt(s, 10, 64): an optional sign, then digits.
fn parse_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Does one expression hold on a node.
pub fn expr_holds(e: &Expr, node: &NodeLabels) -> bool {
    let v = if e.key == "metadata.name" {
        Some(&node.name)
    } else {
        node.labels.get(&e.key)
    };
    let bound = || e.values.first().and_then(|b| parse_int(b));
    let label = || v.and_then(|v| parse_int(v));
    match e.operator {
        "In" => v.is_some_and(|v| e.values.contains(v)),
        "NotIn" => !v.is_some_and(|v| e.values.contains(v)),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        "Gt" => matches!((label(), bound()), (Some(a), Some(b)) if a > b),
        "Lt" => matches!((label(), bound()), (Some(a), Some(b)) if a < b),
        _ => false,
    }
}

pub fn term_holds(t: &Term, node: &NodeLabels) -> bool {
    let empty = t.match_expressions.is_empty() && t.match_fields.is_empty();
    !empty
        && t.match_expressions.iter().all(|e| expr_holds(e, node))
        && t.match_fields.iter().all(|e| expr_holds(e, node))
}

pub fn admits(terms: &[Term], node: &NodeLabels) -> bool {
    terms.iter().any(|t| term_holds(t, node))
}

fn name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// IsDNS1123Subdomain: at most 253 characters, dot-separated labels of
/// lowercase alphanumerics and `-`, each starting and ending alphanumeric.
pub fn dns_subdomain_ok(s: &str) -> bool {
    s.len() <= 253
        && !s.is_empty()
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// IsQualifiedName: `[prefix/]name`, prefix a DNS subdomain.
pub fn qualified_name_ok(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => dns_subdomain_ok(prefix) && name_part_ok(name),
        None => name_part_ok(s),
    }
}

/// IsValidLabelValue: empty, or a name part.
pub fn label_value_ok(s: &str) -> bool {
    s.is_empty() || name_part_ok(s)
}

fn validate_expr(e: &Expr) -> Result<(), String> {
    let n = e.values.len();
    let count_ok = match e.operator {
        "In" | "NotIn" => n > 0,
        "Exists" | "DoesNotExist" => n == 0,
        "Gt" | "Lt" => n == 1 && e.values.iter().all(|v| parse_int(v).is_some()),
        _ => false,
    };
    if !count_ok {
        return Err(format!("{} {} with {n} values", e.key, e.operator));
    }
    if !qualified_name_ok(&e.key) {
        return Err(format!("key {} is not a qualified name", e.key));
    }
    match e.values.iter().find(|v| !label_value_ok(v)) {
        Some(v) => Err(format!("{}: value {v:?} is not a label value", e.key)),
        None => Ok(()),
    }
}

fn validate_field(e: &Expr) -> Result<(), String> {
    let ok = e.key == "metadata.name"
        && matches!(e.operator, "In" | "NotIn")
        && e.values.len() == 1
        && dns_subdomain_ok(&e.values[0]);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "matchFields {} {} {:?}: needs metadata.name In/NotIn with exactly one node name",
            e.key, e.operator, e.values
        ))
    }
}

/// The API server's checks of `nodeSelectorTerms`.
pub fn validate(terms: &[Term]) -> Result<(), String> {
    if terms.is_empty() {
        return Err("nodeSelectorTerms must have at least one term".into());
    }
    for t in terms {
        t.match_expressions.iter().try_for_each(validate_expr)?;
        t.match_fields.iter().try_for_each(validate_field)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: &[(&str, &str)]) -> NodeLabels {
        NodeLabels {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn admits_none_is_valid_and_matches_nothing() {
        let t = vec![admits_none()];
        validate(&t).unwrap();
        for n in [
            node("a", &[]),
            node("b", &[(NONE_KEY, "")]),
            node("c", &[(NONE_KEY, "x")]),
        ] {
            assert!(!admits(&t, &n));
        }
        assert!(!admits(&[Term::default()], &node("a", &[])));
    }

    #[test]
    fn api_server_rules() {
        let bad = [
            Expr::new("metadata.name", "NotIn", &["a".into(), "b".into()]),
            Expr::new("metadata.name", "In", &["gpu-guard.io/no-node".into()]),
            Expr::new("metadata.name", "Exists", &[]),
        ];
        for e in bad {
            let t = Term {
                match_expressions: vec![],
                match_fields: vec![e.clone()],
            };
            assert!(validate(&[t]).is_err(), "{e:?}");
        }
        assert!(validate(&[]).is_err());
        for (k, ok) in [
            ("a.b/c", true),
            ("A.b/c", false),
            ("c", true),
            ("a/b/c", false),
            ("/c", false),
            ("a/-c", false),
        ] {
            assert_eq!(qualified_name_ok(k), ok, "{k}");
        }
        assert!(validate_expr(&Expr::new("x", "Gt", &["1.5".into()])).is_err());
        assert!(validate_expr(&Expr::new("x", "In", &["".into()])).is_ok());
        assert!(!expr_holds(
            &Expr::num("x", "Gt", 1),
            &node("a", &[("x", "")])
        ));
        assert!(expr_holds(
            &Expr::num("x", "Gt", 1),
            &node("a", &[("x", "05")])
        ));
    }
}
