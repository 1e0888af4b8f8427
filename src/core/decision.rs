//! The decision JSON (docs/interfaces.md): a verdict, findings a person can act on,
//! and the edits to make. A refusal is a value, never an error.

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
}

/// What a tuning rule changes in one mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountEdit {
    /// The tmpfs size in bytes (its `size=` option).
    pub size: u64,
}

/// One `process.rlimits` entry's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rlimit {
    pub soft: u64,
    pub hard: u64,
}

impl Edits {
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.capabilities_dropped.is_empty()
            && !self.no_new_privileges
            && self.rlimits.is_empty()
            && self.mounts.is_empty()
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

    /// Worth a syslog line: anything but a plain skip.
    pub fn is_notable(&self) -> bool {
        self.verdict != Verdict::Skip || !self.findings.is_empty() || !self.edits.is_empty()
    }
}
