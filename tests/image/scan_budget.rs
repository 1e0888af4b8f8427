//! Budgets against hostile images: the byte budget counts
//! what is read, not file sizes; the libraries that matter come first and
//! one huge file cannot starve the rest; what a budget leaves unjudged is
//! named, refuses under `on_incomplete = "enforce"`, and the next start
//! resumes from the cache.

use crate::scan_support::*;
use gpu_guard::core::decision::{Check, Finding, Severity};
use gpu_guard::core::facts::Gpu;
use gpu_guard::core::kernel_image::{assess, Scanned};
use gpu_guard::core::policy::{Config, Enforcement, KernelImageConfig};
use gpu_guard::scan::cache::Cache;
use gpu_guard::scan::kernel_image_findings;
use gpu_guard::scan::libraries::{scan_root, Limits};
use gpu_guard::scan::rootfs::{Resolver, Root};
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const TIB: u64 = 1 << 40;
/// Where the shipped globs look for distro cuBLAS/cuDNN.
const DISTRO: &str = "usr/lib/x86_64-linux-gnu";

fn h100() -> Vec<Gpu> {
    vec![Gpu {
        index: 0,
        name: "NVIDIA H100".into(),
        compute_capability: Some("9.0".into()),
        ..Default::default()
    }]
}

/// The shipped budgets under enforce, but time: these tests are about the
/// byte and file budgets, and a loaded test machine must not turn them
/// into time-budget cases.
fn enforce(cache: Option<&Path>) -> KernelImageConfig {
    KernelImageConfig {
        severity: Enforcement::Refuse,
        time_budget_ms: 120_000,
        cache_dir: cache
            .map(|c| c.to_str().unwrap().into())
            .unwrap_or_default(),
        ..Config::default().kernel_image
    }
}

fn scan(root: &Path, cfg: &KernelImageConfig) -> Scanned {
    let r = Root::open_with(root, Resolver::Openat2).unwrap();
    let cache = Cache::open(&cfg.cache_dir);
    scan_root(&r, cfg, &Limits::from_config(cfg), cache.as_ref())
}

fn messages(f: &[Finding]) -> String {
    f.iter()
        .map(|f| format!("{:?}: {}", f.severity, f.message))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A sparse file of `size` zero bytes (costs no disk).
fn sparse(p: &Path, size: u64) {
    fs::File::create(p).unwrap().set_len(size).unwrap();
}

/// A sparse 1 TiB ELF64 that claims a million sections (the extended
/// count in section 0): its headers are 64 MiB of holes, so parsing it
/// reads 64 MiB and judges nothing. The hog a byte budget must contain.
fn hog(p: &Path) {
    let f = fs::File::create(p).unwrap();
    f.set_len(TIB).unwrap();
    let shoff = 0x1000u64;
    let mut h = [0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2; // 64-bit
    h[5] = 1; // little-endian
    h[6] = 1;
    h[16] = 3; // ET_DYN
    h[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    h[0x3c..0x3e].copy_from_slice(&0u16.to_le_bytes()); // e_shnum: see section 0
    h[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes()); // e_shstrndx
    f.write_all_at(&h, 0).unwrap();
    let mut s0 = [0u8; 64];
    s0[32..40].copy_from_slice(&(1u64 << 20).to_le_bytes()); // sh_size: the count
    f.write_all_at(&s0, shoff).unwrap();
    let strtab = b"\0.shstrtab\0";
    let mut s1 = [0u8; 64];
    s1[4..8].copy_from_slice(&3u32.to_le_bytes()); // SHT_STRTAB
    s1[24..32].copy_from_slice(&0x800u64.to_le_bytes());
    s1[32..40].copy_from_slice(&(strtab.len() as u64).to_le_bytes());
    f.write_all_at(&s1, shoff + 64).unwrap();
    f.write_all_at(strtab, 0x800).unwrap();
}

/// The rootfs of the issue: a 1 TiB sparse file that sorts before the real
/// cuBLAS (sm_86 only: nothing for an H100).
fn terabyte_before_real() -> PathBuf {
    let root = tempdir("budget-tib");
    let d = root.join(DISTRO);
    fs::create_dir_all(&d).unwrap();
    sparse(&d.join("libcublas.so.0-aaa"), TIB);
    fs::copy(fixture("sass-only.so"), d.join("libcublasLt.so.13")).unwrap();
    root
}

#[test]
fn a_sparse_terabyte_before_the_real_library_does_not_stop_the_check() {
    let root = terabyte_before_real();
    for max_bytes in [Config::default().kernel_image.max_bytes, 1 << 20] {
        let cfg = KernelImageConfig {
            max_bytes,
            ..enforce(None)
        };
        let s = scan(&root, &cfg);
        assert!(s.incomplete.is_none(), "{max_bytes}: {s:?}");
        // A sparse TiB of zeros costs its 4-byte magic, not its size.
        assert!(s.bytes_read < 64 << 10, "{}", s.bytes_read);
        let f = kernel_image_findings(&root, &h100(), None, &cfg);
        let m = messages(&f);
        let real = f
            .iter()
            .find(|f| f.message.contains("libcublasLt.so.13 has no GPU code"))
            .unwrap_or_else(|| panic!("the real library was not judged:\n{m}"));
        assert_eq!(real.severity, Severity::Error, "{m}");
        assert!(!m.contains("stopped early"), "{m}");
    }
    fs::remove_dir_all(&root).unwrap();
}

/// Thirty sparse TiB files of zeros, three sparse TiB hogs, and the real
/// library last in name order.
fn hostile_crowd() -> (PathBuf, Vec<String>) {
    let root = tempdir("budget-crowd");
    let d = root.join(DISTRO);
    fs::create_dir_all(&d).unwrap();
    for i in 0..30 {
        sparse(&d.join(format!("libcublas.so.0-zero{i:02}")), TIB);
    }
    let mut hogs = Vec::new();
    for i in 0..3 {
        let name = format!("libcublas.so.0-hog{i}");
        hog(&d.join(&name));
        hogs.push(format!("{DISTRO}/{name}"));
    }
    fs::copy(fixture("sass-only.so"), d.join("libcublasLt.so.13")).unwrap();
    (root, hogs)
}

#[test]
fn huge_hostile_files_cost_what_is_read_and_the_unjudged_are_named() {
    let (root, hogs) = hostile_crowd();
    let cfg = KernelImageConfig {
        max_bytes: 8 << 20,
        ..enforce(None)
    };
    let s = scan(&root, &cfg);
    // 33 TiB of files, 8 MiB read at most, every read counted.
    assert!(s.bytes_read <= 8 << 20, "{}", s.bytes_read);
    assert!(s.bytes_read > 4 << 20, "the hogs read: {}", s.bytes_read);
    // Only the hogs are left unjudged, by name; the budget they used up
    // is the reason.
    assert_eq!(s.not_scanned, hogs, "{s:?}");
    let why = s.incomplete.as_deref().unwrap();
    assert!(why.contains("read budget of 8388608 bytes"), "{why}");
    // The zeros are judged (unreadable: not ELF), and so is the real one.
    assert_eq!(s.libraries.len(), 31, "{s:?}");
    let f = assess(&s, &h100(), None, Enforcement::Refuse);
    let m = messages(&f);
    let real = f
        .iter()
        .find(|f| f.message.contains("libcublasLt.so.13 has no GPU code"))
        .unwrap_or_else(|| panic!("real library not judged:\n{m}"));
    assert_eq!(real.severity, Severity::Error);
    let inc = f
        .iter()
        .find(|f| f.message.contains("stopped early"))
        .expect("incomplete finding");
    assert_eq!(inc.severity, Severity::Warning, "on_incomplete = warn");
    assert!(
        inc.message.contains("3 matched libraries not checked"),
        "{m}"
    );
    for h in &hogs {
        assert!(inc.message.contains(h.as_str()), "{h}: {m}");
    }
    assert_eq!(inc.details, hogs);

    // With the shipped byte budgets the hogs hit max_file_bytes (64 MiB each)
    // instead, and are named for that.
    let s = scan(&root, &enforce(None));
    assert_eq!(s.not_scanned, hogs, "{s:?}");
    let why = s.incomplete.as_deref().unwrap();
    assert!(why.contains("reads more than max_file_bytes"), "{why}");
    assert!(s.libraries.len() == 31);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn on_incomplete_refuse_refuses_naming_the_unjudged() {
    let (root, hogs) = hostile_crowd();
    let refuse = KernelImageConfig {
        max_bytes: 8 << 20,
        on_incomplete: Enforcement::Refuse,
        ..enforce(None)
    };
    // Even when every judged library runs: make the real one fit the GPU.
    fs::copy(
        fixture("multi-arch.so"),
        root.join(DISTRO).join("libcublasLt.so.13"),
    )
    .unwrap();
    let f = kernel_image_findings(&root, &h100(), None, &refuse);
    let m = messages(&f);
    let errors: Vec<&Finding> = f.iter().filter(|f| f.severity == Severity::Error).collect();
    assert_eq!(errors.len(), 1, "{m}");
    let e = errors[0];
    assert_eq!(e.check, Check::KernelImage);
    assert!(e.message.contains("stopped early"), "{m}");
    assert!(e.message.contains("read budget"), "{m}");
    for h in &hogs {
        assert!(e.message.contains(h.as_str()), "{h}: {m}");
    }
    assert!(e.fix.as_deref().unwrap().contains("on_incomplete"), "{m}");
    // The default (warn) lets it start with a warning; severity = "warn"
    // never refuses.
    let warn = KernelImageConfig {
        on_incomplete: Enforcement::Warn,
        ..refuse.clone()
    };
    let f = kernel_image_findings(&root, &h100(), None, &warn);
    assert!(f.iter().all(|f| f.severity == Severity::Warning), "{f:?}");
    let sev_warn = KernelImageConfig {
        severity: Enforcement::Warn,
        ..refuse.clone()
    };
    let f = kernel_image_findings(&root, &h100(), None, &sev_warn);
    assert!(f.iter().all(|f| f.severity == Severity::Warning), "{f:?}");
    // The config file spells it so.
    let c = gpu_guard::config::parse("[kernel_image]\non_incomplete = \"enforce\"\n").unwrap();
    assert_eq!(c.kernel_image.on_incomplete, Enforcement::Refuse);
    assert!(gpu_guard::config::parse("[kernel_image]\non_incomplete = \"allow\"\n").is_err());
    fs::remove_dir_all(&root).unwrap();
}

/// A complete scan refuses nothing under `refuse`.
#[test]
fn on_incomplete_refuse_is_quiet_when_the_scan_completes() {
    let root = terabyte_before_real();
    fs::copy(
        fixture("multi-arch.so"),
        root.join(DISTRO).join("libcublasLt.so.13"),
    )
    .unwrap();
    let cfg = KernelImageConfig {
        on_incomplete: Enforcement::Refuse,
        ..enforce(None)
    };
    let f = kernel_image_findings(&root, &h100(), None, &cfg);
    assert!(f.iter().all(|f| f.severity != Severity::Error), "{f:?}");
    fs::remove_dir_all(&root).unwrap();
}

/// Bytes one library alone reads to be judged.
fn reads_of(lib: &Path) -> u64 {
    let root = tempdir("budget-one");
    fs::create_dir_all(root.join("usr/lib")).unwrap();
    fs::copy(lib, root.join("usr/lib/libone.so")).unwrap();
    let cfg = KernelImageConfig {
        libraries: vec!["usr/lib/*.so".into()],
        ..enforce(None)
    };
    let s = scan(&root, &cfg);
    assert!(s.incomplete.is_none() && s.libraries[0].outcome.is_ok());
    fs::remove_dir_all(&root).unwrap();
    s.bytes_read
}

#[test]
fn the_second_start_resumes_from_the_cache() {
    // The smaller library first, so a byte budget that fits the larger one
    // alone, but not both, judges the smaller and stops at the larger.
    let (mut small, mut large) = (fixture("sass-only.so"), fixture("multi-arch.so"));
    let (mut s_bytes, mut l_bytes) = (reads_of(&small), reads_of(&large));
    if s_bytes > l_bytes {
        std::mem::swap(&mut small, &mut large);
        std::mem::swap(&mut s_bytes, &mut l_bytes);
    }
    assert!(s_bytes < l_bytes, "{s_bytes} {l_bytes}");
    let root = tempdir("budget-resume");
    let lib = root.join("usr/lib");
    fs::create_dir_all(&lib).unwrap();
    fs::copy(&small, lib.join("liba.so")).unwrap();
    fs::copy(&large, lib.join("libb.so")).unwrap();
    let cache = tempdir("budget-resume-cache");
    let cfg = KernelImageConfig {
        libraries: vec!["usr/lib/*.so".into()],
        max_bytes: l_bytes.max(2 * s_bytes),
        ..enforce(Some(&cache))
    };
    let first = scan(&root, &cfg);
    assert_eq!(first.not_scanned, ["usr/lib/libb.so"], "{first:?}");
    assert!(first.incomplete.as_deref().unwrap().contains("read budget"));
    assert_eq!(first.libraries.len(), 1);
    assert_eq!(
        fs::read_dir(&cache).unwrap().count(),
        1,
        "what was judged is cached"
    );
    let f = assess(&first, &h100(), None, Enforcement::Refuse);
    assert!(
        f.iter().any(|f| f
            .fix
            .as_deref()
            .unwrap_or("")
            .contains("next start continues")),
        "{f:?}"
    );
    // The next start reads liba.so from the cache (free) and has the
    // whole budget for libb.so.
    let second = scan(&root, &cfg);
    assert!(second.incomplete.is_none(), "{second:?}");
    assert_eq!(second.libraries.len(), 2);
    assert_eq!(second.bytes_read, l_bytes);
    assert_eq!(fs::read_dir(&cache).unwrap().count(), 2);

    // max_files counts parses, not cache hits: one file per start walks
    // through the image.
    let cache2 = tempdir("budget-resume-files");
    let one = KernelImageConfig {
        max_files: 1,
        ..enforce(Some(&cache2))
    };
    let one = KernelImageConfig {
        libraries: vec!["usr/lib/*.so".into()],
        ..one
    };
    let a = scan(&root, &one);
    assert_eq!(a.not_scanned, ["usr/lib/libb.so"], "{a:?}");
    let b = scan(&root, &one);
    assert!(b.incomplete.is_none(), "{b:?}");
    assert_eq!(b.libraries.len(), 2);
    for d in [root, cache, cache2] {
        fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn glob_order_then_literal_names_come_first() {
    let root = tempdir("budget-order");
    for d in ["usr/a", "usr/b"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for p in ["usr/a/lib0.so", "usr/b/lib0.so", "usr/b/libreal.so"] {
        fs::copy(fixture("sass-only.so"), root.join(p)).unwrap();
    }
    let only_one = |globs: &[&str]| {
        let cfg = KernelImageConfig {
            libraries: globs.iter().map(|g| g.to_string()).collect(),
            max_files: 1,
            ..enforce(None)
        };
        let s = scan(&root, &cfg);
        assert_eq!(s.libraries.len(), 1, "{s:?}");
        s.libraries[0].path.clone()
    };
    // The config's order, not the paths' order.
    assert_eq!(only_one(&["usr/b/lib0.so", "usr/a/*.so"]), "usr/b/lib0.so");
    assert_eq!(only_one(&["usr/b/*.so", "usr/a/*.so"]), "usr/b/lib0.so");
    assert_eq!(only_one(&["usr/a/*.so", "usr/b/*.so"]), "usr/a/lib0.so");
    // Within one glob, the literal name before the wildcard's matches,
    // though lib0.so sorts first.
    assert_eq!(
        only_one(&["usr/b/{lib*.so,libreal.so}"]),
        "usr/b/libreal.so"
    );
    fs::remove_dir_all(&root).unwrap();
}
