//! The loader's view of an ELF file: its identity (class, byte order,
//! machine, type), and from the program headers its dynamic section:
//! `DT_NEEDED`, `DT_RPATH`, `DT_RUNPATH`, `DT_SONAME` and `DT_FLAGS_1`.
//!
//! glibc's `ld.so` reads only the ELF header and the program headers
//! (elf/dl-load.c `open_verify`, `_dl_map_object_from_fd`), maps the
//! `PT_LOAD` segments and finds the dynamic section through `PT_DYNAMIC`
//! (elf/get-dynamic-info.h); `DT_STRTAB` is an address, turned into a file
//! offset through the `PT_LOAD` segment that holds it (as ldconfig does,
//! elf/readelflib.c). So section headers play no part here (the section
//! reader is [`super::elf`]); a stripped or `patchelf`-moved dynamic
//! section (nvidia-curand's lies at the end of the file) is read like any.
//!
//! Everything is bounded: the reads are positioned (a 4 GiB sparse file
//! costs the bytes read of it), at most [`MAX_DYN_ENTRIES`] dynamic
//! entries and [`MAX_NEEDED`] needed names are taken, and a string is at
//! most [`MAX_STRING`] bytes. Past a bound the file is not judged.

use super::elf::ELF_MAGIC;
use super::read::{read_exact_at, u16_at, u32_at, u64_at, ReadAt};
use serde::{Deserialize, Serialize};

/// Dynamic entries read from one file (16 bytes each in ELF64: 1 MiB).
pub const MAX_DYN_ENTRIES: u64 = 1 << 16;
/// `DT_NEEDED` entries kept per file (real libraries have tens).
pub const MAX_NEEDED: usize = 4096;
/// The longest name or path list read from the string table (PATH_MAX).
pub const MAX_STRING: usize = 4096;
/// Program headers read (e_phnum is 16 bits; real files have about ten).
const MAX_PHDRS: u16 = 4096;
/// String tables up to this size are read whole (real ones: a few KiB to
/// a few MiB for C++ libraries with many exported symbols).
pub const WHOLE_STRTAB: u64 = 1 << 20;

pub const ELFCLASS32: u8 = 1;
pub const ELFCLASS64: u8 = 2;
pub const EM_386: u16 = 3;
pub const EM_X86_64: u16 = 62;
pub const EM_AARCH64: u16 = 183;
pub const ET_EXEC: u16 = 2;
pub const ET_DYN: u16 = 3;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;
const DT_FLAGS_1: u64 = 0x6fff_fffb;
/// `-z nodefaultlib`: no loader cache, no default directories for this
/// object's dependencies (elf/dl-load.c `_dl_map_new_object`).
pub const DF_1_NODEFLIB: u64 = 0x800;
/// A position-independent executable: ld.so refuses to load it as a
/// dependency (elf/dl-load.c "cannot dynamically load position-independent
/// executable").
pub const DF_1_PIE: u64 = 0x0800_0000;
const ELFOSABI_SYSV: u8 = 0;
const ELFOSABI_GNU: u8 = 3;
/// sysdeps/gnu/ldsodefs.h `VALID_ELF_ABIVERSION`: GNU objects may carry an
/// ABI version below LIBC_ABI_MAX (the libc-abis list: UNIQUE, IFUNC,
/// ABSOLUTE after the default).
const LIBC_ABI_MAX: u8 = 4;

#[derive(Debug, thiserror::Error)]
pub enum DynamicError {
    #[error("cannot read the ELF file: {0}")]
    Io(#[source] std::io::Error),
    #[error("the ELF file has {0} program headers, more than the {MAX_PHDRS} read")]
    TooManyPhdrs(u16),
    #[error("the dynamic section has more than {MAX_DYN_ENTRIES} entries")]
    TooManyEntries,
    #[error("the ELF file has more than {MAX_NEEDED} DT_NEEDED entries")]
    TooManyNeeded,
    #[error("a dynamic string lies outside the string table or the file")]
    BadString,
}

/// What `open_verify` (elf/dl-load.c) makes of the header, for a loader of
/// a given class and machine: usable, skipped (another class or machine:
/// the search goes on), or a fatal load error (the program does not start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fit {
    Usable,
    /// ld.so passes over it and keeps searching.
    Skip,
    /// ld.so stops with this error ("error while loading shared libraries").
    Fatal(String),
}

/// The loader-relevant facts of one file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynInfo {
    /// The file has the ELF magic and a whole header of its class.
    pub elf: bool,
    /// How many header bytes the file had (at most 64).
    pub head_len: u8,
    /// The first 16 bytes (e_ident), as far as the file had them.
    pub ident: Vec<u8>,
    pub e_type: u16,
    pub machine: u16,
    pub e_version: u32,
    pub phentsize: u16,
    pub has_load: bool,
    pub has_dynamic: bool,
    pub has_interp: bool,
    /// DT_STRTAB was found and maps into the file.
    pub has_strtab: bool,
    pub soname: Option<String>,
    pub needed: Vec<String>,
    /// DT_RPATH, cleared when DT_RUNPATH is present (elf/get-dynamic-info.h:
    /// "If both RUNPATH and RPATH are given, the latter is ignored").
    pub rpath: Option<String>,
    pub runpath: Option<String>,
    pub flags_1: u64,
}

impl DynInfo {
    /// The bytes its strings hold in memory: what keeping it costs. Bounded
    /// per file by [`MAX_NEEDED`] names of [`MAX_STRING`] bytes, which a
    /// hostile file reaches with one string named thousands of times.
    pub fn retained_bytes(&self) -> u64 {
        let opt = |s: &Option<String>| s.as_ref().map_or(0, |s| s.len() as u64);
        let needed: u64 = self.needed.iter().map(|n| n.len() as u64 + 24).sum();
        64 + needed + opt(&self.soname) + opt(&self.rpath) + opt(&self.runpath)
    }

    pub fn class(&self) -> u8 {
        self.ident.get(4).copied().unwrap_or(0)
    }

    fn ident_at(&self, i: usize) -> u8 {
        self.ident.get(i).copied().unwrap_or(0)
    }

    /// `open_verify`'s judgement for a loader of this class and machine,
    /// in its order of checks; then the checks of `_dl_map_object_from_fd`
    /// that reject a file as a dependency (no loadable segment, an
    /// executable, no dynamic section, a PIE). `as_main`: the object is the
    /// program itself (ld.so runs it with `__RTLD_OPENEXEC`).
    pub fn fit(&self, class: u8, machine: u16, as_main: bool) -> Fit {
        let fatal = |m: &str| Fit::Fatal(m.to_string());
        let ehdr_len = if class == ELFCLASS64 { 64 } else { 52 };
        if (self.head_len as usize) < ehdr_len {
            return fatal("file too short");
        }
        if self.ident[..4] != ELF_MAGIC {
            return fatal("invalid ELF header");
        }
        if self.class() != class {
            return Fit::Skip;
        }
        if self.ident_at(5) != 1 {
            return fatal("ELF file data encoding not little-endian");
        }
        if self.ident_at(6) != 1 {
            return fatal("ELF file version ident does not match current one");
        }
        let osabi = self.ident_at(7);
        if osabi != ELFOSABI_SYSV && osabi != ELFOSABI_GNU {
            return fatal("ELF file OS ABI invalid");
        }
        let abiv = self.ident_at(8);
        if !(abiv == 0 || (osabi == ELFOSABI_GNU && abiv < LIBC_ABI_MAX)) {
            return fatal("ELF file ABI version invalid");
        }
        if self.ident[9..16].iter().any(|&b| b != 0) {
            return fatal("nonzero padding in e_ident");
        }
        if self.e_version != 1 {
            return fatal("ELF file version does not match current one");
        }
        if self.machine != machine {
            return Fit::Skip;
        }
        if self.e_type != ET_DYN && self.e_type != ET_EXEC {
            return fatal("only ET_DYN and ET_EXEC can be loaded");
        }
        let phent = if class == ELFCLASS64 { 56 } else { 32 };
        if self.phentsize != phent {
            return fatal("ELF file's phentsize not the expected size");
        }
        if !self.has_load {
            return fatal("object file has no loadable segments");
        }
        if self.e_type != ET_DYN && !as_main {
            return fatal("cannot dynamically load executable");
        }
        if !self.has_dynamic && self.e_type == ET_DYN {
            return fatal("object file has no dynamic section");
        }
        if self.flags_1 & DF_1_PIE != 0 && !as_main {
            return fatal("cannot dynamically load position-independent executable");
        }
        Fit::Usable
    }

    /// What ldconfig accepts as a library (elf/readelflib.c
    /// `process_elf_file`): a shared object of the loader's class with a
    /// dynamic section and a string table. `machine_ok`: the machine is
    /// the loader's (sysdeps/x86/readelflib.c rejects other machines).
    pub fn ldconfig_accepts(&self, class: u8, machine: u16) -> bool {
        self.elf
            && self.class() == class
            && self.machine == machine
            && self.e_type == ET_DYN
            && self.has_dynamic
            && self.has_strtab
    }
}

/// A program header, as much as is used.
#[derive(Clone, Copy, Debug)]
struct Phdr {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

/// Reads the loader-relevant facts of `r`. A file that is not ELF (or too
/// short) is `Ok` with `elf: false`: the loader's error for it depends on
/// who asks ([`DynInfo::fit`]).
pub fn read<R: ReadAt + ?Sized>(r: &R) -> Result<DynInfo, DynamicError> {
    let mut h = [0u8; 64];
    let n = r.size().min(64) as usize;
    read_exact_at(r, &mut h[..n], 0).map_err(DynamicError::Io)?;
    let mut info = DynInfo {
        ident: h[..n.min(16)].to_vec(),
        head_len: n as u8,
        ..DynInfo::default()
    };
    let is64 = h[4] == ELFCLASS64;
    let ehdr_len = if is64 { 64 } else { 52 };
    if n < ehdr_len || h[..4] != ELF_MAGIC {
        return Ok(info);
    }
    info.elf = true;
    if h[4] != ELFCLASS32 && h[4] != ELFCLASS64 || h[5] != 1 {
        // Unknown class or big-endian: the loader's verdict needs only
        // the identity bytes.
        return Ok(info);
    }
    info.e_type = u16_at(&h, 16);
    info.machine = u16_at(&h, 18);
    info.e_version = u32_at(&h, 20);
    let (phoff, phentsize, phnum) = if is64 {
        (u64_at(&h, 0x20), u16_at(&h, 0x36), u16_at(&h, 0x38))
    } else {
        (u32_at(&h, 0x1c) as u64, u16_at(&h, 0x2a), u16_at(&h, 0x2c))
    };
    info.phentsize = phentsize;
    let want = if is64 { 56 } else { 32 };
    if phentsize != want {
        return Ok(info);
    }
    let phdrs = read_phdrs(r, is64, phoff, phnum)?;
    info.has_load = phdrs.iter().any(|p| p.kind == PT_LOAD);
    info.has_interp = phdrs.iter().any(|p| p.kind == PT_INTERP);
    if let Some(dynamic) = phdrs.iter().find(|p| p.kind == PT_DYNAMIC) {
        info.has_dynamic = dynamic.filesz > 0;
        read_dynamic(r, is64, dynamic, &phdrs, &mut info)?;
    }
    Ok(info)
}

fn read_phdrs<R: ReadAt + ?Sized>(
    r: &R,
    is64: bool,
    phoff: u64,
    phnum: u16,
) -> Result<Vec<Phdr>, DynamicError> {
    if phnum > MAX_PHDRS {
        return Err(DynamicError::TooManyPhdrs(phnum));
    }
    let ent = if is64 { 56 } else { 32 };
    let mut buf = vec![0u8; phnum as usize * ent];
    read_exact_at(r, &mut buf, phoff).map_err(DynamicError::Io)?;
    Ok(buf
        .chunks_exact(ent)
        .map(|b| {
            if is64 {
                Phdr {
                    kind: u32_at(b, 0),
                    offset: u64_at(b, 8),
                    vaddr: u64_at(b, 16),
                    filesz: u64_at(b, 32),
                }
            } else {
                Phdr {
                    kind: u32_at(b, 0),
                    offset: u32_at(b, 4) as u64,
                    vaddr: u32_at(b, 8) as u64,
                    filesz: u32_at(b, 16) as u64,
                }
            }
        })
        .collect())
}

/// The dynamic tags the loader acts on, in file order.
#[derive(Default)]
struct Tags {
    strtab: Option<u64>,
    strsz: Option<u64>,
    needed: Vec<u64>,
    soname: Option<u64>,
    rpath: Option<u64>,
    runpath: Option<u64>,
}

/// The dynamic entries the loader acts on (elf/get-dynamic-info.h keeps
/// the last entry of each tag but DT_NEEDED), in chunks of 4096.
fn read_tags<R: ReadAt + ?Sized>(
    r: &R,
    is64: bool,
    dynamic: &Phdr,
    flags_1: &mut u64,
) -> Result<Tags, DynamicError> {
    const CHUNK: u64 = 4096;
    let ent: u64 = if is64 { 16 } else { 8 };
    let count = dynamic.filesz / ent;
    let mut tags = Tags::default();
    let mut i = 0u64;
    let mut buf = Vec::new();
    while i < count {
        if i >= MAX_DYN_ENTRIES {
            return Err(DynamicError::TooManyEntries);
        }
        let n = CHUNK.min(count - i).min(MAX_DYN_ENTRIES - i);
        buf.resize((n * ent) as usize, 0);
        let at = dynamic
            .offset
            .checked_add(i * ent)
            .ok_or_else(|| DynamicError::Io(overflow()))?;
        read_exact_at(r, &mut buf, at).map_err(DynamicError::Io)?;
        for e in buf.chunks_exact(ent as usize) {
            let (tag, val) = if is64 {
                (u64_at(e, 0), u64_at(e, 8))
            } else {
                (u32_at(e, 0) as u64, u32_at(e, 4) as u64)
            };
            match tag {
                DT_NULL => return Ok(tags),
                DT_NEEDED => {
                    if tags.needed.len() >= MAX_NEEDED {
                        return Err(DynamicError::TooManyNeeded);
                    }
                    tags.needed.push(val);
                }
                DT_STRTAB => tags.strtab = Some(val),
                DT_STRSZ => tags.strsz = Some(val),
                DT_SONAME => tags.soname = Some(val),
                DT_RPATH => tags.rpath = Some(val),
                DT_RUNPATH => tags.runpath = Some(val),
                DT_FLAGS_1 => *flags_1 = val,
                _ => {}
            }
        }
        i += n;
    }
    Ok(tags)
}

fn read_dynamic<R: ReadAt + ?Sized>(
    r: &R,
    is64: bool,
    dynamic: &Phdr,
    phdrs: &[Phdr],
    info: &mut DynInfo,
) -> Result<(), DynamicError> {
    let tags = read_tags(r, is64, dynamic, &mut info.flags_1)?;
    let Some(strtab) = tags.strtab.and_then(|va| vaddr_to_offset(phdrs, va)) else {
        return Ok(());
    };
    info.has_strtab = true;
    let limit = strtab.1.min(tags.strsz.unwrap_or(u64::MAX));
    // A string table of real size is read at once: one read instead of one
    // per name (and, for a streamed image file, one range to keep).
    let whole = if limit <= WHOLE_STRTAB {
        let mut b = vec![0u8; limit as usize];
        read_exact_at(r, &mut b, strtab.0).map_err(DynamicError::Io)?;
        Some(b)
    } else {
        None
    };
    let strings = Strings {
        offset: strtab.0,
        limit,
        whole,
    };
    for off in tags.needed {
        info.needed.push(strings.get(r, off)?);
    }
    info.soname = tags.soname.map(|o| strings.get(r, o)).transpose()?;
    info.runpath = tags.runpath.map(|o| strings.get(r, o)).transpose()?;
    if info.runpath.is_none() {
        info.rpath = tags.rpath.map(|o| strings.get(r, o)).transpose()?;
    }
    Ok(())
}

/// The file offset of address `va`, and how many file bytes follow it in
/// its `PT_LOAD` segment.
fn vaddr_to_offset(phdrs: &[Phdr], va: u64) -> Option<(u64, u64)> {
    phdrs.iter().find_map(|p| {
        (p.kind == PT_LOAD && va >= p.vaddr && va - p.vaddr < p.filesz)
            .then(|| {
                p.offset
                    .checked_add(va - p.vaddr)
                    .map(|o| (o, p.filesz - (va - p.vaddr)))
            })
            .flatten()
    })
}

/// The dynamic string table: where it starts, how far it may be read, and
/// its bytes when it was read whole.
struct Strings {
    offset: u64,
    limit: u64,
    whole: Option<Vec<u8>>,
}

impl Strings {
    /// The NUL-terminated string at `off`, read in small windows; at most
    /// [`MAX_STRING`] bytes. Names that are not UTF-8 are kept lossily (the
    /// loader compares bytes; such names do not occur in real libraries).
    fn get<R: ReadAt + ?Sized>(&self, r: &R, off: u64) -> Result<String, DynamicError> {
        if off >= self.limit {
            return Err(DynamicError::BadString);
        }
        if let Some(all) = &self.whole {
            let rest = &all[off as usize..];
            let end = rest
                .iter()
                .take(MAX_STRING + 1)
                .position(|&b| b == 0)
                .ok_or(DynamicError::BadString)?;
            return Ok(String::from_utf8_lossy(&rest[..end]).into_owned());
        }
        let start = self
            .offset
            .checked_add(off)
            .ok_or(DynamicError::BadString)?;
        let avail = (self.limit - off).min(MAX_STRING as u64 + 1) as usize;
        let mut out = Vec::new();
        let mut window = [0u8; 256];
        while out.len() < avail {
            let want = window.len().min(avail - out.len());
            let at = start + out.len() as u64;
            let got = r
                .read_at(&mut window[..want], at)
                .map_err(DynamicError::Io)?;
            if got == 0 {
                return Err(DynamicError::BadString);
            }
            if let Some(end) = window[..got].iter().position(|&b| b == 0) {
                out.extend_from_slice(&window[..end]);
                return Ok(String::from_utf8_lossy(&out).into_owned());
            }
            out.extend_from_slice(&window[..got]);
        }
        Err(DynamicError::BadString)
    }
}

fn overflow() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "offset overflows")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ELF64 shared object: one PT_LOAD covering the file, a
    /// PT_DYNAMIC, the given dynamic entries (tag, string) and flags.
    pub(crate) fn build_dso(entries: &[(u64, &str)], flags_1: u64) -> Vec<u8> {
        let mut strtab = vec![0u8];
        let mut dyns: Vec<(u64, u64)> = Vec::new();
        for (tag, s) in entries {
            let off = strtab.len() as u64;
            strtab.extend_from_slice(s.as_bytes());
            strtab.push(0);
            dyns.push((*tag, off));
        }
        let phoff = 64u64;
        let nph = 2u64;
        let str_off = phoff + nph * 56;
        let dyn_off = (str_off + strtab.len() as u64).div_ceil(8) * 8;
        dyns.push((DT_STRTAB, str_off));
        dyns.push((DT_STRSZ, strtab.len() as u64));
        if flags_1 != 0 {
            dyns.push((DT_FLAGS_1, flags_1));
        }
        dyns.push((DT_NULL, 0));
        let total = dyn_off + dyns.len() as u64 * 16;
        let mut out = vec![0u8; total as usize];
        out[..4].copy_from_slice(&ELF_MAGIC);
        out[4] = ELFCLASS64;
        out[5] = 1;
        out[6] = 1;
        out[16..18].copy_from_slice(&ET_DYN.to_le_bytes());
        out[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
        out[20..24].copy_from_slice(&1u32.to_le_bytes());
        out[0x20..0x28].copy_from_slice(&phoff.to_le_bytes());
        out[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        out[0x38..0x3a].copy_from_slice(&(nph as u16).to_le_bytes());
        let ph = |kind: u32, off: u64, size: u64| {
            let mut p = [0u8; 56];
            p[0..4].copy_from_slice(&kind.to_le_bytes());
            p[8..16].copy_from_slice(&off.to_le_bytes());
            p[16..24].copy_from_slice(&off.to_le_bytes());
            p[32..40].copy_from_slice(&size.to_le_bytes());
            p[40..48].copy_from_slice(&size.to_le_bytes());
            p
        };
        out[64..120].copy_from_slice(&ph(PT_LOAD, 0, total));
        out[120..176].copy_from_slice(&ph(PT_DYNAMIC, dyn_off, dyns.len() as u64 * 16));
        out[str_off as usize..str_off as usize + strtab.len()].copy_from_slice(&strtab);
        for (k, (tag, val)) in dyns.iter().enumerate() {
            let at = dyn_off as usize + k * 16;
            out[at..at + 8].copy_from_slice(&tag.to_le_bytes());
            out[at + 8..at + 16].copy_from_slice(&val.to_le_bytes());
        }
        out
    }

    #[test]
    fn reads_needed_soname_and_paths() {
        let elf = build_dso(
            &[
                (DT_NEEDED, "libcudart.so.13"),
                (DT_NEEDED, "libc.so.6"),
                (DT_SONAME, "libcurand.so.10"),
                (DT_RPATH, "$ORIGIN"),
            ],
            0,
        );
        let i = read(elf.as_slice()).unwrap();
        assert_eq!(i.needed, ["libcudart.so.13", "libc.so.6"]);
        assert_eq!(i.soname.as_deref(), Some("libcurand.so.10"));
        assert_eq!(i.rpath.as_deref(), Some("$ORIGIN"));
        assert_eq!(i.runpath, None);
        assert_eq!(i.fit(ELFCLASS64, EM_X86_64, false), Fit::Usable);
        assert!(i.ldconfig_accepts(ELFCLASS64, EM_X86_64));
        // Another machine is passed over, as is another class.
        assert_eq!(i.fit(ELFCLASS64, EM_AARCH64, false), Fit::Skip);
        assert_eq!(i.fit(ELFCLASS32, EM_386, false), Fit::Skip);
    }

    #[test]
    fn runpath_hides_rpath_and_last_tag_wins() {
        let elf = build_dso(
            &[
                (DT_RPATH, "/a"),
                (DT_RUNPATH, "/b"),
                (DT_SONAME, "x.so.1"),
                (DT_SONAME, "x.so.2"),
            ],
            DF_1_NODEFLIB,
        );
        let i = read(elf.as_slice()).unwrap();
        assert_eq!(i.rpath, None);
        assert_eq!(i.runpath.as_deref(), Some("/b"));
        assert_eq!(i.soname.as_deref(), Some("x.so.2"));
        assert_eq!(i.flags_1, DF_1_NODEFLIB);
    }

    #[test]
    fn loader_errors_in_open_verify_order() {
        let short = read(b"\x7fELF\x02\x01\x01".as_slice()).unwrap();
        assert_eq!(
            short.fit(ELFCLASS64, EM_X86_64, false),
            Fit::Fatal("file too short".into())
        );
        let text = read([b'x'; 100].as_slice()).unwrap();
        assert_eq!(
            text.fit(ELFCLASS64, EM_X86_64, false),
            Fit::Fatal("invalid ELF header".into())
        );
        let mut pie = build_dso(&[], DF_1_PIE);
        assert_eq!(
            read(pie.as_slice())
                .unwrap()
                .fit(ELFCLASS64, EM_X86_64, false),
            Fit::Fatal("cannot dynamically load position-independent executable".into())
        );
        assert_eq!(
            read(pie.as_slice())
                .unwrap()
                .fit(ELFCLASS64, EM_X86_64, true),
            Fit::Usable
        );
        pie[16] = 1; // ET_REL
        assert_eq!(
            read(pie.as_slice())
                .unwrap()
                .fit(ELFCLASS64, EM_X86_64, true),
            Fit::Fatal("only ET_DYN and ET_EXEC can be loaded".into())
        );
        let mut be = build_dso(&[], 0);
        be[5] = 2;
        assert_eq!(
            read(be.as_slice())
                .unwrap()
                .fit(ELFCLASS64, EM_X86_64, false),
            Fit::Fatal("ELF file data encoding not little-endian".into())
        );
    }

    #[test]
    fn bounded_against_hostile_tables() {
        // A string offset past the table.
        let mut elf = build_dso(&[(DT_NEEDED, "liba.so")], 0);
        let dyn_at = elf.len() - 4 * 16; // NEEDED, STRTAB, STRSZ, NULL
        elf[dyn_at + 8..dyn_at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(matches!(read(elf.as_slice()), Err(DynamicError::BadString)));
        // Too many DT_NEEDED entries.
        let names: Vec<(u64, String)> = (0..MAX_NEEDED + 1)
            .map(|k| (DT_NEEDED, format!("l{k}.so")))
            .collect();
        let refs: Vec<(u64, &str)> = names.iter().map(|(t, s)| (*t, s.as_str())).collect();
        let elf = build_dso(&refs, 0);
        assert!(matches!(
            read(elf.as_slice()),
            Err(DynamicError::TooManyNeeded)
        ));
        // A truncated program header table is an I/O error, not a panic.
        let elf = build_dso(&[], 0);
        assert!(read(&elf[..100]).is_err());
    }
}
