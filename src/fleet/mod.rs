//! One container judged on many hosts (`gpu-guard check --host F --host G`,
//! `--hosts DIR`, `--nodes FILE`; docs/interfaces.md, "`gpu-guard check`").
//!
//! The container is built, its requirements parsed and its image scanned
//! once ([`Subject`]); each host then costs one pure [`crate::core::decide`]
//! call on facts already in memory. That keeps a 1,000-host run under 1 ms a
//! host (integration/bench-fleet.sh measures it).
//!
//! - [`nodes`] builds host facts from Kubernetes node labels (GPU Feature
//!   Discovery and gpu-guard's own);
//! - [`labels`] writes gpu-guard's node labels (`host --node-labels`);
//! - [`affinity`] turns the verdicts into a Kubernetes `nodeAffinity`;
//! - [`summary`] words the table, the summary line and the exit status.

pub mod affinity;
pub mod attached;
pub mod label_affinity;
pub mod label_exprs;
mod label_grid;
pub mod labels;
pub mod nodes;
pub mod selector;
pub mod summary;
pub mod unknown;

use crate::core::compat::CompatScan;
use crate::core::container::Container;
use crate::core::decide::{self, Inputs};
use crate::core::decision::{Check, Decision, Finding};
use crate::core::detect::{self, Detection};
use crate::core::facts::HostReport;
use crate::core::kernel_image::Scanned;
use crate::core::policy::{Config, Mode};
use crate::core::requirement::Requirement;
use crate::core::security::Stage;
use std::collections::BTreeMap;

/// What is judged: the container, built once, with everything about it that
/// does not depend on the host.
pub struct Subject<'a> {
    pub container: &'a Container,
    pub config: &'a Config,
    pub stage: Stage,
    detection: Detection,
    /// The image's libraries, scanned once (None: no rootfs to scan). A
    /// rootfs from `--bundle` or an image read by `--image` plugs in here.
    scanned: Option<Scanned>,
    /// The image's forward-compatibility libraries (`/usr/local/cuda/compat`),
    /// read with the libraries; None when nothing was read.
    compat: Option<CompatScan>,
    /// The parsed `NVIDIA_REQUIRE_*` (for short reasons and the affinity).
    pub requirements: Vec<Requirement>,
}

/// One host of the fleet and where its facts came from.
pub struct Host {
    /// The facts file's name or the node's name.
    pub name: String,
    pub facts: HostFacts,
}

pub enum HostFacts {
    /// Facts to judge on (from a file, or from node labels).
    Known {
        report: HostReport,
        /// Set when the facts were built from Kubernetes node labels: the
        /// info line saying which facts labels gave and which are unknown.
        from_labels: Option<String>,
    },
    /// A node without GPU Feature Discovery labels: nothing to judge on, so
    /// a GPU container is refused there ([`unknown::no_gpu_facts`]); `why`
    /// says what the labels lack.
    NoGpuFacts { why: String },
}

/// One host's outcome: always a Decision (design.md).
pub struct HostResult {
    pub host: String,
    pub decision: Decision,
}

impl<'a> Subject<'a> {
    pub fn new(
        container: &'a Container,
        config: &'a Config,
        stage: Stage,
        scanned: Option<Scanned>,
    ) -> Subject<'a> {
        let (mut requirements, _) = decide::requirements(container);
        // As decide does: an honoured NVIDIA_DISABLE_REQUIRE checks nothing.
        let disabled = container
            .env
            .get("NVIDIA_DISABLE_REQUIRE")
            .and_then(crate::core::requirement::parse_go_bool)
            .unwrap_or(false);
        if disabled && config.requirements.honor_disable_require {
            requirements.clear();
        }
        Subject {
            container,
            config,
            stage,
            detection: detect::classify_with(container, &config.detect),
            scanned,
            compat: None,
            requirements,
        }
    }

    /// The image's compat libraries, judged per host like a rootfs's.
    pub fn with_compat(mut self, compat: Option<CompatScan>) -> Subject<'a> {
        self.compat = compat;
        self
    }

    /// True when the image's GPU code was scanned (kernel-image findings).
    pub fn has_scan(&self) -> bool {
        self.scanned.is_some()
    }

    pub fn is_gpu_container(&self) -> bool {
        self.detection.gpu
    }

    /// Decides on one host, as `pipeline::assess` does for a single host,
    /// but from facts in hand and the scan done once.
    pub fn decide(&self, host: &HostReport) -> Decision {
        let needs_host = self.detection.gpu && self.config.mode != Mode::Off;
        let report = needs_host.then_some(host);
        decide::decide(&Inputs {
            container: self.container,
            detection: &self.detection,
            host: report,
            config: self.config,
            stage: self.stage,
            kernel_image: self.kernel_image(report),
            scanned: self.scanned.as_ref(),
            compat: self.compat.as_ref(),
        })
    }

    /// The kernel-image findings on this host's visible GPUs, from the scan.
    fn kernel_image(&self, report: Option<&HostReport>) -> Vec<Finding> {
        match (&self.scanned, report.and_then(|r| r.facts.as_ref())) {
            (Some(scanned), Some(facts)) => crate::core::kernel_image::assess_on_host(
                scanned,
                &self.detection.request,
                facts,
                self.config.kernel_image.severity,
            ),
            _ => Vec::new(),
        }
    }

    /// Judges every host. Facts from labels add an info finding saying so,
    /// and "cannot be judged" warnings get a fix that fits labels.
    pub fn judge_all(&self, hosts: &[Host]) -> Vec<HostResult> {
        hosts
            .iter()
            .map(|h| HostResult {
                host: h.name.clone(),
                decision: self.judge_host(h),
            })
            .collect()
    }

    /// One host's Decision (a node without GPU facts included).
    pub fn judge_host(&self, h: &Host) -> Decision {
        match &h.facts {
            HostFacts::NoGpuFacts { why } => unknown::no_gpu_facts(self.detection.gpu, why),
            HostFacts::Known {
                report,
                from_labels,
            } => self.decide_labelled(report, from_labels.as_deref()),
        }
    }

    fn decide_labelled(&self, report: &HostReport, from_labels: Option<&str>) -> Decision {
        let mut d = self.decide(report);
        let Some(note) = from_labels else {
            return d;
        };
        if !d.gpu_container {
            return d;
        }
        // Facts labels cannot give are unknown, never a pass (design.md).
        if let Some(facts) = &report.facts {
            unknown::refuse_unknown(
                &mut d,
                &self.requirements,
                &self.detection.request,
                facts,
                self.config.mode,
            );
        }
        d.findings.insert(0, Finding::info(Check::Host, note));
        d
    }
}

/// What was read to build the container, for the JSON's `image` object:
/// the reference and digest when an image was read, and the environment
/// that decided (the requirement variables and device selection).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ImageInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    pub env: BTreeMap<String, String>,
}

impl ImageInfo {
    /// The variables of `c` that decide anything about GPUs.
    pub fn from_container(c: &Container) -> ImageInfo {
        let env = c
            .env
            .vars()
            .into_iter()
            .filter(|(k, _)| {
                k.starts_with("NVIDIA_") || k.starts_with("CUDA_") || *k == "CUDA_VERSION"
            })
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ImageInfo {
            env,
            ..Default::default()
        }
    }
}
