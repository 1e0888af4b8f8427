//! Host probe: NVML, /proc fallback, cache, deadline (issue 3, in progress).
use crate::cli::HostArgs;
use std::path::Path;
pub fn host_command(_config: Option<&Path>, _args: &HostArgs) -> i32 {
    eprintln!("gpu-guard: host is not built yet");
    2
}

/// Placeholder until the NVML probe lands: a configured facts file, else a probe failure.
pub fn probe(cfg: &crate::config::HostConfig) -> crate::host::HostReport {
    use crate::host::{FactsFile, HostProblem, HostProblemKind, HostReport, HostSource};
    if !cfg.facts_file.is_empty() {
        return FactsFile(cfg.facts_file.clone().into()).report();
    }
    HostReport::failed(
        "NVML",
        HostProblem {
            kind: HostProblemKind::ProbeFailed,
            message: "the NVML probe is not built yet".into(),
            fix: None,
        },
    )
}
