//! A matched file's bytes, held in memory so the positioned-read parsers
//! of [`crate::scan`] (ELF sections, fatbin headers) can read it. A layer is
//! a stream, so random access needs the whole file: only files up to a size
//! bound (default [`MAX_READAT_BYTES`], 64 MiB) are held; larger ones are
//! reported as not judged rather than buffered. Big CUDA libraries
//! (libcublasLt, libcudnn_*: hundreds of MiB) fall over the bound; `check
//! --image` reads libraries with the streaming scanner instead
//! ([`crate::scan::stream_fatbin`], via [`super::scan`]), and uses this
//! buffer only for compat libraries' notes.

use crate::scan::fatbin::{self, FatbinError};
use crate::scan::read::ReadAt;
use std::io::{self, Read};

/// Default bound for [`ReadAtBuf::read`].
pub const MAX_READAT_BYTES: u64 = 64 * 1024 * 1024;

/// A file's bytes with positioned reads.
pub struct ReadAtBuf(Vec<u8>);

impl ReadAtBuf {
    /// Reads `r` whole when its `size` is at most `limit`; `Ok(None)` when
    /// larger (nothing is read then). Never holds more than `limit` bytes
    /// even if the stream is longer than `size` says.
    pub fn read(r: &mut dyn Read, size: u64, limit: u64) -> io::Result<Option<ReadAtBuf>> {
        if size > limit {
            return Ok(None);
        }
        let mut v = Vec::with_capacity(size as usize);
        r.take(limit + 1).read_to_end(&mut v)?;
        if v.len() as u64 > limit {
            return Ok(None);
        }
        Ok(Some(ReadAtBuf(v)))
    }
}

impl ReadAt for ReadAtBuf {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.as_slice().read_at(buf, offset)
    }

    fn size(&self) -> u64 {
        self.0.len() as u64
    }
}

/// What reading one library's device code gave.
#[derive(Debug)]
pub enum FatbinScan {
    /// The fatbin entries, or why the file could not be parsed (not an
    /// ELF, a corrupt fatbin, the fatbin budget).
    Scanned(Result<Vec<fatbin::Entry>, FatbinError>),
    /// Over the in-memory bound: not judged.
    TooLarge { size: u64, limit: u64 },
}

/// Feeds a file's content (from [`super::Image::read_files`]) to the fatbin
/// reader, when it is at most `limit` bytes.
pub fn scan_fatbin(
    r: &mut dyn Read,
    size: u64,
    limit: u64,
    budget: &mut fatbin::Budget,
) -> io::Result<FatbinScan> {
    let Some(buf) = ReadAtBuf::read(r, size, limit)? else {
        return Ok(FatbinScan::TooLarge { size, limit });
    };
    let mut entries = Vec::new();
    let r = fatbin::scan_image(&buf, budget, &mut |e| entries.push(e));
    Ok(FatbinScan::Scanned(r.map(|()| entries)))
}
