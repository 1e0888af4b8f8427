//! Hostile images: nothing may hang, panic, read outside the rootfs or open
//! anything but a regular file. Every case runs with both resolvers
//! (openat2 RESOLVE_IN_ROOT and the userspace fallback).

use crate::scan_support::*;
use gpu_guard::core::decision::{Check, Finding, Severity};
use gpu_guard::core::facts::Gpu;
use gpu_guard::core::kernel_image::{assess, Scanned};
use gpu_guard::core::policy::{Config, Enforcement, KernelImageConfig};
use gpu_guard::scan::libraries::{scan_root, scan_root_tapped, Limits};
use gpu_guard::scan::rootfs::{Entries, Resolver, Root};
use nix::errno::Errno;
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

const RESOLVERS: [Resolver; 2] = [Resolver::Openat2, Resolver::Userspace];

fn cfg(globs: &[&str]) -> KernelImageConfig {
    KernelImageConfig {
        severity: Enforcement::Refuse,
        libraries: globs.iter().map(|s| s.to_string()).collect(),
        cache_dir: String::new(),
        ..Config::default().kernel_image
    }
}

fn limits(cfg: &KernelImageConfig) -> Limits {
    Limits::from_config(cfg)
}

fn scan(root_dir: &Path, resolver: Resolver, cfg: &KernelImageConfig) -> Scanned {
    let root = Root::open_with(root_dir, resolver).unwrap();
    let start = Instant::now();
    let s = scan_root(&root, cfg, &limits(cfg), None);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "scan took {:?}",
        start.elapsed()
    );
    s
}

fn h100() -> Vec<Gpu> {
    vec![Gpu {
        index: 0,
        name: "NVIDIA H100".into(),
        compute_capability: Some("9.0".into()),
        ..Default::default()
    }]
}

fn mkfifo(p: &Path) {
    nix::unistd::mkfifo(p, Mode::from_bits_truncate(0o644)).unwrap();
}

/// /dev/zero's device number (char 1:5) inside the rootfs. Needs root (CI
/// runs as root); elsewhere the case is skipped, loudly.
fn mknod_zero(p: &Path) -> bool {
    let made = mknod(
        p,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(1, 5),
    );
    require(made.ok(), "permission to mknod (run as root)").is_some()
}

fn messages(f: &[Finding]) -> String {
    f.iter()
        .map(|f| format!("{:?}: {}", f.severity, f.message))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn symlinks_resolve_inside_the_rootfs() {
    for resolver in RESOLVERS {
        let root = tempdir("links");
        fs::create_dir_all(root.join("usr/lib")).unwrap();
        fs::create_dir_all(root.join("etc")).unwrap();
        // What the links reach inside the root: distinct fixtures, so the
        // findings prove which file was read.
        fs::copy(fixture("sass-only.so"), root.join("etc/shadow")).unwrap(); // sm_86
        fs::copy(fixture("ptx-only.so"), root.join("etc/passwd")).unwrap(); // compute_80
        symlink("/etc/shadow", root.join("usr/lib/libabs.so")).unwrap();
        symlink(
            "../../../../../../../../etc/passwd",
            root.join("usr/lib/librel.so"),
        )
        .unwrap();
        symlink("../../..", root.join("usr/lib/libup.so")).unwrap();
        symlink("libloop.so", root.join("usr/lib/libloop.so")).unwrap();
        symlink(
            "/proc/self/root/etc/hostname",
            root.join("usr/lib/libproc.so"),
        )
        .unwrap();
        let c = cfg(&["usr/lib/lib*.so"]);
        let s = scan(&root, resolver, &c);
        let by = |p: &str| s.libraries.iter().find(|l| l.path == p);
        let abs = by("usr/lib/libabs.so").expect("libabs scanned");
        let names = |l: &gpu_guard::core::kernel_image::Library| -> Vec<String> {
            l.outcome
                .as_ref()
                .unwrap()
                .iter()
                .map(|i| i.arch.name(i.kind))
                .collect()
        };
        assert_eq!(
            names(abs),
            ["sm_86"],
            "{resolver:?}: /etc/shadow of the rootfs"
        );
        let rel = by("usr/lib/librel.so").expect("librel scanned");
        assert_eq!(
            names(rel),
            ["compute_80"],
            "{resolver:?}: ../ clamps at the root"
        );
        // ../../.. is the root directory: not a library, skipped.
        assert!(by("usr/lib/libup.so").is_none(), "{resolver:?}");
        // A self-loop fails to resolve: an unreadable library, not a hang.
        let l = by("usr/lib/libloop.so").expect("loop reported");
        assert!(l.outcome.is_err(), "{resolver:?}");
        // /proc/self/root inside the image is just a missing path.
        assert!(
            by("usr/lib/libproc.so").map_or(true, |l| l.outcome.is_err()),
            "{resolver:?}"
        );
        // The judgement uses the in-root files: sm_86 has nothing for 9.0,
        // compute_80 JITs.
        let f = assess(&s, &h100(), None, Enforcement::Refuse);
        let m = messages(&f);
        assert!(m.contains("usr/lib/libabs.so has no GPU code"), "{m}");
        assert!(m.contains("usr/lib/librel.so has no machine code"), "{m}");
        fs::remove_dir_all(&root).unwrap();
    }
}

#[test]
fn fifos_devices_and_sockets_are_never_opened() {
    for resolver in RESOLVERS {
        let root = tempdir("special");
        let lib = root.join("usr/lib");
        fs::create_dir_all(&lib).unwrap();
        fs::create_dir_all(root.join("dev")).unwrap();
        mkfifo(&lib.join("libfifo.so"));
        let have_dev = mknod_zero(&root.join("dev/zero"));
        symlink("/dev/zero", lib.join("libzero.so")).unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(lib.join("libsock.so")).unwrap();
        let c = cfg(&["usr/lib/lib*.so"]);
        let s = scan(&root, resolver, &c);
        let err = |p: &str| {
            s.libraries
                .iter()
                .find(|l| l.path == p)
                .and_then(|l| l.outcome.clone().err())
                .unwrap_or_else(|| {
                    panic!("{resolver:?}: {p} should be an unreadable library: {s:?}")
                })
        };
        assert!(err("usr/lib/libfifo.so").contains("not a regular file"));
        assert!(err("usr/lib/libsock.so").contains("not a regular file"));
        if have_dev {
            assert!(err("usr/lib/libzero.so").contains("not a regular file"));
        }
        let f = assess(&s, &h100(), None, Enforcement::Refuse);
        assert!(!f.is_empty());
        assert!(f
            .iter()
            .all(|f| f.severity == Severity::Warning && f.check == Check::KernelImage));
        fs::remove_dir_all(&root).unwrap();
    }
}

/// ELF64 with one `.nv_fatbin` section at `fat_off`/`fat_size` and the
/// section table at `shoff` (written sparsely into `path`).
fn write_elf_with_fatbin(path: &Path, total: u64, fat_off: u64, fat_size: u64, fat: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = fs::File::create(path).unwrap();
    f.set_len(total).unwrap();
    let strtab = b"\0.nv_fatbin\0.shstrtab\0";
    let str_off = 0x100u64;
    let shoff = total - 3 * 64;
    let mut h = [0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2;
    h[5] = 1;
    h[6] = 1;
    h[16] = 3;
    h[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
    h[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
    h[0x3e..0x40].copy_from_slice(&2u16.to_le_bytes());
    f.write_all_at(&h, 0).unwrap();
    f.write_all_at(strtab, str_off).unwrap();
    f.write_all_at(fat, fat_off).unwrap();
    let sh = |name: u32, kind: u32, off: u64, size: u64| {
        let mut s = [0u8; 64];
        s[0..4].copy_from_slice(&name.to_le_bytes());
        s[4..8].copy_from_slice(&kind.to_le_bytes());
        s[8..16].copy_from_slice(&2u64.to_le_bytes());
        s[24..32].copy_from_slice(&off.to_le_bytes());
        s[32..40].copy_from_slice(&size.to_le_bytes());
        s
    };
    f.write_all_at(&sh(1, 1, fat_off, fat_size), shoff + 64)
        .unwrap();
    f.write_all_at(&sh(12, 3, str_off, strtab.len() as u64), shoff + 128)
        .unwrap();
}

fn container(entries: &[u8], fat_size: u64) -> Vec<u8> {
    let mut c = Vec::new();
    c.extend_from_slice(&0xBA55ED50u32.to_le_bytes());
    c.extend_from_slice(&1u16.to_le_bytes());
    c.extend_from_slice(&16u16.to_le_bytes());
    c.extend_from_slice(&fat_size.to_le_bytes());
    c.extend_from_slice(entries);
    c
}

fn entry(header_size: u32, payload: u64) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[0..2].copy_from_slice(&2u16.to_le_bytes());
    h[2..4].copy_from_slice(&0x101u16.to_le_bytes());
    h[4..8].copy_from_slice(&header_size.to_le_bytes());
    h[8..16].copy_from_slice(&payload.to_le_bytes());
    h[28..32].copy_from_slice(&80u32.to_le_bytes());
    h
}

#[test]
fn broken_and_huge_files_are_findings_not_hangs() {
    let root = tempdir("broken");
    let lib = root.join("usr/lib");
    fs::create_dir_all(&lib).unwrap();
    // A sparse 10 GB file whose fatbin section spans it: the first entry
    // claims a 9 GB payload, the next header is zeros.
    let ten_gb = 10u64 << 30;
    let fat = container(&entry(64, 9 << 30), ten_gb - 0x2000 - 16);
    write_elf_with_fatbin(
        &lib.join("libsparse.so"),
        ten_gb,
        0x1000,
        ten_gb - 0x2000,
        &fat,
    );
    // Truncated ELF: half of a real fixture.
    let real = fs::read(fixture("multi-arch.so")).unwrap();
    fs::write(lib.join("libtrunc.so"), &real[..real.len() / 2]).unwrap();
    // Container size pointing past the end of the file.
    let fat = container(&entry(64, 0), 1 << 40);
    write_elf_with_fatbin(&lib.join("libpast.so"), 1 << 20, 0x1000, 0x1000, &fat);
    // Zero-size entry header: would loop forever if trusted.
    let fat = container(&entry(0, 0), 64);
    write_elf_with_fatbin(&lib.join("libzero.so"), 1 << 20, 0x1000, 80, &fat);
    // Payload size that overflows u64 arithmetic.
    let fat = container(&entry(64, u64::MAX - 10), 64);
    write_elf_with_fatbin(&lib.join("liboverflow.so"), 1 << 20, 0x1000, 80, &fat);
    // Not an ELF at all.
    fs::write(lib.join("libtext.so"), b"INPUT(-lfoo)\n").unwrap();
    // Empty.
    fs::write(lib.join("libempty.so"), b"").unwrap();

    for resolver in RESOLVERS {
        let mut c = cfg(&["usr/lib/lib*.so"]);
        c.max_bytes = u64::MAX;
        let s = scan(&root, resolver, &c);
        assert!(s.incomplete.is_none(), "{s:?}");
        for name in [
            "libsparse.so",
            "libtrunc.so",
            "libpast.so",
            "libzero.so",
            "liboverflow.so",
            "libtext.so",
            "libempty.so",
        ] {
            let p = format!("usr/lib/{name}");
            let l = s
                .libraries
                .iter()
                .find(|l| l.path == p)
                .unwrap_or_else(|| panic!("{p} missing: {s:?}"));
            assert!(l.outcome.is_err(), "{resolver:?} {p}: {:?}", l.outcome);
        }
        let f = assess(&s, &h100(), None, Enforcement::Refuse);
        assert_eq!(f.len(), 7, "{}", messages(&f));
        assert!(f.iter().all(|f| f.severity == Severity::Warning));
    }
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn budgets_stop_the_scan_with_a_warning() {
    let root = tempdir("budget");
    let lib = root.join("usr/lib");
    fs::create_dir_all(&lib).unwrap();
    for i in 0..5 {
        fs::copy(fixture("multi-arch.so"), lib.join(format!("lib{i}.so"))).unwrap();
    }
    let gpus = h100();
    // Files.
    let mut c = cfg(&["usr/lib/lib*.so"]);
    c.max_files = 2;
    let s = scan(&root, Resolver::Openat2, &c);
    assert_eq!(s.libraries.len(), 2);
    assert!(s
        .incomplete
        .as_deref()
        .unwrap()
        .contains("more than 2 libraries"));
    assert_eq!(s.not_scanned.len(), 3);
    let f = assess(&s, &gpus, None, Enforcement::Refuse);
    assert!(
        messages(&f).contains("3 matched libraries not checked"),
        "{}",
        messages(&f)
    );
    // Entries: each file has 8. The budget is shared fairly (an equal share
    // of what is left to each library still to parse), so 12 entries for
    // five libraries judge none of them, and all five are named; 40 judge
    // all.
    let mut c = cfg(&["usr/lib/lib*.so"]);
    c.max_entries = 12;
    let s = scan(&root, Resolver::Openat2, &c);
    assert_eq!(s.libraries.len(), 0, "{s:?}");
    assert_eq!(s.not_scanned.len(), 5);
    assert!(s.incomplete.as_deref().unwrap().contains("entry budget"));
    c.max_entries = 40;
    let s = scan(&root, Resolver::Openat2, &c);
    assert_eq!(s.libraries.len(), 5, "{s:?}");
    assert!(s.incomplete.is_none(), "{s:?}");
    // Bytes.
    let mut c = cfg(&["usr/lib/lib*.so"]);
    c.max_bytes = 1;
    let s = scan(&root, Resolver::Openat2, &c);
    assert!(s.libraries.is_empty());
    assert!(s.incomplete.is_some());
    // Time.
    let mut c = cfg(&["usr/lib/lib*.so"]);
    c.time_budget_ms = 0;
    let s = scan(&root, Resolver::Openat2, &c);
    assert!(
        s.incomplete.as_deref().unwrap().contains("time budget"),
        "{s:?}"
    );
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn globs_cannot_loop_or_escape() {
    for resolver in RESOLVERS {
        let root = tempdir("globs");
        let deep = root.join("a/b/c");
        fs::create_dir_all(&deep).unwrap();
        // A directory symlink loop: `**` must not follow it.
        symlink("../..", deep.join("loop")).unwrap();
        symlink("/", root.join("a/hostroot")).unwrap();
        fs::copy(fixture("sm90a.so"), deep.join("libk.so")).unwrap();
        // A name with control characters.
        fs::copy(fixture("sass-only.so"), deep.join("lib\nnasty\u{1b}.so")).unwrap();
        let c = cfg(&["**/lib*.so", "a/hostroot/etc/*"]);
        let s = scan(&root, resolver, &c);
        let paths: Vec<&str> = s.libraries.iter().map(|l| l.path.as_str()).collect();
        assert!(paths.contains(&"a/b/c/libk.so"), "{paths:?}");
        // a/hostroot/etc/* lists the rootfs's own etc (absent): nothing.
        assert!(!paths.iter().any(|p| p.contains("hostroot")), "{paths:?}");
        let f = assess(&s, &h100(), None, Enforcement::Refuse);
        let m = messages(&f);
        assert!(m.contains("lib\\x0anasty\\x1b.so"), "{m}");
        assert!(!f
            .iter()
            .any(|f| f.message.contains('\n') || f.message.contains('\u{1b}')));
        fs::remove_dir_all(&root).unwrap();
    }
}

#[test]
fn a_missing_rootfs_is_a_warning() {
    let f = gpu_guard::scan::kernel_image_findings(
        Path::new("/nonexistent/gpu-guard/rootfs"),
        &h100(),
        None,
        &cfg(&["usr/lib/*.so"]),
    );
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0].message.contains("cannot check"), "{}", f[0].message);
}

/// readdir(3) fails (EIO) after two entries of usr/lib: the scan must not
/// judge the libraries it happened to see as if they were all, and the
/// failure must reach the findings as a warning.
#[test]
fn a_readdir_error_is_a_warning_not_a_short_listing() {
    fn fail_usr_lib<'a>(dir: &str, real: Entries<'a>) -> Entries<'a> {
        if dir != "usr/lib" {
            return real;
        }
        Box::new(real.take(2).chain(std::iter::once(Err(Errno::EIO))))
    }
    for resolver in RESOLVERS {
        let root = tempdir("readdir-eio");
        let lib = root.join("usr/lib");
        fs::create_dir_all(&lib).unwrap();
        for i in 0..4 {
            fs::copy(fixture("sm90a.so"), lib.join(format!("lib{i}.so"))).unwrap();
        }
        let c = cfg(&["usr/lib/lib*.so"]);
        let r = Root::open_with(&root, resolver).unwrap();
        // Without the fault: four libraries, all fine.
        let s = scan_root(&r, &c, &limits(&c), None);
        assert_eq!(s.libraries.len(), 4, "{resolver:?}: {s:?}");
        assert!(s.libraries.iter().all(|l| l.outcome.is_ok()));
        // With it: no library of that listing is scanned, and the
        // directory is reported as unreadable.
        let s = scan_root_tapped(&r, &c, &limits(&c), None, &fail_usr_lib);
        assert_eq!(s.libraries.len(), 1, "{resolver:?}: {s:?}");
        assert_eq!(s.libraries[0].path, "usr/lib");
        let e = s.libraries[0].outcome.as_ref().unwrap_err();
        assert!(e.contains("reading its entries failed"), "{e}");
        assert!(e.contains("Input/output error"), "{e}");
        let f = assess(&s, &h100(), None, Enforcement::Refuse);
        assert_eq!(f.len(), 1, "{}", messages(&f));
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].check, Check::KernelImage);
        assert!(
            f[0].message.contains("cannot read the GPU code in usr/lib"),
            "{}",
            f[0].message
        );
        fs::remove_dir_all(&root).unwrap();
    }
}

/// A glob through a directory the image lacks stays silent; one that
/// cannot be opened for another reason is a warning.
#[test]
fn unlistable_directories_are_warnings_missing_ones_are_not() {
    for resolver in RESOLVERS {
        let root = tempdir("unlistable");
        fs::create_dir_all(root.join("usr/lib")).unwrap();
        // A self-loop where a directory is expected: ELOOP, not absence.
        symlink("loop", root.join("usr/loop")).unwrap();
        let c = cfg(&["opt/*/lib*.so", "usr/loop/*.so"]);
        let s = scan(&root, resolver, &c);
        assert_eq!(s.libraries.len(), 1, "{resolver:?}: {s:?}");
        assert_eq!(s.libraries[0].path, "usr/loop");
        assert!(s.libraries[0].outcome.is_err());
        fs::remove_dir_all(&root).unwrap();
    }
}
