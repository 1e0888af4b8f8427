//! gpu-guard's listing of AMD code objects must agree with LLVM's
//! clang-offload-bundler, bundle by bundle, on every shared object of
//! Debian's ROCm packages (librocsparse0: one `.hip_fatbin` of 111 bundles,
//! found through the `.hipFatBinSegment` wrappers as the HIP runtime finds
//! them; librocrand1), on the HIP fixtures (integration/make-hip-fixtures.sh:
//! hipcc, clang 19 with --offload-compress and code object v6 generic
//! targets) and on compressed bundles of version 3, which no Debian tool
//! writes, built here from the documented layout.

use crate::scan_support::gpu_guard;
use crate::support::{skip_or_fail, TempDir};
use gpu_guard::core::amd::AmdCode;
use gpu_guard::scan::amd::bundle::{self, Table};
use gpu_guard::scan::amd::ccob;
use gpu_guard::scan::elf::{self, HIP};
use gpu_guard::scan::fatbin::Budget;
use gpu_guard::scan::read::{read_exact_at, ReadAt, SizedFile};
use std::path::{Path, PathBuf};
use std::process::Command;

/// LLVM 19's bundler (reads compressed bundles), else LLVM 15's.
fn bundler() -> Option<PathBuf> {
    [
        "/usr/lib/llvm-19/bin/clang-offload-bundler",
        "/usr/bin/clang-offload-bundler-15",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

fn bundler19() -> Option<PathBuf> {
    Some(PathBuf::from("/usr/lib/llvm-19/bin/clang-offload-bundler")).filter(|p| p.exists())
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/hip")
        .join(name)
}

/// The shared objects the Debian ROCm packages install (dpkg -L), the
/// real files (not their symlinks).
fn debian_rocm_libraries() -> Vec<PathBuf> {
    let Ok(o) = Command::new("dpkg")
        .args(["-L", "librocsparse0", "librocrand1"])
        .output()
    else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(PathBuf::from)
        .filter(|p| p.to_string_lossy().contains(".so") && p.is_file() && !p.is_symlink())
        .collect();
    v.sort();
    v.dedup();
    v
}

fn open(path: &Path) -> SizedFile {
    let f = std::fs::File::open(path).unwrap();
    let size = f.metadata().unwrap().len();
    SizedFile::new(f, size)
}

/// What `clang-offload-bundler --list` names in a bundle file: the target
/// IDs of its HIP entries for amdgcn, sorted (a multiset).
fn bundler_targets(tool: &Path, file: &Path) -> Vec<String> {
    let o = Command::new(tool)
        .args(["--list", "--type=o"])
        .arg(format!("--input={}", file.display()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let rest = l
                .strip_prefix("hipv4-")
                .or_else(|| l.strip_prefix("hip-"))?;
            Some(rest.strip_prefix("amdgcn-amd-amdhsa--")?.to_string())
        })
        .collect();
    v.sort();
    v
}

fn archs(codes: &[AmdCode]) -> Vec<String> {
    let mut v: Vec<String> = codes.iter().map(|c| c.arch.clone()).collect();
    v.sort();
    v
}

fn ours<R: ReadAt + ?Sized>(r: &R) -> Vec<AmdCode> {
    let mut v = Vec::new();
    gpu_guard::scan::amd::scan_image(r, &mut Budget::unlimited(), &mut |c| v.push(c)).unwrap();
    v
}

/// The bundles the `.hipFatBinSegment` wrappers point at: (offset, end).
/// lld leaves a wrapper's pointer to a dynamic relocation (its addend is
/// not written into the section: lld's `-z apply-dynamic-relocs` is off by
/// default), so where no wrapper resolves, the `.hip_fatbin` section is
/// stepped bundle by bundle as the bundler steps a file: each bundle's own
/// length, then the zero padding clang aligns the next one with.
fn wrapper_bundles(r: &SizedFile) -> Vec<(u64, u64)> {
    let regions = elf::regions(r, &HIP).unwrap();
    let wrapped: Vec<(u64, u64)> = regions
        .iter()
        .filter(|g| !g.whole_section)
        .map(|g| (g.offset, g.offset + bundle_len(r, g.offset, g.size)))
        .collect();
    if !wrapped.is_empty() {
        return wrapped;
    }
    let mut out = Vec::new();
    for g in regions.iter().filter(|g| g.whole_section) {
        let mut bytes = vec![0u8; g.size as usize];
        read_exact_at(r, &mut bytes, g.offset).unwrap();
        let mut at = 0usize;
        while at < bytes.len() {
            if bytes[at] == 0 {
                at += 1;
                continue;
            }
            let len = bundle_len(r, g.offset + at as u64, (bytes.len() - at) as u64) as usize;
            assert!(len > 0, "an empty bundle at {at:#x}");
            out.push((g.offset + at as u64, g.offset + (at + len) as u64));
            at += len;
        }
    }
    out
}

/// A bundle's length: a compressed one's total size, a plain one's last code object's end.
fn bundle_len(r: &SizedFile, at: u64, room: u64) -> u64 {
    let mut head = vec![0u8; room.min(1 << 20) as usize];
    read_exact_at(r, &mut head, at).unwrap();
    if head.starts_with(ccob::CCOB_MAGIC) {
        return ccob::parse_header(&head).unwrap().total_size.expect("v2+");
    }
    match bundle::parse_table(&head, room).unwrap() {
        Table::Complete { entries, end } => entries
            .iter()
            .map(|e| e.offset + e.size)
            .fold(end, u64::max),
        Table::NeedMore => panic!("table past 1 MiB"),
    }
}

/// Every bundle of `path` through its wrappers: our listing of the bundle
/// equals the bundler's, and the whole file's listing equals them all in
/// file order. Returns the number of bundles.
fn parity(tool: &Path, path: &Path, dir: &TempDir) -> usize {
    let r = open(path);
    let spans = wrapper_bundles(&r);
    let mut by_bundle = Vec::new();
    for (i, (at, end)) in spans.iter().enumerate() {
        let mut bytes = vec![0u8; (end - at) as usize];
        read_exact_at(&r, &mut bytes, *at).unwrap();
        let file = dir.join(format!("bundle-{i}.bin"));
        std::fs::write(&file, &bytes).unwrap();
        let mine = gpu_guard::scan::amd::codes_of(&bytes).unwrap();
        assert_eq!(
            archs(&mine),
            bundler_targets(tool, &file),
            "{} bundle {i} at {at:#x}",
            path.display()
        );
        by_bundle.extend(mine);
    }
    assert_eq!(
        ours(&r),
        by_bundle,
        "{}: the section walk and the wrappers",
        path.display()
    );
    spans.len()
}

#[test]
fn scan_lists_what_the_bundler_lists_on_every_debian_rocm_library() {
    let Some(tool) = bundler() else {
        return skip_or_fail(
            "clang-offload-bundler (clang-tools-19 or clang-tools-15) is not installed",
        );
    };
    let libs = debian_rocm_libraries();
    if libs.len() < 2 {
        return skip_or_fail("librocsparse0 and librocrand1 are not installed");
    }
    let dir = TempDir::new("amd-parity");
    let want = [
        "gfx1030",
        "gfx803",
        "gfx900:xnack-",
        "gfx906:xnack-",
        "gfx908:xnack-",
        "gfx90a:xnack+",
        "gfx90a:xnack-",
    ];
    for lib in &libs {
        let n = parity(&tool, lib, &dir);
        let codes = ours(&open(lib));
        let mut distinct = archs(&codes);
        distinct.dedup();
        assert_eq!(distinct, want, "{}", lib.display());
        // Every code object's header was read: code object v4, processor as named.
        assert!(
            codes
                .iter()
                .all(|c| c.code_object_version == Some(4) && !c.compressed),
            "{}",
            lib.display()
        );
        if lib.to_string_lossy().contains("librocsparse") {
            assert_eq!(n, 111, "librocsparse has 111 bundles");
        }
    }
}

#[test]
fn fixtures_match_the_bundler() {
    let Some(tool) = bundler19() else {
        return skip_or_fail("clang-offload-bundler of LLVM 19 (clang-tools-19) is not installed");
    };
    let dir = TempDir::new("amd-fixtures");
    // (fixture, bundles, distinct targets, compressed, code object version)
    type Case<'a> = (&'a str, usize, &'a [&'a str], bool, Option<u8>);
    let cases: &[Case] = &[
        (
            "hipcc-multi.so",
            1,
            &["gfx1030", "gfx906:sramecc+:xnack-", "gfx90a:xnack+"],
            false,
            Some(4),
        ),
        (
            "hipcc-two-tu.so",
            2,
            &["gfx908:xnack-", "gfx90a"],
            false,
            Some(4),
        ),
        (
            "clang19-compressed.so",
            2,
            &["gfx11-generic", "gfx942:sramecc+:xnack-"],
            true,
            None,
        ),
        (
            "clang19-generic.so",
            1,
            &["gfx10-3-generic", "gfx11-generic", "gfx942"],
            false,
            Some(6),
        ),
    ];
    for (name, bundles, targets, compressed, version) in cases {
        let path = fixture(name);
        assert_eq!(parity(&tool, &path, &dir), *bundles, "{name}");
        let codes = ours(&open(&path));
        let mut distinct = archs(&codes);
        distinct.dedup();
        assert_eq!(distinct, *targets, "{name}");
        assert!(
            codes
                .iter()
                .all(|c| c.compressed == *compressed && c.code_object_version == *version),
            "{name}: {codes:?}"
        );
    }
    // The compressed section as a bare file: the first bundle as the bundler
    // lists it, and both bundles as the runtime finds them.
    // LLVM 19's bundler decompresses a file as one bundle (stepping by the
    // recorded total size came later), so it is given the first one alone.
    let bare = fixture("clang19-compressed.hipfb");
    let bytes = std::fs::read(&bare).unwrap();
    let codes = gpu_guard::scan::amd::codes_of(&bytes).unwrap();
    assert_eq!(codes.len(), 4, "{codes:?}");
    let first: Vec<AmdCode> = codes[..2].to_vec();
    let len = ccob::parse_header(&bytes).unwrap().total_size.expect("v2+") as usize;
    let one = dir.join("first.hipfb");
    std::fs::write(&one, &bytes[..len]).unwrap();
    assert_eq!(archs(&first), bundler_targets(&tool, &one));
}

/// CCOB version 3 (64-bit sizes) and version 1, zlib and zstd, from the
/// layout of llvm/lib/Object/OffloadBundle.cpp, around the real bundle of
/// librocrand; back to back in a real ELF's `.hip_fatbin` (objcopy), each
/// stepped by its recorded size.
#[test]
fn compressed_bundles_of_every_version_built_from_the_layout() {
    let Some(lib) = debian_rocm_libraries()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("librocrand"))
    else {
        return skip_or_fail("librocrand1 is not installed");
    };
    if !crate::support::have_tool("objcopy") || !crate::support::have_tool("gcc") {
        return;
    }
    let r = open(&lib);
    let (at, end) = wrapper_bundles(&r)[0];
    let mut plain = vec![0u8; (end - at) as usize];
    read_exact_at(&r, &mut plain, at).unwrap();
    let want = archs(&gpu_guard::scan::amd::codes_of(&plain).unwrap());
    let dir = TempDir::new("amd-ccob");
    let mut section = Vec::new();
    for (version, zstd) in [(3u16, true), (3, false), (2, true), (1, false)] {
        let c = ccob_of(version, zstd, &plain);
        let codes = gpu_guard::scan::amd::codes_of(&c).unwrap();
        assert_eq!(archs(&codes), want, "v{version} zstd={zstd}");
        assert!(codes.iter().all(|c| c.compressed));
        if version > 1 {
            section.extend_from_slice(&c); // v1 has no size: only last
        }
    }
    section.extend_from_slice(&ccob_of(1, true, &plain));
    let blob = dir.join("fatbin.bin");
    std::fs::write(&blob, &section).unwrap();
    let so = host_library_with_section(&dir, &blob);
    let codes = ours(&open(&so));
    assert_eq!(codes.len(), 4 * want.len(), "{codes:?}");
    // The same through the layer-stream reader.
    let bytes = std::fs::read(&so).unwrap();
    let s = gpu_guard::scan::stream_fatbin::scan_stream(
        &mut &bytes[..],
        bytes.len() as u64,
        &mut Budget::unlimited(),
    )
    .unwrap();
    assert_eq!(s.amd, codes);
}

/// A compressed bundle as LLVM lays it out (hash left 0: LLVM does not check it).
fn ccob_of(version: u16, zstd: bool, plain: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let data = if zstd {
        zstd::bulk::compress(plain, 9).unwrap()
    } else {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(plain).unwrap();
        e.finish().unwrap()
    };
    let header = match version {
        1 => 20,
        2 => 24,
        _ => 32,
    };
    let mut out = b"CCOB".to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(if zstd { 1u16 } else { 0 }).to_le_bytes());
    let total = (header + data.len()) as u64;
    match version {
        1 => out.extend_from_slice(&(plain.len() as u32).to_le_bytes()),
        2 => {
            out.extend_from_slice(&(total as u32).to_le_bytes());
            out.extend_from_slice(&(plain.len() as u32).to_le_bytes());
        }
        _ => {
            out.extend_from_slice(&total.to_le_bytes());
            out.extend_from_slice(&(plain.len() as u64).to_le_bytes());
        }
    }
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&data);
    out
}

/// A real shared library (gcc) with `blob` as its `.hip_fatbin` (objcopy).
fn host_library_with_section(dir: &TempDir, blob: &Path) -> PathBuf {
    let c = dir.join("x.c");
    std::fs::write(&c, "int answer(void) { return 42; }\n").unwrap();
    let plain = dir.join("plain.so");
    let ok = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&plain)
        .arg(&c)
        .status()
        .unwrap();
    assert!(ok.success());
    let so = dir.join("with-fatbin.so");
    let ok = Command::new("objcopy")
        .arg(format!("--add-section=.hip_fatbin={}", blob.display()))
        .args([
            "--set-section-flags=.hip_fatbin=alloc,readonly",
            "--set-section-alignment=.hip_fatbin=4096",
        ])
        .arg(&plain)
        .arg(&so)
        .status()
        .unwrap();
    assert!(ok.success());
    so
}

#[test]
fn streaming_equals_positioned_on_real_libraries() {
    let mut files: Vec<PathBuf> = debian_rocm_libraries()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("librocrand"))
        .collect();
    files.extend(
        [
            "hipcc-multi.so",
            "hipcc-two-tu.so",
            "clang19-compressed.so",
            "clang19-generic.so",
        ]
        .map(fixture),
    );
    if files.len() < 5 {
        return skip_or_fail("librocrand1 is not installed");
    }
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let s = gpu_guard::scan::stream_fatbin::scan_stream(
            &mut &bytes[..],
            bytes.len() as u64,
            &mut Budget::unlimited(),
        )
        .unwrap();
        assert!(s.sections_known, "{}", f.display());
        assert_eq!(
            s.amd,
            gpu_guard::scan::amd::codes_of(&bytes).unwrap(),
            "{}",
            f.display()
        );
    }
}

#[test]
fn scan_json_lists_amdgcn_entries() {
    let f = fixture("hipcc-multi.so");
    let o = Command::new(gpu_guard())
        .args(["scan", "--json"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let entries = v["files"][0]["entries"].as_array().unwrap();
    let got: Vec<String> = entries
        .iter()
        .map(|e| e["arch"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, ["gfx1030", "gfx906:sramecc+:xnack-", "gfx90a:xnack+"]);
    for e in entries {
        assert_eq!(e["kind"], "amdgcn");
        assert_eq!(e["compressed"], false);
        assert_eq!(e.as_object().unwrap().len(), 3, "{e}");
    }
    let o = Command::new(gpu_guard())
        .arg("scan")
        .arg(fixture("clang19-compressed.so"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("4 AMD code objects"), "{text}");
    assert!(
        text.contains("gfx942:sramecc+:xnack-") && text.contains("compressed x2"),
        "{text}"
    );
    // Directories are walked: bare bundles are found by their magic.
    let o = Command::new(gpu_guard())
        .args(["scan", "--json"])
        .arg(fixture(""))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let paths: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        paths
            .iter()
            .any(|p| p.ends_with("clang19-compressed.hipfb")),
        "{paths:?}"
    );
}

/// A ROCm image, as a rootfs and as an OCI layout: the libraries' code
/// objects, rocBLAS's Tensile processors and the ROCm release are the same
/// from `scan_rootfs` and from the image read without unpacking, and from
/// a PyTorch ROCm wheel's `torch/version.py` when there is no /opt/rocm.
#[test]
fn rocm_images_read_alike_from_a_rootfs_and_an_image() {
    use crate::image_support::{gz, oci_layout, tar_of, E};
    let multi = std::fs::read(fixture("hipcc-multi.so")).unwrap();
    let plain_elf = std::fs::read(fixture("hipcc-two-tu.so")).unwrap();
    let files: Vec<(&str, &[u8])> = vec![
        ("opt/rocm-6.2.4/.info/version", b"6.2.4-120\n"),
        ("opt/rocm-6.2.4/lib/librocsparse.so.1.0", &multi),
        ("opt/rocm-6.2.4/lib/librocblas.so.4.2", &plain_elf),
        ("opt/rocm-6.2.4/lib/rocblas/library/TensileLibrary_lazy_gfx90a.dat", b"x"),
        ("opt/rocm-6.2.4/lib/rocblas/library/TensileLibrary_lazy_gfx942.dat", b"x"),
        ("opt/rocm-6.2.4/lib/rocblas/library/TensileLibrary_Type_HH_Contraction_Ailk_Bljk_gfx942.co", b"x"),
    ];
    let mut entries: Vec<E> = vec![
        E::Dir("opt"),
        E::Dir("opt/rocm-6.2.4"),
        E::Dir("opt/rocm-6.2.4/.info"),
    ];
    entries.extend([
        E::Dir("opt/rocm-6.2.4/lib"),
        E::Dir("opt/rocm-6.2.4/lib/rocblas"),
        E::Dir("opt/rocm-6.2.4/lib/rocblas/library"),
    ]);
    entries.extend(files.iter().map(|(p, d)| E::File(p, d)));
    entries.push(E::Sym("opt/rocm", "rocm-6.2.4"));
    let cfg = gpu_guard::core::policy::KernelImageConfig {
        cache_dir: String::new(),
        ..Default::default()
    };
    // The rootfs.
    let dir = TempDir::new("amd-rootfs");
    let root = dir.join("rootfs");
    for (p, d) in &files {
        let f = root.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, d).unwrap();
    }
    std::os::unix::fs::symlink("rocm-6.2.4", root.join("opt/rocm")).unwrap();
    let from_root = gpu_guard::scan::libraries::scan_rootfs(&root, &cfg);
    // The image.
    let img = oci_layout("amd-image", &[], &[gz(&tar_of(&entries))]);
    let image = gpu_guard::image::Image::open(&img, &gpu_guard::image::Options::default()).unwrap();
    let from_image = gpu_guard::image::scan::scan(&image, &cfg).unwrap().scanned;
    for (what, s) in [("rootfs", &from_root), ("image", &from_image)] {
        let rocm = s.rocm.as_ref().unwrap_or_else(|| panic!("{what}: no ROCm"));
        assert_eq!(rocm.version, "6.2.4", "{what}");
        assert_eq!(
            rocm.source,
            gpu_guard::core::amd::RocmSource::InfoVersion,
            "{what}"
        );
        let sparse = s
            .amd
            .iter()
            .find(|l| l.path.ends_with("librocsparse.so.1.0"))
            .unwrap();
        assert_eq!(
            archs(&sparse.code),
            ["gfx1030", "gfx906:sramecc+:xnack-", "gfx90a:xnack+"],
            "{what}"
        );
        let blas = s
            .amd
            .iter()
            .find(|l| l.path.ends_with("librocblas.so.4.2"))
            .unwrap();
        let t = blas.tensile.as_ref().unwrap();
        assert_eq!(t.processors, ["gfx90a", "gfx942"], "{what}");
        assert_eq!(archs(&blas.code), ["gfx908:xnack-", "gfx90a"], "{what}");
    }
    // The same libraries and code; the rootfs names a library by the path
    // its glob met first (`opt/rocm` is a symlink to `opt/rocm-6.2.4`), the
    // image by the file the layer holds.
    let by_name = |s: &gpu_guard::core::kernel_image::Scanned| -> Vec<(String, Vec<AmdCode>, Option<Vec<String>>)> {
        s.amd
            .iter()
            .map(|l| {
                let name = l.path.rsplit('/').next().unwrap_or_default().to_string();
                (name, l.code.clone(), l.tensile.as_ref().map(|t| t.processors.clone()))
            })
            .collect()
    };
    assert_eq!(by_name(&from_root), by_name(&from_image));
    assert_eq!(
        from_root.rocm.as_ref().map(|r| &r.version),
        from_image.rocm.as_ref().map(|r| &r.version)
    );
    // A PyTorch ROCm wheel without /opt/rocm: the HIP version it ships.
    let py = "usr/local/lib/python3.12/site-packages/torch";
    let version_py = b"__version__ = '2.5.1+rocm6.2'\nhip: Optional[str] = '6.2.41133-dd7f95766'\n";
    let wheel = dir.join("wheel");
    std::fs::create_dir_all(wheel.join(py)).unwrap();
    std::fs::write(wheel.join(py).join("version.py"), version_py).unwrap();
    let s = gpu_guard::scan::libraries::scan_rootfs(&wheel, &cfg);
    let rocm = s.rocm.unwrap();
    assert_eq!(
        (rocm.version.as_str(), rocm.source),
        ("6.2", gpu_guard::core::amd::RocmSource::HipRuntime)
    );
    let vp = format!("{py}/version.py");
    let layer = tar_of(&[E::File(&vp, version_py)]);
    let img = oci_layout("amd-wheel", &[], &[gz(&layer)]);
    let image = gpu_guard::image::Image::open(&img, &gpu_guard::image::Options::default()).unwrap();
    let s = gpu_guard::image::scan::scan(&image, &cfg).unwrap().scanned;
    assert_eq!(s.rocm.map(|r| r.version).as_deref(), Some("6.2"));
}
