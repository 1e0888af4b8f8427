//! The AMD walk on built files: sections, wrappers, both bundle formats,
//! bare code objects, and hostile inputs that must fail in bounded time.

use super::bundle::tests::bundle;
use super::ccob::tests::ccob;
use super::ccob::Method;
use super::code_object::tests::header;
use super::walk::codes_of;
use crate::scan::elf::tests::build_elf;
use crate::scan::elf::HIP_FATBIN_MAGIC;
use crate::scan::fatbin::{Budget, FatbinError};

/// A code object for `flags` (processor and features), padded to `len`.
fn co(abi: u8, flags: u32, len: usize) -> Vec<u8> {
    let mut h = header(abi, flags);
    h.resize(len.max(64), 0);
    h
}

fn rocsparse_like() -> Vec<u8> {
    bundle(&[
        ("host-x86_64-unknown-linux", b""),
        ("hipv4-amdgcn-amd-amdhsa--gfx1030", &co(2, 0x036, 200)),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
            &co(2, 0x03f | 0x300, 200),
        ),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
            &co(2, 0x03f | 0x200, 200),
        ),
    ])
}

fn archs(bytes: &[u8]) -> Vec<String> {
    codes_of(bytes)
        .unwrap()
        .into_iter()
        .map(|c| c.arch)
        .collect()
}

fn pad4096(mut b: Vec<u8>) -> Vec<u8> {
    b.resize(b.len().div_ceil(4096) * 4096, 0);
    b
}

#[test]
fn bare_bundles_and_code_objects() {
    let b = rocsparse_like();
    assert_eq!(archs(&b), ["gfx1030", "gfx90a:xnack+", "gfx90a:xnack-"]);
    let codes = codes_of(&b).unwrap();
    assert!(codes
        .iter()
        .all(|c| !c.compressed && c.code_object_version == Some(4)));
    // A bare code object (.hsaco).
    let c = codes_of(&co(3, 0x04c | 0x200 | 0xc00, 64)).unwrap();
    assert_eq!(c[0].arch, "gfx942:sramecc+:xnack-");
    assert_eq!(c[0].code_object_version, Some(5));
    // Compressed, every version and method.
    for v in 1..=3u16 {
        for m in [Method::Zlib, Method::Zstd] {
            let c = codes_of(&ccob(v, m, &b)).unwrap();
            let a: Vec<&str> = c.iter().map(|c| c.arch.as_str()).collect();
            assert_eq!(
                a,
                ["gfx1030", "gfx90a:xnack+", "gfx90a:xnack-"],
                "v{v} {m:?}"
            );
            assert!(c.iter().all(|c| c.compressed));
        }
    }
}

#[test]
fn sections_hold_bundles_back_to_back_and_wrappers_point_at_them() {
    let one = pad4096(rocsparse_like());
    let two = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx942", &co(3, 0x04c, 100))]);
    let three = ccob(
        3,
        Method::Zstd,
        &bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx1100", &co(3, 0x041, 100))]),
    );
    // Concatenated compressed bundles are stepped by their total size.
    let mut section = one.clone();
    section.extend_from_slice(&pad4096(two.clone()));
    section.extend_from_slice(&three);
    section.extend_from_slice(&ccob(2, Method::Zlib, &two));
    let elf = build_elf(&[(".hip_fatbin", 1, 2, 0x10000, &section)]);
    assert_eq!(
        archs(&elf),
        [
            "gfx1030",
            "gfx90a:xnack+",
            "gfx90a:xnack-",
            "gfx942",
            "gfx1100",
            "gfx942"
        ]
    );
    // The section renamed: only the wrappers lead to the bundles (the second
    // bundle is reached through its wrapper only).
    let second_va = 0x10000 + one.len() as u64;
    let mut wrappers = Vec::new();
    for va in [0x10000u64, second_va] {
        wrappers.extend_from_slice(&HIP_FATBIN_MAGIC.to_le_bytes());
        wrappers.extend_from_slice(&1u32.to_le_bytes());
        wrappers.extend_from_slice(&va.to_le_bytes());
        wrappers.extend_from_slice(&0u64.to_le_bytes());
    }
    let elf = build_elf(&[
        (".rodata.hip", 1, 2, 0x10000, &section),
        (".hipFatBinSegment", 1, 3, 0x90000, &wrappers),
    ]);
    assert_eq!(
        archs(&elf),
        ["gfx1030", "gfx90a:xnack+", "gfx90a:xnack-", "gfx942"]
    );
    // Wrappers into the section itself add nothing twice.
    let elf = build_elf(&[
        (".hip_fatbin", 1, 2, 0x10000, &section),
        (".hipFatBinSegment", 1, 3, 0x90000, &wrappers),
    ]);
    assert_eq!(archs(&elf).len(), 6);
    // No HIP code: nothing, not an error.
    assert!(codes_of(&build_elf(&[(".text", 1, 6, 0x1000, b"code")]))
        .unwrap()
        .is_empty());
}

/// Every hostile input returns an error quickly (and never panics).
#[test]
fn hostile_bundles_fail_cleanly() {
    let b = rocsparse_like();
    let e1 = 32 + 24 + "host-x86_64-unknown-linux".len();
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut lying = b.clone();
    lying[e1..e1 + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    cases.push(("offset past the end", lying));
    let mut million = b.clone();
    million[24..32].copy_from_slice(&1_000_000u64.to_le_bytes());
    cases.push(("a million entries", million));
    let mut cut = b.clone();
    cut.truncate(70);
    cases.push(("table cut short", cut));
    let mut mismatch = b.clone();
    let second = b.windows(4).position(|w| w == b"\x7fELF").unwrap();
    mismatch[second + 48] = 0x2f; // gfx906 inside a gfx1030 entry
    cases.push(("ELF of another processor", mismatch));
    let mut v = ccob(3, Method::Zstd, &b);
    v[8..16].copy_from_slice(&(1u64 << 50).to_le_bytes());
    cases.push(("compressed total size past the end", v));
    let mut garbage = ccob(2, Method::Zstd, &b);
    for x in garbage[24..].iter_mut() {
        *x ^= 0x5a;
    }
    cases.push(("compressed garbage", garbage));
    let mut short = ccob(3, Method::Zlib, &b);
    short.truncate(40);
    let n = short.len() as u64;
    short[8..16].copy_from_slice(&n.to_le_bytes());
    cases.push(("compressed data ends early", short));
    // A bomb: a table that never ends inside 1 MiB of decompressed zeros.
    let mut bomb_plain = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    bomb_plain.extend_from_slice(&4000u64.to_le_bytes());
    for _ in 0..4000 {
        bomb_plain.extend_from_slice(&[0u8; 16]);
        bomb_plain.extend_from_slice(&1000u64.to_le_bytes());
        bomb_plain.extend_from_slice(&[b'x'; 1000]);
    }
    bomb_plain.resize(64 << 20, 0);
    cases.push(("compression bomb", ccob(3, Method::Zstd, &bomb_plain)));
    for (what, bytes) in cases {
        let t = std::time::Instant::now();
        let r = codes_of(&bytes);
        assert!(
            matches!(r, Err(FatbinError::Bundle { .. })),
            "{what}: {r:?}"
        );
        assert!(t.elapsed().as_secs() < 5, "{what} took {:?}", t.elapsed());
    }
    // The entry budget stops a long walk.
    let mut budget = Budget {
        entries_left: 2,
        deadline: None,
    };
    let r = super::scan_image(b.as_slice(), &mut budget, &mut |_| {});
    assert!(matches!(r, Err(FatbinError::EntryBudget)), "{r:?}");
}

/// Random mutations of a real-shaped library: the walk returns (never
/// panics, never hangs).
#[test]
fn mutated_files_never_panic() {
    let mut section = pad4096(rocsparse_like());
    section.extend_from_slice(&ccob(3, Method::Zstd, &rocsparse_like()));
    let base = build_elf(&[(".hip_fatbin", 1, 2, 0x10000, &section)]);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..3000 {
        let mut f = base.clone();
        for _ in 0..(next() % 8 + 1) {
            let at = (next() % f.len() as u64) as usize;
            f[at] = next() as u8;
        }
        if next() % 5 == 0 {
            f.truncate((next() % f.len() as u64) as usize);
        }
        let _ = codes_of(&f);
    }
}

/// A reader that hands out small, odd-sized pieces, as a decompressor does.
struct Trickle<'a>(&'a [u8], usize);
impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.1).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

fn streamed(bytes: &[u8], piece: usize) -> Result<Vec<crate::core::amd::AmdCode>, String> {
    crate::scan::stream_fatbin::scan_stream(
        &mut Trickle(bytes, piece),
        bytes.len() as u64,
        &mut Budget::unlimited(),
    )
    .map(|s| s.amd)
    .map_err(|e| e.to_string())
}

fn test_files() -> Vec<(&'static str, Vec<u8>)> {
    let one = pad4096(rocsparse_like());
    let two = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx942", &co(3, 0x04c, 100))]);
    let mut section = one.clone();
    section.extend_from_slice(&pad4096(two.clone()));
    section.extend_from_slice(&ccob(3, Method::Zstd, &rocsparse_like()));
    section.extend_from_slice(&ccob(2, Method::Zlib, &two));
    section.extend_from_slice(&ccob(1, Method::Zstd, &two));
    let mut wrappers = Vec::new();
    for va in [0x10000u64, 0x10000 + one.len() as u64] {
        wrappers.extend_from_slice(&HIP_FATBIN_MAGIC.to_le_bytes());
        wrappers.extend_from_slice(&1u32.to_le_bytes());
        wrappers.extend_from_slice(&va.to_le_bytes());
        wrappers.extend_from_slice(&0u64.to_le_bytes());
    }
    vec![
        ("plain bundle", rocsparse_like()),
        ("compressed v3", ccob(3, Method::Zstd, &rocsparse_like())),
        ("code object", co(3, 0x04c | 0x200 | 0xc00, 64)),
        (
            "section",
            build_elf(&[(".hip_fatbin", 1, 2, 0x10000, &section)]),
        ),
        (
            "renamed section, wrappers",
            build_elf(&[
                (".rodata.hip", 1, 2, 0x10000, &section),
                (".hipFatBinSegment", 1, 3, 0x90000, &wrappers),
            ]),
        ),
    ]
}

#[test]
fn streaming_equals_positioned() {
    for (what, f) in test_files() {
        let positioned = codes_of(&f).map_err(|e| e.to_string());
        assert!(positioned.is_ok(), "{what}: {positioned:?}");
        for piece in [1, 7, 4093, 1 << 20] {
            assert_eq!(streamed(&f, piece), positioned, "{what}, pieces of {piece}");
        }
    }
}

/// Mutated files: the stream never panics, and agrees with the positioned
/// walk whenever it has an answer.
#[test]
fn mutated_files_stream_like_they_walk() {
    let files = test_files();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..1500 {
        let (what, base) = &files[round % files.len()];
        let mut f = base.clone();
        for _ in 0..(next() % 6 + 1) {
            let at = (next() % f.len() as u64) as usize;
            f[at] = next() as u8;
        }
        if next() % 6 == 0 {
            f.truncate((next() % f.len() as u64) as usize);
        }
        let positioned = codes_of(&f).map_err(|e| e.to_string());
        if let Ok(s) = streamed(&f, 4093) {
            assert_eq!(Ok(s), positioned, "{what} round {round}");
        }
    }
}
