//! gpu-guard: keeps GPU containers from starting on hosts where they cannot
//! work, and starts the rest tuned and locked down.
//!
//! One pure core ([`decide`]) and thin adapters around it: the `check` CLI,
//! the OCI hooks and the runtime wrapper. See ../shared/design.md.

pub mod capability;
pub mod check;
pub mod cli;
pub mod config;
pub mod container;
pub mod cuda_tables;
pub mod decide;
pub mod decision;
pub mod detect;
pub mod diagnosis;
pub mod fsutil;
pub mod hook;
pub mod host;
pub mod install;
pub mod logging;
pub mod pipeline;
pub mod probe;
pub mod report;
pub mod requirement;
pub mod runtime;
pub mod sanitize;
pub mod scan;
pub mod security;
pub mod spec_file;
pub mod tuning;
pub mod version;
