//! gpu-guard's node agent: the DaemonSet's main container.
//!
//! - reconcile.rs: keeps the node's engine running gpu-guard. It watches
//!   the engine's configuration and gpu-guard's drop-ins (watch.rs) and,
//!   when install would change anything (the effective configuration no
//!   longer runs gpu-guard, or a file install builds on changed, such as
//!   NVIDIA's drop-in), re-applies the install, so the copy of NVIDIA's
//!   runtimes in gpu-guard's drop-in is always the current one; it
//!   restarts the engine only as `--restart-mode` allows.
//! - labels.rs: writes `gpu-guard host --node-labels` (run in the host's
//!   root) into node-feature-discovery's `features.d`, again whenever the
//!   driver or the GPUs change.
//! - kube.rs: at SIGTERM, tells a DaemonSet deletion (uninstall, as
//!   NVIDIA's toolkit container cleans up) from a rolling upgrade, an
//!   eviction or a node shutdown (keep everything).
//! - report.rs: the log, the status file the readiness probe reads, and
//!   the metrics (node_exporter textfile).

pub mod kube;
pub mod labels;
pub mod reconcile;
pub mod report;
pub mod run;
pub mod watch;
