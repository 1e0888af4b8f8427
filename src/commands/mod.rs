//! The entry points: clap definitions ([`cli`]) and one function per
//! subcommand. Only this layer and `main` know clap; everything below takes
//! plain values.

pub mod check;
pub mod cli;
pub mod doctor;
pub mod fleet_report;
pub mod hook;
pub mod host;
pub mod image_check;
pub mod install;
pub mod man_page;
pub mod network;
pub mod output;
pub mod process_start;
pub mod runtime;
pub mod scan;
pub mod scan_libraries;
