//! One budget for everything reading an image costs: it is
//! made when the image is opened and spent by every pass after it (the
//! outer archive's headers, the header pass, the content pass), so a check
//! never costs more than [`Limits`] say, however many passes it takes.
//!
//! - Time: one deadline. Checked on every read of a layer blob and of its
//!   decompressed stream, inside the zstd decoder between blocks, for every
//!   tree entry applied and while resolving paths ([`Deadline`]).
//! - Decompressed bytes, all layers and passes together, and their ratio
//!   to the compressed bytes read: past [`Limits::expansion_allowance`],
//!   output more than [`Limits::max_expansion`] times the input is a
//!   compression bomb. Deflate tops out at 1,032:1 (madler/zlib, FAQ,
//!   "maximum compression ratio"; `gzip -1` of zeros gives about 220:1),
//!   zstd goes far beyond, while layers of code and data compress a few
//!   times, so a bomb is stopped after about a gigabyte instead of the
//!   whole byte budget. The ratio is the whole image's, so one layer of
//!   zeros among real ones does not trip it.
//! - Tar entries and the bytes of the entry names the tree keeps.
//!
//! Cells rather than `&mut`: the readers of one layer stream share it
//! while the `tar` crate owns the chain. The first budget that stops a
//! read is kept ([`Budget::take_tripped`]), because the `tar` crate turns
//! the reader's `io::Error` into one of its own.

use super::error::ImageError;
use super::Limits;
use std::cell::{Cell, RefCell};
use std::io::{self, Read};
use std::time::Instant;

/// The instant a check must end by.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    at: Instant,
    secs: u64,
}

impl Deadline {
    pub fn check(&self) -> Result<(), ImageError> {
        if Instant::now() >= self.at {
            return Err(ImageError::TimeBudget(self.secs));
        }
        Ok(())
    }
}

/// Budgets shared by every read of one image.
pub(crate) struct Budget {
    limits: Limits,
    deadline: Deadline,
    bytes_left: Cell<u64>,
    entries_left: Cell<u64>,
    path_bytes_left: Cell<u64>,
    /// Layer blob bytes read, and the bytes they decompressed to.
    compressed: Cell<u64>,
    expanded: Cell<u64>,
    tripped: RefCell<Option<ImageError>>,
}

impl Budget {
    pub fn new(limits: &Limits) -> Budget {
        Budget {
            limits: limits.clone(),
            deadline: Deadline {
                at: Instant::now() + limits.max_time,
                secs: limits.max_time.as_secs(),
            },
            bytes_left: Cell::new(limits.max_uncompressed_bytes),
            entries_left: Cell::new(limits.max_entries),
            path_bytes_left: Cell::new(limits.max_path_bytes),
            compressed: Cell::new(0),
            expanded: Cell::new(0),
            tripped: RefCell::new(None),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn deadline(&self) -> Deadline {
        self.deadline
    }

    /// Keeps `e` as the reason a reader stopped and returns it as an
    /// `io::Error` for the reader's caller.
    pub fn trip(&self, e: ImageError) -> io::Error {
        let msg = e.to_string();
        self.tripped.borrow_mut().get_or_insert(e);
        io::Error::other(msg)
    }

    /// The deadline, for a reader.
    pub fn check_time(&self) -> io::Result<()> {
        self.deadline.check().map_err(|e| self.trip(e))
    }

    /// One tar entry kept in the tree.
    pub fn take_entry(&self) -> Result<(), ImageError> {
        let left = self.entries_left.get();
        if left == 0 {
            return Err(ImageError::EntryBudget(self.limits.max_entries));
        }
        self.entries_left.set(left - 1);
        Ok(())
    }

    /// `n` bytes of entry names (paths, link targets) kept.
    pub fn take_path_bytes(&self, n: u64) -> Result<(), ImageError> {
        let left = self.path_bytes_left.get();
        if n > left {
            self.path_bytes_left.set(0);
            return Err(ImageError::PathBudget(self.limits.max_path_bytes));
        }
        self.path_bytes_left.set(left - n);
        Ok(())
    }

    /// Why a reader stopped, once.
    pub fn take_tripped(&self) -> Option<ImageError> {
        self.tripped.borrow_mut().take()
    }

    /// `n` decompressed bytes: the byte budget, then the expansion bound.
    fn take_bytes(&self, n: u64) -> io::Result<()> {
        let left = self.bytes_left.get();
        if n > left {
            self.bytes_left.set(0);
            return Err(self.trip(ImageError::ByteBudget(self.limits.max_uncompressed_bytes)));
        }
        self.bytes_left.set(left - n);
        let out = self.expanded.get().saturating_add(n);
        self.expanded.set(out);
        let l = &self.limits;
        if out > l.expansion_allowance
            && out > l.max_expansion.saturating_mul(self.compressed.get())
        {
            return Err(self.trip(ImageError::Expansion {
                ratio: l.max_expansion,
                allowance: l.expansion_allowance,
            }));
        }
        Ok(())
    }
}

/// A layer blob as stored (compressed): checks the deadline on every read
/// and counts what it returns for the expansion bound.
pub(crate) struct Compressed<'b, R> {
    pub inner: R,
    pub budget: &'b Budget,
}

impl<R: Read> Read for Compressed<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.budget.check_time()?;
        let n = self.inner.read(buf)?;
        let b = self.budget;
        b.compressed
            .set(b.compressed.get().saturating_add(n as u64));
        Ok(n)
    }
}

/// A layer's decompressed stream: counts against the byte budget and the
/// expansion bound, and checks the deadline on every read.
pub(crate) struct Decompressed<'b, R> {
    pub inner: R,
    pub budget: &'b Budget,
}

impl<R: Read> Read for Decompressed<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.budget.check_time()?;
        let n = self.inner.read(buf)?;
        self.budget.take_bytes(n as u64)?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_is_bounded_past_the_allowance() {
        let limits = Limits {
            expansion_allowance: 1000,
            max_expansion: 10,
            ..Limits::default()
        };
        let b = Budget::new(&limits);
        b.compressed.set(50);
        // 1,000 free, then at most 10 x 50 = 500 in all: the allowance decides.
        assert!(b.take_bytes(1000).is_ok());
        assert!(b.take_bytes(1).is_err());
        assert!(matches!(
            b.take_tripped(),
            Some(ImageError::Expansion { ratio: 10, .. })
        ));
        // Enough input: 10:1 holds.
        let b = Budget::new(&limits);
        b.compressed.set(1000);
        assert!(b.take_bytes(10_000).is_ok());
        assert!(b.take_bytes(1).is_err());
    }

    #[test]
    fn names_and_entries_are_counted() {
        let limits = Limits {
            max_path_bytes: 10,
            max_entries: 1,
            ..Limits::default()
        };
        let b = Budget::new(&limits);
        assert!(b.take_path_bytes(10).is_ok());
        assert!(matches!(
            b.take_path_bytes(1),
            Err(ImageError::PathBudget(10))
        ));
        assert!(b.take_entry().is_ok());
        assert!(matches!(b.take_entry(), Err(ImageError::EntryBudget(1))));
    }
}
