//! Small system helpers shared by the I/O layers: bounded reads and atomic
//! writes, reading policy files, logging (syslog and the runtime log),
//! time and a fast hash for trusted data.
//!
//! This layer depends on nothing above it: only `core` (the types it logs)
//! and itself.

pub mod fsutil;
pub mod limits;
pub mod logging;
pub mod metrics;
pub mod policy_file;
#[cfg(test)]
pub(crate) mod test_dirs;
pub mod time;
pub mod word_hash;
