//! What the webhook asks of an image: [`ImageJudge`] reads one image
//! (resolve its reference to a manifest digest, then read what it needs)
//! and says where it can run with a container's env over the image's.
//! Reads are kept by [`ImageKey`] (registry, repository, digest) in
//! [`crate::cache`] and run by [`crate::reads`].

use k8s_openapi::api::core::v1::NodeSelectorTerm;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where an image can run.
#[derive(Clone, Debug, PartialEq)]
pub enum Placement {
    /// Nodes satisfying one of these label terms (empty: any node).
    Terms {
        terms: Vec<NodeSelectorTerm>,
        /// One line for the `gpu-guard.io/needs` annotation.
        summary: String,
        /// Said to the user as warnings (how the image was read, what labels cannot express).
        notes: Vec<String>,
    },
    /// No GPU node could run it (no architecture has code for it, an
    /// impossible requirement): the diagnosis.
    Nowhere { diagnosis: String },
    /// Read, but where it runs cannot be written as node-label terms: the
    /// pod is treated as one whose image is unreadable (`on_unreadable`).
    Unplaceable { reason: String },
}

/// An image as read: one manifest of one repository. An attestation, and
/// so what was read, speaks for its own repository only, so two
/// repositories holding the same bytes are two keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageKey {
    pub registry: String,
    pub repository: String,
    /// The platform's image manifest digest.
    pub digest: String,
}

impl std::fmt::Display for ImageKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}@{}", self.registry, self.repository, self.digest)
    }
}

/// How one read may run: its deadline (in the background too) and a stop
/// that the reader polls and that interrupts its I/O.
#[derive(Clone)]
pub struct ReadCtl {
    pub deadline: Instant,
    stop: Arc<StopState>,
}

#[derive(Default)]
struct StopState {
    stopped: AtomicBool,
    hooks: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

impl crate::remote::Stop for StopState {
    fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

impl ReadCtl {
    pub fn new(deadline: Instant) -> ReadCtl {
        ReadCtl {
            deadline,
            stop: Arc::new(StopState::default()),
        }
    }

    pub fn stopped(&self) -> bool {
        self.stop.stopped.load(Ordering::SeqCst)
    }

    /// The stop as the registry reader polls it.
    pub fn as_stop(&self) -> Arc<dyn crate::remote::Stop> {
        self.stop.clone()
    }

    /// Runs `f` when the read is stopped (at once when it already is):
    /// the reader's way to interrupt a socket blocked on a stalled registry.
    pub fn on_stop(&self, f: impl FnOnce() + Send + 'static) {
        let mut hooks = self.stop.hooks.lock().unwrap_or_else(|p| p.into_inner());
        if self.stopped() {
            drop(hooks);
            f();
            return;
        }
        hooks.push(Box::new(f));
    }

    /// Stops the read: later reads fail, blocked ones are interrupted.
    pub fn stop(&self) {
        self.stop.stopped.store(true, Ordering::SeqCst);
        let hooks = std::mem::take(&mut *self.stop.hooks.lock().unwrap_or_else(|p| p.into_inner()));
        for h in hooks {
            h();
        }
    }
}

/// What the log line and metrics say about a read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadInfo {
    /// The attestation used, if one was.
    pub attestation: Option<String>,
    /// Lines about how it was read (attestations skipped), said to the user.
    pub notes: Vec<String>,
}

/// Reads images for the webhook. `resolve` and `read` run on the blocking
/// pool, must end by `ctl.deadline` and should stop soon after `ctl` is
/// stopped; `place` is CPU work on what was read.
pub trait ImageJudge: Send + Sync + 'static {
    /// What `resolve` found, handed to `read` when the key is not cached.
    type Resolved: Send + 'static;
    /// What a read found, kept by [`ImageKey`].
    type Read: Send + Sync + 'static;
    /// The image's key for `image` as the pod names it.
    fn resolve(&self, image: &str, ctl: &ReadCtl) -> Result<(ImageKey, Self::Resolved), String>;
    /// Reads what the image needs (its attestation first).
    fn read(&self, resolved: Self::Resolved, ctl: &ReadCtl) -> Result<Self::Read, String>;
    /// Where the image runs when started with `env` over its own.
    fn place(&self, read: &Self::Read, env: &[(String, String)]) -> Placement;
    /// For the log line and metrics.
    fn info(&self, read: &Self::Read) -> ReadInfo;
    /// Bytes a cached read holds, roughly (the cache's byte bound).
    fn weight(&self, _read: &Self::Read) -> u64 {
        1024
    }
}
