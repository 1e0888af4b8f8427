//! Facts that node labels cannot give are unknown, never a pass (design.md,
//! "`gpu-guard check` before scheduling").
//!
//! The core judges a requirement three-valued: an alternative whose facts
//! are missing is "cannot judge", and a requirement left with only such
//! alternatives warns and allows, which is right on a node at start (NVML
//! answered, or the node's own /proc fallback is all there is). Before
//! scheduling, the facts come from labels, and labels say nothing about the
//! brand on a node gpu-guard did not label: NVIDIA's images would then be
//! "allowed" through a `brand=tesla,driver>=535,driver<536` alternative on
//! a GeForce. So for facts from labels an alternative that cannot be judged
//! does not hold: the node is refused, with the label that would decide it.

use crate::core::decision::{Check, Decision, Finding, Severity, Verdict};
use crate::core::detect::{self, Request};
use crate::core::facts::{Gpu, HostFacts};
use crate::core::policy::Mode;
use crate::core::requirement::{Context, Key, Outcome, Requirement, RequirementOutcome};
use crate::core::sanitize::esc;
use crate::core::version::Version;

/// The words of the refusal, for the fleet summary's short reason.
pub const NOT_SHOWN: &str = "is not shown to hold by this node's labels";

/// What to run so a node's labels carry the facts gpu-guard reads.
const LABEL_FIX: &str = "run `gpu-guard host --node-labels --write` on the node (the gpu-guard DaemonSet does) so node-feature-discovery publishes its gpu-guard.io labels, and GPU Feature Discovery for the nvidia.com labels";

/// The Decision for a node whose labels give no GPU facts: a GPU container
/// cannot be judged there, so it is not placed there.
pub fn no_gpu_facts(gpu_container: bool, why: &str) -> Decision {
    let mut d = Decision::skip();
    if !gpu_container {
        return d;
    }
    d.gpu_container = true;
    d.verdict = Verdict::Refuse;
    d.findings.push(
        Finding::error(
            Check::Host,
            format!("no GPU facts: {why}; a GPU container cannot be judged here, so it is not placed here"),
        )
        .with_fix("give GPU nodes GPU Feature Discovery labels (the GPU Operator or k8s-device-plugin's gpu-feature-discovery); list only GPU nodes (`kubectl get nodes -l nvidia.com/gpu.present=true`)"),
    );
    d
}

/// The label that decides a factor of `key`.
fn deciding_label(key: Option<Key>) -> &'static str {
    match key {
        Some(Key::Brand) => "gpu-guard.io/brand",
        Some(Key::Arch) => {
            "nvidia.com/gpu.compute.major/minor (GPU Feature Discovery) or gpu-guard.io/compute.min.major/minor"
        }
        Some(Key::Cuda) => "nvidia.com/cuda.runtime-version.major/minor",
        Some(Key::Driver) | None => "nvidia.com/cuda.driver-version.major/minor/revision",
    }
}

/// Turns every requirement that cannot be judged on a visible GPU into a
/// refusal: an error finding, and the core's "cannot be judged" warning
/// reworded to name the label that would decide it.
///
/// Under `mode = "warn"` the errors stand but the verdict stays allow, as
/// the core does with its own errors (decide.rs `finish`).
pub fn refuse_unknown(
    d: &mut Decision,
    reqs: &[Requirement],
    request: &Request,
    facts: &HostFacts,
    mode: Mode,
) {
    if d.verdict == Verdict::Skip {
        return;
    }
    let gpus = visible_gpus(request, facts);
    let mut refused = false;
    for req in reqs {
        let Some((term, why, key)) = first_unknown_term(req, &gpus, facts) else {
            continue;
        };
        let label = deciding_label(key);
        reword_warning(d, &req.source, label);
        d.findings.push(
            Finding::error(
                Check::Requirement,
                format!(
                    "{} {NOT_SHOWN}: no alternative holds, and `{}` cannot be judged ({why}); an alternative whose facts are unknown does not hold",
                    esc(&req.source),
                    esc(&term)
                ),
            )
            .with_fix(format!("label {label} on the node: {LABEL_FIX}")),
        );
        refused = true;
    }
    if refused && d.verdict != Verdict::Refuse {
        refuse_by_mode(d, mode);
    }
}

/// The GPUs the request makes visible on this host (one `None` when there
/// are none, so a requirement is still judged on the driver alone).
fn visible_gpus<'a>(request: &Request, facts: &'a HostFacts) -> Vec<Option<&'a Gpu>> {
    let (idx, _) = detect::resolve(request, facts);
    let mut gpus: Vec<Option<&Gpu>> = idx
        .iter()
        .filter_map(|i| facts.gpus.get(*i))
        .map(Some)
        .collect();
    if gpus.is_empty() {
        gpus.push(None);
    }
    gpus
}

/// The first term of `req` that cannot be judged on a visible GPU, when
/// the requirement as a whole cannot be judged: (term, why, its key).
fn first_unknown_term(
    req: &Requirement,
    gpus: &[Option<&Gpu>],
    facts: &HostFacts,
) -> Option<(String, String, Option<Key>)> {
    let driver = facts
        .driver_version
        .as_deref()
        .and_then(|v| Version::parse(v).ok());
    let cuda = facts
        .cuda_driver_version
        .as_deref()
        .and_then(|v| Version::parse(v).ok());
    let j = gpus.iter().find_map(|gpu| {
        let j = req.judge(&Context {
            driver: driver.as_ref(),
            driver_text: facts.driver_version.as_deref(),
            cuda: cuda.as_ref(),
            gpu: *gpu,
        });
        (j.outcome == RequirementOutcome::CannotJudge).then_some(j)
    })?;
    j.terms.iter().find_map(|t| match &t.outcome {
        Outcome::Unknown(why) => Some((t.term.clone(), why.clone(), t.key)),
        _ => None,
    })
}

/// Refuses as the core does with its own errors: in enforce mode the
/// verdict and the withheld edits, in warn mode a note that it starts anyway.
fn refuse_by_mode(d: &mut Decision, mode: Mode) {
    if mode.refuses() {
        d.verdict = Verdict::Refuse;
        d.withheld_edits = std::mem::take(&mut d.edits);
    } else if !d
        .findings
        .iter()
        .any(|f| f.check == Check::Config && f.message.starts_with("mode = \"warn\""))
    {
        d.findings.push(Finding::info(
            Check::Config,
            "mode = \"warn\": gpu-guard would refuse this container; it starts anyway",
        ));
    }
}

/// The core's warning says NVML would decide; on labels, a label would.
fn reword_warning(d: &mut Decision, source: &str, label: &str) {
    for f in &mut d.findings {
        if f.check == Check::Requirement
            && f.severity == Severity::Warning
            && f.message.starts_with(source)
            && f.message.contains("cannot be judged")
        {
            f.message = crate::core::sanitize::clean(format!(
                "{}; the label {label} would decide it",
                f.message
            ));
            f.fix = Some(LABEL_FIX.into());
        }
    }
}
