//! Finds the CUDA forward-compatibility library in a container rootfs and
//! reads its `.note.cuda.fwd_compatibility` ELF note; the rule that judges
//! it is [`crate::core::compat`].
//!
//! As NVIDIA's `enable-cuda-compat` hook (nvidia-container-toolkit
//! `cmd/nvidia-cdi-hook/cudacompat/`) finds it: `/usr/local/cuda/compat` is
//! resolved inside the root (`/usr/local/cuda` is usually a symlink to
//! `cuda-X.Y`), and the entries named `libcuda.so.*.*` that are regular files
//! themselves (a symlink entry is skipped, as `globFiles` skips it) are the
//! candidates. Everything is resolved with [`Root`], so no symlink leads
//! out of the rootfs, and only regular files are opened.
//!
//! The note is read with positioned reads only, through the scanners' one
//! ELF section reader ([`super::elf::SectionTable`]): the ELF header, the
//! section header table in chunks, the section name table (or single
//! names), and the note section itself, at most 64 KiB. A multi-GB (or sparse
//! 10 GB) library costs a few KiB: a real one has a few dozen 64-byte
//! section headers. What a hostile one can make it read is bounded: the section header size must be the ELF class's, the table at
//! most 1 MiB, the whole directory at most 4 MiB in one second, and the
//! names of one file (hard links: the same device and inode) are read once.

use super::elf::{ends_past, ElfError, Section, SectionTable};
use super::read::{read_exact_at, u32_at, Meter, Metered, ReadAt, SizedFile, Stop};
use super::rootfs::{fstat, open_regular, Found, Root};
use crate::core::compat::{CompatNote, NOTE_OWNER, NOTE_SECTION, NOTE_TYPE};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Where the hook looks (its `--cuda-compat-container-root` default).
pub const COMPAT_DIR: &str = crate::core::compat::COMPAT_DIR;
/// The largest note section read (real ones are under 200 bytes).
const MAX_NOTE: u64 = 64 << 10;
/// The most `libcuda.so.*.*` entries examined in one directory.
pub const MAX_LIBS: usize = crate::core::compat::MAX_LIBS;
/// The most section headers looked at, and the most bytes of them read.
const MAX_SECTIONS: u64 = 1 << 16;
const MAX_TABLE_BYTES: u64 = 1 << 20;
/// What reading one compat directory may cost, all its libraries together.
const MAX_SCAN_BYTES: u64 = 4 << 20;
const MAX_SCAN_TIME: Duration = Duration::from_secs(1);
const SHT_NOTE: u32 = 7;
const PREFIX: &str = "libcuda.so.";

pub use crate::core::compat::{CompatLib, CompatScan};

/// Scans `/usr/local/cuda/compat` in the rootfs at `rootfs` (a trusted host path).
pub fn scan_rootfs(rootfs: &Path) -> CompatScan {
    match Root::open(rootfs) {
        Ok(root) => scan_root(&root, COMPAT_DIR),
        Err(e) => CompatScan {
            error: Some(e.to_string()),
            ..CompatScan::default()
        },
    }
}

/// Scans the directory `dir` (relative, resolved inside `root`).
pub fn scan_root(root: &Root, dir: &str) -> CompatScan {
    let mut scan = CompatScan::default();
    let dir = dir.trim_start_matches('/');
    let found = match root.find(dir) {
        Ok(f) => f,
        Err(e) => {
            if !is_not_found(&e) {
                scan.error = Some(format!(
                    "cannot resolve the CUDA compat directory: {}",
                    io_text(&e)
                ));
            }
            return scan;
        }
    };
    if !found.stat.is_dir() {
        return scan;
    }
    let entries = match root.read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            scan.error = Some(format!(
                "cannot list the CUDA compat directory: {}",
                io_text(&e)
            ));
            return scan;
        }
    };
    let meter = Meter::new(MAX_SCAN_BYTES, Some(Instant::now() + MAX_SCAN_TIME));
    // Notes by (device, inode): hard links are one file, read once.
    let mut read: HashMap<FileId, Result<CompatNote, String>> = HashMap::new();
    for entry in entries {
        if entry.is_dir || !is_candidate(&entry.name) {
            continue;
        }
        if scan.libs.len() >= MAX_LIBS {
            scan.truncated = true;
            break;
        }
        let name = entry.name.to_string_lossy().into_owned();
        let path = format!("{dir}/{name}");
        let version = name[PREFIX.len()..].to_string();
        // The entry itself, not what a symlink points at: O_NOFOLLOW on one
        // component below the resolved directory's descriptor.
        let note = match open_entry(&found, &entry.name, &path) {
            Ok(Some((file, id))) => read
                .entry(id)
                .or_insert_with(|| read_metered(&file, &meter))
                .clone(),
            // A symlink, FIFO, device...: the hook skips it, so do we.
            Ok(None) => continue,
            Err(e) => Err(e),
        };
        scan.libs.push(CompatLib {
            path,
            version,
            note,
        });
    }
    scan
}

/// Reads one library's note on the directory's meter; once the meter has
/// stopped a read, every library after is left unread.
fn read_metered(file: &SizedFile, meter: &Meter) -> Result<CompatNote, String> {
    let note = match meter.hit.get() {
        None => read_note(&Metered { inner: file, meter }),
        Some(_) => Err(String::new()),
    };
    match meter.hit.get() {
        None => note,
        Some(Stop::Bytes) => Err(format!(
            "not read: the compat libraries' read budget of {MAX_SCAN_BYTES} bytes ran out"
        )),
        Some(Stop::Time) => Err(format!(
            "not read: the compat libraries' time budget of {} ms ran out",
            MAX_SCAN_TIME.as_millis()
        )),
    }
}

/// Reads the note of a library at a host path (command line, tests).
pub fn read_host_lib(path: &Path) -> Result<CompatNote, String> {
    let found = super::rootfs::find_host(path).map_err(|e| io_text(&e))?;
    let file = open_regular(&found).map_err(|e| io_text(&e))?;
    let size = found.stat.size;
    read_note(&SizedFile::new(file, size))
}

/// `libcuda.so.*.*` as Go's filepath.Match reads it.
fn is_candidate(name: &OsStr) -> bool {
    let b = name.as_bytes();
    b.len() > PREFIX.len() && b.starts_with(PREFIX.as_bytes()) && b[PREFIX.len()..].contains(&b'.')
}

fn is_not_found(e: &super::rootfs::RootfsError) -> bool {
    use std::error::Error;
    e.source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(|io| matches!(io.raw_os_error(), Some(e) if e == Errno::ENOENT as i32 || e == Errno::ENOTDIR as i32))
}

/// The OS error of a rootfs error, without the path (which came from the image).
fn io_text(e: &super::rootfs::RootfsError) -> String {
    use std::error::Error;
    match e.source().and_then(|s| s.downcast_ref::<std::io::Error>()) {
        Some(io) => io.to_string(),
        None => match e {
            super::rootfs::RootfsError::NotRegular { .. } => "not a regular file".into(),
            super::rootfs::RootfsError::Changed { .. } => {
                "the file was replaced while it was being opened".into()
            }
            _ => "cannot open".into(),
        },
    }
}

/// Opens `name` in the directory `dir` (an O_PATH descriptor inside the
/// root) without following a symlink; Ok(None) when it is not a regular file.
/// A file's (device, inode): the same for all its names.
type FileId = (u64, u64);

/// The file comes with its [`FileId`].
fn open_entry(
    dir: &Found,
    name: &OsStr,
    shown: &str,
) -> Result<Option<(SizedFile, FileId)>, String> {
    // /proc/self/fd/N is the directory the root resolver already found; the
    // single component below it is opened with O_NOFOLLOW, so nothing is
    // resolved outside the root.
    let mut p = format!("/proc/self/fd/{}/", dir.fd.as_raw_fd()).into_bytes();
    p.extend_from_slice(name.as_bytes());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
        .open(OsStr::from_bytes(&p))
        .map_err(|e| format!("cannot open: {e}"))?;
    let fd = OwnedFd::from(file);
    let stat = fstat(&fd).map_err(|e| format!("cannot stat: {e}"))?;
    if !stat.is_regular() {
        return Ok(None);
    }
    let found = Found {
        path: shown.to_string(),
        fd,
        stat,
    };
    let file = open_regular(&found).map_err(|e| io_text(&e))?;
    Ok(Some((
        SizedFile::new(file, stat.size),
        (stat.dev, stat.ino),
    )))
}

fn io_err(e: std::io::Error) -> String {
    format!("cannot read the ELF file: {e}")
}

/// Finds the section named [`NOTE_SECTION`] (the first, as Go's debug/elf
/// lookup in the hook), through the one ELF section reader of the scanners.
fn find_note_section<R: ReadAt + ?Sized>(r: &R) -> Result<Option<Section>, String> {
    let text = |e: ElfError| e.to_string();
    let Some(table) = SectionTable::read(r, MAX_SECTIONS, MAX_TABLE_BYTES).map_err(text)? else {
        return Ok(None);
    };
    let names = table.names(r).map_err(text)?;
    let mut found = None;
    table
        .walk(r, &mut |s| {
            if names.find(r, s.name, &[NOTE_SECTION])?.is_some() {
                found = Some(s);
                return Ok(false);
            }
            Ok::<bool, ElfError>(true)
        })
        .map_err(text)?;
    Ok(found)
}

/// Reads and parses the note of the ELF file `r`.
pub fn read_note<R: ReadAt + ?Sized>(r: &R) -> Result<CompatNote, String> {
    let s = find_note_section(r)?
        .ok_or_else(|| format!("the library has no {NOTE_SECTION} section"))?;
    if s.kind != SHT_NOTE {
        return Err(format!(
            "section {NOTE_SECTION} is not a note (type {})",
            s.kind
        ));
    }
    if s.size > MAX_NOTE {
        return Err(format!(
            "section {NOTE_SECTION} is {} bytes, more than the {MAX_NOTE} read",
            s.size
        ));
    }
    if ends_past(s.offset, s.size, r.size()) {
        return Err(format!(
            "section {NOTE_SECTION} (offset {}, size {}) runs past the end of the file ({} bytes)",
            s.offset,
            s.size,
            r.size()
        ));
    }
    let mut data = vec![0u8; s.size as usize];
    read_exact_at(r, &mut data, s.offset).map_err(io_err)?;
    parse_note(&data, s.align)
}

/// Parses the first note in a note section's bytes (System V ABI "Note
/// Section": namesz, descsz, type, then the name and the descriptor, each
/// padded to 4 bytes, or 8 in a section aligned to 8, as readelf pads).
///
/// A descriptor that runs past the end of the section is cut at the end, as
/// NVIDIA's hook cuts it (`trim` in cuda-elf-header.go): Tegra libraries in
/// the wild declare 2 bytes more than their section holds. What is cut must
/// still be a whole JSON object.
fn parse_note(data: &[u8], section_align: u64) -> Result<CompatNote, String> {
    let pad = if section_align == 8 { 8u64 } else { 4 };
    if data.len() < 12 {
        return Err(format!(
            "section {NOTE_SECTION} is too short for a note header"
        ));
    }
    let namesz = u32_at(data, 0) as u64;
    let descsz = u32_at(data, 4) as u64;
    let kind = u32_at(data, 8);
    let len = data.len() as u64;
    let name_end = 12 + namesz;
    if name_end > len {
        return Err(format!(
            "the note's name (size {namesz}) runs past the end of section {NOTE_SECTION} ({len} bytes)"
        ));
    }
    let name = &data[12..name_end as usize];
    let trimmed: &[u8] = {
        let s = name.iter().position(|&b| b != 0).unwrap_or(name.len());
        let e = name.iter().rposition(|&b| b != 0).map_or(s, |i| i + 1);
        &name[s..e]
    };
    if trimmed != NOTE_OWNER.as_bytes() {
        return Err(format!(
            "the note's owner is not {NOTE_OWNER} ({} bytes{})",
            namesz,
            if trimmed.is_ascii()
                && trimmed.len() <= 32
                && trimmed.iter().all(|b| b.is_ascii_graphic() || *b == b' ')
            {
                format!(": {}", String::from_utf8_lossy(trimmed))
            } else {
                String::new()
            }
        ));
    }
    if kind != NOTE_TYPE {
        return Err(format!("the note's type is {kind}, not {NOTE_TYPE}"));
    }
    if descsz == 0 {
        return Err("the note's descriptor is empty".into());
    }
    let desc_start = namesz.div_ceil(pad) * pad + 12;
    if desc_start >= len {
        return Err(format!(
            "the note's descriptor (size {descsz}) starts past the end of section {NOTE_SECTION} ({len} bytes)"
        ));
    }
    let desc_end = desc_start.saturating_add(descsz).min(len);
    let cut = desc_start + descsz > len;
    CompatNote::from_json(&data[desc_start as usize..desc_end as usize]).map_err(|e| {
        if cut {
            format!(
                "{e}; the descriptor's size {descsz} runs past the end of section {NOTE_SECTION} ({len} bytes)"
            )
        } else {
            e
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(owner: &[u8], kind: u32, desc: &[u8], descsz: Option<u32>) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(owner.len() as u32).to_le_bytes());
        v.extend_from_slice(&descsz.unwrap_or(desc.len() as u32).to_le_bytes());
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(owner);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v.extend_from_slice(desc);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn parses_and_rejects_notes() {
        let ok = note(
            b"NVIDIA Corporation\0",
            0,
            br#"{"CUDA version":"12.9","driver":[535]}"#,
            None,
        );
        let n = parse_note(&ok, 4).unwrap();
        assert!(n.lists_branch(535));
        assert!(parse_note(&note(b"GNU\0", 0, b"{}", None), 4)
            .unwrap_err()
            .contains("owner"));
        assert!(
            parse_note(&note(b"NVIDIA Corporation\0", 3, b"{}", None), 4)
                .unwrap_err()
                .contains("type")
        );
        assert!(
            parse_note(&note(b"NVIDIA Corporation\0", 0, b"{nope", None), 4)
                .unwrap_err()
                .contains("JSON")
        );
        // descsz past the end, JSON cut: an error that says so.
        let cut = note(
            b"NVIDIA Corporation\0",
            0,
            br#"{"driver":[535]}"#,
            Some(4000),
        );
        let mut short = cut.clone();
        short.truncate(short.len() - 8);
        let e = parse_note(&short, 4).unwrap_err();
        assert!(e.contains("runs past the end"), "{e}");
        // namesz past the end.
        let mut huge = ok.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse_note(&huge, 4).is_err());
        assert!(parse_note(&[1, 2, 3], 4).is_err());
        // Descriptor starting at the end of the section.
        let only_name = note(b"NVIDIA Corporation\0", 0, b"", Some(10));
        assert!(parse_note(&only_name, 4).is_err());
    }

    /// The Tegra library's note in nvidia-container-toolkit's
    /// testdata/compat/libcuda.orin.13.2.1.so.1.1: descsz 0x29 but only 39
    /// bytes left in the 0x47-byte section.
    #[test]
    fn tegra_note_with_overlong_descsz() {
        let mut d = Vec::new();
        d.extend_from_slice(&0x13u32.to_le_bytes());
        d.extend_from_slice(&0x29u32.to_le_bytes());
        d.extend_from_slice(&0u32.to_le_bytes());
        d.extend_from_slice(b"NVIDIA Corporation\0\0");
        d.extend_from_slice(br#"{"format":1,"CUDA version":"13.2"}"#);
        d.extend_from_slice(&[0; 5]);
        assert_eq!(d.len(), 0x47);
        let n = parse_note(&d, 4).unwrap();
        assert_eq!(n.cuda_version.as_deref(), Some("13.2"));
        assert!(!n.has_driver_list());
    }

    #[test]
    fn candidates() {
        assert!(is_candidate(OsStr::new("libcuda.so.575.57.08")));
        assert!(is_candidate(OsStr::new("libcuda.so.1.1")));
        assert!(!is_candidate(OsStr::new("libcuda.so.1")));
        assert!(!is_candidate(OsStr::new("libcuda.so")));
        assert!(!is_candidate(OsStr::new(
            "libnvidia-ptxjitcompiler.so.575.57.08"
        )));
    }

    #[test]
    fn not_elf() {
        let data: &[u8] = b"hello world, not an ELF file at all";
        assert!(read_note(data).unwrap_err().contains("not an ELF"));
    }
}
