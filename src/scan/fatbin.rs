//! Walks CUDA fat binary containers and their entry headers, without ever
//! reading (or decompressing) an entry's payload.
//!
//! NVIDIA does not publish the layout. What follows was worked out with
//! NVIDIA's own tools (fatbinary, nvcc and cuobjdump 13.5 from the
//! nvidia-cuda-nvcc / nvidia-cuda-cuobjdump wheels: build images with
//! `fatbinary --create --image3=kind=elf|ptx,sm=...`, dump the headers and
//! compare with `cuobjdump -elf -ptx`).
//! integration/make-fatbin-fixtures.sh rebuilds the fixtures the tests
//! compare against cuobjdump.
//!
//! Container header, 16 bytes:
//!   u32 magic 0xBA55ED50, u16 version (1), u16 header size (16), u64 size of
//!   the entries that follow. Containers follow one another to the end of
//!   the section (nvcc -shared puts one per translation unit there).
//! Entry header, at least 64 bytes, all little-endian:
//!   0 u16 kind (1 PTX, 2 ELF/cubin, 0x100 a group of cubins concatenated
//!     and compressed together, `fatbinary --concat`)
//!   2 u16 format version (0x0101)   4 u32 header size
//!   8 u64 payload size (padded)    16 u32 compressed size (0 if stored)
//!  20 u32 offset of the options block in this header (0 if none)
//!  24 u16 minor, 26 u16 major: PTX ISA for PTX (cuobjdump "code version
//!     = [9,5]"), the cubin ABI for ELF ([1,8])
//!  28 u32 architecture number (80 = sm_80, 100 = sm_100)
//!  32 u32 offset, 36 u32 length of the identifier (`fatbinary --ident`)
//!  40 u64 flags: 0x1 64-bit, 0x10 Linux, 0x2000 LZ4-compressed
//!     (`--compress-mode=speed`), 0x8000 Zstandard-compressed (default and
//!     `size`), 0x100000 architecture-specific (`sm_90a`), 0x200000
//!     family-specific (`sm_100f`)
//!  48 u64 zero, 56 u64 uncompressed payload size
//! The next entry starts at this one + header size + payload size.
//! A concatenated group (kind 0x100) carries, at header offset 64, u32 count
//! and u32 table length (including these 8 bytes), then one 64-byte header
//! per cubin in the compressed payload, each extended by its options block
//! (u32 offset, u32 length, then that many bytes, NUL-terminated, padded to
//! 8), where the header-size field holds the cubin's offset in the
//! uncompressed payload instead.

use super::elf::{self, ElfError, Region};
use super::read::{read_exact_at, u16_at, u32_at, u64_at, ReadAt};
use crate::core::arch::{Arch, Kind, Variant};
use std::time::Instant;

/// Container magic.
pub const FATBIN_MAGIC: u32 = 0xBA55ED50;
const CONTAINER_HEADER: u64 = 16;
const ENTRY_HEADER_MIN: u64 = 64;
/// The largest entry header we read. Plain entries have 64-120 bytes; a
/// concatenated group adds about 120 per cubin.
const ENTRY_HEADER_MAX: u64 = 1 << 20;

const KIND_PTX: u16 = 1;
const KIND_ELF: u16 = 2;
const KIND_CONCAT: u16 = 0x100;

const FLAG_LZ4: u64 = 0x2000;
const FLAG_ZSTD: u64 = 0x8000;
const FLAG_ARCH_SPECIFIC: u64 = 0x10_0000;
const FLAG_FAMILY_SPECIFIC: u64 = 0x20_0000;

/// One embedded image, as `cuobjdump --list-elf --list-ptx` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    pub kind: Kind,
    pub arch: Arch,
    /// PTX ISA `(major, minor)` for PTX entries.
    pub ptx_isa: Option<(u16, u16)>,
    pub compressed: bool,
}

/// Work allowed for one scan; shared by every file of one container.
#[derive(Clone, Debug)]
pub struct Budget {
    /// Entry headers that may still be read.
    pub entries_left: u64,
    /// Stop at this instant.
    pub deadline: Option<Instant>,
}

impl Budget {
    pub fn unlimited() -> Budget {
        Budget {
            entries_left: u64::MAX,
            deadline: None,
        }
    }

    pub(crate) fn take_entry(&mut self) -> Result<(), FatbinError> {
        if self.entries_left == 0 {
            return Err(FatbinError::EntryBudget);
        }
        self.entries_left -= 1;
        self.check_time()
    }

    /// The time budget alone (for work that is not an entry).
    pub(crate) fn check_time(&self) -> Result<(), FatbinError> {
        if let Some(d) = self.deadline {
            if Instant::now() >= d {
                return Err(FatbinError::TimeBudget);
            }
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FatbinError {
    #[error(transparent)]
    Elf(#[from] ElfError),
    #[error("cannot read fatbin data at offset {offset:#x}: {source}")]
    Io {
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("no fatbin container at offset {0:#x} (bad magic)")]
    BadMagic(u64),
    #[error("fatbin container at offset {offset:#x} has unsupported version {version}")]
    Version { offset: u64, version: u16 },
    #[error("fatbin container at offset {offset:#x} has a bad header size {size}")]
    ContainerHeader { offset: u64, size: u16 },
    #[error(
        "fatbin container at offset {offset:#x} ({size} bytes) runs past the end of its section"
    )]
    ContainerPastEnd { offset: u64, size: u64 },
    #[error("fatbin entry at offset {offset:#x} has a bad header size {size}")]
    EntryHeader { offset: u64, size: u64 },
    #[error("fatbin entry at offset {offset:#x} runs past the end of its container")]
    EntryPastEnd { offset: u64 },
    #[error("concatenated fatbin entry at offset {offset:#x} has a table that does not add up")]
    Concat { offset: u64 },
    #[error("not an ELF file or fat binary")]
    NotElf,
    /// A HIP offload bundle (scan::amd) that cannot be read.
    #[error("offload bundle at offset {offset:#x}: {what}")]
    Bundle { offset: u64, what: String },
    #[error("the entry budget ran out")]
    EntryBudget,
    #[error("the time budget ran out")]
    TimeBudget,
}

impl FatbinError {
    /// Budget errors stop the scan of a container; others concern one file.
    pub fn is_budget(&self) -> bool {
        matches!(self, FatbinError::EntryBudget | FatbinError::TimeBudget)
    }
}

fn io(offset: u64) -> impl FnOnce(std::io::Error) -> FatbinError {
    move |source| FatbinError::Io { offset, source }
}

/// Lists the device code in an ELF file, or in a bare fat binary (a
/// `.fatbin` file as `fatbinary --create` writes it), calling `visit` for
/// each entry in file order.
pub fn scan_image<R: ReadAt + ?Sized>(
    r: &R,
    budget: &mut Budget,
    visit: &mut dyn FnMut(Entry),
) -> Result<(), FatbinError> {
    let mut magic = [0u8; 4];
    if r.size() < 4 {
        return Err(FatbinError::NotElf);
    }
    read_exact_at(r, &mut magic, 0).map_err(io(0))?;
    if elf::is_elf(&magic) {
        // Regions come sorted by offset; one that starts inside what was
        // already walked (a wrapper pointing into `.nv_fatbin`, overlapping
        // sections) is skipped, so every byte is walked at most once.
        let mut done_until = 0u64;
        for region in elf::fatbin_regions(r)? {
            if region.offset < done_until {
                continue;
            }
            done_until = walk_region(r, &region, budget, visit)?;
        }
        Ok(())
    } else if u32::from_le_bytes(magic) == FATBIN_MAGIC {
        let region = Region {
            offset: 0,
            size: r.size(),
            whole_section: true,
        };
        walk_region(r, &region, budget, visit).map(|_| ())
    } else {
        Err(FatbinError::NotElf)
    }
}

/// Where `region` ends; a region whose end overflows is an error, not a wrap.
pub(crate) fn region_end(region: &Region) -> Result<u64, FatbinError> {
    region
        .offset
        .checked_add(region.size)
        .ok_or(FatbinError::ContainerPastEnd {
            offset: region.offset,
            size: region.size,
        })
}

/// Walks the containers of one region; returns the offset it walked to
/// (the section's end, or the end of a wrapper's container).
pub fn walk_region<R: ReadAt + ?Sized>(
    r: &R,
    region: &Region,
    budget: &mut Budget,
    visit: &mut dyn FnMut(Entry),
) -> Result<u64, FatbinError> {
    let end = region_end(region)?;
    let mut at = region.offset;
    loop {
        if end - at < CONTAINER_HEADER {
            // Fewer bytes than a header: alignment padding, if anything.
            return Ok(end);
        }
        at = walk_container(r, at, end, budget, visit)?;
        if !region.whole_section {
            return Ok(at);
        }
    }
}

/// Walks one container at `at` that must end by `limit`; returns its end.
fn walk_container<R: ReadAt + ?Sized>(
    r: &R,
    at: u64,
    limit: u64,
    budget: &mut Budget,
    visit: &mut dyn FnMut(Entry),
) -> Result<u64, FatbinError> {
    let mut h = [0u8; 16];
    read_exact_at(r, &mut h, at).map_err(io(at))?;
    if u32_at(&h, 0) != FATBIN_MAGIC {
        return Err(FatbinError::BadMagic(at));
    }
    let version = u16_at(&h, 4);
    if version != 1 {
        return Err(FatbinError::Version {
            offset: at,
            version,
        });
    }
    let header_size = u16_at(&h, 6);
    if (header_size as u64) < CONTAINER_HEADER {
        return Err(FatbinError::ContainerHeader {
            offset: at,
            size: header_size,
        });
    }
    let fat_size = u64_at(&h, 8);
    let start = at + header_size as u64;
    let end = match start.checked_add(fat_size) {
        Some(e) if e <= limit => e,
        _ => {
            return Err(FatbinError::ContainerPastEnd {
                offset: at,
                size: fat_size,
            })
        }
    };
    let mut e = start;
    while e < end {
        e = walk_entry(r, e, end, budget, visit)?;
    }
    Ok(end)
}

/// Reads the entry header at `at` (container ends at `end`); returns the
/// next entry's offset. Each entry advances by at least 64 bytes, so a
/// hostile container cannot loop.
pub(crate) fn walk_entry<R: ReadAt + ?Sized>(
    r: &R,
    at: u64,
    end: u64,
    budget: &mut Budget,
    visit: &mut dyn FnMut(Entry),
) -> Result<u64, FatbinError> {
    budget.take_entry()?;
    if end - at < ENTRY_HEADER_MIN {
        return Err(FatbinError::EntryPastEnd { offset: at });
    }
    let mut fixed = [0u8; 64];
    read_exact_at(r, &mut fixed, at).map_err(io(at))?;
    let kind = u16_at(&fixed, 0);
    let header_size = u32_at(&fixed, 4) as u64;
    let payload = u64_at(&fixed, 8);
    if !(ENTRY_HEADER_MIN..=ENTRY_HEADER_MAX).contains(&header_size) {
        return Err(FatbinError::EntryHeader {
            offset: at,
            size: header_size,
        });
    }
    let next = match at
        .checked_add(header_size)
        .and_then(|x| x.checked_add(payload))
    {
        Some(n) if n <= end => n,
        _ => return Err(FatbinError::EntryPastEnd { offset: at }),
    };
    let flags = u64_at(&fixed, 40);
    let compressed = flags & (FLAG_LZ4 | FLAG_ZSTD) != 0;
    match kind {
        KIND_PTX | KIND_ELF => visit(entry_from(&fixed, compressed)),
        KIND_CONCAT => {
            let mut hdr = vec![0u8; header_size as usize];
            read_exact_at(r, &mut hdr, at).map_err(io(at))?;
            walk_concat(&hdr, at, compressed, budget, visit)?;
        }
        // Other kinds (future image kinds) hold neither SASS nor PTX.
        _ => {}
    }
    Ok(next)
}

fn entry_from(h: &[u8], compressed: bool) -> Entry {
    let kind = if u16_at(h, 0) == KIND_PTX {
        Kind::Ptx
    } else {
        Kind::Sass
    };
    let flags = u64_at(h, 40);
    let variant = if flags & FLAG_ARCH_SPECIFIC != 0 {
        Variant::Arch
    } else if flags & FLAG_FAMILY_SPECIFIC != 0 {
        Variant::Family
    } else {
        Variant::Plain
    };
    let arch = Arch::new(u32_at(h, 28), variant);
    let ptx_isa = match kind {
        Kind::Ptx => Some((u16_at(h, 26), u16_at(h, 24))),
        Kind::Sass => None,
    };
    Entry {
        kind,
        arch,
        ptx_isa,
        compressed,
    }
}

/// The cubins listed in a concatenated group's header.
fn walk_concat(
    hdr: &[u8],
    at: u64,
    compressed: bool,
    budget: &mut Budget,
    visit: &mut dyn FnMut(Entry),
) -> Result<(), FatbinError> {
    let bad = || FatbinError::Concat { offset: at };
    let count = u32_at(hdr, 64) as usize;
    let table_len = u32_at(hdr, 68) as usize;
    if hdr.len() < 72 || table_len < 8 || 64 + table_len > hdr.len() {
        return Err(bad());
    }
    let table_end = 64 + table_len;
    let mut p = 72usize;
    for _ in 0..count {
        if p + 64 > table_end {
            return Err(bad());
        }
        let sub = &hdr[p..table_end];
        let kind = u16_at(sub, 0);
        let len = sub_entry_len(sub).ok_or_else(bad)?;
        if p + len > table_end {
            return Err(bad());
        }
        if kind == KIND_PTX || kind == KIND_ELF {
            budget.take_entry()?;
            visit(entry_from(sub, compressed));
        }
        p += len;
    }
    if p != table_end {
        return Err(bad());
    }
    Ok(())
}

/// The length of one header in a concatenated group's table: 64 bytes plus
/// the options block and identifier it points at, NUL-terminated and padded
/// to 8 (the same rule gives the 64/80/104/112/120-byte headers of plain
/// entries in cuBLAS, cuRAND and our fixtures).
fn sub_entry_len(sub: &[u8]) -> Option<usize> {
    let mut len = 64usize;
    let opt = u32_at(sub, 20) as usize;
    if opt != 0 {
        if opt < 64 || opt + 8 > sub.len() {
            return None;
        }
        let o_off = u32_at(sub, opt) as usize;
        let o_len = u32_at(sub, opt + 4) as usize;
        len = len
            .max(opt + 8)
            .max(align8(o_off.checked_add(o_len)?.checked_add(1)?)?);
    }
    let id_off = u32_at(sub, 32) as usize;
    let id_len = u32_at(sub, 36) as usize;
    if id_len != 0 {
        len = len.max(align8(id_off.checked_add(id_len)?.checked_add(1)?)?);
    }
    Some(len)
}

fn align8(n: usize) -> Option<usize> {
    n.checked_add(7).map(|v| v & !7)
}

/// Collects every entry of an in-memory image (tests, fuzzing).
pub fn entries_of(bytes: &[u8]) -> Result<Vec<Entry>, FatbinError> {
    let mut out = Vec::new();
    scan_image(bytes, &mut Budget::unlimited(), &mut |e| out.push(e))?;
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A plain entry header + payload.
    pub fn entry(kind: u16, arch: u32, isa: (u16, u16), flags: u64, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        h[4..8].copy_from_slice(&64u32.to_le_bytes());
        h[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        h[24..26].copy_from_slice(&isa.1.to_le_bytes());
        h[26..28].copy_from_slice(&isa.0.to_le_bytes());
        h[28..32].copy_from_slice(&arch.to_le_bytes());
        h[40..48].copy_from_slice(&flags.to_le_bytes());
        h.extend_from_slice(payload);
        h
    }

    pub fn container(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut c = Vec::new();
        c.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        c.extend_from_slice(&1u16.to_le_bytes());
        c.extend_from_slice(&16u16.to_le_bytes());
        c.extend_from_slice(&(body.len() as u64).to_le_bytes());
        c.extend_from_slice(&body);
        c
    }

    #[test]
    fn walks_entries_and_containers() {
        let a = container(&[
            entry(2, 80, (1, 8), 0x11, &[0u8; 16]),
            entry(1, 90, (9, 5), 0x8011, &[0u8; 8]),
        ]);
        let b = container(&[
            entry(2, 90, (1, 8), 0x100011, &[]),
            entry(2, 100, (1, 8), 0x1200011, &[1, 2, 3, 4, 5, 6, 7, 8]),
            entry(7, 0, (0, 0), 0, &[]),
        ]);
        let fat = [a, b].concat();
        let got = entries_of(&fat).unwrap();
        let names: Vec<String> = got.iter().map(|e| e.arch.name(e.kind)).collect();
        assert_eq!(names, ["sm_80", "compute_90", "sm_90a", "sm_100f"]);
        assert_eq!(got[1].ptx_isa, Some((9, 5)));
        assert!(got[1].compressed);
        assert!(!got[0].compressed);
    }

    #[test]
    fn hostile_sizes_are_errors_not_loops() {
        // Header size 0: would not advance.
        let mut zero = entry(2, 80, (1, 8), 0, &[]);
        zero[4..8].copy_from_slice(&0u32.to_le_bytes());
        let c = container(&[zero]);
        assert!(matches!(
            entries_of(&c),
            Err(FatbinError::EntryHeader { .. })
        ));
        // Payload past the container.
        let mut big = entry(2, 80, (1, 8), 0, &[]);
        big[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            entries_of(&container(&[big])),
            Err(FatbinError::EntryPastEnd { .. })
        ));
        // Container size past the end of the data.
        let mut c = container(&[entry(2, 80, (1, 8), 0, &[])]);
        c[8..16].copy_from_slice(&(1u64 << 62).to_le_bytes());
        assert!(matches!(
            entries_of(&c),
            Err(FatbinError::ContainerPastEnd { .. })
        ));
        // Garbage after a container.
        let mut c = container(&[entry(2, 80, (1, 8), 0, &[])]);
        c.extend_from_slice(&[0xAAu8; 32]);
        assert!(matches!(entries_of(&c), Err(FatbinError::BadMagic(_))));
        // Unknown container version.
        let mut c = container(&[]);
        c[4] = 9;
        assert!(matches!(entries_of(&c), Err(FatbinError::Version { .. })));
        assert!(matches!(entries_of(b"junk"), Err(FatbinError::NotElf)));
    }

    #[test]
    fn budgets_stop_the_walk() {
        let many: Vec<Vec<u8>> = (0..100).map(|_| entry(2, 80, (1, 8), 0, &[])).collect();
        let c = container(&many);
        let mut b = Budget {
            entries_left: 10,
            deadline: None,
        };
        let mut n = 0;
        let r = scan_image(c.as_slice(), &mut b, &mut |_| n += 1);
        assert!(matches!(r, Err(FatbinError::EntryBudget)));
        assert_eq!(n, 10);
        let mut b = Budget {
            entries_left: u64::MAX,
            deadline: Some(Instant::now()),
        };
        assert!(matches!(
            scan_image(c.as_slice(), &mut b, &mut |_| {}),
            Err(FatbinError::TimeBudget)
        ));
    }

    #[test]
    fn concatenated_group() {
        // Two 64-byte sub-headers (sm_80, sm_90a) as fatbinary --concat writes them.
        let sub = |arch: u32, flags: u64, off: u32| {
            let mut s = entry(2, arch, (1, 8), flags, &[]);
            s[4..8].copy_from_slice(&off.to_le_bytes());
            s
        };
        let mut h = entry(0x100, 0, (0, 1), 0x8011, &[]);
        h.extend_from_slice(&2u32.to_le_bytes());
        h.extend_from_slice(&(8u32 + 128).to_le_bytes());
        h.extend_from_slice(&sub(80, 0x11, 0));
        h.extend_from_slice(&sub(90, 0x100011, 3240));
        let hs = h.len() as u32;
        h[4..8].copy_from_slice(&hs.to_le_bytes());
        h.extend_from_slice(&[0u8; 16]); // payload
        h[8..16].copy_from_slice(&16u64.to_le_bytes());
        let got = entries_of(&container(&[h.clone()])).unwrap();
        let names: Vec<String> = got.iter().map(|e| e.arch.sass_name()).collect();
        assert_eq!(names, ["sm_80", "sm_90a"]);
        assert!(got.iter().all(|e| e.compressed));
        // A count that overruns the table is an error.
        let mut bad = h;
        bad[64..68].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            entries_of(&container(&[bad])),
            Err(FatbinError::Concat { .. })
        ));
    }
}
