//! The AMD part of the label-only affinity (super::label_affinity): terms
//! over AMD nodes' labels that admit exactly the AMD nodes `check --nodes`
//! allows (super::amd_nodes reads them).
//!
//! An AMD node's labels give two facts the decision reads, each a label
//! matched by value: the processor (`gpu-guard.io/amd.gfx`) and the amdgpu
//! driver (`amd.com/gpu.driver-version`). Neither is ordered, so each is cut
//! into classes of values the decision cannot tell apart, and every pair of
//! classes is judged by the real per-node judgement on labels built for it
//! and read back by the node reader:
//!
//! - processors: absent; each processor the decision may treat apart from
//!   the others (the image's code objects and Tensile files name it, or it
//!   belongs to a generic target, or has SRAM ECC or XNACK modes of its own,
//!   or `HSA_OVERRIDE_GFX_VERSION` names it: core::amd::target); and every
//!   other processor, which can only fail to match the image's code the same
//!   way (judged on one of them);
//! - drivers: absent; each module version gpu-guard maps
//!   (core::amd::rocm::DKMS_RELEASE); any other value (read as unmapped).
//!
//! The terms pin an AMD node as the reader does (no NVIDIA driver labels;
//! `gpu-guard.io/vendor=amd`, else AMD's labeller's `amd.com/gpu.family`,
//! else its `amd.com/gpu.device-id`), so they never admit an NVIDIA node,
//! and NVIDIA's terms, which need NVIDIA driver labels, never admit an AMD
//! node.

use super::amd_nodes::{AMD_DEVICE_ID, AMD_DRIVER, AMD_FAMILY};
use super::label_exprs::Dnf;
use super::labels;
use super::node_facts::{DRIVER_NEW, DRIVER_OLD};
use super::nodes::{host_from_node, NodeLabels};
use super::selector::Expr;
use super::FleetContainer;
use crate::core::amd::rocm::DKMS_RELEASE;
use crate::core::amd::target::{generic_of, parse_gfx_override, supported_features, GfxOverride};
use crate::core::decision::Verdict;
use std::collections::{BTreeMap, BTreeSet};

/// Processors core::amd::target treats apart: those with feature modes
/// (`supported_features`) and the members of generic targets (`generic_of`).
const KNOWN: &[&str] = &[
    "gfx801", "gfx810", "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a",
    "gfx90c", "gfx940", "gfx941", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013",
    "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036", "gfx1100",
    "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201",
];

/// A class of label values: the label absent, one value, or any other.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Absent,
    Value(String),
    Other,
}

/// The processors the decision may tell apart for `subject`.
fn processors(subject: &FleetContainer) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = KNOWN.iter().map(|p| p.to_string()).collect();
    for lib in subject.scanned().iter().flat_map(|s| &s.amd) {
        for c in &lib.code {
            if let Some(t) = crate::core::amd::TargetId::parse(&c.arch) {
                out.insert(t.processor);
            }
        }
        out.extend(
            lib.tensile
                .iter()
                .flat_map(|t| t.processors.iter().cloned()),
        );
    }
    if let Some(v) = subject.container().env.get("HSA_OVERRIDE_GFX_VERSION") {
        if let GfxOverride::Processor(p) = parse_gfx_override(v) {
            out.insert(p);
        }
    }
    out.retain(|p| super::amd_nodes::valid_gfx(p));
    out
}

/// A processor none of `named` is, with no feature modes or generic
/// target: what every other processor is judged as.
fn other_processor(named: &BTreeSet<String>) -> Option<String> {
    (0x100u32..0x1000).map(|n| format!("gfx{n:x}")).find(|p| {
        !named.contains(p) && generic_of(p).is_none() && supported_features(p) == (false, false)
    })
}

/// Whether a node labelled `gfx`, `driver` runs `subject`.
fn allowed(subject: &FleetContainer, gfx: &Class, driver: &Class, other: &str) -> bool {
    let mut l = BTreeMap::new();
    l.insert(labels::VENDOR.to_string(), "amd".to_string());
    let value = |c: &Class, other: &str| match c {
        Class::Absent => None,
        Class::Value(v) => Some(v.clone()),
        Class::Other => Some(other.to_string()),
    };
    if let Some(v) = value(gfx, other) {
        l.insert(labels::AMD_GFX.to_string(), v);
    }
    if let Some(v) = value(driver, "0.0.0") {
        l.insert(AMD_DRIVER.to_string(), v);
    }
    let node = NodeLabels {
        name: "amd-cell".into(),
        labels: l,
    };
    match host_from_node(&node) {
        Ok(h) => subject.judge_host(&h).verdict == Verdict::Allow,
        Err(_) => false,
    }
}

/// The expressions on `key` that hold exactly for the classes `set` of
/// the values `all` (Other: any value not in `all`), as alternatives.
fn class_dnf(key: &str, set: &BTreeSet<Class>, all: &[String]) -> Dnf {
    let absent = set.contains(&Class::Absent);
    let values: Vec<String> = all
        .iter()
        .filter(|v| set.contains(&Class::Value((*v).clone())))
        .cloned()
        .collect();
    if set.contains(&Class::Other) {
        let excluded: Vec<String> = all
            .iter()
            .filter(|v| !values.contains(v))
            .cloned()
            .collect();
        let mut t = Vec::new();
        if !absent {
            t.push(Expr::exists(key));
        }
        if !excluded.is_empty() {
            t.push(Expr::new(key, "NotIn", &excluded));
        }
        return vec![t];
    }
    let mut alts = Vec::new();
    if !values.is_empty() {
        alts.push(vec![Expr::new(key, "In", &values)]);
    }
    if absent {
        alts.push(vec![Expr::absent(key)]);
    }
    alts
}

/// The terms (each a list of expressions) that pin an AMD node as
/// super::amd_nodes reads one.
fn amd_guards() -> Dnf {
    let no_nvidia = vec![
        Expr::absent(labels::DRIVER_INT),
        Expr::absent(DRIVER_NEW[0]),
        Expr::absent(DRIVER_OLD[0]),
    ];
    let amd = vec!["amd".to_string()];
    let with = |mut more: Vec<Expr>| {
        let mut t = no_nvidia.clone();
        t.append(&mut more);
        t
    };
    vec![
        with(vec![Expr::new(labels::VENDOR, "In", &amd)]),
        with(vec![
            Expr::new(labels::VENDOR, "NotIn", &amd),
            Expr::exists(AMD_FAMILY),
        ]),
        with(vec![
            Expr::new(labels::VENDOR, "NotIn", &amd),
            Expr::absent(AMD_FAMILY),
            Expr::exists(AMD_DEVICE_ID),
        ]),
    ]
}

/// The AMD terms for `subject`: empty when no AMD node runs it.
pub(super) fn amd_terms(subject: &FleetContainer) -> Dnf {
    let named = processors(subject);
    let Some(other) = other_processor(&named) else {
        return Vec::new();
    };
    let gfx_all: Vec<String> = named.iter().cloned().collect();
    let drivers: Vec<String> = DKMS_RELEASE.iter().map(|(v, _)| v.to_string()).collect();
    let classes = |all: &[String]| -> Vec<Class> {
        let mut v = vec![Class::Absent, Class::Other];
        v.extend(all.iter().cloned().map(Class::Value));
        v
    };
    // For each driver class, the processor classes allowed; driver classes
    // with the same processors share a term.
    let mut by_gfx: BTreeMap<BTreeSet<Class>, BTreeSet<Class>> = BTreeMap::new();
    for d in classes(&drivers) {
        let ok: BTreeSet<Class> = classes(&gfx_all)
            .into_iter()
            .filter(|g| allowed(subject, g, &d, &other))
            .collect();
        if !ok.is_empty() {
            by_gfx.entry(ok).or_default().insert(d);
        }
    }
    let mut out = Dnf::new();
    for (gfx, drv) in &by_gfx {
        let g = class_dnf(labels::AMD_GFX, gfx, &gfx_all);
        let d = class_dnf(AMD_DRIVER, drv, &drivers);
        for guard in amd_guards() {
            for a in &g {
                for b in &d {
                    let mut t = guard.clone();
                    t.extend(a.iter().cloned());
                    t.extend(b.iter().cloned());
                    out.push(t);
                }
            }
        }
    }
    out
}

/// Why no AMD node runs an AMD-only `subject`: the failing findings on the
/// processor node where they are fewest (mapped drivers first).
pub(super) fn nowhere_diagnosis(subject: &FleetContainer) -> String {
    let mut best: Option<Vec<String>> = None;
    for p in KNOWN {
        for driver in DKMS_RELEASE.iter().map(|(v, _)| *v) {
            let mut l = BTreeMap::new();
            l.insert(labels::VENDOR.to_string(), "amd".to_string());
            l.insert(labels::AMD_GFX.to_string(), p.to_string());
            l.insert(AMD_DRIVER.to_string(), driver.to_string());
            let node = NodeLabels {
                name: "amd".into(),
                labels: l,
            };
            let Ok(h) = host_from_node(&node) else {
                continue;
            };
            let d = subject.judge_host(&h);
            let failing: Vec<String> = d.failure_predictions().map(|f| f.message.clone()).collect();
            if !failing.is_empty() && best.as_ref().map_or(true, |b| failing.len() < b.len()) {
                best = Some(failing);
            }
        }
    }
    let mut why = best.unwrap_or_default();
    why.truncate(3);
    if why.is_empty() {
        "no node labelled by gpu-guard or AMD's node labeller could run it".into()
    } else {
        why.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_become_expressions() {
        let all = vec!["a".to_string(), "b".to_string()];
        let set = |c: &[Class]| c.iter().cloned().collect::<BTreeSet<_>>();
        let d = class_dnf(
            "k",
            &set(&[Class::Absent, Class::Other, Class::Value("a".into())]),
            &all,
        );
        assert_eq!(d, vec![vec![Expr::new("k", "NotIn", &["b".to_string()])]]);
        let d = class_dnf("k", &set(&[Class::Other]), &all);
        assert_eq!(
            d,
            vec![vec![Expr::exists("k"), Expr::new("k", "NotIn", &all)]]
        );
        let d = class_dnf("k", &set(&[Class::Absent, Class::Value("b".into())]), &all);
        assert_eq!(
            d,
            vec![
                vec![Expr::new("k", "In", &["b".to_string()])],
                vec![Expr::absent("k")]
            ]
        );
        let any = class_dnf(
            "k",
            &set(&[
                Class::Absent,
                Class::Other,
                Class::Value("a".into()),
                Class::Value("b".into()),
            ]),
            &all,
        );
        assert_eq!(any, vec![Vec::<Expr>::new()]);
        let named: BTreeSet<String> = KNOWN.iter().map(|p| p.to_string()).collect();
        let o = other_processor(&named).unwrap();
        assert!(
            super::super::amd_nodes::valid_gfx(&o) && !named.contains(&o),
            "{o}"
        );
    }
}
