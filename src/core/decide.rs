//! The core: one pure function of (container, host facts, policy).
//!
//! Every entry point (check, hooks, runtime wrapper) builds these inputs,
//! calls [`decide`], and carries out the result. Nothing here does I/O.

use crate::core::compat::CompatScan;
use crate::core::compat_check::{self, FwdHost, FwdNeed, MinorHost, MinorOutcome};
use crate::core::container::Container;
use crate::core::decision::{Check, Decision, Finding, Verdict};
use crate::core::detect::{self, Detection};
use crate::core::diagnosis::{self, Failure};
use crate::core::facts::{Gpu, HostFacts, HostProblemKind, HostReport};
use crate::core::kernel_image::Scanned;
use crate::core::policy::MinorVersionCompat;
use crate::core::policy::{ApplyTo, Config, Mode, OnFailure};
use crate::core::requirement::{self, Context, Requirement, RequirementOutcome};
use crate::core::sanitize::esc;
use crate::core::security::{self, Stage};
use crate::core::tuning;
use crate::core::version::Version;

/// Everything `decide` needs. `kernel_image` holds the findings of the image
/// scan, done by the caller (it reads the rootfs).
pub struct Inputs<'a> {
    pub container: &'a Container,
    pub detection: &'a Detection,
    /// None when the host was not probed (not a GPU container).
    pub host: Option<&'a HostReport>,
    pub config: &'a Config,
    pub stage: Stage,
    pub kernel_image: Vec<Finding>,
    /// The kernel-image scan, when one was done: minor-version
    /// compatibility admits only on its evidence.
    pub scanned: Option<&'a Scanned>,
    /// The compat-library scan, done when [`forward_compat_need`] says so.
    pub compat: Option<&'a CompatScan>,
}

/// Variables that are requirements: every `NVIDIA_REQUIRE_*` except
/// `NVIDIA_REQUIRE_JETPACK*` (nvidia-container-toolkit
/// internal/config/image/cuda_image.go GetRequirements), sorted by name so the
/// output is stable; plus the legacy `cuda>=MAJOR.MINOR` of `CUDA_VERSION`.
pub fn requirements(c: &Container) -> (Vec<Requirement>, Vec<Finding>) {
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
fn check_requirements(
    c: &Container,
    facts: &HostFacts,
    visible: &[&Gpu],
    cfg: &Config,
    scanned: Option<&Scanned>,
    out: &mut Vec<Finding>,
) {
    if requirements_skipped(c, cfg, out) {
        return;
    }
    let (reqs, mut findings) = requirements(c);
    out.append(&mut findings);
    if reqs.is_empty() {
        return;
    }
    let host = HostVersions {
        driver: facts
            .driver_version
            .as_deref()
            .and_then(|d| Version::parse(d).ok()),
        cuda: facts
            .cuda_driver_version
            .as_deref()
            .and_then(|v| Version::parse(v).ok()),
    };
    let gpus: Vec<Option<&Gpu>> = if visible.is_empty() {
        vec![None]
    } else {
        visible.iter().map(|g| Some(*g)).collect()
    };
    // NVIDIA's CLI takes at most 32 --require flags; an image declaring
    // thousands must not turn the diagnosis into megabytes.
    const MAX_REPORTED: usize = 8;
    let mut failed = 0usize;
    for req in &reqs {
        let (failing, unknown) = judge_on_gpus(req, &gpus, facts, &host);
        if !failing.is_empty() {
            let minor = minor_version_rule(req, &failing, facts, &host, visible, cfg, scanned);
            let why_not = match minor {
                Some(MinorOutcome::Admitted(f)) => {
                    out.push(f);
                    continue;
                }
                Some(MinorOutcome::NotAdmitted(why)) => Some(why),
                None => None,
            };
            failed += 1;
            if failed > MAX_REPORTED {
                continue;
            }
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
            out.push(f);
            out.extend(warn_note);
        } else if let Some((gpu, j)) = unknown.first() {
            out.push(cannot_judge_finding(req, *gpu, j));
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
    let skipped = cfg.requirements.honor_disable_require
        && c.env
            .get("NVIDIA_DISABLE_REQUIRE")
            .and_then(requirement::parse_go_bool)
            .unwrap_or(false);
    let mut only_via_fwd: Option<(String, Version)> = None;
    if !skipped {
        let gpus: Vec<Option<&Gpu>> = if visible.is_empty() {
            vec![None]
        } else {
            visible.iter().map(|g| Some(*g)).collect()
        };
        let (reqs, _) = requirements(c);
        for req in &reqs {
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

/// The `compat` findings for forward compatibility, from the compat scan.
fn forward_compat_findings(
    c: &Container,
    facts: &HostFacts,
    visible: &[&Gpu],
    cfg: &Config,
    scan: &CompatScan,
) -> Vec<Finding> {
    let Some(need) = forward_compat_need(c, facts, visible, cfg) else {
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
    compat_check::forward_findings(
        &need,
        &FwdHost {
            gpus: visible,
            driver: &driver,
            cuda: cuda.as_ref(),
        },
        scan,
        &cfg.compat,
    )
}

/// Handles `NVIDIA_DISABLE_REQUIRE`: returns true when the checks are to be
/// skipped (after an info finding), and warns when host policy overrides
/// it. Split from [`check_requirements`] because it decides whether the
/// checks run at all, before any requirement is read.
fn requirements_skipped(c: &Container, cfg: &Config, out: &mut Vec<Finding>) -> bool {
    let disable = c.env.get("NVIDIA_DISABLE_REQUIRE");
    let disabled = disable
        .and_then(requirement::parse_go_bool)
        .unwrap_or(false);
    if !disabled {
        return false;
    }
    if cfg.requirements.honor_disable_require {
        out.push(Finding::info(
            Check::Requirement,
            format!(
                "NVIDIA_DISABLE_REQUIRE={}: requirement checks are skipped for this container",
                esc(disable.unwrap_or(""))
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

/// The host's driver and CUDA versions, parsed once for every requirement.
struct HostVersions {
    driver: Option<Version>,
    cuda: Option<Version>,
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

fn device_findings(det: &Detection, facts: &HostFacts, out: &mut Vec<Finding>) -> Vec<usize> {
    let (visible, unknown) = detect::resolve(&det.request, facts);
    // A list of thousands of unknown names gets a count, not thousands of findings.
    const MAX_REPORTED: usize = 8;
    if unknown.len() > MAX_REPORTED {
        out.push(Finding::error(
            Check::Device,
            format!(
                "{} more requested GPUs are not on this host",
                unknown.len() - MAX_REPORTED
            ),
        ));
    }
    for u in unknown.into_iter().take(MAX_REPORTED) {
        let shown = u.device.shown();
        out.push(
            Finding::error(
                Check::Device,
                format!(
                    "{} asks for GPU {}, which this host does not have; host GPUs: {}",
                    esc(&u.device.via),
                    esc(&shown),
                    facts.gpu_list()
                ),
            )
            .with_fix("request a GPU this host has (index, GPU UUID or MIG UUID as `nvidia-smi -L` lists them), or `all`"),
        );
    }
    if facts.gpus.is_empty() && (det.request.all || !det.request.devices.is_empty()) {
        out.push(
            Finding::warning(
                Check::Device,
                "the container asks for GPUs but this host's driver reports none",
            )
            .with_fix("check `nvidia-smi -L` and `dmesg` on the host"),
        );
    }
    visible
}

/// Findings for the host faults the probe met.
fn host_findings(host: &HostReport, visible: &[&Gpu], cfg: &Config, out: &mut Vec<Finding>) {
    for p in &host.problems {
        let f = match &p.kind {
            HostProblemKind::NoDriver => Finding::error(Check::Host, p.message.clone()),
            HostProblemKind::ProbeFailed => match cfg.host.on_probe_failure {
                OnFailure::Refuse => Finding::error(Check::Host, p.message.clone()),
                OnFailure::Allow => Finding::warning(
                    Check::Host,
                    format!(
                        "{} (host.on_probe_failure = \"allow\": starting without checks)",
                        p.message
                    ),
                ),
            },
            HostProblemKind::GpuLost { index } => {
                if visible.iter().any(|g| g.index == *index) {
                    Finding::error(Check::Host, p.message.clone())
                } else {
                    Finding::info(
                        Check::Host,
                        format!("{} (this container does not use it)", p.message),
                    )
                }
            }
            HostProblemKind::Degraded => Finding::warning(Check::Host, p.message.clone()),
        };
        out.push(match &p.fix {
            Some(fix) => f.with_fix(fix.clone()),
            None => f,
        });
    }
}

/// The host and requirement findings of a GPU container, and the GPUs it
/// sees (empty when host facts are missing). Split from [`decide`] because
/// it is the one part that depends on what the host probe found; it also
/// records the facts' source and the visible GPUs in `d`.
fn host_and_requirement_findings<'a>(
    inp: &Inputs<'a>,
    d: &mut Decision,
    findings: &mut Vec<Finding>,
) -> Vec<&'a Gpu> {
    let (c, cfg, det) = (inp.container, inp.config, inp.detection);
    let mut visible: Vec<&Gpu> = Vec::new();
    let Some(host) = inp.host else {
        findings.push(Finding::error(Check::Host, "host facts were not gathered"));
        return visible;
    };
    d.host_source = Some(host.source.clone());
    match &host.facts {
        Some(facts) => {
            let idx = device_findings(det, facts, findings);
            visible = idx.iter().map(|i| &facts.gpus[*i]).collect();
            d.visible_gpus = Some(visible.iter().map(|g| g.index).collect());
            host_findings(host, &visible, cfg, findings);
            let no_driver_reported = host
                .problems
                .iter()
                .any(|p| p.kind == HostProblemKind::NoDriver);
            if facts.driver_version.is_none() {
                if !no_driver_reported {
                    findings.push(
                        Finding::error(
                            Check::Host,
                            format!("no NVIDIA driver on this host ({} has no driver version)", host.source),
                        )
                        .with_fix("install the NVIDIA driver on this host, or run the container on a GPU host"),
                    );
                }
            } else {
                check_requirements(c, facts, &visible, cfg, inp.scanned, findings);
                if let Some(scan) = inp.compat {
                    findings.extend(forward_compat_findings(c, facts, &visible, cfg, scan));
                }
            }
        }
        None => {
            host_findings(host, &visible, cfg, findings);
            if host.problems.is_empty() {
                findings.push(Finding::error(
                    Check::Host,
                    format!("host facts unavailable from {}", host.source),
                ));
            }
        }
    }
    visible
}

pub fn decide(inp: &Inputs) -> Decision {
    let c = inp.container;
    let cfg = inp.config;
    let det = inp.detection;
    let mut d = Decision::skip();
    d.container_id = c.id.clone();
    d.gpu_container = det.gpu;
    if cfg.mode == Mode::Off {
        return d;
    }
    let allow = cfg.capability_allowlist();
    if !det.gpu {
        if cfg.security.apply_to == ApplyTo::All {
            d = security_only(c, false, cfg, inp.stage);
        }
        if let Some(what) = &det.unattached_env {
            d.findings.push(unattached_finding(what));
        }
        return d;
    }

    let mut findings = Vec::new();
    let visible = host_and_requirement_findings(inp, &mut d, &mut findings);
    findings.extend(inp.kernel_image.iter().cloned());

    if inp.stage == Stage::Edit {
        let (env, mut tf) = tuning::plan(c, &visible, &cfg.tuning);
        d.edits.env = env;
        d.edits.rlimits = tuning::rlimits(c, &cfg.tuning);
        findings.append(&mut tf);
    }
    let sp = security::plan(c, &cfg.security, &allow, inp.stage);
    findings.extend(sp.findings);
    d.edits.capabilities_dropped = sp.dropped;
    d.edits.no_new_privileges = sp.no_new_privileges;
    d.findings = findings;
    finish(&mut d, cfg);
    d
}

/// The note on a container whose env asks for GPUs that nothing attaches
/// (detect.rs: env requests count only when attached).
fn unattached_finding(what: &str) -> Finding {
    Finding::info(
        Check::Device,
        format!(
            "{} asks for GPUs by env, but no NVIDIA hook, runtime or device will attach them; not judged as a GPU container",
            esc(what)
        ),
    )
    .with_fix("to give it GPUs, run it with NVIDIA's runtime or hook (docker --gpus, --runtime=nvidia, CDI devices); to judge such containers anyway, set detect.env_requests = \"always\"")
}

/// The decision when only the security policy applies: a non-GPU container
/// under `security.apply_to = "all"` (verdict skip unless refused), or a
/// process exec'd into an admitted container (verdict allow or refuse).
pub fn security_only(c: &Container, gpu: bool, cfg: &Config, stage: Stage) -> Decision {
    let sp = security::plan(c, &cfg.security, &cfg.capability_allowlist(), stage);
    let mut d = Decision::skip();
    d.container_id = c.id.clone();
    d.gpu_container = gpu;
    if cfg.mode == Mode::Off {
        return d;
    }
    d.findings = sp.findings;
    d.edits.capabilities_dropped = sp.dropped;
    d.edits.no_new_privileges = sp.no_new_privileges;
    finish(&mut d, cfg);
    if !gpu && d.verdict == Verdict::Allow {
        d.verdict = Verdict::Skip;
    }
    d
}

/// Sets the verdict from the findings and the mode.
fn finish(d: &mut Decision, cfg: &Config) {
    if !d.has_errors() {
        d.verdict = Verdict::Allow;
        return;
    }
    match cfg.mode {
        Mode::Enforce => {
            d.verdict = Verdict::Refuse;
            // A refused container is never created; edits would mislead.
            d.withheld_edits = std::mem::take(&mut d.edits);
        }
        _ => {
            d.verdict = Verdict::Allow;
            d.findings.push(Finding::info(
                Check::Config,
                "mode = \"warn\": gpu-guard would refuse this container; it starts anyway",
            ));
        }
    }
}

/// The decision for a GPU container when the config itself is unusable:
/// refuse, naming the file and key (design: non-GPU containers still start).
/// `error` is the loader's one-line message and `path` the file it read.
pub fn config_error(
    error: &str,
    path: &std::path::Path,
    c: &Container,
    det: &Detection,
) -> Decision {
    let mut d = Decision::skip();
    d.container_id = c.id.clone();
    d.gpu_container = det.gpu;
    if det.gpu {
        d.verdict = Verdict::Refuse;
        d.findings.push(
            Finding::error(Check::Config, crate::core::sanitize::one_line(error))
                .with_fix(format!(
                    "fix {} (`gpu-guard check` shows the same error), or remove it to use the built-in defaults",
                    path.display()
                )),
        );
    }
    d
}
