//! Lists the AMD code objects of a file with positioned reads: an ELF
//! library's `.hip_fatbin` sections and the bundles its `.hipFatBinSegment`
//! wrappers point at (as the HIP runtime finds them: ROCm CLR
//! hip_platform.cpp, `__hipRegisterFatBinary` gets each wrapper's
//! `binary`), a bare bundle file, or a bare code object (`.hsaco`, `.co`).
//!
//! A `.hip_fatbin` section holds one bundle per translation unit, each
//! aligned (clang emits the section 4096-aligned). After a bundle (a plain
//! one ends with its last code object, a compressed one after its total
//! size), the next starts at the next bundle magic at a 4-aligned offset,
//! as LLVM's extractOffloadBundle finds the next one by its magic; the
//! streaming reader ([`super::stream`]) finds the same candidates.
//! Payloads are never read, except 64 bytes of each plain entry (its ELF
//! header) and the start of each compressed bundle (its entry table).

use super::bundle::{self, RawEntry, Table, BUNDLE_MAGIC};
use super::ccob::{self, PrefixDecoder, CCOB_MAGIC};
use super::code_object::{self, CodeObjectHeader};
use crate::core::amd::{AmdCode, TargetId};
use crate::scan::elf::{self, Region, HIP};
use crate::scan::fatbin::{region_end, Budget, FatbinError};
use crate::scan::read::{read_exact_at, ReadAt};

/// Reads that search or grow start at this many bytes.
const FIRST_READ: u64 = 4 << 10;
/// And grow up to this.
const CHUNK: u64 = 256 << 10;

fn io(offset: u64) -> impl FnOnce(std::io::Error) -> FatbinError {
    move |source| FatbinError::Io { offset, source }
}

pub(crate) fn bad(offset: u64, what: impl Into<String>) -> FatbinError {
    FatbinError::Bundle {
        offset,
        what: what.into(),
    }
}

/// Calls `visit` for every AMD code object of `r`, in file order.
pub fn scan_image<R: ReadAt + ?Sized>(
    r: &R,
    budget: &mut Budget,
    visit: &mut dyn FnMut(AmdCode),
) -> Result<(), FatbinError> {
    let size = r.size();
    let mut head = [0u8; 64];
    let n = size.min(64) as usize;
    if n < 4 {
        return Err(FatbinError::NotElf);
    }
    read_exact_at(r, &mut head[..n], 0).map_err(io(0))?;
    let head = &head[..n];
    if code_object::is_amdgpu_elf(head) {
        return bare_code_object(head, budget, visit);
    }
    if elf::is_elf(head) {
        let mut done_until = 0u64;
        for region in elf::regions(r, &HIP)? {
            if region.offset < done_until {
                continue;
            }
            done_until = walk_region(r, &region, budget, visit)?;
        }
        return Ok(());
    }
    if bundle::starts_bundle(head) {
        let whole = Region {
            offset: 0,
            size,
            whole_section: true,
        };
        return walk_region(r, &whole, budget, visit).map(|_| ());
    }
    Err(FatbinError::NotElf)
}

/// A file that is itself a code object.
pub(crate) fn bare_code_object(
    head: &[u8],
    budget: &mut Budget,
    visit: &mut dyn FnMut(AmdCode),
) -> Result<(), FatbinError> {
    budget.take_entry()?;
    let h = code_object::parse_header(head).map_err(|e| bad(0, e.to_string()))?;
    visit(AmdCode {
        arch: h.target.to_string(),
        compressed: false,
        code_object_version: Some(h.version),
    });
    Ok(())
}

/// Walks the bundles of a region; returns where the walk ended.
pub fn walk_region<R: ReadAt + ?Sized>(
    r: &R,
    region: &Region,
    budget: &mut Budget,
    visit: &mut dyn FnMut(AmdCode),
) -> Result<u64, FatbinError> {
    let end = region_end(region)?;
    let mut at = region.offset;
    loop {
        let next = walk_bundle(r, at, end, budget, visit)?;
        if !region.whole_section {
            return Ok(next);
        }
        match next_bundle(r, next, end, budget)? {
            Some(m) => at = m,
            None => return Ok(end),
        }
    }
}

/// Where the bundle after one that ended at `from` starts: right there
/// (bundles concatenated back to back), else at the next 4-aligned magic.
fn next_bundle<R: ReadAt + ?Sized>(
    r: &R,
    from: u64,
    end: u64,
    budget: &Budget,
) -> Result<Option<u64>, FatbinError> {
    let mut b = [0u8; 24];
    let n = end.saturating_sub(from).min(24) as usize;
    read_exact_at(r, &mut b[..n], from).map_err(io(from))?;
    if b[..n].starts_with(BUNDLE_MAGIC) || b[..n].starts_with(CCOB_MAGIC) {
        return Ok(Some(from));
    }
    find_magic(r, from, end, budget, false)
}

/// The first 4-aligned offset in `[from, end)` where a bundle magic starts
/// (only `CCOB` with `only_ccob`: a v1 compressed bundle ends where the next
/// one starts, and its compressed data may hold the plain magic as
/// literals).
pub(crate) fn find_magic<R: ReadAt + ?Sized>(
    r: &R,
    from: u64,
    end: u64,
    budget: &Budget,
    only_ccob: bool,
) -> Result<Option<u64>, FatbinError> {
    let mut at = from.div_ceil(4) * 4;
    let mut want = FIRST_READ;
    let mut buf = Vec::new();
    while at + 4 <= end {
        budget.check_time()?;
        // Read a little past the chunk so a magic across its end is seen.
        let n = (want + 24).min(end - at);
        buf.resize(n as usize, 0);
        read_exact_at(r, &mut buf, at).map_err(io(at))?;
        let mut k = 0usize;
        while k + 4 <= buf.len() && (k as u64) < want {
            let w = &buf[k..];
            if w.starts_with(CCOB_MAGIC) {
                return Ok(Some(at + k as u64));
            }
            if !only_ccob && w.starts_with(&BUNDLE_MAGIC[..4]) {
                if w.len() >= 24 && w.starts_with(BUNDLE_MAGIC) {
                    return Ok(Some(at + k as u64));
                }
                if w.len() < 24 && at + (k as u64) + 24 <= end {
                    // Cut by the read: look again from here.
                    break;
                }
            }
            k += 4;
        }
        at += (k as u64).max(4);
        want = (want * 2).min(CHUNK);
    }
    Ok(None)
}

/// The bundle at `at`, which must end by `limit`; returns its end.
fn walk_bundle<R: ReadAt + ?Sized>(
    r: &R,
    at: u64,
    limit: u64,
    budget: &mut Budget,
    visit: &mut dyn FnMut(AmdCode),
) -> Result<u64, FatbinError> {
    let mut head = [0u8; 32];
    let n = (limit - at).min(32) as usize;
    read_exact_at(r, &mut head[..n], at).map_err(io(at))?;
    if head[..n].starts_with(BUNDLE_MAGIC) {
        plain_bundle(r, at, limit, budget, visit)
    } else if head[..n].starts_with(CCOB_MAGIC) {
        compressed_bundle(r, at, &head[..n], limit, budget, visit)
    } else {
        Err(bad(at, "no offload bundle magic where one must start"))
    }
}

/// Reads the table of the plain bundle at `at` (at most `size` bytes).
fn read_table<R: ReadAt + ?Sized>(
    r: &R,
    at: u64,
    size: u64,
) -> Result<(Vec<RawEntry>, u64), FatbinError> {
    let mut want = FIRST_READ.min(size);
    let mut buf = vec![0u8; want as usize];
    loop {
        buf.resize(want as usize, 0);
        read_exact_at(r, &mut buf, at).map_err(io(at))?;
        match bundle::parse_table(&buf, size).map_err(|e| bad(at, e))? {
            Table::Complete { entries, end } => return Ok((entries, end)),
            Table::NeedMore if want >= size => {
                return Err(bad(at, "its entry table runs past the end of its section"))
            }
            Table::NeedMore => want = (want * 4).min(size),
        }
    }
}

fn plain_bundle<R: ReadAt + ?Sized>(
    r: &R,
    at: u64,
    limit: u64,
    budget: &mut Budget,
    visit: &mut dyn FnMut(AmdCode),
) -> Result<u64, FatbinError> {
    let (entries, table_end) = read_table(r, at, limit - at)?;
    let mut end = table_end;
    for e in &entries {
        budget.take_entry()?;
        end = end.max(e.offset + e.size);
        let Some(named) = bundle::hip_target(&e.id) else {
            continue;
        };
        if e.size == 0 {
            // The runtime treats an empty entry as no code object.
            continue;
        }
        let header = if e.size >= 64 {
            let mut h = [0u8; 64];
            let off = at + e.offset;
            read_exact_at(r, &mut h, off).map_err(io(off))?;
            code_object::parse_header(&h).ok()
        } else {
            None
        };
        visit(entry_code(at, e, named, header, false)?);
    }
    Ok(at + end)
}

/// The code object of one entry: its target as the entry names it (or, for
/// an entry that names none, as its code object's header says).
pub(crate) fn entry_code(
    bundle_at: u64,
    e: &RawEntry,
    named: Option<&str>,
    header: Option<CodeObjectHeader>,
    compressed: bool,
) -> Result<AmdCode, FatbinError> {
    let arch = match (named, &header) {
        (Some(t), Some(h)) => {
            if let Some(id) = TargetId::parse(t) {
                if id.processor != h.target.processor {
                    return Err(bad(
                        bundle_at,
                        format!(
                            "entry {} holds a code object for {}",
                            crate::core::sanitize::esc_bounded(&e.id, 120),
                            h.target.processor
                        ),
                    ));
                }
            }
            t.to_string()
        }
        (Some(t), None) => t.to_string(),
        (None, Some(h)) => h.target.to_string(),
        (None, None) => {
            return Err(bad(
                bundle_at,
                format!(
                    "entry {} names no target and its code object header cannot be read",
                    crate::core::sanitize::esc_bounded(&e.id, 120)
                ),
            ))
        }
    };
    Ok(AmdCode {
        arch,
        compressed,
        code_object_version: header.map(|h| h.version),
    })
}

fn compressed_bundle<R: ReadAt + ?Sized>(
    r: &R,
    at: u64,
    head: &[u8],
    limit: u64,
    budget: &mut Budget,
    visit: &mut dyn FnMut(AmdCode),
) -> Result<u64, FatbinError> {
    let h = ccob::parse_header(head).map_err(|e| bad(at, e))?;
    let data_start = at + h.header_size;
    let end = match h.total_size {
        Some(t) if t <= limit - at => at + t,
        Some(t) => {
            return Err(bad(
                at,
                format!("its total size {t} runs past the end of its section"),
            ))
        }
        // v1: up to the next compressed bundle, or the end of the section.
        None => find_magic(r, at + 4, limit, budget, true)?.unwrap_or(limit),
    };
    let mut dec = PrefixDecoder::new(h.method, h.uncompressed_size).map_err(|e| bad(at, e))?;
    let mut pos = data_start;
    let mut buf = vec![0u8; 0];
    let mut want = FIRST_READ;
    let table = loop {
        budget.check_time()?;
        if let Table::Complete { entries, .. } =
            bundle::parse_table(dec.output(), h.uncompressed_size).map_err(|e| bad(at, e))?
        {
            break entries;
        }
        if dec.done() || pos >= end {
            return Err(bad(at, table_cut_reason(&dec, pos >= end)));
        }
        let n = want.min(end - pos);
        buf.resize(n as usize, 0);
        read_exact_at(r, &mut buf, pos).map_err(io(pos))?;
        let before = dec.output().len();
        let used = dec.feed(&buf).map_err(|e| bad(at, e))?;
        pos += used as u64;
        if used == 0 && dec.output().len() == before && !dec.done() {
            return Err(bad(at, "its compressed data makes no progress"));
        }
        want = (want * 2).min(CHUNK);
    };
    for e in &table {
        budget.take_entry()?;
        let Some(named) = bundle::hip_target(&e.id) else {
            continue;
        };
        if e.size > 0 {
            visit(entry_code(at, e, named, None, true)?);
        }
    }
    Ok(end)
}

pub(crate) fn table_cut_reason(dec: &PrefixDecoder, input_ended: bool) -> String {
    if dec.output().len() >= ccob::PREFIX_MAX {
        format!(
            "its entry table is not within the first {} decompressed bytes",
            ccob::PREFIX_MAX
        )
    } else if input_ended && !dec.done() {
        "its compressed data ends before its entry table does".into()
    } else {
        "it decompresses to less than its entry table".into()
    }
}

/// Every AMD code object of an in-memory file (tests, fuzzing).
pub fn codes_of(bytes: &[u8]) -> Result<Vec<AmdCode>, FatbinError> {
    let mut out = Vec::new();
    scan_image(bytes, &mut Budget::unlimited(), &mut |c| out.push(c))?;
    Ok(out)
}
