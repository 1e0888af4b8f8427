//! The AMD code objects of a file read once, front to back (a library in an
//! image layer), with the result [`super::walk::scan_image`] gives.
//!
//! It rides on the CUDA streaming scanner ([`crate::scan::stream_fatbin`]),
//! which feeds it every chunk and, at the end, lends it the bytes it kept
//! for the section headers (with the `.hipFatBinSegment` wrapper records):
//!
//! 1. While the bytes pass, every bundle magic at a 4-aligned offset, and
//!    every offset where a bundle seen so far ends, starts a candidate: a
//!    plain bundle's table is buffered until complete (then the 64-byte ELF
//!    header of each entry is caught as it passes), a compressed bundle's
//!    data is fed to a [`PrefixDecoder`] until its table is complete.
//! 2. At the end the positioned ELF reader gives the regions
//!    ([`crate::scan::elf::regions`] with [`crate::scan::elf::HIP`]) and
//!    the candidates that tile them are the result, stepped as
//!    [`super::walk`] steps: a bundle's end, else the next candidate.
//!
//! Memory: each candidate's table (at most [`bundle::MAX_TABLE_BYTES`])
//! while it is being read, one decoder per compressed bundle being read,
//! and the code objects; at most [`MAX_CANDIDATES`] candidates and
//! [`MAX_ACTIVE`] being read at once.

use super::bundle::{self, RawEntry, Table, BUNDLE_MAGIC};
use super::ccob::{self, CcobHeader, PrefixDecoder, CCOB_MAGIC};
use super::code_object;
use super::walk::{bad, entry_code, table_cut_reason};
use crate::core::amd::AmdCode;
use crate::scan::elf::{self, Region, HIP};
use crate::scan::fatbin::{region_end, Budget, FatbinError};
use crate::scan::read::ReadAt;
use std::collections::{BTreeMap, BTreeSet};

/// Candidates recorded (valid or not).
const MAX_CANDIDATES: usize = 1 << 16;
/// Candidates being read at once (real files: one).
const MAX_ACTIVE: usize = 64;

/// What a candidate is doing.
enum State {
    /// Buffering a plain bundle's table.
    Table(Vec<u8>),
    /// Buffering a compressed bundle's header.
    CcobHeader(Vec<u8>),
    /// Feeding a compressed bundle's data; the offset of the next byte it takes.
    Ccob(CcobHeader, Box<PrefixDecoder>, u64),
    /// Waiting for the ELF headers of its entries.
    Headers,
    Done,
}

struct Cand {
    state: State,
    compressed: bool,
    /// The bundle's end, once known (v1 compressed: never).
    end: Option<u64>,
    entries: Vec<RawEntry>,
    /// One per entry: its ELF header as it passes.
    headers: Vec<Option<Vec<u8>>>,
    error: Option<String>,
}

/// Watches one file's stream.
pub struct AmdStream {
    size: u64,
    cands: BTreeMap<u64, Cand>,
    /// The next 4-aligned offset to look at for a magic.
    search: u64,
    /// Bundle ends not yet looked at: a bundle may start right there.
    ends: BTreeSet<u64>,
    /// The last bytes of the previous chunk (a magic across chunks), at
    /// file offset `tail_at`.
    tail: Vec<u8>,
    tail_at: u64,
}

impl AmdStream {
    pub fn new(size: u64) -> AmdStream {
        AmdStream {
            size,
            cands: BTreeMap::new(),
            search: 0,
            ends: BTreeSet::new(),
            tail: Vec::new(),
            tail_at: 0,
        }
    }

    /// The next `bytes` of the stream, at file offset `at`.
    pub fn feed(&mut self, at: u64, bytes: &[u8]) -> Result<(), FatbinError> {
        let mut joined = std::mem::take(&mut self.tail);
        let base = if joined.is_empty() { at } else { self.tail_at };
        joined.extend_from_slice(bytes);
        let end = base + joined.len() as u64;
        self.find_candidates(base, &joined)?;
        // Candidates take what they need; one that ends inside these bytes
        // may be followed right there by another, which takes them too.
        let mut advanced = BTreeSet::new();
        loop {
            let active: Vec<u64> = self
                .cands
                .iter()
                .filter(|(k, c)| !matches!(c.state, State::Done) && !advanced.contains(*k))
                .map(|(k, _)| *k)
                .collect();
            if active.is_empty() {
                break;
            }
            if active.len() > MAX_ACTIVE {
                return Err(bad(at, "too many overlapping offload bundles"));
            }
            for k in active {
                advanced.insert(k);
                if let Some(e) = self.advance(k, base, &joined) {
                    self.end_at(e, base, &joined)?;
                }
            }
        }
        let keep = joined.len().min(27);
        self.tail_at = end - keep as u64;
        self.tail = joined[joined.len() - keep..].to_vec();
        Ok(())
    }

    /// A bundle ended at `e`: look for the next one there, now or later.
    fn end_at(&mut self, e: u64, base: u64, b: &[u8]) -> Result<(), FatbinError> {
        let end = base + b.len() as u64;
        if e >= self.size {
            return Ok(());
        }
        if e >= base && e + 24 <= end {
            let w = &b[(e - base) as usize..];
            if starts_magic(w) {
                self.add(e, w)?;
            }
        } else if e >= base {
            self.ends.insert(e);
        }
        Ok(())
    }

    fn find_candidates(&mut self, base: u64, b: &[u8]) -> Result<(), FatbinError> {
        let end = base + b.len() as u64;
        let reached: Vec<u64> = self.ends.range(..end).copied().collect();
        for e in reached {
            if e + 24 <= end || e + 24 > self.size {
                self.ends.remove(&e);
                if e >= base && starts_magic(&b[(e - base) as usize..]) {
                    self.add(e, &b[(e - base) as usize..])?;
                }
            }
        }
        let mut o = self.search.max(base).div_ceil(4) * 4;
        while o + 4 <= end {
            let w = &b[(o - base) as usize..];
            if w.len() < 24 && w.starts_with(&BUNDLE_MAGIC[..4]) && o + 24 <= self.size {
                break; // the rest of the magic comes with the next bytes
            }
            if starts_magic(w) {
                self.add(o, w)?;
            }
            o += 4;
        }
        self.search = o;
        Ok(())
    }

    fn add(&mut self, at: u64, first: &[u8]) -> Result<(), FatbinError> {
        if self.cands.contains_key(&at) {
            return Ok(());
        }
        if self.cands.len() >= MAX_CANDIDATES {
            return Err(bad(at, "too many offload bundle candidates"));
        }
        let compressed = first.starts_with(CCOB_MAGIC);
        let state = if compressed {
            State::CcobHeader(Vec::new())
        } else {
            State::Table(Vec::new())
        };
        let cand = Cand {
            state,
            compressed,
            end: None,
            entries: Vec::new(),
            headers: Vec::new(),
            error: None,
        };
        self.cands.insert(at, cand);
        Ok(())
    }

    /// Gives candidate `k` the bytes of `b` (at `base`) from `k` on;
    /// returns its end when that became known now.
    fn advance(&mut self, k: u64, base: u64, b: &[u8]) -> Option<u64> {
        let size = self.size;
        let c = self.cands.get_mut(&k)?;
        let known = c.end;
        let from = k.max(base);
        let end = base + b.len() as u64;
        if from < end {
            if let Err(e) = step(c, k, from, &b[(from - base) as usize..], size) {
                c.error = Some(e);
                c.state = State::Done;
            }
        }
        match (known, c.end) {
            (None, Some(e)) if c.error.is_none() => Some(e),
            _ => None,
        }
    }

    /// The code objects of the candidates that tile the regions, given the
    /// bytes kept for the section headers (`kept`; None for a bare bundle
    /// file), as the positioned walk lists them.
    pub fn finish(
        &mut self,
        kept: Option<&dyn ReadAt>,
        budget: &mut Budget,
    ) -> Result<Vec<AmdCode>, FatbinError> {
        let regions = match kept {
            Some(r) => elf::regions(r, &HIP)?,
            None => vec![Region {
                offset: 0,
                size: self.size,
                whole_section: true,
            }],
        };
        let mut out = Vec::new();
        let mut done_until = 0u64;
        for region in regions {
            if region.offset < done_until {
                continue;
            }
            done_until = self.walk(&region, budget, &mut out)?;
        }
        Ok(out)
    }

    /// Every valid candidate, outermost first (when the section names could
    /// not be kept).
    pub fn finish_all(&mut self, budget: &mut Budget) -> Result<Vec<AmdCode>, FatbinError> {
        let mut out = Vec::new();
        let mut until = 0u64;
        let keys: Vec<u64> = self.cands.keys().copied().collect();
        for k in keys {
            let ok = self.cands.get(&k).is_some_and(|c| c.error.is_none());
            if k < until || !ok {
                continue;
            }
            let mut codes = Vec::new();
            if let Ok(e) = self.bundle(k, self.size, budget, &mut codes) {
                until = e;
                out.extend(codes);
            }
        }
        Ok(out)
    }

    fn walk(
        &mut self,
        region: &Region,
        budget: &mut Budget,
        out: &mut Vec<AmdCode>,
    ) -> Result<u64, FatbinError> {
        let end = region_end(region)?;
        let mut at = region.offset;
        loop {
            let next = self.bundle(at, end, budget, out)?;
            if !region.whole_section {
                return Ok(next);
            }
            // As walk::next_bundle: right at the end, else the next
            // 4-aligned magic.
            let following = if self.cands.contains_key(&next) {
                Some(next)
            } else {
                self.cands
                    .range(next..end)
                    .map(|(k, _)| *k)
                    .find(|k| k % 4 == 0 && k + 4 <= end)
            };
            match following {
                Some(k) => at = k,
                None => return Ok(end),
            }
        }
    }

    /// Lists the candidate at `at`, which must end by `limit`; returns its end.
    fn bundle(
        &self,
        at: u64,
        limit: u64,
        budget: &mut Budget,
        out: &mut Vec<AmdCode>,
    ) -> Result<u64, FatbinError> {
        let Some(c) = self.cands.get(&at) else {
            return Err(bad(at, "no offload bundle magic where one must start"));
        };
        if let Some(e) = &c.error {
            return Err(bad(at, e.clone()));
        }
        let end = match c.end {
            Some(e) if e <= limit => e,
            Some(_) if c.compressed => {
                return Err(bad(at, "its total size runs past the end of its section"))
            }
            Some(_) => return Err(bad(at, "an entry runs past the end of its section")),
            // v1: up to the next compressed bundle.
            None => self
                .cands
                .range(at + 4..limit)
                .find(|(k, c)| c.compressed && *k % 4 == 0)
                .map_or(limit, |(k, _)| *k),
        };
        for (i, e) in c.entries.iter().enumerate() {
            budget.take_entry()?;
            let Some(named) = bundle::hip_target(&e.id) else {
                continue;
            };
            if e.size == 0 {
                continue;
            }
            let header = c
                .headers
                .get(i)
                .and_then(|h| h.as_deref())
                .and_then(|h| code_object::parse_header(h).ok());
            out.push(entry_code(at, e, named, header, c.compressed)?);
        }
        Ok(end)
    }
}

/// Does a bundle magic start `w`?
fn starts_magic(w: &[u8]) -> bool {
    w.starts_with(CCOB_MAGIC) || w.starts_with(BUNDLE_MAGIC)
}

/// Candidate `c` (a bundle at file offset `k`) takes `slice`, the stream's
/// bytes from `from` (>= k) on.
fn step(c: &mut Cand, k: u64, from: u64, slice: &[u8], size: u64) -> Result<(), String> {
    match &c.state {
        State::Table(_) => step_table(c, k, from, slice, size),
        State::CcobHeader(_) => step_ccob_header(c, k, from, slice, size),
        State::Ccob(..) => step_ccob(c, from, slice, size),
        State::Headers => catch_headers(c, k, from, slice),
        State::Done => Ok(()),
    }
}

/// A plain bundle's table, buffered until complete.
fn step_table(c: &mut Cand, k: u64, from: u64, slice: &[u8], size: u64) -> Result<(), String> {
    let State::Table(buf) = &mut c.state else {
        return Ok(());
    };
    let need = k + buf.len() as u64;
    let Some(slice) = from_offset(slice, from, need) else {
        return Ok(());
    };
    let from = need;
    let want = (bundle::MAX_TABLE_BYTES as usize + 1).saturating_sub(buf.len());
    buf.extend_from_slice(&slice[..slice.len().min(want)]);
    match bundle::parse_table(buf, size - k)? {
        Table::NeedMore if k + buf.len() as u64 >= size => {
            Err("its entry table runs past the end of its section".into())
        }
        Table::NeedMore => Ok(()),
        Table::Complete { entries, end } => {
            let buf = std::mem::take(buf);
            let bundle_end = entries
                .iter()
                .map(|e| e.offset + e.size)
                .fold(end, u64::max);
            c.headers = vec![None; entries.len()];
            c.entries = entries;
            c.end = Some(k + bundle_end);
            c.state = State::Headers;
            catch_headers(c, k, k, &buf)?;
            catch_headers(c, k, from, slice)
        }
    }
}

/// A compressed bundle's header, buffered until complete; then its data.
fn step_ccob_header(
    c: &mut Cand,
    k: u64,
    from: u64,
    slice: &[u8],
    size: u64,
) -> Result<(), String> {
    let State::CcobHeader(buf) = &mut c.state else {
        return Ok(());
    };
    let full = 32usize.min((size - k) as usize);
    let need = k + buf.len() as u64;
    let Some(slice) = from_offset(slice, from, need) else {
        return Ok(());
    };
    let take = slice.len().min(full - buf.len());
    buf.extend_from_slice(&slice[..take]);
    if buf.len() < full {
        return Ok(());
    }
    let h = ccob::parse_header(buf)?;
    if let Some(t) = h.total_size {
        if t > size - k {
            return Err(format!(
                "its total size {t} runs past the end of its section"
            ));
        }
        c.end = Some(k + t);
    }
    let dec = PrefixDecoder::new(h.method, h.uncompressed_size)?;
    let data_at = k + h.header_size;
    // The 32 bytes buffered may hold the start of the data already (v1 and
    // v2 headers are shorter).
    let early = buf[h.header_size as usize..].to_vec();
    let rest_at = k + buf.len() as u64;
    c.state = State::Ccob(h, Box::new(dec), data_at);
    if !early.is_empty() {
        step_ccob(c, data_at, &early, size)?;
    }
    if take < slice.len() {
        return step(c, k, rest_at, &slice[take..], size);
    }
    Ok(())
}

/// A compressed bundle's data, fed to its decoder until the table is complete.
fn step_ccob(c: &mut Cand, from: u64, slice: &[u8], size: u64) -> Result<(), String> {
    let data_end = c.end.unwrap_or(size);
    let State::Ccob(h, dec, next) = &mut c.state else {
        return Ok(());
    };
    let lo = from.max(*next);
    let hi = (from + slice.len() as u64).min(data_end);
    if lo < hi && !dec.done() && lo == *next {
        let used = dec.feed(&slice[(lo - from) as usize..(hi - from) as usize])?;
        *next += used as u64;
    }
    match bundle::parse_table(dec.output(), h.uncompressed_size)? {
        Table::Complete { entries, .. } => {
            c.entries = entries;
            c.state = State::Done;
            Ok(())
        }
        Table::NeedMore if dec.done() || hi >= data_end => {
            Err(table_cut_reason(dec, hi >= data_end))
        }
        Table::NeedMore => Ok(()),
    }
}

/// `slice` (at file offset `from`) from offset `need` on; None when it
/// ends before.
fn from_offset(slice: &[u8], from: u64, need: u64) -> Option<&[u8]> {
    let skip = need.checked_sub(from)?;
    slice.get(skip as usize..).filter(|s| !s.is_empty())
}

/// Copies into each entry's header buffer the bytes of `slice` (at file
/// offset `from`) of its first 64 bytes; done when all are caught. A header
/// whose bytes went by before the table was complete is an error (the
/// positioned walk reads it, so the stream cannot answer differently).
fn catch_headers(c: &mut Cand, k: u64, from: u64, slice: &[u8]) -> Result<(), String> {
    let to = from + slice.len() as u64;
    let mut waiting = false;
    for (i, e) in c.entries.iter().enumerate() {
        if e.size < 64 || bundle::hip_target(&e.id).is_none() {
            continue;
        }
        let buf = c.headers[i].get_or_insert_with(Vec::new);
        if buf.len() >= 64 {
            continue;
        }
        let want = k + e.offset + buf.len() as u64;
        if want < from {
            return Err("an entry's code object lies before its bundle's table ends".into());
        }
        if want < to {
            let s = (want - from) as usize;
            let n = (64 - buf.len()).min(slice.len() - s);
            buf.extend_from_slice(&slice[s..s + n]);
        }
        if buf.len() < 64 {
            waiting = true;
        }
    }
    if !waiting {
        c.state = State::Done;
    }
    Ok(())
}
