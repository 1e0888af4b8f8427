//! gpu-guard's network side, in its own binary (`gpu-guard-admission`) so
//! that the container-start path (`gpu-guard` as hook and runtime wrapper)
//! never links an HTTP or TLS stack: the Kubernetes admission webhook
//! (`gpu-guard admission`) and the registry reads of `check --image docker://...`.

pub mod affinity;
pub mod cache;
pub mod certs;
pub mod check;
pub mod daemon_source;
pub mod judge;
pub mod metrics;
pub mod needs;
pub mod placement;
pub mod pod;
pub mod podenv;
pub mod reads;
pub mod remote;
pub mod review;
pub mod reviewlog;
pub mod server;
pub mod webhook;
