//! The core: one pure function of (container, host facts, policy).
//!
//! The decision pipeline (`crate::pipeline`, the one place outside the core
//! that builds [`Inputs`]) classifies the container, gathers host facts and
//! runs the scans, then calls [`decide`]; every entry point carries out the
//! result. Nothing here does I/O.

use crate::core::amd::visible::{AmdUnknown, Named};
use crate::core::compat::CompatScan;
use crate::core::container::Container;
use crate::core::decision::{Check, Decision, Finding, Rlimit, Verdict};
use crate::core::detect::{self, Detection};
use crate::core::facts::{Gpu, HostFacts, HostProblemKind, HostReport};
use crate::core::kernel_image::Scanned;
use crate::core::policy::{ApplyTo, Config, Mode, OnFailure};
use crate::core::requirement_check::{check_requirements, forward_compat_findings};
use crate::core::sanitize::esc;
use crate::core::security::{self, SpecAccess};
use crate::core::tuning;
use crate::core::tuning::shm::ShmHost;
use std::collections::BTreeMap;

pub use crate::core::requirement_check::{checked_requirements, forward_compat_need, Declared};

/// Everything `decide` needs. `kernel_image` holds the findings of the image
/// scan, done by the caller (it reads the rootfs).
pub struct Inputs<'a> {
    pub container: &'a Container,
    pub detection: &'a Detection,
    /// None when the host was not probed (not a GPU container).
    pub host: Option<&'a HostReport>,
    pub config: &'a Config,
    pub stage: SpecAccess,
    /// The container's requirements, parsed once ([`Declared::of`]).
    pub declared: &'a Declared,
    pub kernel_image: Vec<Finding>,
    /// The kernel-image scan, when one was done: minor-version
    /// compatibility admits only on its evidence.
    pub scanned: Option<&'a Scanned>,
    /// The compat-library scan, done when [`forward_compat_need`] says so.
    pub compat: Option<&'a CompatScan>,
    /// The `library` and `cuda-runtime` findings on this host
    /// (core::libraries::assess), and the scan they come from.
    pub libraries: Vec<Finding>,
    pub library_scan: Option<&'a crate::core::library_scan::LibraryScan>,
    /// What only the host the container starts on can say, read there;
    /// empty for a host described by a facts file or labels.
    pub local: HostLocal,
}

/// What only the host a container starts on can say about it, read by the
/// pipeline (docs/interfaces.md, "Host health and tuning").
#[derive(Clone, Debug, Default)]
pub struct HostLocal {
    /// The limits the container inherits where its spec sets none
    /// (crate::sys::limits), for `tuning.memlock` and `tuning.stack`.
    pub rlimits: BTreeMap<String, Rlimit>,
    /// The RAM and a bind-mounted `/dev/shm`'s size, for `tuning.shm_size`.
    pub shm: ShmHost,
    /// The findings of the CDI spec check (core::cdi::judge).
    pub cdi: Vec<Finding>,
    /// The findings of the device nodes the container will use
    /// (core::device_nodes), for a probed host.
    pub device_nodes: Vec<Finding>,
    /// The CPUs and memory nodes a cpuset may name, for `tuning.numa = "pin"`.
    pub numa: crate::core::tuning::numa::NumaHost,
}

/// The AMD GPUs the container gets (core::amd::visible) and their
/// findings: names the host does not have, AMD asked for on a host
/// without AMD GPUs, code objects and ROCm (core::amd::judge), and an
/// image built for the other vendor.
fn amd_findings<'a>(
    inp: &Inputs<'a>,
    facts: &'a HostFacts,
    nvidia: &[&'a Gpu],
    out: &mut Vec<Finding>,
) -> Vec<&'a Gpu> {
    let (c, det) = (inp.container, inp.detection);
    let v = crate::core::amd::visible::amd_gpus(c, det, facts);
    // `/dev/kfd` and no render node of an AMD GPU: ROCm finds no GPU.
    let blind = v.gpus.is_empty() && det.amd_nodes.kfd;
    for u in v.unknown.iter().take(8) {
        out.push(amd_unknown_finding(u, facts, blind));
    }
    if !det.amd_signals.is_empty() && !facts.gpus.iter().any(|g| g.is_amd()) {
        let asked: Vec<String> = det.amd_signals.iter().map(|s| s.describe()).collect();
        out.push(
            Finding::error(
                Check::Device,
                format!(
                    "the container asks for AMD GPUs ({}) but this host has none (no GPU in its KFD topology); host GPUs: {}",
                    esc(&asked.join(", ")),
                    facts.gpu_list()
                ),
            )
            .with_fix("run the container on a node with AMD GPUs (gpu-guard.io/vendor=amd), or load the amdgpu driver (`modprobe amdgpu`, check `dmesg`)"),
        );
    }
    out.extend(crate::core::amd_judge::findings(
        c,
        &v.gpus,
        facts,
        inp.scanned,
        inp.config,
    ));
    out.extend(crate::core::amd_judge::vendor_findings(
        c,
        nvidia,
        &v.gpus,
        inp.scanned,
    ));
    v.gpus
}

/// A GPU the container names that the host does not have. A render node
/// that is no AMD GPU's is an error only where the container then sees no
/// AMD GPU (`blind`): beside one that is, it may be another vendor's
/// (an integrated GPU's, with `--device=/dev/dri`), which ROCm skips.
fn amd_unknown_finding(u: &AmdUnknown, facts: &HostFacts, blind: bool) -> Finding {
    let hosts = format!("host GPUs: {}", facts.gpu_list());
    let (f, fix) = match u.how {
        Named::Cdi => (
            Finding::error(
                Check::Device,
                format!(
                    "CDI device {} asks for AMD GPU {}, which this host does not have; {hosts}",
                    esc(&u.via),
                    esc(&u.name)
                ),
            ),
            "request a device of the host's AMD CDI spec (`amd-ctk cdi list`: amd.com/gpu=0 to N-1 in PCI bus order, or amd.com/gpu=all), or regenerate the spec with `amd-ctk cdi generate` if the GPUs changed".to_string(),
        ),
        Named::Env => (
            Finding::error(
                Check::Device,
                format!(
                    "{} asks for AMD GPU {}, which this host does not have; {hosts}",
                    esc(&u.via),
                    esc(&u.name)
                ),
            ),
            "request an AMD GPU this host has (its index among the AMD GPUs, or its UUID as `gpu-guard host` lists them), or `all`".to_string(),
        ),
        Named::RenderNode => {
            let message = format!(
                "device {} is the render node of no AMD GPU on this host{}; {hosts}; AMD render nodes: {}",
                esc(&u.via),
                if blind {
                    ": the container gets /dev/kfd and no AMD GPU's render node, so ROCm in it finds no GPU (hipErrorNoDevice)"
                } else {
                    " (another vendor's GPU, or none): ROCm does not use it"
                },
                amd_render_nodes(facts)
            );
            let f = if blind {
                Finding::error(Check::Device, message)
            } else {
                Finding::warning(Check::Device, message)
            };
            (f, "pass the render node of an AMD GPU this host has (`gpu-guard host --json` gives each AMD GPU's render_node), e.g. `--device=/dev/kfd --device=/dev/dri/renderD128`, or every render node with `--device=/dev/dri`".to_string())
        }
    };
    f.with_fix(fix)
}

/// The host's AMD render nodes, for messages.
fn amd_render_nodes(facts: &HostFacts) -> String {
    let nodes: Vec<String> = facts
        .gpus
        .iter()
        .filter(|g| g.is_amd())
        .filter_map(|g| {
            let n = g.render_node.as_deref()?;
            Some(format!("{} (AMD GPU {})", esc(n), g.index))
        })
        .collect();
    if nodes.is_empty() {
        "none known".to_string()
    } else {
        nodes.join(", ")
    }
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

/// Findings for the host faults the probe met. A container of AMD GPUs
/// only (`amd_only`) does not need NVIDIA's driver: the probe's "no
/// NVIDIA driver" is not its fault.
fn host_findings(
    host: &HostReport,
    visible: &[&Gpu],
    cfg: &Config,
    amd_only: bool,
    out: &mut Vec<Finding>,
) {
    for p in &host.problems {
        let f = match &p.kind {
            HostProblemKind::NoDriver if amd_only => continue,
            HostProblemKind::NoDriver | HostProblemKind::Untrusted => {
                Finding::error(Check::Host, p.message.clone())
            }
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
            // The GPU's health says it failed: a `health` finding
            // (core::health), by `[health] failed`.
            HostProblemKind::GpuLost { index } => {
                let judged = host.facts.as_ref().is_some_and(|f| {
                    f.gpus
                        .iter()
                        .any(|g| g.index == *index && g.health.is_some())
                });
                if judged {
                    continue;
                }
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
            d.host_versions = facts.driver_version.clone().map(|v| {
                let cuda = facts.cuda_driver_version.clone();
                (v, cuda.unwrap_or_else(|| "unknown".into()))
            });
            let idx = if det.amd_only {
                Vec::new()
            } else {
                device_findings(det, facts, findings)
            };
            let nvidia: Vec<&Gpu> = idx.iter().map(|i| &facts.gpus[*i]).collect();
            let amd = amd_findings(inp, facts, &nvidia, findings);
            visible = nvidia.iter().chain(&amd).copied().collect();
            d.visible_gpus = Some(visible.iter().map(|g| g.index).collect());
            host_findings(host, &visible, cfg, det.amd_only, findings);
            findings.extend(crate::core::health::findings(
                &visible,
                &facts.gpus,
                &cfg.health,
            ));
            let no_driver_reported = host
                .problems
                .iter()
                .any(|p| p.kind == HostProblemKind::NoDriver);
            if det.amd_only {
                // AMD GPUs only: NVIDIA's driver and CUDA requirements
                // are not this container's (a CUDA image is a `vendor`
                // finding).
            } else if facts.driver_version.is_none() {
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
                let declared = inp.declared;
                check_requirements(c, declared, facts, &visible, cfg, inp.scanned, findings);
                findings.extend(forward_compat_findings(
                    c, declared, facts, &visible, cfg, inp.compat,
                ));
            }
        }
        None => {
            host_findings(host, &visible, cfg, det.amd_only, findings);
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
    d.workload = crate::core::workload::of(c.cri_facts());
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
    findings.extend(inp.libraries.iter().cloned());
    d.libraries = inp.library_scan.cloned();
    findings.extend(inp.local.cdi.iter().cloned());
    findings.extend(inp.local.device_nodes.iter().cloned());

    if inp.stage == SpecAccess::Edit {
        let (env, mut tf) = if inp.detection.amd_only {
            // The env rules tune CUDA's stack (CUDA_*, PyTorch's and
            // TensorFlow's CUDA allocators), and on ROCm they can harm:
            // TensorFlow's ROCm build aborts when TF_GPU_ALLOCATOR asks
            // for cuda_malloc_async (gpu_cudamallocasync_allocator.cc
            // without TF_CUDA_MALLOC_ASYNC_SUPPORTED: LOG(FATAL)). An AMD
            // GPU container gets the limits, the cpuset and /dev/shm only.
            (Default::default(), Vec::new())
        } else {
            tuning::plan(c, &visible, &cfg.tuning)
        };
        d.edits.env = env;
        d.edits.rlimits = tuning::rlimits_over(c, &cfg.tuning, &inp.local.rlimits);
        findings.append(&mut tf);
    }
    let numa = tuning::numa::plan(c, &visible, &cfg.tuning, inp.stage, &inp.local.numa);
    d.edits.env.extend(numa.env);
    d.edits.cpuset = numa.cpuset;
    findings.extend(numa.findings);
    let (mount, mut shm) = tuning::shm::plan(c, &cfg.tuning, inp.stage, &inp.local.shm);
    d.edits.mounts.extend(mount);
    findings.append(&mut shm);
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
pub fn security_only(c: &Container, gpu: bool, cfg: &Config, stage: SpecAccess) -> Decision {
    let sp = security::plan(c, &cfg.security, &cfg.capability_allowlist(), stage);
    let mut d = Decision::skip();
    d.container_id = c.id.clone();
    d.workload = crate::core::workload::of(c.cri_facts());
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
    if cfg.mode == Mode::Audit {
        d.findings.push(audit_note());
    }
    if !d.has_errors() {
        d.verdict = Verdict::Allow;
        return;
    }
    if cfg.mode.refuses() {
        d.verdict = Verdict::Refuse;
        // A refused container is never created; edits would mislead.
        d.withheld_edits = std::mem::take(&mut d.edits);
    } else {
        d.verdict = Verdict::Allow;
        d.findings.push(warn_note("container", "starts"));
    }
}

/// Under `mode = "audit"` the verdict and edits are enforce's, and nothing
/// acts on them: every decision says so.
pub fn audit_note() -> Finding {
    Finding::info(
        Check::Config,
        "mode = \"audit\": this is what enforce would do; gpu-guard only logs it, refuses nothing and changes nothing",
    )
}

/// Under `mode = "warn"`: what enforce would have refused still `starts`.
fn warn_note(what: &str, starts: &str) -> Finding {
    Finding::info(
        Check::Config,
        format!("mode = \"warn\": gpu-guard would refuse this {what}; it {starts} anyway"),
    )
}

/// The decision for a GPU container when the config itself is unusable:
/// refuse, naming the file and key (docs/invalid-config.md: non-GPU
/// containers still start). `error` is the loader's one-line message, `path` the file it
/// read and `gpu` whether the built-in detection calls it a GPU container.
pub fn config_error(error: &str, path: &std::path::Path, c: &Container, gpu: bool) -> Decision {
    let mut d = Decision::skip();
    d.container_id = c.id.clone();
    d.workload = crate::core::workload::of(c.cri_facts());
    d.gpu_container = gpu;
    if gpu {
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

/// The decision for a spec (or exec process file) gpu-guard cannot read:
/// runc may still run it, so it is decided from what is
/// certain. A file that mentions a GPU request is refused under `mode =
/// "enforce"` (and under "audit" the verdict says so, which the entry
/// points log without acting on), naming the error; under "warn" the
/// refusal is logged and the container starts. Any other file is none of gpu-guard's
/// business: the verdict is skip and the caller stands aside.
pub fn unreadable_spec(
    mode: Mode,
    id: Option<String>,
    error: &str,
    mentions_gpu: bool,
) -> Decision {
    let mut d = Decision::skip();
    d.container_id = id;
    if !mentions_gpu || mode == Mode::Off {
        return d;
    }
    d.gpu_container = true;
    d.findings.push(
        Finding::error(
            Check::Config,
            format!(
                "gpu-guard cannot read the container's spec ({}), and the spec names a GPU request or NVIDIA's tooling; a GPU container is not started unchecked",
                crate::core::sanitize::one_line(error)
            ),
        )
        .with_fix("write config.json as plain JSON (runc's own encoder output), or report the spec to gpu-guard's maintainers"),
    );
    if mode.refuses() {
        d.verdict = Verdict::Refuse;
    } else {
        d.verdict = Verdict::Allow;
        d.findings.push(warn_note("container", "starts"));
    }
    if mode == Mode::Audit {
        d.findings.push(audit_note());
    }
    d
}
