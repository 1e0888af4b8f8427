//! `check --affinity`: a Kubernetes `nodeAffinity`
//! (`requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`)
//! that admits the nodes where the container is allowed.
//!
//! Without `--nodes` it is the label-only affinity of
//! [`super::label_affinity`] (what the admission webhook writes): exact on
//! every node labelled by GPU Feature Discovery and gpu-guard, or stricter
//! and saying so. With `--nodes`, that affinity is checked against every
//! node listed and patched by name where it differs (a node it admits but
//! the decision refuses is excluded, one allowed but not admitted is
//! admitted), so it admits exactly the allowed nodes of the list. The
//! patches are what the API server accepts (pkg/apis/core/validation
//! ValidateNodeFieldSelectorRequirement): one `metadata.name NotIn [name]`
//! field per excluded node in every term, one term of `metadata.name In
//! [name]` per included node, and for "admits none" a label expression
//! that can never hold ([`selector::admits_none`]).

pub use super::label_affinity::{label_terms, LabelAffinity};
use super::nodes::NodeLabels;
use super::selector::{self, Expr, Term};
use super::FleetContainer;
use std::collections::BTreeMap;

/// The affinity, what it says about itself, and whether it is exact.
#[derive(Clone, Debug, Default)]
pub struct Affinity {
    pub terms: Vec<Term>,
    pub notes: Vec<String>,
    pub exact: bool,
}

impl From<LabelAffinity> for Affinity {
    fn from(l: LabelAffinity) -> Affinity {
        Affinity {
            terms: l.terms,
            notes: l.notes,
            exact: l.exact,
        }
    }
}

pub fn admits(terms: &[Term], node: &NodeLabels) -> bool {
    selector::admits(terms, node)
}

/// The label-only affinity (no `--nodes`).
pub fn for_labels(subject: &FleetContainer) -> Affinity {
    label_terms(subject).into()
}

fn name_field(op: &'static str, name: &str) -> Expr {
    Expr::new("metadata.name", op, &[name.to_string()])
}

/// The affinity for `--nodes`: the label affinity, patched by node name so
/// that it admits exactly the nodes in `allowed` (name -> None when
/// allowed, Some(reason) when refused).
pub fn for_nodes(
    subject: &FleetContainer,
    nodes: &[NodeLabels],
    allowed: &BTreeMap<String, Option<String>>,
) -> Affinity {
    let mut a = for_labels(subject);
    let none = a.terms == [selector::admits_none()];
    let mut exclude = Vec::new();
    let mut include = Vec::new();
    for n in nodes {
        let admitted = !none && admits(&a.terms, n);
        let ok_name = selector::dns_subdomain_ok(&n.name);
        let shown = crate::core::sanitize::esc(&n.name);
        match allowed.get(&n.name) {
            Some(None) if !admitted && ok_name => include.push(n.name.clone()),
            Some(Some(why)) if admitted && ok_name => {
                a.notes.push(format!("excluded by name: {shown} ({why})"));
                exclude.push(n.name.clone());
            }
            Some(_) if !ok_name => a.notes.push(format!(
                "{shown} is not a valid node name, so no node of the cluster has it; it is not patched in by name"
            )),
            _ => {}
        }
    }
    if !none {
        for t in &mut a.terms {
            t.match_fields
                .extend(exclude.iter().map(|n| name_field("NotIn", n)));
        }
    }
    if !include.is_empty() {
        a.notes.push(format!(
            "admitted by name (their labels do not show it): {}",
            crate::core::sanitize::esc(&include.join(", "))
        ));
        if none {
            a.terms.clear();
        }
        a.terms.extend(include.iter().map(|n| Term {
            match_expressions: Vec::new(),
            match_fields: vec![name_field("In", n)],
        }));
    }
    if !nodes.iter().any(|n| admits(&a.terms, n)) {
        a.notes.push(
            "the container is allowed on none of these nodes; this affinity admits none".into(),
        );
        a.terms = vec![selector::admits_none()];
    }
    // Exact on the listed nodes, by the patches above.
    a.exact = nodes
        .iter()
        .filter(|n| selector::dns_subdomain_ok(&n.name))
        .all(|n| admits(&a.terms, n) == matches!(allowed.get(&n.name), Some(None)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::{Container, Env};
    use crate::core::policy::Config;
    use crate::core::security::SpecAccess;

    fn node(name: &str, major: &str) -> NodeLabels {
        let l = [
            ("nvidia.com/cuda.driver-version.major", major),
            ("nvidia.com/cuda.driver-version.minor", "54"),
            ("nvidia.com/cuda.driver-version.revision", "15"),
            ("nvidia.com/cuda.runtime-version.major", "12"),
            ("nvidia.com/cuda.runtime-version.minor", "4"),
        ];
        NodeLabels {
            name: name.into(),
            labels: l
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Name patches are what the API server accepts: one
    /// value per field requirement, one term per included node.
    #[test]
    fn name_patches_are_one_name_each() {
        let mut c = Container::from_env(Env::from_entries(["NVIDIA_REQUIRE_CUDA=driver>=550"]));
        crate::fleet::attached::as_run_with_all_gpus(&mut c);
        let cfg = Config::default();
        let s = FleetContainer::new(
            &cfg,
            crate::pipeline::ContainerInput::new(c, SpecAccess::Edit),
        );
        let nodes = [
            node("a", "550"),
            node("b", "550"),
            node("c", "535"),
            node("d", "535"),
        ];
        // Pretend the decision disagrees with the labels on b, c and d.
        let allowed: BTreeMap<String, Option<String>> = [
            ("a", None),
            ("b", Some("refused".to_string())),
            ("c", None),
            ("d", None),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let a = for_nodes(&s, &nodes, &allowed);
        selector::validate(&a.terms).unwrap();
        assert!(a.exact);
        for (n, want) in nodes.iter().zip([true, false, true, true]) {
            assert_eq!(admits(&a.terms, n), want, "{}", n.name);
        }
        let fields: Vec<&Expr> = a.terms.iter().flat_map(|t| &t.match_fields).collect();
        assert!(fields.iter().all(|e| e.values.len() == 1), "{fields:?}");
        // Nothing allowed: a valid term that admits none.
        let none: BTreeMap<String, Option<String>> = nodes
            .iter()
            .map(|n| (n.name.clone(), Some("x".into())))
            .collect();
        let a = for_nodes(&s, &nodes, &none);
        assert_eq!(a.terms, vec![selector::admits_none()]);
        selector::validate(&a.terms).unwrap();
    }
}
