//! Test binary `decide`: decisions on container specs, environments and
//! host facts files, in process (the requirement language, detection and
//! decision tables over tests/data/images and tests/data/hosts, profiles,
//! config drop-ins) and through the gpu-guard binary (the CLI contract and
//! bad input, the hooks, fleets and node labels), and root's file writes
//! under race. Tests that need `test-hooks` (a fake host, the runtime
//! wrapper with its marker directory) belong in `test_hooks`, image and
//! rootfs reading in `image`, engine registration in `install`. The
//! checks that read the sources (`structure`: module graph, size rules,
//! test layout) run here too: `cargo test --test decide structure::`.
//!
//! Helpers: `support` (temp dirs, the skip rule); a file's own helpers stay
//! in that file. A new test file here is one more `mod` line below.
#[path = "../support/mod.rs"]
mod support;

#[path = "../structure/mod.rs"]
mod structure;

mod amd_cdi;
mod amd_host;
mod cli;
mod config_dropin;
mod config_trust;
mod decision_table;
mod detect_table;
mod facts_file_trust;
mod fleet_affinity;
mod fleet_cli;
mod fleet_inputs;
mod hook_trust_audit;
mod host_tuning;
mod nvidia_settings;
mod output_style;
mod precreate_handoff;
mod profiles;
mod readme_docs;
mod readme_quickstart;
mod spec_go_decoder;
mod version_overflow;
mod write_safety;
