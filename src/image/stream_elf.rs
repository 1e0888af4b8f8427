//! The loader's facts of a file read as its layer streams by, without
//! holding the file: a [`Recorder`] watches the bytes go past (whoever
//! else reads them: the kernel-image scan reads the same stream) and keeps
//! the first [`PREFIX`] bytes (ELF header, program headers and, in the
//! usual layout, the dynamic string table) and one window around what the
//! prefix lacks (a `patchelf`-moved dynamic section and its strings at the
//! end of the file, as in nvidia-curand's `libcurand.so.10`). What lies
//! outside both cannot be had again from a stream: such a file is not
//! judged, and its error says so.

use crate::scan::elf_dynamic::{self, DynInfo};
use crate::scan::read::ReadAt;
use std::cell::Cell;
use std::io::{self, Read};

/// Bytes kept from the start of each file.
pub const PREFIX: u64 = 8 << 20;
/// The window kept around what the prefix lacks: this much before it and
/// after its end.
const MARGIN: u64 = 2 << 20;
/// The longest range the parse may ask for past the prefix (a dynamic
/// section of 65,536 entries is 1 MiB).
const MAX_RANGE: u64 = 2 << 20;

/// A file known only in ranges, that says which range it lacked.
struct Sparse<'a> {
    size: u64,
    ranges: [(u64, &'a [u8]); 2],
    missing: Cell<Option<(u64, u64)>>,
}

impl ReadAt for Sparse<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= self.size {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.size - offset);
        // Piece by piece: a range may straddle the prefix and the window
        // when the window starts where the prefix ends.
        let mut done = 0u64;
        while done < want {
            let at = offset + done;
            let Some((start, bytes)) = self
                .ranges
                .iter()
                .find(|(s, b)| at >= *s && at < s + b.len() as u64)
            else {
                self.missing.set(Some((offset, want)));
                return Err(io::Error::other("not kept from the layer stream"));
            };
            let from = (at - start) as usize;
            let n = (bytes.len() - from).min((want - done) as usize);
            buf[done as usize..done as usize + n].copy_from_slice(&bytes[from..from + n]);
            done += n as u64;
        }
        Ok(want as usize)
    }

    fn size(&self) -> u64 {
        self.size
    }
}

/// Watches one file's stream and keeps what the loader facts need.
pub struct Recorder<'a> {
    inner: &'a mut dyn Read,
    size: u64,
    pos: u64,
    prefix: Vec<u8>,
    planned: bool,
    /// The parse of the prefix alone, when it had everything.
    parsed: Option<DynInfo>,
    /// The window past the prefix to keep, and what was kept of it.
    window: Option<(u64, u64)>,
    caught: Vec<u8>,
}

impl<'a> Recorder<'a> {
    pub fn new(inner: &'a mut dyn Read, size: u64) -> Recorder<'a> {
        Recorder {
            inner,
            size,
            pos: 0,
            prefix: Vec::new(),
            planned: false,
            parsed: None,
            window: None,
            caught: Vec::new(),
        }
    }

    fn sparse(&self) -> Sparse<'_> {
        let start = self.window.map(|w| w.0).unwrap_or(0);
        Sparse {
            size: self.size,
            ranges: [(0, &self.prefix), (start, &self.caught)],
            missing: Cell::new(None),
        }
    }

    /// With the prefix in hand: the window around the first thing a parse
    /// of it lacks.
    fn plan(&mut self) {
        self.planned = true;
        let s = self.sparse();
        let missing = match elf_dynamic::read(&s) {
            Ok(info) => {
                self.parsed = Some(info);
                return;
            }
            Err(_) => s.missing.get(),
        };
        if let Some((off, len)) = missing {
            let kept = self.prefix.len() as u64;
            if off + len > kept && len <= MAX_RANGE {
                let start = off.saturating_sub(MARGIN).max(kept);
                let end = (off + len + MARGIN).min(self.size);
                self.window = Some((start, end));
            }
        }
    }

    /// Reads the rest of the file (through the recorder) and parses what
    /// was kept.
    pub fn finish(mut self) -> Result<DynInfo, String> {
        io::copy(&mut self, &mut io::sink()).map_err(|e| e.to_string())?;
        if !self.planned {
            self.plan();
        }
        if let Some(info) = self.parsed.take() {
            return Ok(info);
        }
        let s = self.sparse();
        match elf_dynamic::read(&s) {
            Ok(info) => Ok(info),
            Err(e) => match s.missing.get() {
                Some((off, _)) => Err(format!(
                    "its dynamic section or strings (at offset {off}) lie where the layer stream could not keep them; not judged"
                )),
                None => Err(e.to_string()),
            },
        }
    }
}

impl Read for Recorder<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let at = self.pos;
        let chunk = &buf[..n];
        if at < PREFIX {
            let take = (n as u64).min(PREFIX - at) as usize;
            self.prefix.extend_from_slice(&chunk[..take]);
        }
        self.pos += n as u64;
        if !self.planned && self.prefix.len() as u64 >= PREFIX.min(self.size) {
            self.plan();
        }
        if let Some((ws, we)) = self.window {
            let (a, b) = (ws.max(at), we.min(self.pos));
            if a < b {
                self.caught
                    .extend_from_slice(&chunk[(a - at) as usize..(b - at) as usize]);
            }
        }
        Ok(n)
    }
}

/// The loader facts of one streamed file of `size` bytes, read to its end.
pub fn dyn_info_from_stream(r: &mut dyn Read, size: u64) -> Result<DynInfo, String> {
    Recorder::new(r, size).finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::elf_dynamic::tests::build_dso;

    /// `build_dso`'s file with everything after the program headers moved
    /// `delta` bytes later (its addresses equal its offsets).
    fn shifted(dso: &[u8], delta: u64) -> Vec<u8> {
        let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let tables = 64 + 2 * 56;
        let mut out = dso[..tables].to_vec();
        out.resize(tables + delta as usize, 0);
        out.extend_from_slice(&dso[tables..]);
        let total = out.len() as u64;
        out[64 + 32..64 + 40].copy_from_slice(&total.to_le_bytes());
        out[64 + 40..64 + 48].copy_from_slice(&total.to_le_bytes());
        let dyn_off = u64_at(&out, 120 + 8) + delta;
        out[120 + 8..120 + 16].copy_from_slice(&dyn_off.to_le_bytes());
        out[120 + 16..120 + 24].copy_from_slice(&dyn_off.to_le_bytes());
        let mut at = dyn_off as usize;
        while at + 16 <= out.len() {
            let tag = u64_at(&out, at);
            if tag == 5 {
                let v = u64_at(&out, at + 8) + delta;
                out[at + 8..at + 16].copy_from_slice(&v.to_le_bytes());
            }
            if tag == 0 {
                break;
            }
            at += 16;
        }
        out
    }

    /// A reader that hands out small pieces, as a decompressor does.
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(4093).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_dynamic_section_past_the_prefix_is_caught_on_the_way() {
        let dso = build_dso(&[(1, "libcudart.so.13"), (14, "libcurand.so.10")], 0);
        let dyn_at = u64::from_le_bytes(dso[128..136].try_into().unwrap());
        // In the prefix; past it; far past it; straddling its end.
        for delta in [0, PREFIX + 12345, 3 * PREFIX, PREFIX - 8 - dyn_at] {
            let f = shifted(&dso, delta);
            assert_eq!(
                crate::scan::elf_dynamic::read(f.as_slice()).unwrap().needed,
                ["libcudart.so.13"]
            );
            let info = dyn_info_from_stream(&mut Trickle(&f), f.len() as u64).unwrap();
            assert_eq!(
                info.soname.as_deref(),
                Some("libcurand.so.10"),
                "delta {delta}"
            );
            assert_eq!(info.needed, ["libcudart.so.13"]);
            // Another reader of the same stream (the kernel-image scan)
            // reads every byte through the recorder, and the facts agree.
            let mut src = Trickle(&f);
            let mut rec = Recorder::new(&mut src, f.len() as u64);
            let mut seen = Vec::new();
            io::copy(&mut rec, &mut seen).unwrap();
            assert_eq!(seen, f, "delta {delta}");
            assert_eq!(rec.finish().unwrap(), info, "delta {delta}");
        }
    }

    /// Mutated objects: both readers return (never panic), and agree
    /// whenever the stream reader has an answer.
    #[test]
    fn mutated_objects_read_the_same_both_ways() {
        let base = build_dso(
            &[
                (1, "libcudart.so.13"),
                (1, "libc.so.6"),
                (14, "libx.so.1"),
                (15, "$ORIGIN"),
            ],
            0,
        );
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..3000 {
            let mut f = base.clone();
            for _ in 0..(next() % 6 + 1) {
                let at = (next() % f.len() as u64) as usize;
                f[at] = next() as u8;
            }
            if next() % 4 == 0 {
                f.truncate((next() % f.len() as u64) as usize);
            }
            let positioned = crate::scan::elf_dynamic::read(f.as_slice());
            if let Ok(streamed) = dyn_info_from_stream(&mut Trickle(&f), f.len() as u64) {
                assert_eq!(positioned.as_ref().ok(), Some(&streamed));
            }
        }
    }
}
