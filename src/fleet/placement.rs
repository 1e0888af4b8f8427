//! Placement: a fleet's host is allowed only where the container would
//! work. The node's own decision (what gpu-guard does when the container
//! starts there) follows `mode` and each check's `severity`; a scheduler
//! must not place a pod where the prediction is a failure, also when that
//! prediction is only a warning at the node (`[kernel_image] severity =
//! "warn"`, the default): the pod would start and then fail with `no kernel
//! image is available`, a library the loader cannot open, or `CUDA driver
//! version is insufficient`. So a host's decision whose findings predict a
//! failure ([`Decision::failure_predictions`]) is a refusal here, with a
//! note saying why; a PTX JIT is not a failure.
//!
//! On facts from node labels also: facts labels cannot give are unknown,
//! never a pass ([`super::unknown`]; GPU code on a GPU whose compute
//! capability no label gives is code that cannot be judged), and a node
//! with fewer healthy GPUs (`gpu-guard.io/gpu.healthy`) than the pod asks
//! for is not chosen; a node without that label is not refused for it.

use super::{unknown, FleetContainer, Host, HostFacts, LabelInfo};
use crate::core::decision::{Check, Decision, Finding, Verdict};
use crate::core::facts::HostReport;
use crate::core::kernel_image::Scanned;
use std::borrow::Cow;

/// One host's decision for placement; `with_kernel`: with the judgement
/// of the GPU code ([`kernel_findings`]), else without it (the label
/// affinity judges the two apart: super::label_judge).
pub(super) fn judge(subject: &FleetContainer, h: &Host, with_kernel: bool) -> Decision {
    let (report, labels) = match &h.facts {
        HostFacts::NoGpuFacts { why } => {
            return unknown::no_gpu_facts(subject.detection().gpu, why)
        }
        HostFacts::Known { report, labels } => (report, labels.as_ref()),
    };
    let report = as_judged(subject, report, labels);
    let judge = subject.judge();
    let mut d = if with_kernel {
        judge.on_host(Some(&report))
    } else {
        judge.on_host_without_kernel_image(Some(&report))
    };
    if let Some(info) = labels.filter(|_| d.gpu_container) {
        if let Some(facts) = &report.facts {
            unknown::refuse_unknown(
                &mut d,
                &subject.requirements,
                &subject.detection().request,
                facts,
                subject.config().mode,
            );
        }
        if with_kernel {
            d.findings.extend(label_kernel_refusal(subject, &report));
        }
        d.findings.extend(too_few_healthy(subject, info));
        d.findings.insert(0, Finding::info(Check::Host, &info.note));
    }
    refuse_predicted_failures(&mut d);
    d
}

/// The judgement of the GPU code on one host: the kernel-image findings,
/// and on facts from labels the refusal of code no label lets be judged.
pub(super) fn kernel_findings(subject: &FleetContainer, h: &Host) -> Vec<Finding> {
    let HostFacts::Known { report, labels } = &h.facts else {
        return Vec::new();
    };
    let report = as_judged(subject, report, labels.as_ref());
    let mut out = subject.judge().kernel_image_findings(&report);
    if labels.is_some() {
        out.extend(label_kernel_refusal(subject, &report));
    }
    out
}

/// The facts a node's labels give, as the container sees them: on a node
/// with two GPU models, which index has which is not labelled, so a
/// request by index or UUID sees GPUs of unknown compute capability.
fn as_judged<'r>(
    subject: &FleetContainer,
    report: &'r HostReport,
    labels: Option<&LabelInfo>,
) -> Cow<'r, HostReport> {
    let by_index = !subject.detection().request.all;
    if !(by_index && labels.is_some_and(|l| l.mixed_models)) {
        return Cow::Borrowed(report);
    }
    let mut r = report.clone();
    if let Some(f) = &mut r.facts {
        for g in &mut f.gpus {
            g.compute_capability = None;
        }
    }
    Cow::Owned(r)
}

/// True when some scanned library has GPU code to judge.
fn has_gpu_code(s: &Scanned) -> bool {
    s.libraries
        .iter()
        .any(|l| l.outcome.as_ref().is_ok_and(|i| !i.is_empty()))
}

/// GPU code on a visible GPU whose compute capability (or, AMD's, target)
/// the labels do not give: the code cannot be judged, so the node is not
/// chosen (the core only warns: on the node itself NVML or KFD answers).
fn label_kernel_refusal(subject: &FleetContainer, report: &HostReport) -> Option<Finding> {
    nvidia_unknown(subject, report).or_else(|| amd_unknown(subject, report))
}

/// AMD code objects or Tensile files for a visible AMD GPU whose
/// processor no label gives (`gpu-guard.io/amd.gfx`).
fn amd_unknown(subject: &FleetContainer, report: &HostReport) -> Option<Finding> {
    let scanned = subject.scanned().filter(|s| !s.amd.is_empty())?;
    let facts = report.facts.as_ref()?;
    let v = crate::core::amd::visible::amd_gpus(subject.container(), subject.detection(), facts);
    if !v.gpus.iter().any(|g| g.target_id.is_none()) || scanned.rootfs_error.is_some() {
        return None;
    }
    Some(
        Finding::error(
            Check::KernelImage,
            format!(
                "the image's AMD code objects cannot be judged on this node: its labels do not give the GPU's processor ({}; AMD's node labeller publishes no GPU architecture); a node whose GPUs cannot be judged is not chosen",
                super::labels::AMD_GFX
            ),
        )
        .with_fix("run `gpu-guard host --node-labels --write` on the node (the gpu-guard DaemonSet does) so node-feature-discovery publishes its gpu-guard.io labels"),
    )
}

/// NVIDIA GPU code on a visible GPU whose compute capability no label gives.
fn nvidia_unknown(subject: &FleetContainer, report: &HostReport) -> Option<Finding> {
    let scanned = subject.scanned().filter(|s| has_gpu_code(s))?;
    let facts = report.facts.as_ref()?;
    let (visible, _) = crate::core::detect::resolve(&subject.detection().request, facts);
    let unknown = visible
        .iter()
        .filter_map(|i| facts.gpus.get(*i))
        .any(|g| g.compute_capability.is_none());
    if !unknown || scanned.rootfs_error.is_some() {
        return None;
    }
    Some(
        Finding::error(
            Check::KernelImage,
            format!(
                "the image's GPU code cannot be judged on this node: its labels do not give the compute capability of every GPU the container gets ({} and {}; GPU Feature Discovery labels one GPU model of a node that may have several); a node whose GPUs cannot be judged is not chosen",
                super::labels::SM_MIN,
                super::labels::SM_MAX
            ),
        )
        .with_fix("run `gpu-guard host --node-labels --write` on the node (the gpu-guard DaemonSet does) so node-feature-discovery publishes its gpu-guard.io labels"),
    )
}

/// A node labelled with fewer healthy GPUs than the pod asks for.
fn too_few_healthy(subject: &FleetContainer, info: &LabelInfo) -> Option<Finding> {
    let healthy = info.healthy?;
    let want = subject.gpus_wanted;
    (healthy < want).then(|| {
        Finding::error(
            Check::Device,
            format!(
                "the pod asks for {want} GPU{}; this node has {healthy} healthy ({}={healthy}): the device plugin allocates only healthy GPUs",
                if want == 1 { "" } else { "s" },
                super::labels::HEALTHY
            ),
        )
        .with_fix("drain the node and reset or replace its failed GPUs (`nvidia-smi -r`), or ask for fewer GPUs")
    })
}

/// A decision that lets the container start where a finding predicts it
/// fails is a refusal for placement.
fn refuse_predicted_failures(d: &mut Decision) {
    if d.verdict != Verdict::Allow {
        return;
    }
    let Some(first) = d.failure_predictions().next() else {
        return;
    };
    let why = crate::core::sanitize::one_line(first.title());
    d.findings.push(Finding::info(
        Check::Config,
        format!(
            "not placed here: {why} (placement follows what will happen on the node, not the severity or mode that lets a container start)"
        ),
    ));
    d.verdict = Verdict::Refuse;
    d.withheld_edits = std::mem::take(&mut d.edits);
}

/// True when `d` is an allow for placement: allowed, and no finding
/// predicts a failure. `check --strict` reads decisions this way.
pub fn runs(d: &Decision) -> bool {
    d.verdict == Verdict::Allow && d.failure_predictions().next().is_none()
}
