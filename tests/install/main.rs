//! Test binary `install`: `gpu-guard install`/`uninstall` for every engine.
//! Golden tests of the engine configs written (tests/data/install), the
//! chained-runtime drop-ins, and the real engines (containerd `config dump`,
//! podman running the installed hooks) reading what was written.
//!
//! Helpers: `install_support` (golden files, fake host roots, options) and
//! `support` (temp dirs, the skip rule). A new test file here is one more
//! `mod` line below.
#[path = "../support/mod.rs"]
mod support;

mod install_support;

mod doctor;
mod doctor_amd;

mod install_chain;
mod install_chain_amd;
mod install_containerd;
mod install_containerd_merge;
mod install_conventions;
mod install_crio;
mod install_docker;
mod install_drift;
mod install_k3s;
mod install_podman;
mod install_transaction;
