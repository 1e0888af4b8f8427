//! The webhook's memory of images, bounded in entries, bytes and time:
//! - what a read found, by [`ImageKey`] (registry, repository, digest:
//!   never by digest alone, so a copy of an image in another repository,
//!   with an attestation of its own, speaks only for itself), for
//!   `cache_ttl_s`;
//! - a reference's key (`tag_cache_s` for a tag, `cache_ttl_s` for a digest);
//! - each placement, by key and the container env it was judged with;
//! - an image that could not be read, by reference, for `unreadable_cache_s`
//!   (the next reviews answer at once instead of reading again).

use crate::judge::{ImageKey, Placement};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Entry<V> {
    value: V,
    used: u64,
    until: Instant,
    weight: u64,
}

/// Least recently used first out, past `max_entries` or `max_weight`;
/// entries expire at their own time.
pub struct Lru<V> {
    map: HashMap<String, Entry<V>>,
    clock: u64,
    weight: u64,
    max_entries: usize,
    max_weight: u64,
}

impl<V: Clone> Lru<V> {
    pub fn new(max_entries: usize, max_weight: u64) -> Lru<V> {
        Lru {
            map: HashMap::new(),
            clock: 0,
            weight: 0,
            max_entries: max_entries.max(1),
            max_weight: max_weight.max(1),
        }
    }

    pub fn get(&mut self, k: &str) -> Option<V> {
        let now = Instant::now();
        match self.map.get_mut(k) {
            Some(e) if e.until > now => {
                self.clock += 1;
                e.used = self.clock;
                Some(e.value.clone())
            }
            Some(_) => {
                self.remove(k);
                None
            }
            None => None,
        }
    }

    fn remove(&mut self, k: &str) {
        if let Some(e) = self.map.remove(k) {
            self.weight -= e.weight;
        }
    }

    /// Keeps `v` for `ttl`; a value heavier than the whole bound is not kept.
    pub fn insert(&mut self, k: &str, v: V, ttl: Duration, weight: u64) {
        self.remove(k);
        if weight > self.max_weight || ttl.is_zero() {
            return;
        }
        while !self.map.is_empty()
            && (self.map.len() >= self.max_entries || self.weight + weight > self.max_weight)
        {
            self.evict();
        }
        self.clock += 1;
        self.weight += weight;
        self.map.insert(
            k.to_string(),
            Entry {
                value: v,
                used: self.clock,
                until: Instant::now() + ttl,
                weight,
            },
        );
    }

    /// Drops what expired, else the least recently used entry.
    fn evict(&mut self) {
        let now = Instant::now();
        let before = self.map.len();
        let mut freed = 0;
        self.map.retain(|_, e| {
            let keep = e.until > now;
            if !keep {
                freed += e.weight;
            }
            keep
        });
        self.weight -= freed;
        if self.map.len() < before {
            return;
        }
        if let Some(k) = self
            .map
            .iter()
            .min_by_key(|(_, e)| e.used)
            .map(|(k, _)| k.clone())
        {
            self.remove(&k);
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The lifetimes and bounds of [`Cache`].
#[derive(Clone, Debug)]
pub struct CacheSettings {
    pub entries: usize,
    pub bytes: u64,
    pub ttl: Duration,
    pub tag_ttl: Duration,
    pub unreadable_ttl: Duration,
}

impl CacheSettings {
    pub fn from_config(a: &gpu_guard::core::admission::AdmissionConfig) -> CacheSettings {
        CacheSettings {
            entries: a.cache_entries,
            bytes: a.cache_bytes,
            ttl: Duration::from_secs(a.cache_ttl_s),
            tag_ttl: Duration::from_secs(a.tag_cache_s),
            unreadable_ttl: Duration::from_secs(a.unreadable_cache_s),
        }
    }
}

pub struct Cache<R> {
    settings: CacheSettings,
    refs: Mutex<Lru<ImageKey>>,
    reads: Mutex<Lru<Arc<R>>>,
    placements: Mutex<Lru<Arc<Placement>>>,
    unreadable: Mutex<Lru<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<R> Cache<R> {
    pub fn new(settings: CacheSettings) -> Cache<R> {
        let n = settings.entries.max(1);
        Cache {
            refs: Mutex::new(Lru::new(n * 4, u64::MAX)),
            reads: Mutex::new(Lru::new(n, settings.bytes)),
            placements: Mutex::new(Lru::new(n * 4, u64::MAX)),
            unreadable: Mutex::new(Lru::new(n, u64::MAX)),
            settings,
        }
    }

    /// The read of `image` as the pod names it, while its key is trusted.
    pub fn by_reference(&self, image: &str) -> Option<(ImageKey, Arc<R>)> {
        let key = lock(&self.refs).get(image)?;
        let r = self.by_key(&key)?;
        Some((key, r))
    }

    pub fn by_key(&self, key: &ImageKey) -> Option<Arc<R>> {
        lock(&self.reads).get(&key.to_string())
    }

    /// Remembers a read, and `image`'s key.
    pub fn insert(&self, image: &str, key: &ImageKey, read: Arc<R>, weight: u64) {
        lock(&self.reads).insert(&key.to_string(), read, self.settings.ttl, weight);
        self.remember_ref(image, key);
    }

    pub fn remember_ref(&self, image: &str, key: &ImageKey) {
        // A reference by digest names the same bytes for ever.
        let ttl = if image.contains("@sha256:") {
            self.settings.ttl
        } else {
            self.settings.tag_ttl
        };
        lock(&self.refs).insert(image, key.clone(), ttl, 1);
        lock(&self.unreadable).remove(image);
    }

    pub fn unreadable(&self, image: &str) -> Option<String> {
        lock(&self.unreadable).get(image)
    }

    pub fn remember_unreadable(&self, image: &str, why: &str) {
        lock(&self.unreadable).insert(image, why.to_string(), self.settings.unreadable_ttl, 1);
    }

    pub fn placement(&self, key: &ImageKey, env_id: &str) -> Option<Arc<Placement>> {
        lock(&self.placements).get(&format!("{key}\n{env_id}"))
    }

    pub fn remember_placement(&self, key: &ImageKey, env_id: &str, p: Arc<Placement>) {
        lock(&self.placements).insert(&format!("{key}\n{env_id}"), p, self.settings.ttl, 1);
    }

    /// Reads kept (the `/metrics` gauge).
    pub fn len(&self) -> usize {
        lock(&self.reads).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_by_entries_weight_and_time() {
        let mut l: Lru<u32> = Lru::new(2, 10);
        l.insert("a", 1, Duration::from_secs(60), 4);
        l.insert("b", 2, Duration::from_secs(60), 4);
        assert_eq!(l.get("a"), Some(1));
        l.insert("c", 3, Duration::from_secs(60), 4);
        // b was least recently used.
        assert_eq!(
            (l.get("a"), l.get("b"), l.get("c")),
            (Some(1), None, Some(3))
        );
        // Weight: 4 + 4 + 8 > 10.
        l.insert("d", 4, Duration::from_secs(60), 8);
        assert_eq!(l.len(), 1);
        assert_eq!(l.get("d"), Some(4));
        // Too heavy alone: not kept.
        l.insert("e", 5, Duration::from_secs(60), 11);
        assert_eq!(l.get("e"), None);
        l.insert("f", 6, Duration::from_millis(1), 1);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(l.get("f"), None);
    }

    #[test]
    fn keyed_by_repository_not_digest_alone() {
        let c: Cache<u32> = Cache::new(CacheSettings {
            entries: 8,
            bytes: 1 << 20,
            ttl: Duration::from_secs(60),
            tag_ttl: Duration::from_secs(60),
            unreadable_ttl: Duration::from_secs(60),
        });
        let k = |repo: &str| ImageKey {
            registry: "r".into(),
            repository: repo.into(),
            digest: "sha256:aa".into(),
        };
        c.insert("r/evil:1", &k("evil"), Arc::new(1), 1);
        assert!(c.by_key(&k("good")).is_none());
        assert!(c.by_reference("r/good:1").is_none());
        assert_eq!(*c.by_reference("r/evil:1").unwrap().1, 1);
    }
}
