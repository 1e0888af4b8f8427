//! Where an image can run, from what it needs: the node-label terms of
//! `check --affinity` without `--nodes`, or "nowhere" with the diagnosis.
//!
//! The container is the one `check --image` judges (`docker run --gpus
//! all` of the image). Where it goes is `fleet::label_affinity::place` of
//! it: the label-only affinity `check --affinity` prints without
//! `--nodes`, exact on every node labelled by gpu-guard and GPU Feature
//! Discovery, or stricter and saying so. A pod is denied only when no node
//! with any labels could run it (what the image is stops it: no
//! architecture has code for any capability, an impossible requirement),
//! never because it needs a driver newer than gpu-guard's tables know: that
//! is an affinity a node labelled with such a driver satisfies. Terms that
//! admit no node are never written otherwise: not exact (requirements too
//! complex to judge), the image counts as unreadable.
//!
//! Every decision here goes through the one pipeline (`gpu_guard::pipeline`,
//! by `fleet::FleetContainer`), as `check --image --nodes` decides.

use crate::affinity::{expr, term};
use crate::judge::Placement;
use crate::needs::Needs;
use gpu_guard::core::policy::Config;
use gpu_guard::core::security::SpecAccess;
use gpu_guard::fleet::label_affinity::LabelPlacement;
use gpu_guard::fleet::FleetContainer;
use gpu_guard::pipeline::{ContainerInput, Scans};
use k8s_openapi::api::core::v1::NodeSelectorTerm;

fn summary(needs: &Needs, reqs: &[String]) -> String {
    let mut archs: Vec<String> = needs
        .libraries
        .iter()
        .flat_map(|l| l.entries.iter().flatten())
        .map(|e| e.arch.clone())
        .collect();
    archs.sort();
    archs.dedup();
    let req = if reqs.is_empty() {
        "no CUDA requirement".to_string()
    } else {
        reqs.join(" ")
    };
    let code = if needs.libraries.is_empty() {
        "no GPU libraries scanned".to_string()
    } else if archs.is_empty() {
        format!("{} libraries, no GPU code", needs.libraries.len())
    } else {
        format!(
            "{} libraries, GPU code {}",
            needs.libraries.len(),
            archs.join(" ")
        )
    };
    format!(
        "{} {}: {req}; {code}",
        &needs.manifest_digest.get(..19).unwrap_or(""),
        needs.platform
    )
}

/// Places an image from its needs under `cfg`, run with `env` (the
/// container's own, [`crate::podenv`]) over the image's.
pub fn place(needs: &Needs, env: &[(String, String)], cfg: &Config) -> Placement {
    let container = gpu_guard::commands::image_check::container_for(&needs.env, env);
    // The requirements as judged: the image's env with the container's over it.
    let judged: Vec<String> = container
        .env
        .vars()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let (scanned, compat) = needs.scanned();
    // Through the one pipeline (gpu_guard::pipeline), as `check --image`
    // judges a node: the scans in hand, GPUs attached.
    let scans = Scans::made(Some(scanned), Some(compat)).with_libraries(needs.library_scan.clone());
    let case = ContainerInput::new(container, SpecAccess::Edit).with_scans(scans);
    let subject = FleetContainer::new(cfg, case);
    let aff = match gpu_guard::fleet::label_affinity::place(&subject) {
        LabelPlacement::Nowhere { diagnosis } => return Placement::Nowhere { diagnosis },
        LabelPlacement::Unwritable { reason } => {
            return Placement::Unplaceable {
                reason: format!("its node affinity cannot be written: {reason}"),
            }
        }
        LabelPlacement::Terms(a) => a,
    };
    // The first note says what the terms read (labels only); the rest say
    // why they are stricter than gpu-guard, which users should see.
    let why: Vec<String> = aff.notes.iter().skip(1).cloned().collect();
    if aff.terms.iter().all(|t| {
        t.match_expressions
            .iter()
            .any(|e| e.key == gpu_guard::fleet::selector::NONE_KEY)
    }) {
        return Placement::Unplaceable {
            reason: format!("its node affinity cannot be written: {}", why.join("; ")),
        };
    }
    let terms: Vec<NodeSelectorTerm> = aff.terms.iter().map(k8s_term).collect();
    let notes = if aff.exact { Vec::new() } else { why };
    let reqs: Vec<String> = judged
        .iter()
        .filter(|e| {
            e.starts_with("NVIDIA_REQUIRE_")
                || e.starts_with("CUDA_VERSION=")
                || e.starts_with("NVIDIA_DISABLE_REQUIRE=")
        })
        .map(|e| e.chars().take(120).collect())
        .take(4)
        .collect();
    Placement::Terms {
        terms,
        summary: summary(needs, &reqs),
        notes,
    }
}

/// `terms` (placed once per image and env) for a container that asks for
/// `n` GPUs: a node labelled with fewer healthy GPUs is not chosen, as
/// `check --affinity --gpu-count N` writes it
/// (gpu_guard::fleet::label_affinity::with_gpu_count).
pub fn for_gpu_count(terms: &[NodeSelectorTerm], n: u32) -> Vec<NodeSelectorTerm> {
    let too_few: Vec<String> = (0..n.max(1)).map(|x| x.to_string()).collect();
    let mut out = terms.to_vec();
    for e in out
        .iter_mut()
        .flat_map(|t| t.match_expressions.iter_mut().flatten())
    {
        if e.key == gpu_guard::fleet::labels::HEALTHY && e.operator == "NotIn" {
            e.values = Some(too_few.clone());
        }
    }
    out
}

fn k8s_term(t: &gpu_guard::fleet::selector::Term) -> NodeSelectorTerm {
    let exprs = t
        .match_expressions
        .iter()
        .map(|e| {
            let values: Vec<&str> = e.values.iter().map(String::as_str).collect();
            expr(&e.key, e.operator, &values)
        })
        .collect();
    term(exprs)
}
