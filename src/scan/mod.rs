//! Fatbin scanner (issue 6, in progress).
use crate::cli::ScanArgs;
use std::path::Path;
pub fn command(_config: Option<&Path>, _args: &ScanArgs) -> i32 {
    eprintln!("gpu-guard: scan is not built yet");
    2
}

/// Placeholder until the scanner lands.
pub fn kernel_image_findings(
    _rootfs: &Path,
    _gpus: &[crate::host::Gpu],
    _cuda_driver_version: Option<&crate::version::Version>,
    _cfg: &crate::config::KernelImageConfig,
) -> Vec<crate::decision::Finding> {
    Vec::new()
}
