//! The decision JSON (docs/interfaces.md): a verdict, findings a person can act on,
//! and the edits to make. A refusal is a value, never an error.

pub use crate::core::container::Rlimit;
use crate::core::sanitize::clean;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Refuse,
    /// Not a GPU container: never refused, never changed.
    Skip,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    Requirement,
    Device,
    Host,
    KernelImage,
    Tuning,
    Security,
    Config,
    /// CUDA forward and minor-version compatibility (docs/interfaces.md,
    /// "Decision JSON").
    Compat,
    /// A library the loader will not find at start (core::libraries).
    Library,
    /// A CUDA runtime the image ships that the driver is too old for.
    CudaRuntime,
    /// An image's ROCm user space outside what the host's amdgpu driver
    /// supports (core::amd::rocm).
    Rocm,
    /// An image built for one GPU vendor given only the other's GPUs
    /// (core::amd_judge).
    Vendor,
    /// A GPU the container gets that NVML reports failed or degraded
    /// (core::health).
    Health,
}

impl Check {
    pub fn as_str(self) -> &'static str {
        match self {
            Check::Requirement => "requirement",
            Check::Device => "device",
            Check::Host => "host",
            Check::KernelImage => "kernel-image",
            Check::Tuning => "tuning",
            Check::Security => "security",
            Check::Config => "config",
            Check::Compat => "compat",
            Check::Library => "library",
            Check::CudaRuntime => "cuda-runtime",
            Check::Rocm => "rocm",
            Check::Vendor => "vendor",
            Check::Health => "health",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub check: Check,
    pub severity: Severity,
    /// One line a person can act on.
    pub message: String,
    /// What to do, or null.
    pub fix: Option<String>,
    /// Extension: supporting lines for people (one per failed alternative).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// For people: the message without the details folded into it, shown
    /// above the detail lines. Not part of the JSON.
    #[serde(skip)]
    pub headline: Option<String>,
    /// Extension: the finding predicts that the container will fail there
    /// (`no kernel image is available`, a library that will not load, a
    /// driver too old for the CUDA runtime), whatever its severity: a
    /// warning under `severity = "warn"` still predicts it. Placement
    /// (fleets, `--affinity`, the admission webhook) and `check --strict`
    /// read it; a PTX JIT is not a failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub predicts_failure: bool,
}

/// Every text of a finding passes through [`clean`] here, the one place,
/// so container-supplied strings (env names and values, annotation keys,
/// device names) cannot put control characters on the hook's stderr, the
/// `--log` file or a terminal, whatever the call site quoted. [`clean`]
/// leaves text quoted with `esc` unchanged, so nothing is escaped twice.
impl Finding {
    pub fn new(check: Check, severity: Severity, message: impl Into<String>) -> Finding {
        Finding {
            check,
            severity,
            message: clean(message.into()),
            fix: None,
            details: Vec::new(),
            headline: None,
            predicts_failure: false,
        }
    }

    pub fn error(check: Check, message: impl Into<String>) -> Finding {
        Finding::new(check, Severity::Error, message)
    }

    pub fn warning(check: Check, message: impl Into<String>) -> Finding {
        Finding::new(check, Severity::Warning, message)
    }

    pub fn info(check: Check, message: impl Into<String>) -> Finding {
        Finding::new(check, Severity::Info, message)
    }

    pub fn with_fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(clean(fix.into()));
        self
    }

    pub fn with_details(mut self, details: Vec<String>) -> Finding {
        self.details = details.into_iter().map(clean).collect();
        self
    }

    pub fn with_headline(mut self, headline: impl Into<String>) -> Finding {
        self.headline = Some(clean(headline.into()));
        self
    }

    /// Marks the finding as predicting a failure ([`Finding::predicts_failure`]).
    pub fn predicting_failure(mut self) -> Finding {
        self.predicts_failure = true;
        self
    }

    /// The first line people see: the headline when there are detail lines.
    pub fn title(&self) -> &str {
        match (&self.headline, self.details.is_empty()) {
            (Some(h), false) => h,
            _ => &self.message,
        }
    }
}

/// What gpu-guard changes in the container's config (runtime wrapper and
/// podman precreate; the prestart hook can only verify).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Edits {
    /// Variables added, in the order added. Never one the image or user set.
    pub env: serde_json::Map<String, serde_json::Value>,
    /// Capabilities removed from any of the five sets, sorted.
    pub capabilities_dropped: Vec<String>,
    /// True when the policy makes `process.noNewPrivileges` true.
    pub no_new_privileges: bool,
    /// `process.rlimits` raised by a tuning rule, by type
    /// (`{"RLIMIT_MEMLOCK": {"soft": N, "hard": N}}`, docs/interfaces.md,
    /// "Decision JSON"); never one lowered. Unlimited is u64::MAX, as
    /// runc's spec writes RLIM_INFINITY.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rlimits: BTreeMap<String, Rlimit>,
    /// Mounts a tuning rule changed, by destination: `/dev/shm`'s tmpfs
    /// `size=` raised (`{"/dev/shm": {"size": N}}`, docs/interfaces.md
    /// "Decision JSON"); never one lowered, never a bind mount.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mounts: BTreeMap<String, MountEdit>,
    /// `linux.resources.cpu.cpus` and `.mems` set to the NUMA node of the
    /// container's GPUs (`tuning.numa = "pin"`), only for a container with
    /// no cpuset of its own (docs/interfaces.md, "GPU health and topology
    /// at start").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset: Option<CpusetEdit>,
}

/// A cpuset in cpulist syntax: `{"cpus": "0-15,32-47", "mems": "0"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpusetEdit {
    pub cpus: String,
    pub mems: String,
}

/// What a tuning rule changes in one mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountEdit {
    /// The tmpfs size in bytes (its `size=` option).
    pub size: u64,
}

impl Edits {
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.capabilities_dropped.is_empty()
            && !self.no_new_privileges
            && self.rlimits.is_empty()
            && self.mounts.is_empty()
            && self.cpuset.is_none()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub verdict: Verdict,
    pub gpu_container: bool,
    pub findings: Vec<Finding>,
    pub edits: Edits,
    /// Extension: the container id when known (hook state, wrapper argv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// Extension: the Kubernetes workload, where its CRI runtime's record
    /// of it is believed (core::workload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<crate::core::workload::Workload>,
    /// Extension: indices of the host GPUs the container sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_gpus: Option<Vec<u32>>,
    /// Extension: where host facts came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_source: Option<String>,
    /// What the container's libraries need, when its rootfs was read
    /// (core::libraries; docs/interfaces.md "Container content").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libraries: Option<crate::core::library_scan::LibraryScan>,
    /// The driver and CUDA versions of the host facts decided on, for the
    /// metrics' `gpu_guard_host_info`. Not part of the JSON.
    #[serde(skip)]
    pub host_versions: Option<(String, String)>,
    /// The edits a refused container would have had (`edits` is empty when
    /// refused). Not part of the JSON; podman's precreate hook applies them
    /// when it leaves the refusal to the prestart hook.
    #[serde(skip)]
    pub withheld_edits: Edits,
}

impl Decision {
    pub fn skip() -> Decision {
        Decision {
            verdict: Verdict::Skip,
            gpu_container: false,
            findings: Vec::new(),
            edits: Edits::default(),
            container_id: None,
            workload: None,
            visible_gpus: None,
            host_source: None,
            libraries: None,
            host_versions: None,
            withheld_edits: Edits::default(),
        }
    }

    pub fn errors(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
    }

    pub fn has_errors(&self) -> bool {
        self.errors().next().is_some()
    }

    /// What happened, in the words of the log records and the metrics'
    /// `verdict` label: `allow`, `refuse`, `skip`, or `would_refuse` when
    /// enforce would have refused and `mode` (audit, warn) let it start.
    pub fn outcome(&self, mode: crate::core::policy::Mode) -> &'static str {
        use crate::core::policy::Mode;
        match (self.verdict, mode) {
            (Verdict::Refuse, Mode::Audit) => "would_refuse",
            (Verdict::Allow, Mode::Warn) if self.has_errors() => "would_refuse",
            (Verdict::Allow, _) => "allow",
            (Verdict::Refuse, _) => "refuse",
            (Verdict::Skip, _) => "skip",
        }
    }

    /// The findings that predict the container fails on this host: those
    /// marked so ([`Finding::predicts_failure`]), and the errors of the
    /// checks that judge whether it can work there (its requirements, its
    /// GPUs, the host, its code, libraries and CUDA compatibility), not of
    /// policy alone (security, tuning, config).
    pub fn failure_predictions(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| {
            f.predicts_failure
                || (f.severity == Severity::Error
                    && !matches!(f.check, Check::Security | Check::Tuning | Check::Config))
        })
    }

    /// Worth a syslog line: anything but a plain skip.
    pub fn is_notable(&self) -> bool {
        self.verdict != Verdict::Skip || !self.findings.is_empty() || !self.edits.is_empty()
    }
}
