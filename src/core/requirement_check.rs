//! The requirement findings of a GPU container on one host: what the image
//! declares (`NVIDIA_REQUIRE_*`, the legacy `CUDA_VERSION`), whether
//! `NVIDIA_DISABLE_REQUIRE` turns the checks off, each requirement judged on
//! every visible GPU, CUDA minor-version compatibility, and whether the
//! image's forward-compatibility library must be read. Split from
//! [`crate::core::decide`], which orders these findings with the device,
//! host, tuning and security ones. Pure, like the rest of the core.

use crate::core::compat::CompatScan;
use crate::core::compat_check::{self, FwdHost, FwdNeed, MinorHost, MinorOutcome};
use crate::core::container::Container;
use crate::core::decision::{Check, Finding};
use crate::core::diagnosis::{self, Failure};
use crate::core::facts::{Gpu, HostFacts};
use crate::core::kernel_image::Scanned;
use crate::core::policy::{Config, MinorVersionCompat};
use crate::core::requirement::{self, Context, Requirement, RequirementOutcome};
use crate::core::sanitize::esc;
use crate::core::version::Version;

/// Variables that are requirements: every `NVIDIA_REQUIRE_*` except
/// `NVIDIA_REQUIRE_JETPACK*` (nvidia-container-toolkit
/// internal/config/image/cuda_image.go GetRequirements), sorted by name so the
/// output is stable; plus the legacy `cuda>=MAJOR.MINOR` of `CUDA_VERSION`.
fn requirements(c: &Container) -> (Vec<Requirement>, Vec<Finding>) {
    let mut reqs = Vec::new();
    let mut findings = Vec::new();
    for (name, value) in c.env.vars() {
        if !name.starts_with("NVIDIA_REQUIRE_") || name.starts_with("NVIDIA_REQUIRE_JETPACK") {
            continue;
        }
        match Requirement::parse(name, value) {
            Ok(r) => {
                findings.extend(unknown_key_findings(&r));
                reqs.push(r);
            }
            Err(e) => findings.push(
                Finding::error(
                    Check::Requirement,
                    format!("{} is not a valid requirement: {}", esc(name), esc(&e.to_string())),
                )
                .with_fix(
                    "fix the image's requirement: factors are key op value with keys cuda, driver, arch, brand and operators = != < <= > >=, alternatives separated by spaces, factors by commas",
                ),
            ),
        }
    }
    let require_cuda = c.env.get("NVIDIA_REQUIRE_CUDA").unwrap_or("");
    let cuda_version = c.env.get("CUDA_VERSION").unwrap_or("");
    if require_cuda.is_empty() && !cuda_version.is_empty() {
        match requirement::cuda_version_major_minor(cuda_version) {
            Some(mm) => {
                let text = format!("cuda>={mm}");
                if let Ok(r) = Requirement::parse("CUDA_VERSION", &text) {
                    reqs.push(r);
                }
            }
            None => findings.push(
                Finding::error(
                    Check::Requirement,
                    format!(
                        "CUDA_VERSION={} is not a version, so the legacy requirement cuda>=MAJOR.MINOR cannot be formed",
                        esc(cuda_version)
                    ),
                )
                .with_fix("set CUDA_VERSION to the image's CUDA version (e.g. 12.4.1), or set NVIDIA_REQUIRE_CUDA"),
            ),
        }
    }
    (reqs, findings)
}

/// The requirements a container declares, parsed once: the decision
/// pipeline (crate::pipeline `Classified`) parses them when it classifies the
/// container, and each host's decision reads them, so a fleet of thousands
/// of hosts (or the label affinity's grid) does not parse them per host.
#[derive(Clone, Debug, Default)]
pub struct Declared {
    reqs: Vec<Requirement>,
    /// What the parse found: invalid requirements, unknown keys.
    findings: Vec<Finding>,
}

impl Declared {
    /// The requirements `c`'s env declares ([`requirements`]).
    pub fn of(c: &Container) -> Declared {
        let (reqs, findings) = requirements(c);
        Declared { reqs, findings }
    }
}

/// Warnings for what unknown keys dropped from a requirement, as NVIDIA's
/// Go checker drops it (requirement.rs): the factors, the alternatives
/// left empty, and the whole variable when nothing is left. Bounded: an
/// image with thousands of unknown factors gets a count, not thousands of lines.
fn unknown_key_findings(r: &Requirement) -> Vec<Finding> {
    const MAX_NAMED: usize = 8;
    let name = esc(&r.source);
    let mut out = Vec::new();
    for k in r.unknown_keys.iter().take(MAX_NAMED) {
        out.push(Finding::warning(
            Check::Requirement,
            format!(
                "{name}: `{}` uses a key NVIDIA does not define (cuda, driver, arch, brand); it is dropped",
                esc(k)
            ),
        ));
    }
    if r.unknown_keys.len() > MAX_NAMED {
        out.push(Finding::warning(
            Check::Requirement,
            format!(
                "{name}: {} more factors use keys NVIDIA does not define; they are dropped",
                r.unknown_keys.len() - MAX_NAMED
            ),
        ));
    }
    if r.imposes_nothing() {
        out.push(
            Finding::warning(
                Check::Requirement,
                format!(
                    "{name} imposes nothing: every alternative uses only keys NVIDIA does not define, so all are dropped"
                ),
            )
            .with_fix("write the requirement with the keys cuda, driver, arch and brand"),
        );
    } else if !r.dropped_terms.is_empty() {
        let shown: Vec<String> = r
            .dropped_terms
            .iter()
            .take(MAX_NAMED)
            .map(|t| format!("`{}`", esc(t)))
            .collect();
        out.push(Finding::warning(
            Check::Requirement,
            format!(
                "{name}: alternative{} {} {} only keys NVIDIA does not define and cannot satisfy it; the other alternatives must hold",
                if r.dropped_terms.len() == 1 { "" } else { "s" },
                shown.join(", "),
                if r.dropped_terms.len() == 1 { "has" } else { "have" },
            ),
        ));
    }
    out
}

/// Judges the requirements on every visible GPU (once with no GPU when none
/// is visible, where arch and brand pass).
pub(crate) fn check_requirements(
    c: &Container,
    declared: &Declared,
    facts: &HostFacts,
    visible: &[&Gpu],
    cfg: &Config,
    scanned: Option<&Scanned>,
    out: &mut Vec<Finding>,
) {
    if requirements_skipped(c, cfg, out) {
        return;
    }
    out.extend(declared.findings.iter().cloned());
    let reqs = &declared.reqs;
    if reqs.is_empty() {
        return;
    }
    let host = HostVersions::of(facts);
    let gpus: Vec<Option<&Gpu>> = if visible.is_empty() {
        vec![None]
    } else {
        visible.iter().map(|g| Some(*g)).collect()
    };
    // NVIDIA's CLI takes at most 32 --require flags; an image declaring
    // thousands must not turn the diagnosis into megabytes.
    const MAX_REPORTED: usize = 8;
    let mut failed = 0usize;
    for req in reqs {
        let (failing, unknown) = judge_on_gpus(req, &gpus, facts, &host);
        if failing.is_empty() {
            if let Some((gpu, j)) = unknown.first() {
                out.push(cannot_judge_finding(req, *gpu, j));
            }
            continue;
        }
        let why_not = match minor_version_rule(req, &failing, facts, &host, visible, cfg, scanned) {
            Some(MinorOutcome::Admitted(f)) => {
                out.push(f);
                continue;
            }
            Some(MinorOutcome::NotAdmitted(why)) => Some(why),
            None => None,
        };
        failed += 1;
        if failed <= MAX_REPORTED {
            out.extend(failure_findings(req, failing, why_not, facts, cfg));
        }
    }
    if failed > MAX_REPORTED {
        out.push(Finding::error(
            Check::Requirement,
            format!(
                "{} more NVIDIA_REQUIRE_* variables are not satisfied",
                failed - MAX_REPORTED
            ),
        ));
    }
}

/// The findings of a requirement that fails on `failing`: its diagnosis,
/// and why CUDA minor-version compatibility did not admit it (`why_not`):
/// a detail of the diagnosis under "allow", an info finding under "warn".
fn failure_findings(
    req: &Requirement,
    failing: Vec<OnGpu>,
    why_not: Option<String>,
    facts: &HostFacts,
    cfg: &Config,
) -> Vec<Finding> {
    let mut f = diagnosis::requirement_failure(
        &Failure {
            requirement: req,
            failing,
        },
        facts,
        cfg.requirements.honor_disable_require,
    );
    let mut warn_note = None;
    if let Some(why) = why_not {
        if cfg.requirements.minor_version_compatibility == MinorVersionCompat::Allow {
            f.details.push(crate::core::sanitize::clean(format!(
                "CUDA minor-version compatibility does not admit it: {why}"
            )));
        } else {
            warn_note = Some(Finding::info(Check::Compat, why));
        }
    }
    std::iter::once(f).chain(warn_note).collect()
}

/// Applies `requirements.minor_version_compatibility` to a requirement
/// that failed on `failing`. None under "off". Under "warn" the result is
/// never [`MinorOutcome::Admitted`]: a finding says what "allow" would have
/// done, and the failure stands.
fn minor_version_rule(
    req: &Requirement,
    failing: &[OnGpu],
    facts: &HostFacts,
    host: &HostVersions,
    visible: &[&Gpu],
    cfg: &Config,
    scanned: Option<&Scanned>,
) -> Option<MinorOutcome> {
    let mode = cfg.requirements.minor_version_compatibility;
    if mode == MinorVersionCompat::Off {
        return None;
    }
    let per_gpu: Vec<requirement::MinorVersion> = failing
        .iter()
        .map(|(gpu, _)| {
            req.minor_version(&Context {
                driver: host.driver.as_ref(),
                driver_text: facts.driver_version.as_deref(),
                cuda: host.cuda.as_ref(),
                gpu: *gpu,
            })
        })
        .collect();
    let outcome = compat_check::minor_version(
        &req.source,
        &per_gpu,
        &MinorHost {
            gpus: visible,
            driver: host.driver.as_ref(),
            driver_text: facts.driver_version.as_deref().unwrap_or("unknown"),
            cuda: host.cuda.as_ref(),
        },
        scanned,
    );
    if mode == MinorVersionCompat::Allow {
        return Some(outcome);
    }
    let note = match &outcome {
        MinorOutcome::Admitted(_) => format!(
            "{}: CUDA minor-version compatibility would admit this image (requirements.minor_version_compatibility = \"allow\"); it is refused as NVIDIA's check refuses it",
            esc(&req.source)
        ),
        MinorOutcome::NotAdmitted(why) => format!(
            "{}: CUDA minor-version compatibility would not admit this image either: {why}",
            esc(&req.source)
        ),
    };
    Some(MinorOutcome::NotAdmitted(note))
}

/// The GPUs a requirement is judged on to learn only whether it holds:
/// one of each brand and compute capability, the only facts of a GPU its
/// factors read (requirement::eval); `None` alone when none is visible. A
/// node of eight alike GPUs judges the thirty alternatives of a CUDA
/// image's NVIDIA_REQUIRE_CUDA once, not eight times, at every start.
fn alike_judged_once<'a>(visible: &[&'a Gpu]) -> Vec<Option<&'a Gpu>> {
    let mut kinds: Vec<Option<&Gpu>> = Vec::new();
    for g in visible {
        let seen = kinds
            .iter()
            .flatten()
            .any(|k| k.brand == g.brand && k.compute_capability == g.compute_capability);
        if !seen {
            kinds.push(Some(*g));
        }
    }
    if kinds.is_empty() {
        kinds.push(None);
    }
    kinds
}

/// Whether the image's CUDA compat library must be read for this
/// container on this host (the pipeline reads it only then), and why:
/// - some requirement holds on a visible GPU only through a
///   forward-compatibility alternative
///   ([`Requirement::forward_compat_only`]); or
/// - the image's `CUDA_VERSION` is newer than the host driver's CUDA.
///
/// None when neither holds, or the host's driver version is unknown.
pub fn forward_compat_need(
    c: &Container,
    declared: &Declared,
    facts: &HostFacts,
    visible: &[&Gpu],
    cfg: &Config,
) -> Option<FwdNeed> {
    let driver = facts
        .driver_version
        .as_deref()
        .and_then(|d| Version::parse(d).ok())?;
    let cuda = facts
        .cuda_driver_version
        .as_deref()
        .and_then(|v| Version::parse(v).ok());
    let mut only_via_fwd: Option<(String, Version)> = None;
    if !disable_require_honoured(c, cfg) {
        let gpus = alike_judged_once(visible);
        for req in &declared.reqs {
            for gpu in &gpus {
                let ctx = Context {
                    driver: Some(&driver),
                    driver_text: facts.driver_version.as_deref(),
                    cuda: cuda.as_ref(),
                    gpu: *gpu,
                };
                if let Some(v) = req.forward_compat_only(&ctx) {
                    if !only_via_fwd.as_ref().is_some_and(|(_, have)| v <= *have) {
                        only_via_fwd = Some((req.source.clone(), v));
                    }
                }
            }
        }
    }
    let image_cuda = c
        .env
        .get("CUDA_VERSION")
        .and_then(requirement::cuda_version_major_minor)
        .filter(|v| cuda.as_ref().is_some_and(|h| v > h));
    if only_via_fwd.is_none() && image_cuda.is_none() {
        return None;
    }
    Some(FwdNeed {
        only_via_fwd,
        image_cuda,
    })
}

/// The `compat` findings for forward compatibility, from the compat scan
/// (`None`: the image's content was not read; then one warning when
/// forward compatibility would decide).
pub(crate) fn forward_compat_findings(
    c: &Container,
    declared: &Declared,
    facts: &HostFacts,
    visible: &[&Gpu],
    cfg: &Config,
    scan: Option<&CompatScan>,
) -> Vec<Finding> {
    let Some(need) = forward_compat_need(c, declared, facts, visible, cfg) else {
        return Vec::new();
    };
    let Some(driver) = facts
        .driver_version
        .as_deref()
        .and_then(|d| Version::parse(d).ok())
    else {
        return Vec::new();
    };
    let cuda = facts
        .cuda_driver_version
        .as_deref()
        .and_then(|v| Version::parse(v).ok());
    let host = FwdHost {
        gpus: visible,
        driver: &driver,
        cuda: cuda.as_ref(),
    };
    match scan {
        Some(scan) => compat_check::forward_findings(&need, &host, scan, &cfg.compat),
        None => compat_check::unread_finding(&need, &host)
            .into_iter()
            .collect(),
    }
}

/// Handles `NVIDIA_DISABLE_REQUIRE`: returns true when the checks are to be
/// skipped (after an info finding), and warns when host policy overrides
/// it. Split from [`check_requirements`] because it decides whether the
/// checks run at all, before any requirement is read.
fn requirements_skipped(c: &Container, cfg: &Config, out: &mut Vec<Finding>) -> bool {
    let Some(disable) = disable_require(c) else {
        return false;
    };
    if cfg.requirements.honor_disable_require {
        out.push(Finding::info(
            Check::Requirement,
            format!(
                "NVIDIA_DISABLE_REQUIRE={}: requirement checks are skipped for this container",
                esc(disable)
            ),
        ));
        return true;
    }
    out.push(Finding::warning(
        Check::Requirement,
        "NVIDIA_DISABLE_REQUIRE is set but host policy ignores it (requirements.honor_disable_require = false); requirements are checked",
    ));
    false
}

/// `NVIDIA_DISABLE_REQUIRE` when it is set to true (Go's strconv.ParseBool,
/// as nvidia-container-toolkit internal/config/image/cuda_image.go reads it).
fn disable_require(c: &Container) -> Option<&str> {
    c.env
        .get("NVIDIA_DISABLE_REQUIRE")
        .filter(|v| requirement::parse_go_bool(v).unwrap_or(false))
}

/// True when the container turns the requirement checks off and host
/// policy honours it (`requirements.honor_disable_require`). The one place
/// that rule lives: the checks, the forward-compatibility need and the
/// requirements a fleet's affinity is written from all ask it.
fn disable_require_honoured(c: &Container, cfg: &Config) -> bool {
    cfg.requirements.honor_disable_require && disable_require(c).is_some()
}

/// The requirements that are checked for this container: none when
/// `NVIDIA_DISABLE_REQUIRE` is honoured, else [`requirements`] (fleets
/// write their node affinity from them).
pub fn checked_requirements(c: &Container, cfg: &Config) -> Vec<Requirement> {
    if disable_require_honoured(c, cfg) {
        return Vec::new();
    }
    requirements(c).0
}

/// The host's driver and CUDA versions, parsed once for every requirement.
struct HostVersions {
    driver: Option<Version>,
    cuda: Option<Version>,
}

impl HostVersions {
    fn of(facts: &HostFacts) -> HostVersions {
        let parse = |v: Option<&str>| v.and_then(|v| Version::parse(v).ok());
        HostVersions {
            driver: parse(facts.driver_version.as_deref()),
            cuda: parse(facts.cuda_driver_version.as_deref()),
        }
    }
}

/// A requirement's judgement on one GPU (`None`: no GPU visible).
type OnGpu<'a> = (Option<&'a Gpu>, requirement::Judgement);

/// Judges one requirement on each GPU and sorts the GPUs into those where
/// it fails and those where it cannot be judged (it holds on the rest).
/// The seam: judging is per requirement, reporting decides across them.
fn judge_on_gpus<'a>(
    req: &Requirement,
    gpus: &[Option<&'a Gpu>],
    facts: &HostFacts,
    host: &HostVersions,
) -> (Vec<OnGpu<'a>>, Vec<OnGpu<'a>>) {
    let mut failing = Vec::new();
    let mut unknown = Vec::new();
    for gpu in gpus {
        let j = req.judge(&Context {
            driver: host.driver.as_ref(),
            driver_text: facts.driver_version.as_deref(),
            cuda: host.cuda.as_ref(),
            gpu: *gpu,
        });
        match j.outcome {
            RequirementOutcome::Holds => {}
            RequirementOutcome::Fails => failing.push((*gpu, j)),
            RequirementOutcome::CannotJudge => unknown.push((*gpu, j)),
        }
    }
    (failing, unknown)
}

/// The warning for a requirement that fails nowhere but cannot be judged on
/// `gpu`, quoting the first term's reason. Kept apart from the failure
/// path, which has its own module ([`diagnosis`]).
fn cannot_judge_finding(
    req: &Requirement,
    gpu: Option<&Gpu>,
    j: &requirement::Judgement,
) -> Finding {
    let why = j
        .terms
        .iter()
        .find_map(|t| match &t.outcome {
            requirement::Outcome::Unknown(w) => Some(format!("{}: {w}", esc(&t.term))),
            _ => None,
        })
        .unwrap_or_default();
    let on = gpu
        .map(|g| g.describe())
        .unwrap_or_else(|| "this host".into());
    Finding::warning(
        Check::Requirement,
        format!("{} cannot be judged on {on}: {why}", req.source),
    )
    .with_fix("make NVML available to gpu-guard (install the NVIDIA driver's libnvidia-ml.so.1) so compute capability and CUDA version can be read")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_alike_in_brand_and_capability_are_judged_once() {
        let gpu = |index: u32, brand: &str, cc: Option<&str>| Gpu {
            index,
            brand: brand.into(),
            compute_capability: cc.map(str::to_string),
            ..Gpu::default()
        };
        let (h0, h1) = (gpu(0, "tesla", Some("9.0")), gpu(1, "tesla", Some("9.0")));
        let (a, g, u) = (
            gpu(2, "tesla", Some("8.0")),
            gpu(3, "geforce", Some("9.0")),
            gpu(4, "tesla", None),
        );
        let kinds = alike_judged_once(&[&h0, &h1, &a, &g, &u, &h1]);
        let indexes: Vec<u32> = kinds.iter().flatten().map(|g| g.index).collect();
        assert_eq!(indexes, [0, 2, 3, 4]);
        assert_eq!(alike_judged_once(&[]), [None]);
    }
}
