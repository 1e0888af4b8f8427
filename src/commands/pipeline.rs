//! The I/O around the pure core, shared by every entry point: classify the
//! container, gather host facts only for GPU containers (a non-GPU container
//! never waits for NVML), scan the image's GPU code, then [`decide`].

use crate::config::ConfigError;
use crate::core::container::Container;
use crate::core::decide::{self, Inputs};
use crate::core::decision::Decision;
use crate::core::detect;
use crate::core::facts::{HostReport, HostSource};
use crate::core::policy::{Config, DetectConfig, Enforcement, Mode};
use crate::core::security::Stage;
use crate::host::facts_file::FactsFile;
use std::path::Path;

/// Where host facts come from for this call.
pub enum HostChoice<'a> {
    /// `check --host FILE`.
    File(&'a Path),
    /// Config `host.facts_file`, else the probe (cache, NVML, /proc).
    FromConfig,
}

fn host_report(cfg: &Config, choice: &HostChoice) -> HostReport {
    match choice {
        HostChoice::File(p) => FactsFile(p.to_path_buf()).report(),
        // The probe reads host.facts_file itself when it is set.
        HostChoice::FromConfig => crate::host::probe(&cfg.host),
    }
}

/// Decides for one container.
pub fn assess(
    config: &Result<Config, ConfigError>,
    container: &Container,
    stage: Stage,
    host: HostChoice,
) -> Decision {
    let default_detect = DetectConfig::default();
    let detect_cfg = config.as_ref().map_or(&default_detect, |c| &c.detect);
    let detection = detect::classify_with(container, detect_cfg);
    let cfg = match config {
        Ok(c) => c,
        Err(e) => return decide::config_error(&e.to_string(), &e.path, container, &detection),
    };
    let needs_host = detection.gpu && cfg.mode != Mode::Off;
    let report = needs_host.then(|| host_report(cfg, &host));
    // The image scans, for GPU containers with a rootfs on a host with
    // facts: the kernel-image scan (per [kernel_image]) and, only when the
    // requirement or CUDA_VERSION makes it matter, the compat library.
    let mut kernel_image = Vec::new();
    let mut scanned = None;
    let mut compat = None;
    if let (Some(facts), Some(rootfs)) = (
        report.as_ref().and_then(|r| r.facts.as_ref()),
        &container.rootfs,
    ) {
        let (idx, _) = detect::resolve(&detection.request, facts);
        if !idx.is_empty() && cfg.kernel_image.severity != Enforcement::Off {
            let s = crate::scan::libraries::scan_rootfs(rootfs, &cfg.kernel_image);
            kernel_image = crate::core::kernel_image::assess_on_host(
                &s,
                &detection.request,
                facts,
                cfg.kernel_image.severity,
            );
            scanned = Some(s);
        }
        let visible: Vec<_> = idx.iter().map(|i| &facts.gpus[*i]).collect();
        if decide::forward_compat_need(container, facts, &visible, cfg).is_some() {
            compat = Some(crate::scan::compat_lib::scan_rootfs(rootfs));
        }
    }
    decide::decide(&Inputs {
        container,
        detection: &detection,
        host: report.as_ref(),
        config: cfg,
        stage,
        kernel_image,
        scanned: scanned.as_ref(),
        compat: compat.as_ref(),
    })
}

/// Where decisions are logged (an invalid config still logs, to the system's syslog).
pub fn syslog_target(config: &Result<Config, ConfigError>) -> crate::sys::logging::Syslog {
    match config {
        Ok(c) => c.log.target(),
        Err(_) => crate::sys::logging::Syslog::System,
    }
}
