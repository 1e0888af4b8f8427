//! gpu-guard: keeps GPU containers from starting on hosts where they cannot
//! work, and starts the rest tuned and locked down.
//!
//! The layout is the architecture (docs/design.md).
//! Dependencies point one way, from the entry points down to the core;
//! `tests/module_graph.rs` fails on any cycle between these modules.
//!
//! - [`core`]: the pure decision: requirement language, versions, detection,
//!   decide, diagnosis, tuning, security policy, capabilities, CUDA tables.
//!   No I/O, no clap, imports nothing outside itself.
//! - [`oci`]: the container view built from a spec, spec patching, the hook
//!   state and the runtime's argv.
//! - [`host`]: the NVML probe, the /proc fallback and the facts cache,
//!   behind [`core::facts::HostSource`].
//! - [`scan`]: the ELF/fatbin readers and the rootfs walker.
//! - [`pipeline`]: the one way from what an entry point knows (container,
//!   host choice, scans) to a decision; the only builder of the core's
//!   inputs outside the core.
//! - [`fleet`]: one container judged on many hosts (facts files, Kubernetes
//!   node labels), gpu-guard's node labels and node affinity.
//! - [`install`]: engine registration.
//! - [`config`]: finds, reads and validates config.toml into a
//!   [`core::policy::Config`].
//! - [`commands`]: the clap definitions and one function per subcommand;
//!   only this layer and `main` know clap.
//! - [`sys`]: filesystem helpers, logging and time.

pub mod commands;
pub mod config;
pub mod core;
pub mod fleet;
pub mod host;
pub mod image;
pub mod install;
pub mod oci;
pub mod pipeline;
pub mod scan;
pub mod sys;
