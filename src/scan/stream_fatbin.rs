//! Lists the device code of an ELF file (or a bare fat binary) read once,
//! front to back, with bounded memory: for a library inside an image layer,
//! which is a compressed stream without random access, and too large to
//! hold (libcublasLt, libcudnn_*: hundreds of MiB; the in-memory path,
//! `image::ReadAtBuf`, stops at 64 MiB).
//!
//! The positioned reader ([`super::fatbin::scan_image`]) first reads the
//! section header table to find the fatbin sections, then walks them. In a
//! stream the section headers come last (ld writes them after every
//! section), so the order is turned around:
//!
//! 1. While the bytes stream by, every fatbin container header (magic
//!    0xBA55ED50 at a 4-aligned offset, version 1, header size >= 16, the
//!    container inside the file) starts a candidate whose entry headers are
//!    parsed as they arrive, by the positioned reader's own
//!    [`super::fatbin::walk_entry`] on a small window; payloads are skipped
//!    by size. `__fatBinC_Wrapper_t` records (magic 0x466243B1) are kept
//!    (24 bytes each), as are the ELF header, and a window around `e_shoff`:
//!    the section header table and the [`TAIL_BEFORE`] bytes before it,
//!    where ld puts `.shstrtab` (after `.symtab` and `.strtab`).
//! 2. At the end, the positioned ELF reader ([`super::elf::fatbin_regions`])
//!    runs on what was kept, giving exactly the regions the positioned
//!    scanner walks; the candidates that tile those regions are the result,
//!    with the same errors for a region that does not hold containers back
//!    to back.
//! 3. When a read in step 2 falls outside what was kept (a section name
//!    table far from the section headers, an unstripped library with a
//!    large `.strtab` after `.shstrtab`, wrapper slots without the magic),
//!    section names are unknown: every valid candidate is kept
//!    ([`StreamScan::sections_known`] is false, and callers say so).
//!
//! Memory: one read chunk, the window of one entry header (at most 1 MiB,
//! the positioned reader's bound), the kept tail (at most [`TAIL_BEFORE`] +
//! [`SHT_MAX`]) and the candidates' entries (bounded by the entry budget).
//! On the fixtures and on libcurand the result equals the positioned
//! reader's (tests/image/image_check_stream.rs `streaming_equals_positioned_*`).

use super::amd::stream::AmdStream;
use super::elf::{self, Region, FATBINC_MAGIC, HIP_FATBIN_MAGIC};
use super::fatbin::{self, Budget, Entry, FatbinError, FATBIN_MAGIC};
use super::read::{u16_at, u32_at, u64_at, ReadAt};
use crate::core::amd::AmdCode;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, Read};

/// Bytes kept before `e_shoff` for the section name table.
const TAIL_BEFORE: u64 = 4 << 20;
/// Bytes kept from `e_shoff` on: the section header table (65,536 64-byte
/// headers; real libraries have tens).
const SHT_MAX: u64 = 4 << 20;
/// Bytes read from the stream at a time.
const CHUNK: usize = 256 << 10;
/// Container candidates (valid or not) recorded; cuBLASLt 13 has 2,638.
const MAX_CANDIDATES: usize = 1 << 16;
/// Wrapper records kept (elf.rs follows at most 65,536).
const MAX_WRAPPERS: usize = 1 << 16;
/// Candidates whose entries are being parsed at once (real files: one).
const MAX_ACTIVE: usize = 1024;
/// As in fatbin.rs.
const KIND_CONCAT: u16 = 0x100;
const ENTRY_HEADER_MAX: u64 = 1 << 20;

/// What the streaming scan found.
#[derive(Debug, Default)]
pub struct StreamScan {
    /// The entries, in file order, as [`fatbin::scan_image`] lists them.
    pub entries: Vec<Entry>,
    /// False when the section headers or names could not be kept: then
    /// every valid container of the file is listed, in or out of a fatbin
    /// section.
    pub sections_known: bool,
    /// The AMD code objects ([`crate::scan::amd::stream`]), in file order,
    /// as [`crate::scan::amd::scan_image`] lists them.
    pub amd: Vec<AmdCode>,
}

/// A container header seen in the stream.
struct Candidate {
    fat_size: u64,
    end: u64,
    entries: Vec<Entry>,
    /// Why it is not a container the positioned walk would accept.
    error: Option<FatbinError>,
}

/// A candidate whose entry headers are still arriving.
struct Active {
    at: u64,
    next: u64,
    end: u64,
}

/// The stream's bytes from `base`, as a [`ReadAt`] at file offsets.
struct Window<'a> {
    base: u64,
    bytes: &'a [u8],
    size: u64,
}

impl ReadAt for Window<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let end = offset.saturating_add(buf.len() as u64).min(self.size);
        if offset < self.base || end > self.base + self.bytes.len() as u64 {
            return Err(io::Error::other("read outside the streaming window"));
        }
        let s = (offset - self.base) as usize;
        let n = (end - offset) as usize;
        buf[..n].copy_from_slice(&self.bytes[s..s + n]);
        Ok(n)
    }

    fn size(&self) -> u64 {
        self.size
    }
}

/// The pieces of the file kept for the section headers, as a [`ReadAt`]:
/// a read of bytes that were not kept is answered with zeros and marks
/// `missed` (the scan then falls back to "all candidates").
struct Kept {
    size: u64,
    pieces: BTreeMap<u64, Vec<u8>>,
    missed: Cell<bool>,
}

impl Kept {
    fn put(&mut self, at: u64, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.pieces.insert(at, bytes.to_vec());
        }
    }
}

impl ReadAt for Kept {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= self.size {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(self.size - offset) as usize;
        let mut done = 0usize;
        while done < n {
            let at = offset + done as u64;
            let piece = self
                .pieces
                .range(..=at)
                .next_back()
                .filter(|(s, p)| at < **s + p.len() as u64);
            match piece {
                Some((s, p)) => {
                    let from = (at - s) as usize;
                    let take = (p.len() - from).min(n - done);
                    buf[done..done + take].copy_from_slice(&p[from..from + take]);
                    done += take;
                }
                None => {
                    self.missed.set(true);
                    // Zeros up to the next piece.
                    let next = self
                        .pieces
                        .range(at + 1..)
                        .next()
                        .map_or(offset + n as u64, |(s, _)| *s)
                        .min(offset + n as u64);
                    let take = (next - at) as usize;
                    buf[done..done + take].fill(0);
                    done += take;
                }
            }
        }
        Ok(n)
    }

    fn size(&self) -> u64 {
        self.size
    }
}

fn too_many(offset: u64, what: &str) -> FatbinError {
    FatbinError::Io {
        offset,
        source: io::Error::new(io::ErrorKind::InvalidData, format!("too many {what}")),
    }
}

/// The state of one streaming scan.
struct Scanner<'b> {
    size: u64,
    budget: &'b mut Budget,
    elf: bool,
    /// The kept window `[keep_lo, keep_hi)` around `e_shoff`.
    keep_lo: u64,
    keep_hi: u64,
    keep: Vec<u8>,
    kept: Kept,
    /// Unconsumed stream bytes from `wstart`.
    win: Vec<u8>,
    wstart: u64,
    /// Next 4-aligned offset to look at for a magic.
    search: u64,
    cands: BTreeMap<u64, Candidate>,
    active: Vec<Active>,
    wrappers: usize,
    /// The file is a bare offload bundle: no CUDA code.
    bundle_file: bool,
    /// The first bytes, for a bare AMD code object.
    head: Vec<u8>,
    amd: AmdStream,
}

impl Scanner<'_> {
    fn wend(&self) -> u64 {
        self.wstart + self.win.len() as u64
    }

    /// Copies the part of the new bytes `[from, wend)` that falls in the
    /// kept window.
    fn keep_new(&mut self, from: u64) {
        let lo = from.max(self.keep_lo);
        let hi = self.wend().min(self.keep_hi);
        if lo < hi {
            let s = (lo - self.wstart) as usize;
            let e = (hi - self.wstart) as usize;
            self.keep.extend_from_slice(&self.win[s..e]);
        }
    }

    /// Looks for container and wrapper magics in the window.
    fn find_magics(&mut self, eof: bool) -> Result<(), FatbinError> {
        let wend = self.wend();
        let mut o = self.search;
        while o + 4 <= wend {
            // The hot loop: one u32 compare per 4 bytes.
            let s = (o - self.wstart) as usize;
            let tail = &self.win[s..];
            let hit = tail.chunks_exact(4).position(|c| {
                let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                v == FATBIN_MAGIC || v == FATBINC_MAGIC || v == HIP_FATBIN_MAGIC
            });
            let Some(k) = hit else {
                o += (tail.len() / 4 * 4) as u64;
                break;
            };
            o += 4 * k as u64;
            let s = (o - self.wstart) as usize;
            let v = u32_at(&self.win[s..], 0);
            if v == FATBIN_MAGIC {
                if o + 16 > wend {
                    if !eof {
                        break;
                    }
                } else {
                    self.candidate(o)?;
                }
            } else {
                if o + 24 > wend && !eof {
                    break;
                }
                if self.wrappers < MAX_WRAPPERS {
                    self.wrappers += 1;
                    let e = (s + 24).min(self.win.len());
                    let bytes = self.win[s..e].to_vec();
                    self.kept.put(o, &bytes);
                }
            }
            o += 4;
        }
        self.search = o;
        Ok(())
    }

    /// A container header at `o` (16 bytes in the window).
    fn candidate(&mut self, o: u64) -> Result<(), FatbinError> {
        if self.cands.len() >= MAX_CANDIDATES {
            return Err(too_many(o, "fatbin container candidates"));
        }
        let s = (o - self.wstart) as usize;
        let h = &self.win[s..s + 16];
        let version = u16_at(h, 4);
        let header_size = u16_at(h, 6);
        let fat_size = u64_at(h, 8);
        let mut c = Candidate {
            fat_size,
            end: 0,
            entries: Vec::new(),
            error: None,
        };
        let start = o + header_size as u64;
        if version != 1 {
            c.error = Some(FatbinError::Version { offset: o, version });
        } else if (header_size as u64) < 16 {
            c.error = Some(FatbinError::ContainerHeader {
                offset: o,
                size: header_size,
            });
        } else {
            match start.checked_add(fat_size) {
                Some(e) if e <= self.size => {
                    c.end = e;
                    if self.active.len() >= MAX_ACTIVE {
                        return Err(too_many(o, "overlapping fatbin containers"));
                    }
                    self.active.push(Active {
                        at: o,
                        next: start,
                        end: e,
                    });
                }
                _ => {
                    c.error = Some(FatbinError::ContainerPastEnd {
                        offset: o,
                        size: fat_size,
                    })
                }
            }
        }
        self.cands.insert(o, c);
        Ok(())
    }

    /// Parses the entry headers now in the window. Budget errors end the
    /// scan; any other error ends the candidate.
    fn parse_entries(&mut self) -> Result<(), FatbinError> {
        let wend = self.wend();
        let mut i = 0;
        while i < self.active.len() {
            let a = &mut self.active[i];
            let cand = self
                .cands
                .get_mut(&a.at)
                .expect("active candidates are recorded");
            let mut done = false;
            loop {
                if a.next >= a.end {
                    done = true;
                    break;
                }
                // What walk_entry will read: 64 bytes, the whole header of a
                // concatenated group (when its size is sane; else it fails
                // on the 64 bytes alone).
                let mut need = 64u64.min(a.end - a.next);
                if a.next + need > wend {
                    break;
                }
                let s = (a.next - self.wstart) as usize;
                if need == 64 && u16_at(&self.win[s..], 0) == KIND_CONCAT {
                    let hs = u32_at(&self.win[s..], 4) as u64;
                    if (64..=ENTRY_HEADER_MAX).contains(&hs) && a.next + hs <= a.end {
                        need = hs;
                    }
                }
                if a.next + need > wend {
                    break;
                }
                let w = Window {
                    base: self.wstart,
                    bytes: &self.win,
                    size: self.size,
                };
                let entries = &mut cand.entries;
                match fatbin::walk_entry(&w, a.next, a.end, self.budget, &mut |e| entries.push(e)) {
                    Ok(n) => a.next = n,
                    Err(e) if e.is_budget() => return Err(e),
                    Err(e) => {
                        cand.error = Some(e);
                        done = true;
                        break;
                    }
                }
            }
            if done {
                self.active.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Drops the window bytes nobody needs any more.
    fn trim(&mut self) {
        let mut from = self.search.min(self.wend());
        for a in &self.active {
            from = from.min(a.next.max(self.wstart));
        }
        let drop = (from - self.wstart) as usize;
        if drop > 0 {
            self.win.drain(..drop);
            self.wstart = from;
        }
    }

    fn regions(&mut self) -> Result<Option<Vec<Region>>, FatbinError> {
        if self.bundle_file {
            return Ok(Some(Vec::new()));
        }
        if !self.elf {
            return Ok(Some(vec![Region {
                offset: 0,
                size: self.size,
                whole_section: true,
            }]));
        }
        let keep = std::mem::take(&mut self.keep);
        if !keep.is_empty() {
            // Wrapper records inside the window are in it already; a piece
            // starting inside another would hide the rest of that one.
            let (lo, hi) = (self.keep_lo, self.keep_lo + keep.len() as u64);
            self.kept
                .pieces
                .retain(|at, p| *at < lo || *at + p.len() as u64 > hi);
            self.kept.put(lo, &keep);
        }
        let r = elf::fatbin_regions(&self.kept);
        if self.kept.missed.get() {
            return Ok(None);
        }
        Ok(Some(r?))
    }

    /// The candidates that tile `region`, as walk_region walks it.
    fn walk(&mut self, region: &Region, visit: &mut Vec<Entry>) -> Result<u64, FatbinError> {
        let end = super::fatbin::region_end(region)?;
        let mut at = region.offset;
        loop {
            if end - at < 16 {
                return Ok(end);
            }
            let Some(c) = self.cands.remove(&at) else {
                return Err(FatbinError::BadMagic(at));
            };
            match c.error {
                Some(
                    e @ (FatbinError::Version { .. }
                    | FatbinError::ContainerHeader { .. }
                    | FatbinError::ContainerPastEnd { .. }),
                ) => return Err(e),
                _ if c.end > end => {
                    return Err(FatbinError::ContainerPastEnd {
                        offset: at,
                        size: c.fat_size,
                    })
                }
                Some(e) => return Err(e),
                None => {}
            }
            visit.extend(c.entries);
            at = c.end;
            if !region.whole_section {
                return Ok(at);
            }
        }
    }
}

/// Reads `r` (a file of `size` bytes) to its end once and lists its device
/// code as [`fatbin::scan_image`] would. A file that is neither ELF nor a
/// fat binary is [`FatbinError::NotElf`] after 4 bytes.
pub fn scan_stream(
    r: &mut dyn Read,
    size: u64,
    budget: &mut Budget,
) -> Result<StreamScan, FatbinError> {
    let mut head = [0u8; 64];
    let n = read_full(r, &mut head[..size.min(64) as usize])?;
    let mut s = Scanner::start(&head[..n], size, budget)?;
    s.feed(r)?;
    s.finish()
}

impl<'b> Scanner<'b> {
    /// A scanner that has seen the first bytes of the file, `head`.
    fn start(head: &[u8], size: u64, budget: &'b mut Budget) -> Result<Scanner<'b>, FatbinError> {
        let n = head.len();
        if n < 4 {
            return Err(FatbinError::NotElf);
        }
        let elf = elf::is_elf(&head[..4]);
        let bundle_file = !elf && crate::scan::amd::bundle::starts_bundle(head);
        if !elf && !bundle_file && u32_at(head, 0) != FATBIN_MAGIC {
            return Err(FatbinError::NotElf);
        }
        // e_shoff, to know which bytes to keep for the section headers.
        let shoff = if elf && n >= 52 {
            if head[4] == 2 && n >= 64 {
                u64_at(head, 0x28)
            } else {
                u32_at(head, 0x20) as u64
            }
        } else {
            0
        };
        let (keep_lo, keep_hi) = if shoff == 0 {
            (0, 0)
        } else {
            (
                shoff.saturating_sub(TAIL_BEFORE),
                shoff.saturating_add(SHT_MAX).min(size),
            )
        };
        let mut s = Scanner {
            size,
            budget,
            elf,
            keep_lo,
            keep_hi,
            keep: Vec::new(),
            kept: Kept {
                size,
                pieces: BTreeMap::new(),
                missed: Cell::new(false),
            },
            win: head.to_vec(),
            wstart: 0,
            search: 0,
            cands: BTreeMap::new(),
            active: Vec::new(),
            wrappers: 0,
            bundle_file,
            head: head.to_vec(),
            amd: AmdStream::new(size),
        };
        s.kept.put(0, head);
        s.keep_new(0);
        s.amd.feed(0, head)?;
        Ok(s)
    }

    /// Reads the rest of the file through the scanner, then what is left
    /// in the window. It must be exactly the file's size.
    fn feed(&mut self, r: &mut dyn Read) -> Result<(), FatbinError> {
        let mut chunk = vec![0u8; CHUNK];
        let mut total = self.wend();
        loop {
            self.find_magics(false)?;
            self.parse_entries()?;
            self.trim();
            let got = read_some(r, &mut chunk)?;
            if got == 0 {
                break;
            }
            let from = self.wend();
            self.amd.feed(total, &chunk[..got])?;
            self.win.extend_from_slice(&chunk[..got]);
            total += got as u64;
            if total > self.size {
                return Err(FatbinError::Io {
                    offset: self.size,
                    source: io::Error::new(io::ErrorKind::InvalidData, "file longer than its size"),
                });
            }
            self.keep_new(from);
        }
        if total < self.size {
            return Err(FatbinError::Io {
                offset: total,
                source: io::Error::new(io::ErrorKind::UnexpectedEof, "file ends early"),
            });
        }
        self.find_magics(true)?;
        // Every active candidate ends inside the file, so all are done.
        self.parse_entries()
    }

    /// The entries of the candidates the section headers point at, or of
    /// every valid candidate when they could not be kept.
    fn finish(mut self) -> Result<StreamScan, FatbinError> {
        let mut out = StreamScan::default();
        match self.regions()? {
            Some(regions) => {
                out.sections_known = true;
                let mut done_until = 0u64;
                for region in regions {
                    if region.offset < done_until {
                        continue;
                    }
                    done_until = self.walk(&region, &mut out.entries)?;
                }
            }
            None => {
                // Section names unknown: every valid container, outermost only.
                let mut until = 0u64;
                for (at, c) in std::mem::take(&mut self.cands) {
                    if at < until || c.error.is_some() {
                        continue;
                    }
                    until = c.end;
                    out.entries.extend(c.entries);
                }
            }
        }
        out.amd = self.amd_codes(out.sections_known)?;
        Ok(out)
    }

    /// The AMD code objects, from the same kept section headers (every
    /// valid bundle when they could not be kept).
    fn amd_codes(&mut self, known: bool) -> Result<Vec<AmdCode>, FatbinError> {
        if crate::scan::amd::code_object::is_amdgpu_elf(&self.head) {
            let mut out = Vec::new();
            crate::scan::amd::walk::bare_code_object(&self.head, self.budget, &mut |c| {
                out.push(c)
            })?;
            return Ok(out);
        }
        if self.bundle_file {
            return self.amd.finish(None, self.budget);
        }
        if !self.elf {
            return Ok(Vec::new());
        }
        if known {
            let r = self.amd.finish(Some(&self.kept), self.budget);
            if !self.kept.missed.get() {
                return r;
            }
        }
        self.amd.finish_all(self.budget)
    }
}

fn read_some(r: &mut dyn Read, buf: &mut [u8]) -> Result<usize, FatbinError> {
    loop {
        match r.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(FatbinError::Io { offset: 0, source }),
        }
    }
}

fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> Result<usize, FatbinError> {
    let mut done = 0;
    while done < buf.len() {
        let n = read_some(r, &mut buf[done..])?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::fatbin::tests::{container, entry};

    fn both(bytes: &[u8]) -> (Result<Vec<Entry>, String>, Result<Vec<Entry>, String>) {
        let positioned = fatbin::entries_of(bytes).map_err(|e| e.to_string());
        let streamed = scan_stream(
            &mut &bytes[..],
            bytes.len() as u64,
            &mut Budget::unlimited(),
        )
        .map(|s| s.entries)
        .map_err(|e| e.to_string());
        (positioned, streamed)
    }

    #[test]
    fn bare_fatbins_match_the_positioned_reader() {
        let a = container(&[
            entry(2, 80, (1, 8), 0x11, &[0u8; 16]),
            entry(1, 90, (9, 5), 0x8011, &[0u8; 8]),
        ]);
        let b = container(&[entry(2, 90, (1, 8), 0x100011, &[])]);
        let ok = [a.clone(), b].concat();
        let (p, s) = both(&ok);
        assert_eq!(p.as_ref().unwrap().len(), 3);
        assert_eq!(p, s);
        // Garbage after a container, a container past the end, bad version.
        let mut g = a.clone();
        g.extend_from_slice(&[0xAA; 32]);
        let (p, s) = both(&g);
        assert!(p.is_err());
        assert_eq!(p, s);
        let mut big = a.clone();
        big[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(both(&big).0, both(&big).1);
        let mut v = a;
        v[4] = 9;
        let (p, s) = both(&v);
        assert!(p.is_err());
        assert_eq!(p, s);
        assert!(matches!(
            scan_stream(&mut &b"junk"[..], 4, &mut Budget::unlimited()),
            Err(FatbinError::NotElf)
        ));
    }

    #[test]
    fn a_short_stream_is_an_error() {
        let a = container(&[entry(2, 80, (1, 8), 0x11, &[0u8; 16])]);
        let r = scan_stream(&mut &a[..], a.len() as u64 + 10, &mut Budget::unlimited());
        assert!(r.is_err());
    }

    #[test]
    fn entry_headers_across_chunk_boundaries() {
        // Enough payload that entry headers straddle 256 KiB reads.
        let es: Vec<Vec<u8>> = (0..40)
            .map(|i| entry(2, 80 + i, (1, 8), 0x11, &vec![0u8; 13_000 + 8 * i as usize]))
            .collect();
        let c = container(&es);
        let (p, s) = both(&c);
        assert_eq!(p.as_ref().unwrap().len(), 40);
        assert_eq!(p, s);
    }
}
