//! Where an image can run, from what it needs: the node-label terms of
//! `check --affinity` without `--nodes`, or "nowhere" with the diagnosis.
//!
//! The container is the one `check --image` judges (`docker run --gpus
//! all` of the image). The terms are `fleet::affinity::label_terms` of
//! it, the label-only affinity `check --affinity` prints without
//! `--nodes`: exact on every node labelled by GPU Feature Discovery and
//! gpu-guard, or stricter and saying so. Terms that admit no node are never
//! written (a pod that could never be scheduled, Pending without a word):
//! exact, no labelled node could run it and the pod is denied; not exact
//! (requirements too complex to judge), the image counts as unreadable.
//!
//! First, though, the image is judged on the best-case nodes a GPU Feature
//! Discovery cluster could have (each brand, each compute capability
//! gpu-guard knows, the newest driver in its tables): refused on all of
//! them (no architecture has code for it, a CUDA newer than any known
//! driver), the pod is denied with what stops it there. Labels alone cannot
//! tell that: a node could be labelled with a CUDA no driver has.
//!
//! Every decision here goes through the one pipeline (`gpu_guard::pipeline`,
//! by `fleet::Subject`), as `check --image --nodes` decides.

use crate::affinity::{expr, term};
use crate::judge::Placement;
use crate::needs::Needs;
use gpu_guard::core::decision::{Severity, Verdict};
use gpu_guard::core::facts::{Gpu, HostFacts, HostReport, BRANDS};
use gpu_guard::core::policy::Config;
use gpu_guard::core::security::Stage;
use gpu_guard::fleet::Subject;
use gpu_guard::pipeline::{Case, Scans};
use k8s_openapi::api::core::v1::NodeSelectorTerm;

/// Compute capabilities of NVIDIA GPUs (NVIDIA, "CUDA GPU Compute
/// Capability", developer.nvidia.com/cuda-gpus), oldest first.
const CAPABILITIES: &[&str] = &[
    "3.5", "3.7", "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5", "8.0", "8.6",
    "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1",
];

/// The newest driver and its CUDA version in gpu-guard's tables.
fn newest_driver() -> (String, String) {
    let (cuda, driver) = gpu_guard::core::cuda_tables::newest_toolkit();
    (driver.to_string(), cuda.to_string())
}

fn best_case_hosts() -> Vec<HostReport> {
    let (driver, cuda) = newest_driver();
    let mut v = Vec::new();
    for brand in BRANDS.iter().filter(|b| **b != "unknown") {
        for cc in CAPABILITIES {
            v.push(HostReport {
                facts: Some(HostFacts {
                    driver_version: Some(driver.clone()),
                    cuda_driver_version: Some(cuda.clone()),
                    gpus: vec![Gpu {
                        index: 0,
                        uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
                        name: format!("best case {brand} {cc}"),
                        brand: brand.to_string(),
                        compute_capability: Some(cc.to_string()),
                        ..Gpu::default()
                    }],
                }),
                problems: Vec::new(),
                source: "gpu-guard admission best case".into(),
            });
        }
    }
    v
}

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

/// Why no GPU node runs the subject: the errors on the best-case nodes
/// (refused on every one of them), or None when one of them runs it.
/// None when some best-case node runs it.
fn nowhere(subject: &Subject) -> Option<String> {
    let decisions: Vec<_> = best_case_hosts()
        .iter()
        .map(|h| subject.decide(h))
        .collect();
    let generic = "no node labelled by GPU Feature Discovery and gpu-guard could run it";
    if decisions.is_empty() || decisions.iter().any(|d| d.verdict != Verdict::Refuse) {
        return None;
    }
    // The errors on the newest, most capable node.
    let errors: Vec<String> = decisions
        .last()
        .map(|d| d.findings.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.message)
        .take(3)
        .collect();
    Some(if errors.is_empty() {
        generic.to_string()
    } else {
        errors.join("; ")
    })
}

/// Places an image from its needs under `cfg`.
pub fn place(needs: &Needs, cfg: &Config) -> Placement {
    let container = gpu_guard::commands::image_check::container_for(&needs.env, &[]);
    let (scanned, compat) = needs.scanned();
    // Through the one pipeline (gpu_guard::pipeline), as `check --image`
    // judges a node: the scans in hand, GPUs attached.
    let scans = Scans::made(Some(scanned), Some(compat)).with_libraries(needs.library_scan.clone());
    let case = Case::new(container, Stage::Edit).with_scans(scans);
    let subject = Subject::new(cfg, case);
    // No GPU node at all could run it, whatever its labels say (a CUDA
    // newer than any driver: labels could claim one, no driver has it).
    if let Some(diagnosis) = nowhere(&subject) {
        return Placement::Nowhere { diagnosis };
    }
    let aff = gpu_guard::fleet::affinity::label_terms(&subject);
    let none = |t: &gpu_guard::fleet::selector::Term| {
        t.match_expressions
            .iter()
            .any(|e| e.key == gpu_guard::fleet::selector::NONE_KEY)
    };
    // The first note says what the terms read (labels only); the rest say
    // why they are stricter than gpu-guard, which users should see.
    let why: Vec<String> = aff.notes.iter().skip(1).cloned().collect();
    if aff.terms.is_empty() || aff.terms.iter().all(none) {
        return if aff.exact {
            Placement::Nowhere {
                diagnosis: "no node labelled by GPU Feature Discovery and gpu-guard could run it"
                    .to_string(),
            }
        } else {
            Placement::Unplaceable {
                reason: format!("its node affinity cannot be written: {}", why.join("; ")),
            }
        };
    }
    let terms: Vec<NodeSelectorTerm> = aff.terms.iter().map(k8s_term).collect();
    let notes = if aff.exact { Vec::new() } else { why };
    let reqs: Vec<String> = needs
        .env
        .iter()
        .filter(|e| e.starts_with("NVIDIA_REQUIRE_") || e.starts_with("CUDA_VERSION="))
        .map(|e| e.chars().take(120).collect())
        .take(4)
        .collect();
    Placement::Terms {
        terms,
        summary: summary(needs, &reqs),
        notes,
    }
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
