//! Image reads for the webhook, bounded so that no review, image or
//! registry can hold up another review:
//! - at most `max_reads` reads at once, all reviews together (a fair FIFO
//!   queue); a read still queued when the last review waiting for it is
//!   answered is dropped, never run late;
//! - at most `max_reads_per_review` reads started by one review (a pod
//!   naming thousands of uncached images reads that many; the rest are
//!   unreadable at once);
//! - one read per image reference at a time: a review that finds the image
//!   being read waits for that read, until its own deadline, never longer
//!   (each review's deadline is its own, computed when it arrived);
//! - when no review waits any longer, the read goes on in the background
//!   (at most `background_reads`, each until `background_read_s`) and its
//!   result is cached for the next pod of the image; with no background
//!   slot it is stopped: its sockets are shut down (`ReadCtl::stop`).
//!
//! An image that could not be read is remembered for `unreadable_cache_s`.

use crate::cache::Cache;
use crate::judge::{ImageJudge, ImageKey, ReadCtl};
use crate::metrics::{Budget, Metrics};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// The bounds of [`Reads`].
#[derive(Clone, Debug)]
pub struct ReadSettings {
    pub max_reads: usize,
    pub per_review: usize,
    pub background: usize,
    /// The most one read may take, in the background included.
    pub background_for: Duration,
}

impl ReadSettings {
    pub fn from_config(a: &gpu_guard::core::admission::AdmissionConfig) -> ReadSettings {
        ReadSettings {
            max_reads: a.max_reads.max(1),
            per_review: a.max_reads_per_review.max(1),
            background: a.background_reads,
            background_for: Duration::from_secs(a.background_read_s),
        }
    }
}

/// A finished read: the image's key and what was read, or why not.
type Outcome<R> = Result<(ImageKey, Arc<R>), String>;
/// The read slot (foreground, then background) a blocking read holds.
type Slot = Arc<Mutex<Option<OwnedSemaphorePermit>>>;
/// A blocking read in progress.
type Work<R> = tokio::task::JoinHandle<Outcome<R>>;

struct Flight<R> {
    tx: watch::Sender<Option<Outcome<R>>>,
    /// The latest deadline of the reviews waiting for this read.
    until: Mutex<Instant>,
}

impl<R> Flight<R> {
    fn until(&self) -> Instant {
        *self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn extend(&self, deadline: Instant) {
        let mut u = self.until.lock().unwrap_or_else(|p| p.into_inner());
        *u = (*u).max(deadline);
    }
}

/// The reads one review may still start.
pub struct ReviewBudget(AtomicUsize);

impl ReviewBudget {
    pub fn new(n: usize) -> ReviewBudget {
        ReviewBudget(AtomicUsize::new(n))
    }

    fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
            .is_ok()
    }
}

/// What a review got for one image.
pub enum Got<R> {
    /// From the cache.
    Cached(ImageKey, Arc<R>),
    /// Read now (or by another review's read, waited for).
    Read(ImageKey, Arc<R>),
    /// Not read: why.
    Failed(String),
}

pub struct Reads<J: ImageJudge> {
    judge: Arc<J>,
    pub cache: Arc<Cache<J::Read>>,
    fg: Arc<Semaphore>,
    bg: Arc<Semaphore>,
    flights: Mutex<HashMap<String, Arc<Flight<J::Read>>>>,
    pub settings: ReadSettings,
    metrics: Arc<Metrics>,
}

fn at(i: Instant) -> tokio::time::Instant {
    tokio::time::Instant::from_std(i)
}

/// Runs in the blocking pool: the key, then the cache or a read.
fn read_blocking<J: ImageJudge>(
    j: &J,
    cache: &Cache<J::Read>,
    image: &str,
    ctl: &ReadCtl,
) -> Outcome<J::Read> {
    let (key, resolved) = j.resolve(image, ctl)?;
    if let Some(r) = cache.by_key(&key) {
        cache.remember_ref(image, &key);
        return Ok((key, r));
    }
    let r = Arc::new(j.read(resolved, ctl)?);
    cache.insert(image, &key, r.clone(), j.weight(&r));
    Ok((key, r))
}

impl<J: ImageJudge> Reads<J> {
    pub fn new(
        judge: Arc<J>,
        cache: Arc<Cache<J::Read>>,
        settings: ReadSettings,
        metrics: Arc<Metrics>,
    ) -> Reads<J> {
        Reads {
            judge,
            cache,
            fg: Arc::new(Semaphore::new(settings.max_reads.max(1))),
            bg: Arc::new(Semaphore::new(settings.background)),
            flights: Mutex::new(HashMap::new()),
            settings,
            metrics,
        }
    }

    pub fn judge(&self) -> &Arc<J> {
        &self.judge
    }

    /// `image` (as the pod names it) for a review that ends at `deadline`.
    pub async fn get(
        self: &Arc<Self>,
        image: &str,
        deadline: Instant,
        budget: &ReviewBudget,
    ) -> Got<J::Read> {
        if let Some((k, r)) = self.cache.by_reference(image) {
            Metrics::inc(&self.metrics.cache_hits);
            return Got::Cached(k, r);
        }
        if let Some(why) = self.cache.unreadable(image) {
            Metrics::inc(&self.metrics.unreadable_cache_hits);
            return Got::Failed(format!("{why} (not read again for a while)"));
        }
        Metrics::inc(&self.metrics.cache_misses);
        let mut rx = {
            let mut m = self.flights.lock().unwrap_or_else(|p| p.into_inner());
            match m.get(image) {
                Some(f) => {
                    f.extend(deadline);
                    f.tx.subscribe()
                }
                None => {
                    if !budget.take() {
                        self.metrics.budget(Budget::ReviewReads);
                        return Got::Failed(format!(
                            "not read: the pod names more than {} images not yet cached",
                            self.settings.per_review
                        ));
                    }
                    let (tx, rx) = watch::channel(None);
                    let f = Arc::new(Flight {
                        tx,
                        until: Mutex::new(deadline),
                    });
                    m.insert(image.to_string(), f.clone());
                    tokio::spawn(self.clone().drive(image.to_string(), f));
                    rx
                }
            }
        };
        let waited = tokio::time::timeout_at(at(deadline), rx.wait_for(|v| v.is_some())).await;
        match waited {
            Ok(Ok(v)) => match v.clone() {
                Some(Ok((k, r))) => Got::Read(k, r),
                Some(Err(e)) => Got::Failed(e),
                None => Got::Failed("the read ended without an answer".to_string()),
            },
            Ok(Err(_)) => Got::Failed("the read ended without an answer".to_string()),
            Err(_) => {
                self.metrics.budget(Budget::Deadline);
                Got::Failed("not read before the review's deadline (read_timeout_ms)".to_string())
            }
        }
    }

    /// Runs one read, then tells its reviews and forgets the flight.
    async fn drive(self: Arc<Self>, image: String, flight: Arc<Flight<J::Read>>) {
        let (outcome, remember) = self.run(&image, &flight).await;
        if let (Err(e), true) = (&outcome, remember) {
            self.cache.remember_unreadable(&image, e);
        }
        self.flights
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&image);
        flight.tx.send_replace(Some(outcome));
    }

    /// The read, in a slot, for as long as a review waits, then in the
    /// background or stopped. The flag: whether a failure is remembered.
    async fn run(&self, image: &str, flight: &Flight<J::Read>) -> (Outcome<J::Read>, bool) {
        let permit = match tokio::time::timeout_at(
            at(flight.until()),
            self.fg.clone().acquire_owned(),
        )
        .await
        {
            Ok(Ok(p)) => p,
            _ => {
                self.metrics.budget(Budget::ReadPool);
                let msg = format!(
                    "not read: all {} image read slots stayed busy until the review's deadline",
                    self.settings.max_reads
                );
                return (Err(msg), false);
            }
        };
        let started = Instant::now();
        let background = if self.settings.background > 0 {
            self.settings.background_for
        } else {
            Duration::ZERO
        };
        let ctl = ReadCtl::new(flight.until().max(started + background));
        // The slot goes with the blocking read and is freed when it ends.
        let hold: Slot = Arc::new(Mutex::new(Some(permit)));
        let mut work = self.spawn(image, &ctl, &hold);
        loop {
            let until = flight.until();
            match tokio::time::timeout_at(at(until), &mut work).await {
                Ok(r) => return self.joined(r, started),
                Err(_) if flight.until() > until => continue,
                Err(_) => break,
            }
        }
        // Every review waiting for it has been answered.
        self.go_on_or_stop(work, &ctl, &hold, started).await
    }

    /// The blocking read, holding its slot until it ends.
    fn spawn(&self, image: &str, ctl: &ReadCtl, hold: &Slot) -> Work<J::Read> {
        let (j, c, img, ctl, hold) = (
            self.judge.clone(),
            self.cache.clone(),
            image.to_string(),
            ctl.clone(),
            hold.clone(),
        );
        Metrics::inc(&self.metrics.reads_in_flight);
        let metrics = self.metrics.clone();
        tokio::task::spawn_blocking(move || {
            let r = read_blocking(&*j, &c, &img, &ctl);
            Metrics::dec(&metrics.reads_in_flight);
            drop(hold);
            r
        })
    }

    fn joined(
        &self,
        r: Result<Outcome<J::Read>, tokio::task::JoinError>,
        started: Instant,
    ) -> (Outcome<J::Read>, bool) {
        self.metrics.image_read_seconds.observe(started.elapsed());
        match r {
            Ok(o) => (o, true),
            Err(e) => (Err(format!("the image read failed: {e}")), true),
        }
    }

    /// In the background when a slot is free (the foreground slot is then
    /// freed for other reviews), else stopped.
    async fn go_on_or_stop(
        &self,
        mut work: Work<J::Read>,
        ctl: &ReadCtl,
        hold: &Slot,
        started: Instant,
    ) -> (Outcome<J::Read>, bool) {
        let Ok(bp) = self.bg.clone().try_acquire_owned() else {
            ctl.stop();
            self.metrics.budget(Budget::Background);
            self.metrics.image_read_seconds.observe(started.elapsed());
            let msg = "not read before the review's deadline, and no background read slot was free";
            return (Err(msg.to_string()), true);
        };
        Metrics::inc(&self.metrics.background_reads);
        *hold.lock().unwrap_or_else(|p| p.into_inner()) = Some(bp);
        let grace = ctl.deadline + Duration::from_secs(2);
        match tokio::time::timeout_at(at(grace), &mut work).await {
            Ok(r) => self.joined(r, started),
            Err(_) => {
                ctl.stop();
                self.metrics.budget(Budget::BackgroundDeadline);
                let s = self.settings.background_for.as_secs();
                (Err(format!("the read took longer than {s} s")), true)
            }
        }
    }
}
