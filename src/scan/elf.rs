//! Finds where an ELF file keeps its CUDA fat binaries (and, with [`HIP`],
//! its HIP offload bundles), reading only the ELF header, the section header
//! table and the section names.
//!
//! NVIDIA's crt/fatbinary_section.h (shipped in the nvidia-cuda-nvcc wheel)
//! names the sections: `.nv_fatbin` holds fatbin data, `__nv_relfatbin` the
//! data of relocatable device code (-rdc), and `.nvFatBinSegment` the
//! `__fatBinC_Wrapper_t` structures { int magic = FATBINC_MAGIC 0x466243B1;
//! int version; const unsigned long long *data; void *filename_or_fatbins }
//! whose `data` points at a fatbin. cuobjdump also finds a fatbin through a
//! wrapper when its section was renamed (checked with cuobjdump 13.5 on a
//! library whose `.nv_fatbin` was renamed with objcopy), so we follow the
//! wrappers too.
//!
//! ELF layout: System V ABI, "Object Files" (ELF header, section header
//! table, the SHN_XINDEX and e_shnum == 0 extensions).

use super::read::{read_exact_at, u16_at, u32_at, u64_at, ReadAt};

/// `FATBINC_MAGIC` in fatbinary_section.h.
pub const FATBINC_MAGIC: u32 = 0x466243B1;
/// `__hipFatMAGIC2` ("HIPF") of the HIP runtime's `__hip_fatbin_wrapper`
/// (clang lib/CodeGen/CGCUDANV.cpp, `makeModuleCtorFunction`; ROCm CLR
/// hipamd/src/hip_platform.cpp `__hipRegisterFatBinary` checks it).
pub const HIP_FATBIN_MAGIC: u32 = 0x48495046;

/// Which sections hold device code, and which hold the wrappers whose
/// pointer leads to it. Both vendors' wrappers are laid out alike:
/// `{ u32 magic; u32 version; pointer to the data; pointer }`
/// (`__fatBinC_Wrapper_t`, `__hip_fatbin_wrapper`).
pub struct RegionSpec {
    /// Data sections, walked whole.
    pub data: &'static [&'static str],
    /// The wrapper section.
    pub wrappers: &'static str,
    pub magic: u32,
}

/// CUDA: `.nv_fatbin` and `__nv_relfatbin` (relocatable device code),
/// wrappers in `.nvFatBinSegment` (crt/fatbinary_section.h).
pub const NVIDIA: RegionSpec = RegionSpec {
    data: &[".nv_fatbin", "__nv_relfatbin"],
    wrappers: ".nvFatBinSegment",
    magic: FATBINC_MAGIC,
};

/// HIP: `.hip_fatbin`, wrappers in `.hipFatBinSegment` (clang
/// lib/CodeGen/CGCUDANV.cpp names both sections).
pub const HIP: RegionSpec = RegionSpec {
    data: &[".hip_fatbin"],
    wrappers: ".hipFatBinSegment",
    magic: HIP_FATBIN_MAGIC,
};

const SHT_NOBITS: u32 = 8;
const SHF_ALLOC: u64 = 0x2;
const SHN_XINDEX: u32 = 0xffff;
const ET_REL: u16 = 1;
/// The most sections the fatbin reader looks at. Shared libraries have
/// tens; a relocatable object built with -ffunction-sections can have many
/// thousands.
const MAX_SECTIONS: u64 = 1 << 20;
/// Section name tables up to this size are read at once; larger ones name by name.
const SMALL_STRTAB: u64 = 64 << 10;
/// Bytes read for one section name: enough for every name looked up.
const NAME_READ: u64 = 32;
/// Section headers are read in chunks of at most this many bytes.
const CHUNK_BYTES: u64 = 64 << 10;
/// The most wrappers we follow (each is 24 bytes in `.nvFatBinSegment`;
/// cuBLASLt 13 has 2,638, one per translation unit).
const MAX_WRAPPERS: u64 = 1 << 16;
/// The most fatbin sections, and allocated sections used to map wrapper
/// pointers, that we keep (real libraries have a handful and a few dozen).
const MAX_KEPT_SECTIONS: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot read the ELF headers: {0}")]
    Io(#[source] std::io::Error),
    #[error("not an ELF file")]
    NotElf,
    #[error("unsupported ELF class {0}")]
    Class(u8),
    #[error("big-endian ELF files are not supported")]
    BigEndian,
    #[error("ELF section header entry size {size} is not {want}, the size of a section header of its class")]
    ShEntSize { size: u16, want: u16 },
    #[error("ELF file has {count} sections, more than the {limit} we read")]
    TooManySections { count: u64, limit: u64 },
    #[error("ELF section name table index {0} is out of range")]
    StrTab(u32),
    #[error("ELF section {name} (offset {offset}, size {size}) runs past the end of the file ({file_size} bytes)")]
    SectionPastEnd {
        name: String,
        offset: u64,
        size: u64,
        file_size: u64,
    },
}

/// A byte range of the file that holds fat binaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    pub offset: u64,
    pub size: u64,
    /// Containers follow one another to the end of a section; a wrapper
    /// points at one container only.
    pub whole_section: bool,
}

/// One section header (System V ABI, "Sections": Elf32_Shdr / Elf64_Shdr).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Section {
    /// Offset of the name in the section name table.
    pub name: u32,
    pub kind: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub align: u64,
}

/// The ELF header's view of the section header table: where it is, how
/// many entries of what size, and which section holds the names. The one
/// reader of section headers for every scanner ([`fatbin_regions`],
/// the compat note reader).
pub(crate) struct SectionTable {
    pub is64: bool,
    pub e_type: u16,
    shoff: u64,
    entsize: u64,
    /// The number of sections, from the header or section 0.
    pub count: u64,
    strndx: u32,
}

pub const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];

/// The ELF header fields that locate the section header table.
struct Header {
    is64: bool,
    e_type: u16,
    shoff: u64,
    shentsize: u16,
    shnum: u64,
    shstrndx: u32,
}

fn header<R: ReadAt + ?Sized>(r: &R) -> Result<Header, ElfError> {
    let mut h = [0u8; 64];
    let n = r.size().min(64) as usize;
    read_exact_at(r, &mut h[..n], 0).map_err(ElfError::Io)?;
    if n < 16 || h[..4] != ELF_MAGIC {
        return Err(ElfError::NotElf);
    }
    let is64 = match h[4] {
        1 => false,
        2 => true,
        c => return Err(ElfError::Class(c)),
    };
    if h[5] != 1 {
        return Err(ElfError::BigEndian);
    }
    let need = if is64 { 64 } else { 52 };
    if n < need {
        return Err(ElfError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "file ends inside the ELF header",
        )));
    }
    let e_type = u16_at(&h, 16);
    Ok(if is64 {
        Header {
            is64,
            e_type,
            shoff: u64_at(&h, 0x28),
            shentsize: u16_at(&h, 0x3a),
            shnum: u16_at(&h, 0x3c) as u64,
            shstrndx: u16_at(&h, 0x3e) as u32,
        }
    } else {
        Header {
            is64,
            e_type,
            shoff: u32_at(&h, 0x20) as u64,
            shentsize: u16_at(&h, 0x2e),
            shnum: u16_at(&h, 0x30) as u64,
            shstrndx: u16_at(&h, 0x32) as u32,
        }
    })
}

fn parse_section(b: &[u8], is64: bool) -> Section {
    if is64 {
        Section {
            name: u32_at(b, 0),
            kind: u32_at(b, 4),
            flags: u64_at(b, 8),
            addr: u64_at(b, 16),
            offset: u64_at(b, 24),
            size: u64_at(b, 32),
            link: u32_at(b, 40),
            align: u64_at(b, 48),
        }
    } else {
        Section {
            name: u32_at(b, 0),
            kind: u32_at(b, 4),
            flags: u32_at(b, 8) as u64,
            addr: u32_at(b, 12) as u64,
            offset: u32_at(b, 16) as u64,
            size: u32_at(b, 20) as u64,
            link: u32_at(b, 24),
            align: u32_at(b, 32) as u64,
        }
    }
}

fn overflow() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "offset overflows")
}

impl SectionTable {
    /// Reads the ELF header and, when e_shnum or e_shstrndx do not fit its
    /// 16-bit fields, section 0 (sh_size holds the count, sh_link the name
    /// table index). `None`: the file has no section header table
    /// (stripped with sstrip). More than `max_sections`, or a table of
    /// more than `max_table_bytes`, is an error before it is read.
    ///
    /// e_shentsize must be the class's section header size, 40 or 64
    /// bytes (System V ABI, "ELF Header": e_shentsize is sizeof(ElfN_Shdr);
    /// every linker writes exactly that): a hostile one of up to 65,535
    /// would make every header read cost that much.
    pub fn read<R: ReadAt + ?Sized>(
        r: &R,
        max_sections: u64,
        max_table_bytes: u64,
    ) -> Result<Option<SectionTable>, ElfError> {
        let h = header(r)?;
        if h.shoff == 0 {
            return Ok(None);
        }
        let want: u16 = if h.is64 { 64 } else { 40 };
        if h.shentsize != want {
            return Err(ElfError::ShEntSize {
                size: h.shentsize,
                want,
            });
        }
        let mut t = SectionTable {
            is64: h.is64,
            e_type: h.e_type,
            shoff: h.shoff,
            entsize: h.shentsize as u64,
            count: h.shnum,
            strndx: h.shstrndx,
        };
        if t.count == 0 || t.strndx == SHN_XINDEX {
            let first = t.section(r, 0)?;
            if t.count == 0 {
                t.count = first.size;
            }
            if t.strndx == SHN_XINDEX {
                t.strndx = first.link;
            }
        }
        let limit = max_sections.min(max_table_bytes / t.entsize);
        if t.count > limit {
            return Err(ElfError::TooManySections {
                count: t.count,
                limit,
            });
        }
        if t.strndx as u64 >= t.count {
            return Err(ElfError::StrTab(t.strndx));
        }
        Ok(Some(t))
    }

    /// Is this file linked (not a relocatable object)?
    pub fn is_linked(&self) -> bool {
        self.e_type != ET_REL
    }

    fn offset_of(&self, i: u64) -> Result<u64, ElfError> {
        i.checked_mul(self.entsize)
            .and_then(|o| o.checked_add(self.shoff))
            .ok_or_else(|| ElfError::Io(overflow()))
    }

    fn header_len(&self) -> usize {
        if self.is64 {
            64
        } else {
            40
        }
    }

    /// Section header `i`.
    pub fn section<R: ReadAt + ?Sized>(&self, r: &R, i: u64) -> Result<Section, ElfError> {
        let mut b = [0u8; 64];
        let len = self.header_len();
        read_exact_at(r, &mut b[..len], self.offset_of(i)?).map_err(ElfError::Io)?;
        Ok(parse_section(&b[..len], self.is64))
    }

    /// The section name table, read whole when it is small.
    pub fn names<R: ReadAt + ?Sized>(&self, r: &R) -> Result<Names, ElfError> {
        let file_size = r.size();
        let strtab = self.section(r, self.strndx as u64)?;
        if ends_past(strtab.offset, strtab.size, file_size) {
            return Err(ElfError::SectionPastEnd {
                name: "section name table".into(),
                offset: strtab.offset,
                size: strtab.size,
                file_size,
            });
        }
        let small = if strtab.size <= SMALL_STRTAB {
            let mut all = vec![0u8; strtab.size as usize];
            read_exact_at(r, &mut all, strtab.offset).map_err(ElfError::Io)?;
            Some(all)
        } else {
            None
        };
        Ok(Names {
            offset: strtab.offset,
            size: strtab.size,
            small,
        })
    }

    /// Hands every section header, in order, to `visit` until it returns
    /// `Ok(false)`. Headers are read in chunks of at most 64 KiB, so memory
    /// stays small whatever the count and entry size.
    pub fn walk<R: ReadAt + ?Sized, E: From<ElfError>>(
        &self,
        r: &R,
        visit: &mut dyn FnMut(Section) -> Result<bool, E>,
    ) -> Result<(), E> {
        let ent = self.entsize;
        let per_chunk = (CHUNK_BYTES / ent).max(1);
        let mut chunk = Vec::new();
        let mut i = 0u64;
        while i < self.count {
            let n = per_chunk.min(self.count - i);
            let at = self.offset_of(i)?;
            chunk.resize((n * ent) as usize, 0);
            read_exact_at(r, &mut chunk, at).map_err(ElfError::Io)?;
            for k in 0..n as usize {
                if !visit(parse_section(&chunk[k * ent as usize..], self.is64))? {
                    return Ok(());
                }
            }
            i += n;
        }
        Ok(())
    }
}

/// The section name table.
pub(crate) struct Names {
    offset: u64,
    size: u64,
    small: Option<Vec<u8>>,
}

impl Names {
    /// The name at `at`, if it is one of `among` (each shorter than 32
    /// bytes; at most 32 bytes are read).
    pub fn find<R: ReadAt + ?Sized>(
        &self,
        r: &R,
        at: u32,
        among: &[&'static str],
    ) -> Result<Option<&'static str>, ElfError> {
        let at = at as u64;
        if at >= self.size {
            return Ok(None);
        }
        let mut buf = [0u8; NAME_READ as usize];
        let n = (self.size - at).min(NAME_READ) as usize;
        let bytes: &[u8] = match &self.small {
            Some(all) => {
                let s = at as usize;
                &all[s..s + n]
            }
            None => {
                read_exact_at(r, &mut buf[..n], self.offset + at).map_err(ElfError::Io)?;
                &buf[..n]
            }
        };
        let name = match bytes.iter().position(|&c| c == 0) {
            Some(end) => &bytes[..end],
            None => return Ok(None),
        };
        Ok(among.iter().copied().find(|n| n.as_bytes() == name))
    }
}

/// Is this the start of an ELF file?
pub fn is_elf(first_bytes: &[u8]) -> bool {
    first_bytes.len() >= 4 && first_bytes[..4] == ELF_MAGIC
}

/// The regions of `r` that hold fat binaries: every `.nv_fatbin` and
/// `__nv_relfatbin` section and each wrapper target, in file order.
pub fn fatbin_regions<R: ReadAt + ?Sized>(r: &R) -> Result<Vec<Region>, ElfError> {
    regions(r, &NVIDIA)
}

/// The regions of `r` that `spec` names: its data sections, whole, and
/// each wrapper's target, in file order.
pub fn regions<R: ReadAt + ?Sized>(r: &R, spec: &RegionSpec) -> Result<Vec<Region>, ElfError> {
    let Some(table) = SectionTable::read(r, MAX_SECTIONS, u64::MAX)? else {
        // No section header table (stripped with sstrip): nothing to find.
        return Ok(Vec::new());
    };
    let names = table.names(r)?;
    let mut among: Vec<&'static str> = spec.data.to_vec();
    among.push(spec.wrappers);
    let mut found = Sections::default();
    table.walk(r, &mut |s| {
        keep_section(r, &table, &names, s, spec, &among, &mut found)?;
        Ok::<bool, ElfError>(true)
    })?;
    // Wrappers: follow `data` when it points outside the sections above.
    // In relocatable objects the pointer is a relocation (0 in the file), so
    // only linked files are followed.
    if table.is_linked() {
        follow_wrappers(r, &table, spec.magic, &mut found)?;
    }
    // In file order, a section before a wrapper target at the same offset:
    // the walker skips any region that starts inside one already walked, so
    // overlapping or repeated regions cost nothing (and hostile ones cannot
    // make the walk quadratic).
    let mut regions = found.regions;
    regions.sort_by_key(|g| (g.offset, !g.whole_section));
    regions.dedup();
    Ok(regions)
}

/// What the section header table gave.
#[derive(Default)]
struct Sections {
    /// Fatbin sections (whole), and later the wrapper targets.
    regions: Vec<Region>,
    /// `.nvFatBinSegment` sections.
    wrappers: Vec<Section>,
    /// Allocated sections inside the file, to map wrapper pointers.
    allocated: Vec<Section>,
}

/// Files one section header: as an allocated section (for wrapper
/// pointers), a fatbin region or a wrapper section.
fn keep_section<R: ReadAt + ?Sized>(
    r: &R,
    h: &SectionTable,
    names: &Names,
    s: Section,
    spec: &RegionSpec,
    among: &[&'static str],
    found: &mut Sections,
) -> Result<(), ElfError> {
    let file_size = r.size();
    if s.kind != SHT_NOBITS
        && s.flags & SHF_ALLOC != 0
        && h.is_linked()
        && found.allocated.len() < MAX_KEPT_SECTIONS
        && !ends_past(s.offset, s.size, file_size)
    {
        found.allocated.push(s);
    }
    let Some(name) = names.find(r, s.name, among)? else {
        return Ok(());
    };
    if s.kind == SHT_NOBITS || s.size == 0 {
        return Ok(());
    }
    if ends_past(s.offset, s.size, file_size) {
        return Err(ElfError::SectionPastEnd {
            name: name.to_string(),
            offset: s.offset,
            size: s.size,
            file_size,
        });
    }
    if found.regions.len() + found.wrappers.len() >= MAX_KEPT_SECTIONS {
        return Ok(());
    }
    if name == spec.wrappers {
        found.wrappers.push(s);
    } else {
        found.regions.push(Region {
            offset: s.offset,
            size: s.size,
            whole_section: true,
        });
    }
    Ok(())
}

/// Adds the fatbin each `__fatBinC_Wrapper_t` in the wrapper sections
/// points at (at most [`MAX_WRAPPERS`] are followed).
fn follow_wrappers<R: ReadAt + ?Sized>(
    r: &R,
    h: &SectionTable,
    magic: u32,
    found: &mut Sections,
) -> Result<(), ElfError> {
    let wsize: u64 = if h.is64 { 24 } else { 16 };
    let mut followed = 0u64;
    for w in &found.wrappers {
        let count = w.size / wsize;
        for j in 0..count {
            followed += 1;
            if followed > MAX_WRAPPERS {
                break;
            }
            let mut b = [0u8; 24];
            read_exact_at(r, &mut b[..wsize as usize], w.offset + j * wsize)
                .map_err(ElfError::Io)?;
            if u32_at(&b, 0) != magic {
                continue;
            }
            let data = if h.is64 {
                u64_at(&b, 8)
            } else {
                u32_at(&b, 8) as u64
            };
            if let Some(region) = wrapper_target(&found.allocated, data) {
                found.regions.push(region);
            }
        }
    }
    Ok(())
}

/// The container a wrapper's `data` pointer names: its extent is bounded
/// by the allocated section it lies in.
fn wrapper_target(allocated: &[Section], data: u64) -> Option<Region> {
    if data == 0 {
        return None;
    }
    let off = virtual_to_file(allocated, data)?;
    let sec = allocated
        .iter()
        .find(|s| off >= s.offset && off - s.offset < s.size)?;
    Some(Region {
        offset: off,
        size: sec.offset + sec.size - off,
        whole_section: false,
    })
}

/// Does `offset + size` overflow or pass `limit`?
pub fn ends_past(offset: u64, size: u64, limit: u64) -> bool {
    match offset.checked_add(size) {
        Some(end) => end > limit,
        None => true,
    }
}

/// Maps a virtual address to a file offset through the allocated sections.
fn virtual_to_file(sections: &[Section], va: u64) -> Option<u64> {
    sections.iter().find_map(|s| {
        if va >= s.addr && va - s.addr < s.size {
            s.offset.checked_add(va - s.addr)
        } else {
            None
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal little-endian ELF64 with the given (name, type, flags, addr, data) sections.
    pub(crate) fn build_elf(sections: &[(&str, u32, u64, u64, &[u8])]) -> Vec<u8> {
        let mut out = vec![0u8; 64];
        out[..4].copy_from_slice(&ELF_MAGIC);
        out[4] = 2;
        out[5] = 1;
        out[6] = 1;
        out[16] = 3; // ET_DYN
        let mut strtab = vec![0u8];
        let mut placed = Vec::new();
        for (name, kind, flags, addr, data) in sections {
            let name_off = strtab.len() as u32;
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
            while out.len() % 8 != 0 {
                out.push(0);
            }
            let off = out.len() as u64;
            out.extend_from_slice(data);
            placed.push((name_off, *kind, *flags, *addr, off, data.len() as u64));
        }
        let str_name = strtab.len() as u32;
        strtab.extend_from_slice(b".shstrtab\0");
        let str_off = out.len() as u64;
        out.extend_from_slice(&strtab);
        placed.push((str_name, 3, 0, 0, str_off, strtab.len() as u64));
        while out.len() % 8 != 0 {
            out.push(0);
        }
        let shoff = out.len() as u64;
        out.extend_from_slice(&[0u8; 64]); // section 0
        for (name, kind, flags, addr, off, size) in &placed {
            let mut sh = [0u8; 64];
            sh[0..4].copy_from_slice(&name.to_le_bytes());
            sh[4..8].copy_from_slice(&kind.to_le_bytes());
            sh[8..16].copy_from_slice(&flags.to_le_bytes());
            sh[16..24].copy_from_slice(&addr.to_le_bytes());
            sh[24..32].copy_from_slice(&off.to_le_bytes());
            sh[32..40].copy_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&sh);
        }
        let shnum = placed.len() as u16 + 1;
        out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        out[0x3c..0x3e].copy_from_slice(&shnum.to_le_bytes());
        out[0x3e..0x40].copy_from_slice(&(shnum - 1).to_le_bytes());
        out
    }

    #[test]
    fn finds_fatbin_sections() {
        let elf = build_elf(&[
            (".text", 1, 6, 0x1000, b"code"),
            (".nv_fatbin", 1, 2, 0x2000, &[1u8; 24]),
            ("__nv_relfatbin", 1, 2, 0x3000, &[2u8; 16]),
        ]);
        let regions = fatbin_regions(elf.as_slice()).unwrap();
        assert_eq!(regions.len(), 2);
        assert_eq!(regions[0].size, 24);
        assert!(regions.iter().all(|r| r.whole_section));
        assert_eq!(elf[regions[1].offset as usize], 2);
    }

    #[test]
    fn follows_a_wrapper_into_a_renamed_section() {
        let mut wrapper = Vec::new();
        wrapper.extend_from_slice(&FATBINC_MAGIC.to_le_bytes());
        wrapper.extend_from_slice(&1u32.to_le_bytes());
        wrapper.extend_from_slice(&0x2008u64.to_le_bytes());
        wrapper.extend_from_slice(&0u64.to_le_bytes());
        let elf = build_elf(&[
            (".rodata.x", 1, 2, 0x2000, &[7u8; 40]),
            (".nvFatBinSegment", 1, 3, 0x4000, &wrapper),
        ]);
        let regions = fatbin_regions(elf.as_slice()).unwrap();
        assert_eq!(regions.len(), 1);
        assert!(!regions[0].whole_section);
        assert_eq!(regions[0].size, 32);
    }

    #[test]
    fn reads_elf32() {
        // ELF32: 52-byte header, 40-byte section headers, one .nv_fatbin.
        let strtab = b"\0.nv_fatbin\0.shstrtab\0";
        let data = [9u8; 16];
        let mut out = vec![0u8; 52];
        out[..4].copy_from_slice(&ELF_MAGIC);
        out[4] = 1;
        out[5] = 1;
        out[16] = 3;
        let data_off = out.len() as u32;
        out.extend_from_slice(&data);
        let str_off = out.len() as u32;
        out.extend_from_slice(strtab);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        let shoff = out.len() as u32;
        let sh = |name: u32, kind: u32, off: u32, size: u32| {
            let mut s = [0u8; 40];
            s[0..4].copy_from_slice(&name.to_le_bytes());
            s[4..8].copy_from_slice(&kind.to_le_bytes());
            s[8..12].copy_from_slice(&2u32.to_le_bytes());
            s[16..20].copy_from_slice(&off.to_le_bytes());
            s[20..24].copy_from_slice(&size.to_le_bytes());
            s
        };
        out.extend_from_slice(&[0u8; 40]);
        out.extend_from_slice(&sh(1, 1, data_off, 16));
        out.extend_from_slice(&sh(12, 3, str_off, strtab.len() as u32));
        out[0x20..0x24].copy_from_slice(&shoff.to_le_bytes());
        out[0x2e..0x30].copy_from_slice(&40u16.to_le_bytes());
        out[0x30..0x32].copy_from_slice(&3u16.to_le_bytes());
        out[0x32..0x34].copy_from_slice(&2u16.to_le_bytes());
        let regions = fatbin_regions(out.as_slice()).unwrap();
        assert_eq!(
            regions,
            [Region {
                offset: data_off as u64,
                size: 16,
                whole_section: true
            }]
        );
    }

    #[test]
    fn many_sections_via_section_zero() {
        // e_shnum = 0 and e_shstrndx = SHN_XINDEX: the real values live in
        // section 0 (sh_size, sh_link).
        let mut elf = build_elf(&[(".nv_fatbin", 1, 2, 0, &[5u8; 8])]);
        let shoff = u64_at(&elf, 0x28) as usize;
        let shnum = u16_at(&elf, 0x3c) as u64;
        let strndx = u16_at(&elf, 0x3e) as u32;
        elf[0x3c..0x3e].copy_from_slice(&0u16.to_le_bytes());
        elf[0x3e..0x40].copy_from_slice(&0xffffu16.to_le_bytes());
        elf[shoff + 32..shoff + 40].copy_from_slice(&shnum.to_le_bytes());
        elf[shoff + 40..shoff + 44].copy_from_slice(&strndx.to_le_bytes());
        let regions = fatbin_regions(elf.as_slice()).unwrap();
        assert_eq!(regions.len(), 1);
        assert_eq!(regions[0].size, 8);
    }

    #[test]
    fn rejects_bad_headers() {
        assert!(matches!(
            fatbin_regions(b"hello world, not elf".as_slice()),
            Err(ElfError::NotElf)
        ));
        let mut be = build_elf(&[]);
        be[5] = 2;
        assert!(matches!(
            fatbin_regions(be.as_slice()),
            Err(ElfError::BigEndian)
        ));
        let mut bad = build_elf(&[(".nv_fatbin", 1, 2, 0, &[0u8; 8])]);
        // Section offset past the end of the file.
        let shoff = u64_at(&bad, 0x28) as usize;
        let sh1 = shoff + 64;
        bad[sh1 + 24..sh1 + 32].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(matches!(
            fatbin_regions(bad.as_slice()),
            Err(ElfError::SectionPastEnd { .. })
        ));
        // Truncated inside the section header table.
        let elf = build_elf(&[(".nv_fatbin", 1, 2, 0, &[0u8; 8])]);
        let cut = &elf[..elf.len() - 10];
        assert!(fatbin_regions(cut).is_err());
        // Too short for an ELF header.
        assert!(fatbin_regions(&ELF_MAGIC[..]).is_err());
    }

    #[test]
    fn the_section_header_size_is_the_class_s() {
        let mut elf = build_elf(&[(".nv_fatbin", 1, 2, 0, &[0u8; 8])]);
        elf[0x3a..0x3c].copy_from_slice(&65u16.to_le_bytes());
        assert!(matches!(
            fatbin_regions(elf.as_slice()),
            Err(ElfError::ShEntSize { size: 65, want: 64 })
        ));
        // A table over the byte cap is refused before it is read.
        let elf = build_elf(&[(".nv_fatbin", 1, 2, 0, &[0u8; 8])]);
        assert!(matches!(
            SectionTable::read(elf.as_slice(), 1 << 20, 64),
            Err(ElfError::TooManySections { count: 3, limit: 1 })
        ));
    }
}
