//! The fleet's outcome for people (a table and a summary line), as JSON, and
//! as an exit status.
//!
//! Counting: a host is *allowed* when the container would start and work
//! there as a GPU container (verdict allow: fleets are judged for
//! placement, super::placement, so no finding predicts a failure there),
//! *refused* when it would not (a node without GPU facts included: a GPU
//! container cannot be judged there), and *skipped* when gpu-guard would
//! not judge it as a GPU container at all.
//! A skip is never counted as runnable: a fleet answer built on it would
//! pass every host, even one without a driver.

use super::{FleetContainer, HostResult, ImageInfo};
use crate::core::decision::{Check, Decision, Severity, Verdict};
use crate::core::facts::HostFacts;
use crate::core::requirement::{Context, Key, Outcome, RequirementOutcome};
use crate::core::version::Version;
use std::collections::BTreeMap;

pub const EXIT_ALLOWED: i32 = 0;
pub const EXIT_REFUSED: i32 = 1;

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub allowed: usize,
    pub refused: usize,
    /// Extension: hosts where the container is not judged as a GPU
    /// container (verdict skip); neither allowed nor refused.
    pub skipped: usize,
    /// Extension: of the refused, the nodes without GPU facts.
    pub no_gpu_facts: usize,
}

/// True for the refusal of a node whose labels give no GPU facts.
pub fn is_no_gpu_facts(d: &Decision) -> bool {
    d.errors()
        .any(|f| f.check == Check::Host && f.message.starts_with("no GPU facts"))
}

pub fn counts(results: &[HostResult]) -> Counts {
    let mut c = Counts::default();
    for r in results {
        match r.decision.verdict {
            Verdict::Refuse => {
                c.refused += 1;
                c.no_gpu_facts += usize::from(is_no_gpu_facts(&r.decision));
            }
            Verdict::Skip => c.skipped += 1,
            Verdict::Allow => c.allowed += 1,
        }
    }
    c
}

/// 0 when allowed on every host (with `any`: on at least one), else 1. A
/// skip is not allowed.
pub fn exit_status(c: &Counts, any: bool) -> i32 {
    let ok = if any {
        c.allowed > 0
    } else {
        c.allowed > 0 && c.refused == 0 && c.skipped == 0
    };
    if ok {
        EXIT_ALLOWED
    } else {
        EXIT_REFUSED
    }
}

/// The multi-host JSON (docs/interfaces.md, "`gpu-guard check`").
#[derive(serde::Serialize)]
pub struct FleetJson<'a> {
    pub image: &'a ImageInfo,
    pub results: Vec<ResultJson<'a>>,
    pub summary: Counts,
}

#[derive(serde::Serialize)]
pub struct ResultJson<'a> {
    pub host: &'a str,
    pub decision: &'a Decision,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_gpu_facts: bool,
}

pub fn to_json<'a>(image: &'a ImageInfo, results: &'a [HostResult]) -> FleetJson<'a> {
    FleetJson {
        image,
        results: results
            .iter()
            .map(|r| ResultJson {
                host: &r.host,
                decision: &r.decision,
                no_gpu_facts: is_no_gpu_facts(&r.decision),
            })
            .collect(),
        summary: counts(results),
    }
}

/// The longest note a table row shows on a terminal (`note_max`); piped
/// or with `--wide` a note is never cut.
pub const NOTE_MAX: usize = 110;

/// One line per host: name, verdict, first error (else first warning),
/// the note cut to `note_max` characters when one is given.
pub fn table(
    subject: &FleetContainer,
    results: &[HostResult],
    facts: &[Option<&HostFacts>],
    note_max: Option<usize>,
) -> String {
    let width = results
        .iter()
        .map(|r| r.host.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 40);
    let mut s = format!("{:<width$}  {:<12}  NOTE\n", "HOST", "VERDICT");
    for (r, f) in results.iter().zip(facts) {
        let d = &r.decision;
        let (verdict, note) = match f {
            // A refusal reads best as its short reason, then the finding.
            Some(f) if d.verdict == Verdict::Refuse => (
                verdict_word(d),
                format!("{}: {}", short_reason(subject, d, f), first_note(d)),
            ),
            _ => (verdict_word(d), first_note(d)),
        };
        let mut note = crate::core::sanitize::one_line(&note);
        if let Some(max) = note_max.filter(|m| note.chars().count() > *m) {
            note = note.chars().take(max.saturating_sub(1)).collect::<String>() + "…";
        }
        let host = crate::core::sanitize::esc(&r.host);
        s.push_str(&format!("{host:<width$}  {verdict:<12}  {note}\n"));
    }
    s
}

fn verdict_word(d: &Decision) -> &'static str {
    match d.verdict {
        Verdict::Allow => "allow",
        Verdict::Refuse => "refuse",
        Verdict::Skip => "skip",
    }
}

fn first_note(d: &Decision) -> String {
    let pick = |sev| d.findings.iter().find(|f| f.severity == sev);
    let predicted = d.failure_predictions().next();
    match pick(Severity::Error)
        .or(predicted)
        .or_else(|| pick(Severity::Warning))
    {
        Some(f) => f.title().to_string(),
        None => "-".to_string(),
    }
}

/// "runs on 14 of 20 hosts; refused on 6: driver 535 too old for CUDA 12.4
/// on 4, no sm_75 code for Tesla T4 on 2".
pub fn summary_line(
    subject: &FleetContainer,
    results: &[HostResult],
    facts: &[Option<&HostFacts>],
) -> String {
    let c = counts(results);
    let mut s = format!("runs on {} of {} hosts", c.allowed, results.len());
    if c.refused > 0 {
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for (r, f) in results.iter().zip(facts) {
            let d = &r.decision;
            if d.verdict == Verdict::Refuse {
                let why = match f {
                    Some(f) => short_reason(subject, d, f),
                    None if is_no_gpu_facts(d) => "no GPU facts".to_string(),
                    None => "refused".to_string(),
                };
                if !reasons.contains_key(&why) {
                    order.push(why.clone());
                }
                *reasons.entry(why).or_default() += 1;
            }
        }
        let parts: Vec<String> = order
            .iter()
            .map(|w| format!("{w} on {}", reasons[w]))
            .collect();
        s.push_str(&format!("; refused on {}: {}", c.refused, parts.join(", ")));
    }
    if c.skipped > 0 {
        s.push_str(&format!(
            "; not judged as a GPU container on {} (a skip is not counted as runs; the container asks for no GPU)",
            c.skipped
        ));
    }
    s
}

/// A few words for why `d` refused on a host: derived from the first error
/// finding's check, and for requirements from re-judging on the facts.
pub fn short_reason(subject: &FleetContainer, d: &Decision, facts: &HostFacts) -> String {
    // A placement refusal may rest on a warning that predicts a failure.
    let Some(f) = d.errors().next().or_else(|| d.failure_predictions().next()) else {
        return "refused".into();
    };
    match f.check {
        Check::Requirement => {
            let from_labels = f.message.contains(super::unknown::NOT_SHOWN);
            requirement_reason(subject, facts, from_labels)
                .unwrap_or_else(|| "requirement not satisfied".into())
        }
        Check::KernelImage => kernel_image_reason(&f.message, facts),
        Check::Host if facts.driver_version.is_none() => "no NVIDIA driver".into(),
        Check::Device => "requested GPU missing".into(),
        other => format!("{} error", other.as_str()),
    }
}

/// The first failing requirement, by the key that failed: CUDA first (the
/// usual story: forward-compat alternatives do not match either), then
/// compute capability, driver, brand.
fn requirement_reason(
    subject: &FleetContainer,
    facts: &HostFacts,
    from_labels: bool,
) -> Option<String> {
    let driver = facts
        .driver_version
        .as_deref()
        .and_then(|v| Version::parse(v).ok());
    let cuda = facts
        .cuda_driver_version
        .as_deref()
        .and_then(|v| Version::parse(v).ok());
    for req in &subject.requirements {
        for gpu in facts
            .gpus
            .iter()
            .map(Some)
            .chain(facts.gpus.is_empty().then_some(None))
        {
            let j = req.judge(&Context {
                driver: driver.as_ref(),
                driver_text: facts.driver_version.as_deref(),
                cuda: cuda.as_ref(),
                gpu,
            });
            if from_labels && j.outcome == RequirementOutcome::CannotJudge {
                let key = j
                    .terms
                    .iter()
                    .find(|t| matches!(t.outcome, Outcome::Unknown(_)))
                    .and_then(|t| t.key);
                return Some(match key {
                    Some(Key::Brand) => "brand unknown from labels".into(),
                    Some(Key::Arch) => "compute capability unknown from labels".into(),
                    _ => "CUDA version unknown from labels".into(),
                });
            }
            if j.outcome != RequirementOutcome::Fails {
                continue;
            }
            let failed = |k| {
                j.terms
                    .iter()
                    .any(|t| t.key == Some(k) && matches!(t.outcome, Outcome::Fail(_)))
            };
            let branch = driver
                .as_ref()
                .map(|d| d.major().to_string())
                .unwrap_or_default();
            if let (true, Some(floor)) = (failed(Key::Cuda), req.cuda_floor()) {
                return Some(format!("driver {branch} too old for CUDA {floor}"));
            }
            if failed(Key::Arch) {
                let cc = gpu
                    .and_then(|g| g.compute_capability.clone())
                    .unwrap_or_default();
                return Some(match req.arch_floor() {
                    Some(a) => format!("compute capability {cc} below {a}"),
                    None => format!("compute capability {cc} not accepted"),
                });
            }
            if failed(Key::Driver) {
                return Some(format!("driver branch {branch} not accepted"));
            }
            let brand = gpu.map(|g| g.brand.clone()).unwrap_or_default();
            return Some(format!("brand {brand} not accepted"));
        }
    }
    None
}

/// "no sm_75 code for Tesla T4": the GPU the finding names.
fn kernel_image_reason(message: &str, facts: &HostFacts) -> String {
    let gpu = facts.gpus.iter().find(|g| message.contains(&g.describe()));
    let gpu = gpu.or_else(|| {
        facts
            .gpus
            .iter()
            .find(|g| !g.name.is_empty() && message.contains(&g.name))
    });
    match gpu {
        Some(g) => {
            let sm = g
                .compute_capability
                .as_deref()
                .map(|c| format!("sm_{}", c.replace('.', "")))
                .unwrap_or_else(|| "matching".into());
            format!("no {sm} code for {}", g.name)
        }
        None => "no GPU code for this host's GPUs".into(),
    }
}
