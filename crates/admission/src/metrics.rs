//! The webhook's counters, served at `GET /metrics` in Prometheus' text
//! exposition format (version 0.0.4: `# HELP`, `# TYPE`, one sample per
//! line; histograms as cumulative `_bucket{le=...}`, `_sum`, `_count`).
//! Names follow Prometheus' conventions: one prefix, base units
//! (seconds), `_total` for counters, labels of a few fixed values only
//! (never a pod, image or namespace: those go to the log line).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a review ended as (the `result` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewResult {
    /// Allowed with gpu-guard's node affinity.
    Patched,
    /// Allowed unchanged: no GPU container, or not a pod created.
    Unchanged,
    /// Denied: no node can run it.
    Denied,
    /// An image could not be read (or placed): allowed without affinity.
    UnreadableAllowed,
    /// An image could not be read: denied (`on_unreadable = "deny"`).
    UnreadableDenied,
    /// The body was not an AdmissionReview (HTTP 400), or too large (413),
    /// or the server was too busy to read it (503).
    Invalid,
}

const RESULTS: [(ReviewResult, &str); 6] = [
    (ReviewResult::Patched, "patched"),
    (ReviewResult::Unchanged, "unchanged"),
    (ReviewResult::Denied, "denied"),
    (ReviewResult::UnreadableAllowed, "unreadable_allowed"),
    (ReviewResult::UnreadableDenied, "unreadable_denied"),
    (ReviewResult::Invalid, "invalid"),
];

impl ReviewResult {
    pub fn label(self) -> &'static str {
        RESULTS
            .iter()
            .find(|(r, _)| *r == self)
            .map(|(_, l)| *l)
            .unwrap_or("invalid")
    }

    fn index(self) -> usize {
        RESULTS.iter().position(|(r, _)| *r == self).unwrap_or(5)
    }
}

/// A bound that stopped work (the `budget` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// A review answered before its image was read.
    Deadline,
    /// A read queued for a slot until its review's deadline.
    ReadPool,
    /// A review naming more uncached images than it may read.
    ReviewReads,
    /// A read stopped when its review was answered: no background slot.
    Background,
    /// A background read that passed its own deadline.
    BackgroundDeadline,
    /// A request body that did not arrive in time, or no memory for it.
    Body,
    /// The connection limit was reached (new connections wait).
    Connections,
}

const BUDGETS: [(Budget, &str); 7] = [
    (Budget::Deadline, "deadline"),
    (Budget::ReadPool, "read_pool"),
    (Budget::ReviewReads, "review_reads"),
    (Budget::Background, "background"),
    (Budget::BackgroundDeadline, "background_deadline"),
    (Budget::Body, "body"),
    (Budget::Connections, "connections"),
];

/// Upper bounds of the histogram buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
];

#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (b, le) in self.buckets.iter().zip(BUCKETS) {
            if s <= le {
                b.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, le) in self.buckets.iter().zip(BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {}", get(b));
        }
        let count = get(&self.count);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = get(&self.sum_micros) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

#[derive(Default)]
pub struct Metrics {
    reviews: [AtomicU64; RESULTS.len()],
    pub review_seconds: Histogram,
    pub image_read_seconds: Histogram,
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub unreadable_cache_hits: AtomicU64,
    budgets: [AtomicU64; BUDGETS.len()],
    pub attestations_used: AtomicU64,
    pub background_reads: AtomicU64,
    pub reads_in_flight: AtomicU64,
    pub tls_reloads: AtomicU64,
    pub tls_reload_errors: AtomicU64,
}

impl Metrics {
    pub fn review(&self, r: ReviewResult, took: Duration) {
        self.reviews[r.index()].fetch_add(1, Ordering::Relaxed);
        if r != ReviewResult::Invalid {
            self.review_seconds.observe(took);
        }
    }

    pub fn budget(&self, b: Budget) {
        if let Some(i) = BUDGETS.iter().position(|(x, _)| *x == b) {
            self.budgets[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn inc(a: &AtomicU64) {
        a.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dec(a: &AtomicU64) {
        let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
    }

    /// The exposition, with the image results kept (`cached`).
    pub fn render(&self, cached: usize) -> String {
        let mut o = String::with_capacity(4096);
        let p = "gpu_guard_admission";
        let _ = writeln!(o, "# HELP {p}_reviews_total Pod reviews answered, by result.\n# TYPE {p}_reviews_total counter");
        for (i, (_, l)) in RESULTS.iter().enumerate() {
            let _ = writeln!(
                o,
                "{p}_reviews_total{{result=\"{l}\"}} {}",
                get(&self.reviews[i])
            );
        }
        self.review_seconds.render(
            &mut o,
            &format!("{p}_review_seconds"),
            "Time to answer a pod review.",
        );
        self.image_read_seconds.render(
            &mut o,
            &format!("{p}_image_read_seconds"),
            "Time one image read took (resolve, attestation, layers), finished or not.",
        );
        let counters = [
            ("cache_hits_total", "Images answered from the cache.", get(&self.cache_hits)),
            ("cache_misses_total", "Images not in the cache (read, or joined a read in progress).", get(&self.cache_misses)),
            ("unreadable_cache_hits_total", "Images answered as unreadable from the cache.", get(&self.unreadable_cache_hits)),
            ("attestations_used_total", "Image reads answered by an attestation (no layer read).", get(&self.attestations_used)),
            ("background_reads_total", "Reads that went on after their review was answered.", get(&self.background_reads)),
            ("tls_reloads_total", "Serving certificates loaded again after their files changed.", get(&self.tls_reloads)),
            ("tls_reload_errors_total", "Changed certificate files that could not be loaded (the previous certificate is kept).", get(&self.tls_reload_errors)),
        ];
        for (n, h, v) in counters {
            let _ = writeln!(o, "# HELP {p}_{n} {h}\n# TYPE {p}_{n} counter\n{p}_{n} {v}");
        }
        let _ = writeln!(o, "# HELP {p}_budget_exhausted_total Work stopped by a bound, by bound.\n# TYPE {p}_budget_exhausted_total counter");
        for (i, (_, l)) in BUDGETS.iter().enumerate() {
            let _ = writeln!(
                o,
                "{p}_budget_exhausted_total{{budget=\"{l}\"}} {}",
                get(&self.budgets[i])
            );
        }
        let gauges = [
            (
                "reads_in_flight",
                "Image reads running now (in the background included).",
                get(&self.reads_in_flight),
            ),
            ("cached_images", "Image results kept.", cached as u64),
        ];
        for (n, h, v) in gauges {
            let _ = writeln!(o, "# HELP {p}_{n} {h}\n# TYPE {p}_{n} gauge\n{p}_{n} {v}");
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition() {
        let m = Metrics::default();
        m.review(ReviewResult::Patched, Duration::from_millis(3));
        m.review(ReviewResult::Denied, Duration::from_secs(2));
        m.budget(Budget::ReadPool);
        let t = m.render(7);
        assert!(
            t.contains("gpu_guard_admission_reviews_total{result=\"patched\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("gpu_guard_admission_review_seconds_bucket{le=\"0.005\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("gpu_guard_admission_review_seconds_bucket{le=\"+Inf\"} 2\n"),
            "{t}"
        );
        assert!(
            t.contains("gpu_guard_admission_review_seconds_count 2\n"),
            "{t}"
        );
        assert!(t.contains("gpu_guard_admission_budget_exhausted_total{budget=\"read_pool\"} 1\n"));
        assert!(t.contains("gpu_guard_admission_cached_images 7\n"));
        // Every sample line is `name{labels} value` or `name value`.
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let (name, v) = l.rsplit_once(' ').unwrap();
            assert!(name.starts_with("gpu_guard_admission_"), "{l}");
            assert!(v.parse::<f64>().is_ok(), "{l}");
        }
    }
}
