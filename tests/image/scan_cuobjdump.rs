//! gpu-guard's listing of device code must agree with NVIDIA's cuobjdump,
//! on the generated fixtures (integration/make-fatbin-fixtures.sh) and on a
//! library NVIDIA ships (libcurand from the nvidia-curand wheel).

use crate::scan_support::*;
use gpu_guard::core::arch::{Kind, Variant};
use gpu_guard::scan::fatbin::{entries_of, Entry};
use std::path::Path;
use std::process::Command;

/// Every fixture the generator writes, with what it must hold (a cross
/// check that the fixture is what its name says, independent of cuobjdump).
const FIXTURES: &[(&str, &[&str])] = &[
    ("multi-arch.so", &["sm_75", "sm_80", "sm_90a", "compute_90"]),
    ("ptx-only.so", &["compute_80"]),
    ("sass-only.so", &["sm_86"]),
    ("sm90a.so", &["sm_90a", "compute_90a"]),
    (
        "sm100f.so",
        &["sm_100f", "sm_103f", "sm_120f", "compute_100f"],
    ),
    ("compressed-zstd.so", &["sm_80", "compute_80"]),
    ("compressed-lz4.so", &["sm_89", "compute_89"]),
    ("uncompressed.so", &["sm_75", "compute_75"]),
    ("concat.so", &["sm_80", "sm_90a", "sm_100f", "sm_120a"]),
    ("rdc.o", &["sm_80", "compute_80"]),
    ("rdc.so", &["sm_86", "compute_86"]),
    ("renamed-section.so", &["sm_86"]),
    ("ident.so", &["sm_80", "compute_75"]),
    ("bare.fatbin", &["sm_80", "compute_75"]),
    ("old-arch.so", &["sm_52", "compute_52"]),
    ("no-device-code.so", &[]),
];

fn ours(path: &Path) -> Vec<Entry> {
    let bytes = std::fs::read(path).unwrap();
    entries_of(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What `cuobjdump --list-elf --list-ptx` lists, as `cubin sm_80` /
/// `ptx sm_90` lines, sorted (a multiset: one line per embedded image).
fn cuobjdump_list(tool: &Path, file: &Path) -> Vec<String> {
    let out = Command::new(tool)
        .arg("--list-elf")
        .arg("--list-ptx")
        .arg(file)
        .output()
        .unwrap();
    // cuobjdump exits non-zero for a file without device code, saying so.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v: Vec<String> = text
        .lines()
        .filter_map(|l| {
            // "ELF file    1: multi-arch.1.sm_80.cubin", "PTX file    1: x.1.sm_90.ptx"
            let (kind, name) = if l.starts_with("ELF file") {
                ("cubin", l.rsplit_once(": ")?.1.strip_suffix(".cubin")?)
            } else if l.starts_with("PTX file") {
                ("ptx", l.rsplit_once(": ")?.1.strip_suffix(".ptx")?)
            } else {
                return None;
            };
            let arch = name.rsplit_once('.').map_or(name, |(_, a)| a);
            Some(format!("{kind} {arch}"))
        })
        .collect();
    v.sort();
    v
}

/// Our entries in cuobjdump's list spelling. cuobjdump 13.5 names a
/// family-specific cubin without its `f` (`sm_100f` -> "x.sm_100.cubin")
/// while its -elf header says `arch = sm_100f`; PTX keeps it.
fn ours_as_list(entries: &[Entry]) -> Vec<String> {
    let mut v: Vec<String> = entries
        .iter()
        .map(|e| match e.kind {
            Kind::Sass => {
                let mut a = e.arch;
                if a.variant == Variant::Family {
                    a.variant = Variant::Plain;
                }
                format!("cubin {}", a.sass_name())
            }
            Kind::Ptx => format!("ptx {}", e.arch.sass_name()),
        })
        .collect();
    v.sort();
    v
}

/// The headers `cuobjdump -elf -ptx` prints for each image: kind, arch
/// (with a/f), code version (PTX ISA for PTX) and the `compressed` line.
fn cuobjdump_headers(tool: &Path, file: &Path) -> Vec<String> {
    let out = Command::new(tool)
        .arg("-elf")
        .arg("-ptx")
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let kind = match l {
            "Fatbin elf code:" => "sass",
            "Fatbin ptx code:" => "ptx",
            _ => continue,
        };
        let (mut arch, mut version, mut compressed) = (String::new(), String::new(), false);
        while let Some(h) = lines.peek() {
            let h = h.trim_end();
            if let Some(a) = h.strip_prefix("arch = ") {
                arch = a.to_string();
            } else if let Some(c) = h.strip_prefix("code version = ") {
                version = c.to_string();
            } else if h == "compressed" {
                compressed = true;
            } else if !(h.starts_with("====")
                || h.starts_with("host = ")
                || h.starts_with("compile_size = ")
                || h.starts_with("identifier = ")
                || h.starts_with("ptxasOptions"))
            {
                break;
            }
            lines.next();
        }
        let arch = if kind == "ptx" {
            arch.replacen("sm_", "compute_", 1)
        } else {
            arch
        };
        let version = if kind == "ptx" {
            version
        } else {
            String::new()
        };
        v.push(format!("{kind} {arch} {version} {compressed}"));
    }
    v.sort();
    v
}

fn ours_as_headers(entries: &[Entry]) -> Vec<String> {
    let mut v: Vec<String> = entries
        .iter()
        .map(|e| {
            let version = e
                .ptx_isa
                .map(|(a, b)| format!("[{a},{b}]"))
                .unwrap_or_default();
            let kind = if e.kind == Kind::Sass { "sass" } else { "ptx" };
            format!("{kind} {} {version} {}", e.arch.name(e.kind), e.compressed)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn fixtures_hold_what_their_names_say() {
    for (name, want) in FIXTURES {
        let entries = ours(&fixture(name));
        let mut got: Vec<String> = entries.iter().map(|e| e.arch.name(e.kind)).collect();
        got.sort();
        got.dedup();
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(got, want, "{name}");
    }
    // Compression as the generator asked for it.
    assert!(ours(&fixture("compressed-zstd.so"))
        .iter()
        .all(|e| e.compressed));
    assert!(ours(&fixture("compressed-lz4.so"))
        .iter()
        .all(|e| e.compressed));
    assert!(ours(&fixture("uncompressed.so"))
        .iter()
        .all(|e| !e.compressed));
    // Two translation units: two containers, each image twice.
    assert_eq!(ours(&fixture("multi-arch.so")).len(), 8);
    // Old PTX ISA from CUDA 12.9's ptxas.
    let old = ours(&fixture("old-arch.so"));
    assert!(old.iter().any(|e| e.ptx_isa == Some((8, 8))), "{old:?}");
}

#[test]
fn lists_equal_cuobjdump_on_fixtures_and_a_real_library() {
    let Some(tool) = require(cuobjdump(), "cuobjdump (pip install nvidia-cuda-cuobjdump)") else {
        return;
    };
    let Some(real) = require(real_library(), "libcurand (pip install nvidia-curand)") else {
        return;
    };
    let mut files: Vec<_> = FIXTURES.iter().map(|(n, _)| fixture(n)).collect();
    files.push(real.clone());
    for f in &files {
        let theirs = cuobjdump_list(&tool, f);
        let mine = ours_as_list(&ours(f));
        assert_eq!(
            mine,
            theirs,
            "{}: gpu-guard vs cuobjdump --list-elf --list-ptx",
            f.display()
        );
    }
    // The real library has plenty of both.
    let real_entries = ours(&real);
    assert!(real_entries.iter().filter(|e| e.kind == Kind::Sass).count() > 10);
    assert!(real_entries.iter().filter(|e| e.kind == Kind::Ptx).count() > 10);
}

#[test]
fn headers_equal_cuobjdump_including_variants_isa_and_compression() {
    let Some(tool) = require(cuobjdump(), "cuobjdump (pip install nvidia-cuda-cuobjdump)") else {
        return;
    };
    let Some(real) = require(real_library(), "libcurand (pip install nvidia-curand)") else {
        return;
    };
    // cuobjdump -elf prints one header for a whole concatenated group, not
    // one per cubin, so concat.so is checked by the list test only.
    let mut files: Vec<_> = FIXTURES
        .iter()
        .filter(|(n, _)| *n != "concat.so")
        .map(|(n, _)| fixture(n))
        .collect();
    files.push(real);
    for f in &files {
        let theirs = cuobjdump_headers(&tool, f);
        let mine = ours_as_headers(&ours(f));
        assert_eq!(
            mine,
            theirs,
            "{}: gpu-guard vs cuobjdump -elf -ptx",
            f.display()
        );
    }
}
