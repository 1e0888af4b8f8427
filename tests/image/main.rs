//! Test binary `image`: what gpu-guard reads from an image or a rootfs.
//! Image archives and OCI layouts read without unpacking (hostile ones
//! included), the fatbin/ELF scanners (against NVIDIA's
//! cuobjdump where installed), scan budgets, caches and hostile rootfs
//! trees, compat libraries (real ELF files built with gcc and objcopy),
//! minor-version compatibility and memlock edits from `check --bundle`.
//! `check --image` with lowered budgets needs `test-hooks`: it is in
//! `test_hooks`.
//!
//! Helpers: `image_support` (layer tars, OCI layouts, docker archives),
//! `scan_support` (fatbin fixtures, cuobjdump, real NVIDIA libraries),
//! `compat_support` (compat libraries, bundles, `check --bundle` runs) and
//! `support` (temp dirs, the skip rule). A new test file here is one more
//! `mod` line below.
#[path = "../support/mod.rs"]
mod support;

mod compat_support;
mod image_support;
mod scan_support;

mod amd_decide;
mod amd_scan;
mod compat_bounds;
mod compat_check;
mod compat_lib;
mod compat_unread;
mod fleet_affinity_amd;
mod fleet_affinity_exact;
mod image_bounds;
mod image_check_stream;
mod image_compat;
mod image_reader;
mod image_transports;
mod libraries_budget;
mod libraries_loader;
mod libraries_scan;
mod memlock;
mod minor_version;
mod pipeline_paths;
mod scan_budget;
mod scan_cli;
mod scan_cuobjdump;
mod scan_decision;
mod scan_hostile;
