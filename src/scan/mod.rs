//! Reads the GPU code compiled into ELF files: `gpu-guard scan`,
//! and the `kernel-image` check of the decision, which predicts CUDA's
//! "no kernel image is available for execution on the device" before a
//! container starts.
//!
//! - [`elf`] finds the fatbin sections, [`fatbin`] walks containers and
//!   entry headers (positioned reads only, payloads never read);
//! - [`arch`] holds the driver's code-selection rule and the PTX ISA table,
//!   [`compat`] judges libraries against GPUs and words the findings (pure);
//! - [`rootfs`] resolves paths inside a hostile rootfs, [`glob`] and
//!   [`libraries`] find and scan the configured libraries within budgets,
//!   [`cache`] makes the second start of an image parse nothing.

pub mod amd;
pub mod cache;
pub mod compat_lib;

pub mod elf;
pub mod elf_dynamic;
pub mod fatbin;
pub mod glob;
pub mod ldso;
pub mod libraries;
pub mod read;
pub mod rootfs;
pub mod stream_fatbin;

use crate::core::decision::Finding;
use crate::core::facts::Gpu;
use crate::core::policy::{Enforcement, KernelImageConfig};
use crate::core::version::Version;
use std::path::Path;

/// Scans the configured libraries inside `rootfs` (budgets, cache) and judges them
/// against each visible GPU. Returns `kernel-image` findings (severity per config:
/// warn => Warning, enforce => Error for "no usable image"; JIT-only => Warning;
/// unreadable library => Warning; budget exhausted => Warning, or Error under
/// enforce with `on_incomplete = "enforce"`). Never panics, never hangs.
pub fn kernel_image_findings(
    rootfs: &Path,
    gpus: &[Gpu],
    cuda_driver_version: Option<&Version>,
    cfg: &KernelImageConfig,
) -> Vec<Finding> {
    if cfg.severity == Enforcement::Off || gpus.is_empty() {
        return Vec::new();
    }
    let scanned = libraries::scan_rootfs(rootfs, cfg);
    crate::core::kernel_image::assess(&scanned, gpus, cuda_driver_version, cfg.severity)
}
