//! The compat-note reader on hostile libraries: what it may
//! read is bounded by the ELF class's section header size, a cap on the
//! section header table, one read budget for the compat directory, and
//! one read per distinct file (hard links are the same file). Bounds are
//! proven by the bytes this thread read (`rchar` of /proc/thread-self/io),
//! which counts what the holes of a sparse file give back too.

use crate::compat_support::*;
use gpu_guard::scan::compat_lib::scan_rootfs;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// Bytes this thread has read through read(2)-like calls.
fn rchar() -> u64 {
    let io = fs::read_to_string("/proc/thread-self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("rchar in /proc/thread-self/io")
}

/// Without per-thread I/O accounting (CONFIG_TASK_IO_ACCOUNTING) the bounds
/// cannot be measured: SKIP, or fail under GPU_GUARD_CI=1.
fn io_accounting() -> bool {
    let ok = fs::read_to_string("/proc/thread-self/io").is_ok_and(|s| s.contains("rchar: "));
    if !ok {
        crate::support::skip_or_fail("/proc/thread-self/io has no rchar (no task I/O accounting)");
    }
    ok
}

/// `rootfs/usr/local/cuda -> cuda-12.9`, and its compat directory.
fn compat_dir(base: &Path) -> (PathBuf, PathBuf) {
    let rootfs = base.join("rootfs");
    let compat = rootfs.join("usr/local/cuda-12.9/compat");
    fs::create_dir_all(&compat).unwrap();
    symlink("cuda-12.9", rootfs.join("usr/local/cuda")).unwrap();
    (rootfs, compat)
}

/// An ELF64 header whose section header table starts at 64, with these
/// fields, in a sparse file of `len` bytes: the table and the section
/// name table it points at are holes (zeros), so no name ever matches
/// and a reader without bounds walks every header.
fn hostile_elf(path: &Path, shentsize: u16, shnum: u16, len: u64) {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2;
    h[5] = 1;
    h[6] = 1;
    h[16] = 3;
    h[0x28..0x30].copy_from_slice(&64u64.to_le_bytes());
    h[0x3a..0x3c].copy_from_slice(&shentsize.to_le_bytes());
    h[0x3c..0x3e].copy_from_slice(&shnum.to_le_bytes());
    h[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
    fs::write(path, &h).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn errors(scan: &gpu_guard::core::compat::CompatScan) -> Vec<String> {
    scan.libs
        .iter()
        .map(|l| l.note.as_ref().err().cloned().unwrap_or_default())
        .collect()
}

/// 16 hard links to one sparse 4 GiB library of 65,535 section headers of
/// 65,535 bytes: 4 GiB of reads per name before (13-28 s per start).
#[test]
fn a_section_header_size_other_than_the_class_is_refused_unread() {
    if !io_accounting() {
        return;
    }
    let base = tmp("bounds-shentsize");
    let (rootfs, compat) = compat_dir(&base);
    let first = compat.join("libcuda.so.575.1.0");
    hostile_elf(&first, 0xffff, 0xffff, 4 << 30);
    for i in 1..16 {
        fs::hard_link(&first, compat.join(format!("libcuda.so.575.1.{i}"))).unwrap();
    }
    let before = rchar();
    let scan = scan_rootfs(&rootfs);
    let read = rchar() - before;
    assert!(read < 64 << 10, "read {read} bytes");
    assert_eq!(scan.libs.len(), 16, "{scan:?}");
    for e in errors(&scan) {
        assert!(e.contains("entry size 65535"), "{e}");
    }
}

/// A section header table over the cap is refused before it is read;
/// distinct files (no links) each cost the ELF header only.
#[test]
fn a_section_header_table_over_the_cap_is_refused_unread() {
    if !io_accounting() {
        return;
    }
    let base = tmp("bounds-shnum");
    let (rootfs, compat) = compat_dir(&base);
    for i in 0..16 {
        hostile_elf(
            &compat.join(format!("libcuda.so.575.2.{i}")),
            64,
            0xffff,
            1 << 30,
        );
    }
    let before = rchar();
    let scan = scan_rootfs(&rootfs);
    let read = rchar() - before;
    assert!(read < 64 << 10, "read {read} bytes");
    for e in errors(&scan) {
        assert!(e.contains("65535 sections"), "{e}");
    }
}

/// Tables under the cap, one per file, 16 files: the directory's read
/// budget ends the reading, and the libraries left are errors that say so.
#[test]
fn the_compat_directory_has_one_read_budget() {
    if !io_accounting() {
        return;
    }
    let base = tmp("bounds-budget");
    let (rootfs, compat) = compat_dir(&base);
    for i in 0..16 {
        hostile_elf(
            &compat.join(format!("libcuda.so.575.3.{i:02}")),
            64,
            16_000,
            1 << 30,
        );
    }
    let before = rchar();
    let scan = scan_rootfs(&rootfs);
    let read = rchar() - before;
    assert!(read <= (4 << 20) + (64 << 10), "read {read} bytes");
    let errs = errors(&scan);
    assert_eq!(errs.len(), 16);
    assert!(
        errs[0].contains("no .note.cuda.fwd_compatibility"),
        "{errs:?}"
    );
    assert!(errs[15].contains("read budget"), "{errs:?}");
}

/// Hard links to one real library are one file: read once, every name
/// gets the same note.
#[test]
fn hard_links_are_read_once() {
    if !io_accounting() {
        return;
    }
    let base = tmp("bounds-links");
    let (rootfs, compat) = compat_dir(&base);
    let first = compat.join("libcuda.so.575.57.08");
    build_lib(&base, &first, Some(&nvidia_note(DGPU_12_9)));
    let before = rchar();
    let one = scan_rootfs(&rootfs);
    let read_one = rchar() - before;
    assert!(one.libs[0].note.is_ok(), "{one:?}");
    for i in 0..15 {
        fs::hard_link(&first, compat.join(format!("libcuda.so.575.58.{i:02}"))).unwrap();
    }
    let before = rchar();
    let all = scan_rootfs(&rootfs);
    let read_all = rchar() - before;
    assert_eq!(all.libs.len(), 16);
    for l in &all.libs {
        assert_eq!(l.note, one.libs[0].note, "{}", l.path);
    }
    assert!(
        read_all < 2 * read_one,
        "16 names of one file read {read_all} bytes, one name {read_one}"
    );
}
