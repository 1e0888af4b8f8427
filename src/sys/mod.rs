//! Small system helpers shared by the I/O layers: bounded reads and atomic
//! writes, logging (syslog and the runtime log) and time.

pub mod fsutil;
pub mod logging;
