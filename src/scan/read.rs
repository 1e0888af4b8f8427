//! Positioned reads: the parsers read only the headers they need, at their
//! offsets, so a multi-GB library costs a few KiB of memory. Files use
//! pread(2) rather than mmap, so a file truncated under us is an error
//! (short read), never a SIGBUS.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::Instant;

/// Something that can be read at an offset: a file, or bytes in memory
/// (tests and the fuzz target).
pub trait ReadAt {
    /// Reads up to `buf.len()` bytes at `offset`; fewer only at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// The total size in bytes.
    fn size(&self) -> u64;
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }

    fn size(&self) -> u64 {
        self.metadata().map(|m| m.len()).unwrap_or(0)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        if start >= self.len() {
            return Ok(0);
        }
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }

    fn size(&self) -> u64 {
        self.len() as u64
    }
}

/// A file with its size taken once (fstat), so each read does not stat again.
pub struct SizedFile {
    file: File,
    size: u64,
}

impl SizedFile {
    pub fn new(file: File, size: u64) -> SizedFile {
        SizedFile { file, size }
    }
}

impl ReadAt for SizedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(&self.file, buf, offset)
    }

    fn size(&self) -> u64 {
        self.size
    }
}

/// What stopped a metered read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    Bytes,
    Time,
}

/// A read allowance: bytes the reads may return, and a deadline. Records
/// what was read and what stopped it.
pub(crate) struct Meter {
    allowance: u64,
    deadline: Option<Instant>,
    pub read: Cell<u64>,
    pub hit: Cell<Option<Stop>>,
}

impl Meter {
    pub fn new(allowance: u64, deadline: Option<Instant>) -> Meter {
        Meter {
            allowance,
            deadline,
            read: Cell::new(0),
            hit: Cell::new(None),
        }
    }
}

/// A reader that counts what it returns against a [`Meter`] and fails a
/// read that would go past the allowance or the deadline. The parsers see
/// an I/O error; the caller asks the meter whether it was the budget.
pub(crate) struct Metered<'a, R: ?Sized> {
    pub inner: &'a R,
    pub meter: &'a Meter,
}

impl<R: ReadAt + ?Sized> ReadAt for Metered<'_, R> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let m = self.meter;
        if m.read.get().saturating_add(buf.len() as u64) > m.allowance {
            m.hit.set(Some(Stop::Bytes));
            return Err(io::Error::other("read budget used up"));
        }
        if m.deadline.is_some_and(|d| Instant::now() >= d) {
            m.hit.set(Some(Stop::Time));
            return Err(io::Error::other("time budget used up"));
        }
        let n = self.inner.read_at(buf, offset)?;
        m.read.set(m.read.get() + n as u64);
        Ok(n)
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// Fills `buf` from `offset`, or fails with `UnexpectedEof`.
pub fn read_exact_at<R: ReadAt + ?Sized>(r: &R, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let at = offset
            .checked_add(done as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "offset overflows"))?;
        match r.read_at(&mut buf[done..], at) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file ends early",
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        a.copy_from_slice(s);
    }
    u16::from_le_bytes(a)
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_reads_and_eof() {
        let data: &[u8] = &[1, 2, 3, 4, 5];
        let mut b = [0u8; 3];
        read_exact_at(data, &mut b, 2).unwrap();
        assert_eq!(b, [3, 4, 5]);
        assert!(read_exact_at(data, &mut b, 3).is_err());
        assert!(read_exact_at(data, &mut b, u64::MAX).is_err());
        assert_eq!(u32_at(&[1, 0, 0, 0, 9], 0), 1);
        // Out of range reads as zero instead of panicking.
        assert_eq!(u64_at(&[1, 2], 0), 0);
    }
}
