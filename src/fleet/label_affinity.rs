//! The label-only node affinity (`check --affinity` without `--nodes`, and
//! the admission webhook): `nodeSelectorTerms` over node labels alone
//! (gpu-guard's `gpu-guard.io/...` and GPU Feature Discovery's
//! `nvidia.com/...`, never `matchFields`) that admit exactly the labelled
//! nodes `check --nodes` allows.
//!
//! Exact by construction, not by translating requirement syntax: the facts
//! a node's labels give ([`super::node_facts`]) are a driver version, a
//! CUDA version, compute capabilities, a GPU count, a brand and a healthy
//! count. Every comparison the decision makes against them is against a
//! constant (the requirements' versions; with a scanned image, its
//! architectures, PTX ISA versions, compat libraries and CUDA runtimes), so
//! cutting each axis at those constants leaves cells on which the decision
//! cannot change ([`super::label_grid`]). Each cell is judged by the real
//! per-node judgement on labels built for it and read back by the node
//! reader, at its lowest point and at its highest ([`super::label_judge`]),
//! once per source of facts (gpu-guard's integer labels, GFD's current
//! labels, GFD's deprecated ones); a cell where the two ends disagree (a
//! constant missed) is refused and the affinity marked not exact. The
//! allowed cells are covered by boxes and written as terms
//! ([`super::label_cover`]). With gpu-guard's integers a range of any fact
//! is one `Gt` and one `Lt`, and the capabilities a node's code runs on
//! are one range with a `NotIn` list, so an image's code and its
//! requirements together stay a handful of terms.
//!
//! When no cell allows the container, no node with any labels could run
//! it: that follows from what the image is (no architecture with code for
//! any capability, an impossible requirement), never from the newest driver
//! gpu-guard knows (a node labelled with a newer one is a cell too), so the
//! admission webhook may deny it ([`place`]).

use super::label_cover::{logical_terms, write, Writing};
use super::label_grid::cuts;
use super::label_judge::{judge, Judged};
use super::labels;
use super::node_facts::Source;
use super::selector::{self, Term};
use super::FleetContainer;
use crate::core::facts::{Gpu, HostFacts, HostReport};

/// The label affinity and how far it can be trusted.
#[derive(Clone, Debug)]
pub struct LabelAffinity {
    pub terms: Vec<Term>,
    /// True when the terms admit exactly the labelled nodes `check
    /// --nodes` allows; false when they admit fewer (never more).
    pub exact: bool,
    pub notes: Vec<String>,
}

/// Where an image can go, from its labels alone (the admission webhook).
#[derive(Clone, Debug)]
pub enum LabelPlacement {
    /// The terms admit exactly the labelled nodes that run it (`exact`),
    /// or fewer, saying why in `notes`.
    Terms(LabelAffinity),
    /// No node with any labels could run it: what the image is stops it,
    /// not the newest driver gpu-guard knows. Deny, with the diagnosis.
    Nowhere { diagnosis: String },
    /// Its affinity cannot be written (requirements with too many
    /// constants): the image counts as unreadable.
    Unwritable { reason: String },
}

/// At most this many terms, and [`MAX_EXPRESSIONS`] expressions in all:
/// the API server sets no count, but the pod object must stay far below
/// etcd's 1.5 MiB request limit (`--max-request-bytes`) with the pod's
/// own spec, and the scheduler evaluates every term on every node for
/// every pod. NVIDIA's official images with any GPU code need at most 16.
pub const MAX_TERMS: usize = 64;
pub const MAX_EXPRESSIONS: usize = 1024;

/// The first note: what the terms read.
fn labels_note() -> String {
    format!(
        "over node labels only: gpu-guard's {}, {}, {}/{}, {}, {} and {} (gpu-guard host --node-labels), else GPU Feature Discovery's nvidia.com/cuda.driver-version.*, cuda.runtime-version.* (or the deprecated cuda.driver.*, cuda.runtime.*) with gpu-guard's {}; on AMD nodes gpu-guard's {} and {} with AMD's node labeller's {}; a node without them is not admitted",
        labels::DRIVER_INT,
        labels::CUDA_INT,
        labels::SM_MIN,
        labels::SM_MAX,
        labels::BRAND,
        labels::DRIVER_BRANCH,
        labels::HEALTHY,
        labels::BRAND,
        labels::VENDOR,
        labels::AMD_GFX,
        super::amd_nodes::AMD_DRIVER,
    )
}

/// The judged grids of every source, or None when one is too large.
fn judge_all(subject: &FleetContainer) -> Option<Vec<Judged>> {
    let fine = cuts(subject, true);
    let coarse = cuts(subject, false);
    Source::ALL
        .iter()
        .map(|&s| judge(subject, s, &fine, &coarse))
        .collect()
}

/// The label affinity for `subject`.
pub fn label_terms(subject: &FleetContainer) -> LabelAffinity {
    match place(subject) {
        LabelPlacement::Terms(a) => a,
        LabelPlacement::Nowhere { diagnosis } => LabelAffinity {
            terms: vec![selector::admits_none()],
            exact: true,
            notes: vec![
                labels_note(),
                format!("no node with any labels could run it, so this affinity admits none: {diagnosis}"),
            ],
        },
        LabelPlacement::Unwritable { reason } => LabelAffinity {
            terms: vec![selector::admits_none()],
            exact: false,
            notes: vec![labels_note(), reason],
        },
    }
}

/// Where `subject` can go, from labels alone.
pub fn place(subject: &FleetContainer) -> LabelPlacement {
    let Some(grids) = judge_all(subject) else {
        return LabelPlacement::Unwritable {
            reason: "the requirements compare with too many versions to judge; this affinity admits no node (not exact)".into(),
        };
    };
    let amd = super::label_amd::amd_terms(subject);
    let any = !amd.is_empty()
        || grids
            .iter()
            .any(|g| g.allowed.iter().flatten().any(|a| !a.is_empty()));
    if !any && grids.iter().all(|g| g.consistent) {
        return LabelPlacement::Nowhere {
            diagnosis: nowhere_diagnosis(subject),
        };
    }
    let mut notes = vec![labels_note()];
    let mut exact = grids.iter().all(|g| g.consistent);
    if !exact {
        notes.push("some nodes could not be judged alike within a range; they are not admitted (not exact)".into());
    }
    let w = Writing {
        all_gpus: subject.detection().request.all,
        wanted: subject.gpus_wanted,
    };
    let mut terms: Vec<Term> = Vec::new();
    let mut exprs = 0usize;
    let written = grids
        .iter()
        .flat_map(|g| logical_terms(g).into_iter().map(move |l| (g, l)))
        .flat_map(|(g, l)| write(g, &l, &w))
        .chain(amd);
    for t in written {
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
        notes.push("some node could run it but no term could be written; this affinity admits none (not exact)".into());
        terms.push(selector::admits_none());
        exact = false;
    }
    if let Err(e) = selector::validate(&terms) {
        return LabelPlacement::Unwritable {
            reason: format!(
                "internal: the terms fail the API server's rules ({e}); this affinity admits none"
            ),
        };
    }
    LabelPlacement::Terms(LabelAffinity {
        terms,
        exact,
        notes,
    })
}

/// Why no node runs `subject`, in its own findings: those on a node with
/// the newest driver gpu-guard knows and each GPU generation, taken from
/// the node where the fewest findings predict a failure (no node of any
/// driver runs it; this is only what to tell).
fn nowhere_diagnosis(subject: &FleetContainer) -> String {
    if subject.detection().amd_only {
        return super::label_amd::nowhere_diagnosis(subject);
    }
    let (cuda, driver) = crate::core::cuda_tables::newest_toolkit();
    let mut best: Option<Vec<String>> = None;
    // Newest first: of nodes alike in what stops it, the newest is told.
    let ccs = [
        "12.0", "10.0", "9.0", "8.9", "8.6", "8.0", "7.5", "7.0", "6.1", "5.2",
    ];
    for brand in ["tesla", "geforce"] {
        for cc in ccs {
            let report = HostReport::from_facts(
                HostFacts {
                    driver_version: Some(driver.into()),
                    cuda_driver_version: Some(cuda.into()),
                    gpus: vec![Gpu {
                        brand: brand.into(),
                        compute_capability: Some(cc.into()),
                        ..Gpu::default()
                    }],
                    ..HostFacts::default()
                },
                String::from("gpu-guard's best case"),
            );
            let d = subject.decision_on(&report);
            let mut failing: Vec<String> =
                d.failure_predictions().map(|f| f.message.clone()).collect();
            if failing.is_empty() {
                failing = d.errors().map(|f| f.message.clone()).collect();
            }
            if !failing.is_empty() && best.as_ref().map_or(true, |b| failing.len() < b.len()) {
                best = Some(failing);
            }
        }
    }
    let mut why = best.unwrap_or_default();
    why.truncate(3);
    if why.is_empty() {
        "no node labelled by gpu-guard or GPU Feature Discovery could run it".into()
    } else {
        why.join("; ")
    }
}

/// `terms` written for a pod asking for `n` GPUs: the healthy-count
/// expression of every term (`gpu-guard.io/gpu.healthy NotIn [0..n-1]`,
/// which a node without the label passes) set for `n`. The webhook
/// places an image once per digest and each pod by its own
/// `nvidia.com/gpu` limit.
pub fn with_gpu_count(terms: &[Term], n: u32) -> Vec<Term> {
    let unhealthy: Vec<String> = (0..n.max(1)).map(|x| x.to_string()).collect();
    terms
        .iter()
        .map(|t| {
            let mut t = t.clone();
            for e in &mut t.match_expressions {
                if e.key == labels::HEALTHY && e.operator == "NotIn" {
                    e.values = unhealthy.clone();
                }
            }
            t
        })
        .collect()
}

#[cfg(test)]
mod tests;
