//! The budget of the model's own work in one libraries scan: what the
//! reads ([`super::content`]) do not count. The ld.so.conf includes, the
//! ldconfig directories, each judged program's loading and the resolution
//! trees all spend from it, so a hostile tree (an include of itself, a glob
//! through symlinks to `/`, a `DT_NEEDED` chain thousands deep) stops at
//! the scan's `time_budget_ms` and at fixed bounds of work, and the scan
//! says it is incomplete rather than run on. The first reason to stop is
//! kept; every step after it sees the budget spent.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

/// Steps of work (a path looked up, an object loaded, a directory entry
/// matched) one scan may take. A real image's scan takes tens of
/// thousands; the time budget is the bound that normally ends a hostile one.
pub const MAX_STEPS: u64 = 50_000_000;
/// How many steps between two looks at the clock.
const CLOCK_EVERY: u64 = 256;

/// Time and work left for one scan.
#[derive(Debug)]
pub struct Budget {
    deadline: Instant,
    time_budget_ms: u64,
    steps_left: Cell<u64>,
    until_clock: Cell<u64>,
    stopped: RefCell<Option<String>>,
}

impl Budget {
    /// A budget ending at `deadline` (`time_budget_ms` names it in the
    /// reason) with [`MAX_STEPS`] steps.
    pub fn new(deadline: Instant, time_budget_ms: u64) -> Budget {
        Budget::with_steps(deadline, time_budget_ms, MAX_STEPS)
    }

    pub fn with_steps(deadline: Instant, time_budget_ms: u64, steps: u64) -> Budget {
        Budget {
            deadline,
            time_budget_ms,
            steps_left: Cell::new(steps),
            until_clock: Cell::new(0),
            stopped: RefCell::new(None),
        }
    }

    /// A budget of `ms` milliseconds from now.
    pub fn from_now(ms: u64) -> Budget {
        Budget::new(Instant::now() + Duration::from_millis(ms), ms)
    }

    /// Generous bounds for tools (`scan --libraries` traces): a minute.
    pub fn generous() -> Budget {
        Budget::from_now(60_000)
    }

    /// Takes `n` steps; false once the time or the steps are spent (and
    /// from then on).
    pub fn spend(&self, n: u64) -> bool {
        if self.stopped.borrow().is_some() {
            return false;
        }
        let left = self.steps_left.get();
        if left < n {
            self.stop(format!(
                "the model's work bound ({MAX_STEPS} steps) was reached"
            ));
            return false;
        }
        self.steps_left.set(left - n);
        let until = self.until_clock.get();
        if until > n {
            self.until_clock.set(until - n);
            return true;
        }
        self.until_clock.set(CLOCK_EVERY);
        if Instant::now() >= self.deadline {
            self.stop(format!(
                "the time budget of {} ms (libraries.time_budget_ms) ran out",
                self.time_budget_ms
            ));
            return false;
        }
        true
    }

    /// True while time and steps are left (a look at the clock).
    pub fn ok(&self) -> bool {
        self.until_clock.set(0);
        self.spend(0)
    }

    /// Stops the scan with `why`, unless it stopped already.
    pub fn stop(&self, why: String) {
        let mut s = self.stopped.borrow_mut();
        if s.is_none() {
            *s = Some(why);
        }
    }

    /// Why the scan stopped early, if it did.
    pub fn stopped(&self) -> Option<String> {
        self.stopped.borrow().clone()
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_time_stop_for_good() {
        let b = Budget::with_steps(Instant::now() + Duration::from_secs(60), 1, 10);
        assert!(b.spend(4) && b.spend(6));
        assert!(!b.spend(1));
        assert!(b.stopped().unwrap().contains("work bound"));
        assert!(!b.spend(0));
        let late = Budget::new(Instant::now(), 5);
        assert!(!late.ok());
        assert!(
            late.stopped().unwrap().contains("5 ms"),
            "{:?}",
            late.stopped()
        );
    }
}
