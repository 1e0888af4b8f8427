//! The decision pipeline: the one way from what an entry point knows to a
//! [`Decision`]. Every entry point (the runtime wrapper, both hooks,
//! `check` with `--bundle`, `--spec`, `--env` or `--image`, fleets of
//! hosts) goes through it, and it is the one place outside the core that
//! builds [`core::decide::Inputs`](crate::core::decide::Inputs).
//!
//! ```text
//! entry point ─> ContainerInput: container view, stage, chained runtime, scans made
//!             ─> Classified: classified once (detect, the chained runtime)
//!             ─> per host (probe | facts file | a host in hand):
//!                  the scans it needs (read once) ─> core::decide ─> Decision
//! ```
//!
//! The entry point carries out the decision's effects (patch, refuse,
//! exec the real runtime, print). Under a [`Policy`] whose config is
//! invalid, GPU containers are refused naming the error, and nothing is
//! probed or read.

mod local;
pub mod policy;
pub mod runtime;
pub mod scans;

pub use policy::Policy;
pub use scans::Scans;

use crate::config::ConfigError;
use crate::core::container::Container;
use crate::core::cri_facts::CriRuntime;
use crate::core::decide::{self, Declared, HostLocal, Inputs};
use crate::core::decision::{Decision, Finding};
use crate::core::detect::{self, Detection};
use crate::core::facts::{HostFacts, HostReport, HostSource};
use crate::core::policy::{Config, DetectConfig, Mode};
use crate::core::requirement::Requirement;
use crate::core::security::SpecAccess;
use crate::host::facts_file::FactsFile;
use std::path::{Path, PathBuf};

/// What an entry point knows about the container it decides for.
pub struct ContainerInput {
    /// The container as its spec (or env, or image) describes it.
    pub container: Container,
    pub stage: SpecAccess,
    /// The OCI runtime the wrapper execs for it: the one it found, or for
    /// `check --stage runtime` the one it would find. None under a hook.
    pub runtime: Option<PathBuf>,
    /// Scans already made; by default each is read from the container's
    /// rootfs when a host needs it.
    pub scans: Scans,
    /// The CRI runtime that made the container, as evidence from outside
    /// its spec knows it (the wrapper's runtime root, `check --engine`);
    /// None: the spec's CRI facts are not believed (core::cri_facts).
    pub cri: Option<CriRuntime>,
}

impl ContainerInput {
    /// A container at `stage`, with no chained runtime and nothing scanned.
    pub fn new(container: Container, stage: SpecAccess) -> ContainerInput {
        ContainerInput {
            container,
            stage,
            runtime: None,
            scans: Scans::default(),
            cri: None,
        }
    }

    pub fn with_cri(mut self, cri: Option<CriRuntime>) -> ContainerInput {
        self.cri = cri;
        self
    }

    pub fn with_runtime(mut self, runtime: Option<PathBuf>) -> ContainerInput {
        self.runtime = runtime;
        self
    }

    pub fn with_scans(mut self, scans: Scans) -> ContainerInput {
        self.scans = scans;
        self
    }
}

/// Where one host's facts come from.
pub enum HostChoice<'a> {
    /// `check --host FILE`.
    File(&'a Path),
    /// Config `host.facts_file`, else the probe (cache, NVML, /proc).
    FromConfig,
}

impl HostChoice<'_> {
    fn report(&self, cfg: &Config) -> HostReport {
        match self {
            HostChoice::File(p) => FactsFile(p.to_path_buf()).report(),
            // The probe reads host.facts_file itself when it is set.
            HostChoice::FromConfig => crate::host::probe_for(cfg),
        }
    }
}

/// The container as the runtime behind it will run it, classified: the
/// one place the chained runtime joins the container view (NVIDIA's
/// runtime there acts on the env's GPU requests, core::detect), and the
/// host's bind-mount sources are looked at.
pub fn classify(
    mut container: Container,
    runtime: Option<&Path>,
    detect_cfg: &DetectConfig,
) -> (Container, Detection) {
    if let Some(r) = runtime {
        container.chained_runtime = Some(r.to_string_lossy().into_owned());
    }
    // A bind-mounted GPU node counts by what it is on the host, not by
    // its name (core::detect).
    crate::host::device_nodes::inspect_mounts(&mut container);
    // Which device majors are GPU drivers' here (core::device_table):
    // /proc/devices, read only when the container's devices ask.
    let with_majors;
    let detect_cfg = if detect::reads_host_majors(&container) {
        with_majors = DetectConfig {
            majors: crate::host::device_nodes::host_majors(),
            ..detect_cfg.clone()
        };
        &with_majors
    } else {
        detect_cfg
    };
    let detection = detect::classify_with(&container, detect_cfg);
    (container, detection)
}

/// Decides for one container on one host: the hooks, the wrapper, `check`.
/// Host facts are gathered only for a GPU container under a mode that
/// judges, so a non-GPU container never waits for NVML.
pub fn decide_container(policy: &Policy, case: ContainerInput, host: HostChoice) -> Decision {
    let cfg = match policy.config() {
        Ok(c) => c,
        Err(e) => return refused_for_config(e, policy, case),
    };
    let judge = Classified::new(cfg, case);
    let report = judge.needs_host().then(|| host.report(cfg));
    match host {
        HostChoice::FromConfig => judge.on_this_host(report.as_ref()),
        HostChoice::File(_) => judge.on_host(report.as_ref()),
    }
}

/// The decision under a config that cannot be used: the container
/// classified as the config would classify it (what of it could be read,
/// pipeline::policy), a GPU container refused naming the file and key.
fn refused_for_config(e: &ConfigError, policy: &Policy, case: ContainerInput) -> Decision {
    let runtime = case.runtime.as_deref();
    let (mut container, detection) = classify(case.container, runtime, policy.detect());
    container.cri_runtime = case.cri;
    let mut d = decide::config_error(&e.to_string(), &e.path, &container, detection.gpu);
    if let Some(unread) = policy.unread().filter(|_| detection.gpu) {
        d.findings
            .push(Finding::info(crate::core::decision::Check::Config, unread));
    }
    d
}

/// One container, judged on as many hosts as asked: classified and its
/// scans read once, then one pure `core::decide` call per host (fleets:
/// integration/bench-fleet.sh holds a host under 1 ms).
pub struct Classified<'c> {
    config: &'c Config,
    container: Container,
    stage: SpecAccess,
    detection: Detection,
    /// The container's requirements, parsed once for every host.
    declared: Declared,
    scans: Scans,
}

impl<'c> Classified<'c> {
    pub fn new(config: &'c Config, case: ContainerInput) -> Classified<'c> {
        let runtime = case.runtime.as_deref();
        let (mut container, detection) = classify(case.container, runtime, &config.detect);
        container.cri_runtime = case.cri;
        Classified {
            config,
            declared: Declared::of(&container),
            container,
            stage: case.stage,
            detection,
            scans: case.scans,
        }
    }

    pub fn container(&self) -> &Container {
        &self.container
    }

    pub fn config(&self) -> &Config {
        self.config
    }

    pub fn detection(&self) -> &Detection {
        &self.detection
    }

    pub fn scans(&self) -> &Scans {
        &self.scans
    }

    /// True when host facts matter: a GPU container under a mode that judges.
    pub fn needs_host(&self) -> bool {
        self.detection.gpu && self.config.mode != Mode::Off
    }

    /// The requirements that are checked (none under an honoured
    /// `NVIDIA_DISABLE_REQUIRE`).
    pub fn requirements(&self) -> Vec<Requirement> {
        decide::checked_requirements(&self.container, self.config)
    }

    /// True when the image's GPU code is (or will be) scanned.
    pub fn reads_gpu_code(&self) -> bool {
        let rootfs = self.container.rootfs.as_deref();
        self.scans.reads_gpu_code(rootfs, self.config)
    }

    /// Decides on one host (None: its facts were not gathered). A report
    /// given for a container that needs none is not used.
    pub fn on_host(&self, host: Option<&HostReport>) -> Decision {
        self.decide_on(host, HostLocal::default(), true)
    }

    /// [`Classified::on_host`] for the host this process runs on, where the
    /// container starts: what only this host can say is read too
    /// (`local.rs`).
    pub fn on_this_host(&self, host: Option<&HostReport>) -> Decision {
        let local = match host.filter(|_| self.needs_host()) {
            Some(r) => local::read(
                &self.container,
                &self.detection,
                self.config,
                r.facts.as_ref(),
            ),
            None => HostLocal::default(),
        };
        self.decide_on(host, local, true)
    }

    /// [`Classified::on_host`] without the kernel-image findings: the scans
    /// still inform the rest of the decision (minor-version compatibility,
    /// forward compatibility), only the findings of
    /// [`Classified::kernel_image_findings`] are left out. `core::decide` adds
    /// those to the others and nothing else reads them, so `on_host` refuses
    /// exactly when this refuses or, under a mode that refuses
    /// (`Mode::refuses`), one of them is an error (decide.rs `finish`).
    /// The label affinity judges the two parts on grids of their own
    /// (crate::fleet::label_grid_apart).
    pub fn on_host_without_kernel_image(&self, host: Option<&HostReport>) -> Decision {
        self.decide_on(host, HostLocal::default(), false)
    }

    /// The kernel-image findings [`Classified::on_host`] gives on this host: the
    /// scanned GPU code judged on the GPUs the container sees there.
    pub fn kernel_image_findings(&self, host: &HostReport) -> Vec<Finding> {
        match host.facts.as_ref().filter(|_| self.needs_host()) {
            Some(f) => self.scans_on(f).kernel_image,
            None => Vec::new(),
        }
    }

    /// What the scans give the decision on a host with these facts.
    fn scans_on(&self, facts: &HostFacts) -> scans::OnHost<'_> {
        let c = &self.container;
        self.scans
            .on_host(c, &self.declared, &self.detection, facts, self.config)
    }

    /// The decision on `host`, with what only this host can say (`local`),
    /// and with or without the kernel-image findings.
    fn decide_on(
        &self,
        host: Option<&HostReport>,
        local: HostLocal,
        with_kernel_image: bool,
    ) -> Decision {
        let host = host.filter(|_| self.needs_host());
        let facts = host.and_then(|r| r.facts.as_ref());
        let found = facts.map(|f| self.scans_on(f));
        let (kernel_image, scanned, compat, libraries, library_scan) = match found {
            Some(s) => (
                s.kernel_image,
                s.scanned,
                s.compat,
                s.libraries,
                s.library_scan,
            ),
            None => (Vec::new(), None, None, Vec::new(), None),
        };
        decide::decide(&Inputs {
            container: &self.container,
            detection: &self.detection,
            host,
            config: self.config,
            stage: self.stage,
            declared: &self.declared,
            kernel_image: if with_kernel_image {
                kernel_image
            } else {
                Vec::new()
            },
            scanned,
            compat,
            libraries,
            library_scan,
            local,
        })
    }
}
