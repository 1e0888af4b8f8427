//! One container judged on many hosts (`gpu-guard check --host F --host G`,
//! `--hosts DIR`, `--nodes FILE`; docs/interfaces.md, "`gpu-guard check`").
//!
//! The container is classified, its requirements parsed and its image
//! scanned once, by the decision pipeline ([`FleetContainer`] holds a
//! [`crate::pipeline::Classified`]); each host then costs one pure
//! [`crate::core::decide`] call on facts already in memory. That keeps a
//! 1,000-host run under 1 ms a host (integration/bench-fleet.sh measures it).
//!
//! A fleet is judged for placement: a host is allowed only where the
//! container would work ([`placement`]), whatever `severity` or `mode`
//! lets a container start at the node.
//!
//! - [`nodes`] and [`node_facts`] build host facts from Kubernetes node
//!   labels (gpu-guard's own, else GPU Feature Discovery's), [`amd_nodes`]
//!   those of AMD GPU nodes;
//! - [`labels`] writes gpu-guard's node labels (`host --node-labels`);
//! - [`affinity`] turns the verdicts into a Kubernetes `nodeAffinity`, and
//!   [`label_affinity`] writes one from labels alone;
//! - [`summary`] words the table, the summary line and the exit status.

pub mod affinity;
pub mod amd_nodes;
pub mod attached;
pub mod label_affinity;
mod label_amd;
mod label_cover;
pub mod label_exprs;
mod label_grid;
mod label_judge;
pub mod labels;
pub mod node_facts;
pub mod node_labels;
pub mod nodes;
pub mod placement;
pub mod selector;
pub mod summary;
pub mod unknown;

use crate::core::compat::CompatScan;
use crate::core::container::Container;
use crate::core::decision::{Decision, Finding};
use crate::core::detect::Detection;
use crate::core::facts::HostReport;
use crate::core::kernel_image::Scanned;
use crate::core::libraries::LibraryScan;
use crate::core::policy::Config;
use crate::core::requirement::Requirement;
use crate::pipeline::{Classified, ContainerInput};
use std::collections::BTreeMap;

/// What is judged: the container, classified and scanned once by the
/// decision pipeline ([`crate::pipeline::Classified`]), and the requirements its
/// affinity and short reasons are written from.
pub struct FleetContainer<'a> {
    judge: Classified<'a>,
    /// The requirements that are checked (for short reasons and the affinity).
    pub requirements: Vec<Requirement>,
    /// How many GPUs the pod asks for (its `nvidia.com/gpu` limit; 1 when
    /// not known): a node labelled with fewer healthy GPUs is not chosen.
    pub gpus_wanted: u32,
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
        /// Set when the facts were built from Kubernetes node labels.
        labels: Option<LabelInfo>,
    },
    /// A node without GPU Feature Discovery labels: nothing to judge on, so
    /// a GPU container is refused there ([`unknown::no_gpu_facts`]); `why`
    /// says what the labels lack.
    NoGpuFacts { why: String },
}

/// What node labels said beyond host facts.
#[derive(Clone, Debug, Default)]
pub struct LabelInfo {
    /// The info line saying which facts labels gave and which are unknown.
    pub note: String,
    /// `gpu-guard.io/gpu.healthy`, when labelled.
    pub healthy: Option<u32>,
    /// Two GPU models: which GPU index has which is not labelled.
    pub mixed_models: bool,
}

/// One host's outcome: always a Decision (docs/interfaces.md).
pub struct HostResult {
    pub host: String,
    pub decision: Decision,
}

impl<'a> FleetContainer<'a> {
    /// The container of `case` judged under `config`. Its scans are read
    /// now, once, from its rootfs (unless the image reader made them): every
    /// host is judged with them, and the label affinity is written from them.
    pub fn new(config: &'a Config, mut case: ContainerInput) -> FleetContainer<'a> {
        let rootfs = case.container.rootfs.clone();
        let scans = std::mem::take(&mut case.scans);
        case.scans = scans.read_now(rootfs.as_deref(), &case.container, config);
        let judge = Classified::new(config, case);
        FleetContainer {
            requirements: judge.requirements(),
            judge,
            gpus_wanted: 1,
        }
    }

    /// The pod asks for `n` GPUs (its `nvidia.com/gpu` limit; at least 1).
    pub fn with_gpus_wanted(mut self, n: u32) -> FleetContainer<'a> {
        self.gpus_wanted = n.max(1);
        self
    }

    pub fn container(&self) -> &Container {
        self.judge.container()
    }

    pub fn config(&self) -> &Config {
        self.judge.config()
    }

    pub fn detection(&self) -> &Detection {
        self.judge.detection()
    }

    /// The image's GPU code, as scanned (None: not scanned).
    pub fn scanned(&self) -> Option<&Scanned> {
        self.judge.scans().kernel_image()
    }

    /// The image's forward-compatibility libraries (None: not read).
    pub fn compat(&self) -> Option<&CompatScan> {
        self.judge.scans().compat()
    }

    /// What the image's libraries need (None: not read).
    pub fn libraries(&self) -> Option<&LibraryScan> {
        self.judge.scans().libraries()
    }

    /// True when the image's GPU code was scanned (kernel-image findings).
    pub fn has_scan(&self) -> bool {
        self.scanned().is_some()
    }

    /// Decides on one host from facts in hand.
    pub fn decision_on(&self, host: &HostReport) -> Decision {
        self.judge.on_host(Some(host))
    }

    /// Judges every host for placement ([`placement`]). Facts from labels
    /// add an info finding saying so, and "cannot be judged" warnings get a
    /// fix that fits labels.
    pub fn judge_all(&self, hosts: &[Host]) -> Vec<HostResult> {
        hosts
            .iter()
            .map(|h| HostResult {
                host: h.name.clone(),
                decision: self.judge_host(h),
            })
            .collect()
    }

    /// One host's Decision for placement (a node without GPU facts
    /// included): allowed only where the container would work.
    pub fn judge_host(&self, h: &Host) -> Decision {
        placement::judge(self, h, true)
    }

    /// The judgement of the GPU code alone on one host: the kernel-image
    /// findings and, on facts from labels, the refusal of code that labels
    /// cannot judge ([`placement::kernel_findings`]).
    pub(crate) fn kernel_judgement(&self, h: &Host) -> Vec<Finding> {
        placement::kernel_findings(self, h)
    }

    /// [`FleetContainer::judge_host`] without [`FleetContainer::kernel_judgement`]: the
    /// label affinity judges those apart ([`label_judge`]).
    pub(crate) fn judge_host_without_kernel_image(&self, h: &Host) -> Decision {
        placement::judge(self, h, false)
    }

    pub(crate) fn judge(&self) -> &Classified<'a> {
        &self.judge
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
