//! Test binary `test_hooks`: every test that needs the `test-hooks` feature,
//! i.e. sets a variable only a test-hooks build of gpu-guard reads, or
//! loads the fake NVML library (crates/fake-nvml):
//! - a fake host (GPU_GUARD_PROC_NVIDIA, GPU_GUARD_DEV_DIR,
//!   GPU_GUARD_BOOT_ID_FILE, GPU_GUARD_PROC_MODULES, GPU_GUARD_PROC_DEVICES,
//!   GPU_GUARD_SYS_DIR): the host probe, NVML faults, the facts cache, the
//!   probe child, `check` and the prestart hook against fake hosts, GPU
//!   health and topology (the wrapper's NUMA pin under real runc),
//!   integration/gpu-check.sh;
//! - lowered image budgets (GPU_GUARD_IMAGE_MAX_BYTES/_SECS): `check --image`;
//! - a private marker directory (GPU_GUARD_MARKER_DIR): the runtime wrapper
//!   end to end in spec_parity and wrapper_policy (without it, markers go
//!   to the real /run/gpu-guard).
//!
//! Cargo builds this binary only with the feature (`required-features` in
//! Cargo.toml), so plain `cargo test` leaves it out instead of failing.
//! A test that needs none of these belongs in another binary.
//!
//! Helpers: `probe_common` (FakeHost, the fake library, bounded runs),
//! `image_support` (shared with the `image` binary) and `support` (temp dirs,
//! the skip rule). A new test file here is one more `mod` line below.
#[cfg(not(feature = "test-hooks"))]
compile_error!("these tests need `--features test-hooks` (Cargo.toml gates this binary on it)");

#[path = "../support/mod.rs"]
mod support;

#[path = "../image/image_support.rs"]
mod image_support;
mod probe_common;

mod amd_device_nodes;
mod decision_records;
mod doctor_nvml;
mod driver_root;
mod fake_nvml_faults;
mod fake_nvml_profiles;
mod health_topology;
mod image_check;
mod install_faults;
mod numa_runc;
mod probe_api;
mod probe_cache;
mod probe_child;
mod probe_e2e_check;
mod probe_e2e_hook;
mod probe_gpu_check_script;
mod spec_parity;
mod wrapper_devices;
mod wrapper_engines;
mod wrapper_fail_closed;
mod wrapper_policy;

/// A finished process's exit status (-1: ended by a signal).
pub(crate) fn code(o: &std::process::Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// What a finished process printed, stdout then stderr.
pub(crate) fn shown(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
