//! What the webhook asks of an image, and the cache in front of it.
//!
//! [`ImageJudge`] reads one image and says where it can run: node-label
//! terms, or nowhere with the diagnosis. [`Cache`] keeps each answer by
//! manifest digest, and each reference's digest for a while, so the
//! second pod of a Deployment costs no registry reads. Concurrent reviews
//! of the same image wait for one read (single flight).

use k8s_openapi::api::core::v1::NodeSelectorTerm;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// No GPU node could run it (no architecture has code for it, a CUDA
    /// newer than any driver): the diagnosis.
    Nowhere { diagnosis: String },
    /// Read, but where it runs cannot be written as node-label terms: the
    /// pod is treated as one whose image is unreadable (`on_unreadable`).
    Unplaceable { reason: String },
}

/// Reads images for the webhook. Both calls run on the blocking pool and
/// must return by `deadline` (an error then).
pub trait ImageJudge: Send + Sync + 'static {
    /// What `resolve` found, handed to `judge` when the digest is not cached.
    type Resolved: Send + 'static;
    /// The image's manifest digest (the platform's) for `image` as the pod names it.
    fn resolve(&self, image: &str, deadline: Instant) -> Result<(String, Self::Resolved), String>;
    /// Reads what the image needs (its attestation first) and places it.
    fn judge(&self, resolved: Self::Resolved, deadline: Instant) -> Result<Placement, String>;
}

struct TagEntry {
    digest: String,
    until: Instant,
}

/// Answers by digest (bounded, oldest dropped first) and digests by reference.
pub struct Cache {
    by_digest: Mutex<HashMap<String, (Arc<Placement>, u64)>>,
    by_ref: Mutex<HashMap<String, TagEntry>>,
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    max: usize,
    tag_ttl: Duration,
    clock: Mutex<u64>,
}

impl Cache {
    pub fn new(max: usize, tag_ttl: Duration) -> Cache {
        Cache {
            by_digest: Mutex::new(HashMap::new()),
            by_ref: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            max: max.max(1),
            tag_ttl,
            clock: Mutex::new(0),
        }
    }

    fn tick(&self) -> u64 {
        let mut c = self.clock.lock().unwrap_or_else(|p| p.into_inner());
        *c += 1;
        *c
    }

    /// The cached answer for a reference whose digest is still trusted.
    pub fn by_reference(&self, image: &str) -> Option<Arc<Placement>> {
        let digest = {
            let m = self.by_ref.lock().unwrap_or_else(|p| p.into_inner());
            let e = m.get(image)?;
            if e.until < Instant::now() {
                return None;
            }
            e.digest.clone()
        };
        self.by_digest(&digest)
    }

    pub fn by_digest(&self, digest: &str) -> Option<Arc<Placement>> {
        let now = self.tick();
        let mut m = self.by_digest.lock().unwrap_or_else(|p| p.into_inner());
        let e = m.get_mut(digest)?;
        e.1 = now;
        Some(e.0.clone())
    }

    pub fn remember_ref(&self, image: &str, digest: &str) {
        let mut m = self.by_ref.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= self.max * 4 {
            let now = Instant::now();
            m.retain(|_, e| e.until >= now);
            if m.len() >= self.max * 4 {
                m.clear();
            }
        }
        m.insert(
            image.to_string(),
            TagEntry {
                digest: digest.to_string(),
                until: Instant::now() + self.tag_ttl,
            },
        );
    }

    pub fn insert(&self, digest: &str, p: Arc<Placement>) {
        let now = self.tick();
        let mut m = self.by_digest.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= self.max && !m.contains_key(digest) {
            if let Some(oldest) = m.iter().min_by_key(|(_, v)| v.1).map(|(k, _)| k.clone()) {
                m.remove(&oldest);
            }
        }
        m.insert(digest.to_string(), (p, now));
    }

    /// The lock that makes concurrent reads of one key wait for the first.
    pub fn flight(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() > 4096 {
            m.retain(|_, v| Arc::strong_count(v) > 1);
        }
        m.entry(key.to_string()).or_default().clone()
    }

    pub fn len(&self) -> usize {
        self.by_digest.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One image's answer: from the cache, or read now (within `deadline`).
pub async fn place<J: ImageJudge>(
    judge: &Arc<J>,
    cache: &Arc<Cache>,
    image: &str,
    deadline: Instant,
) -> Result<Arc<Placement>, String> {
    if let Some(p) = cache.by_reference(image) {
        return Ok(p);
    }
    let flight = cache.flight(image);
    let left = deadline.saturating_duration_since(Instant::now());
    let _guard = tokio::time::timeout(left, flight.lock())
        .await
        .map_err(|_| "the deadline passed while another review read this image".to_string())?;
    if let Some(p) = cache.by_reference(image) {
        return Ok(p);
    }
    let (j, c, img) = (judge.clone(), cache.clone(), image.to_string());
    let work = tokio::task::spawn_blocking(move || -> Result<Arc<Placement>, String> {
        let (digest, resolved) = j.resolve(&img, deadline)?;
        c.remember_ref(&img, &digest);
        if let Some(p) = c.by_digest(&digest) {
            return Ok(p);
        }
        let p = Arc::new(j.judge(resolved, deadline)?);
        c.insert(&digest, p.clone());
        Ok(p)
    });
    // The blocking read checks the deadline itself; this bounds the wait
    // should it not (its result is then dropped).
    match tokio::time::timeout(left + Duration::from_millis(200), work).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("the image read failed: {e}")),
        Err(_) => Err(format!(
            "reading the image took longer than the {} ms deadline",
            left.as_millis()
        )),
    }
}
