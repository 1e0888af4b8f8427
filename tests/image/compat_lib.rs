//! CUDA forward compatibility on real ELF files: a tiny shared library built
//! with gcc, given a `.note.cuda.fwd_compatibility` section with objcopy, in a
//! rootfs laid out like an nvidia/cuda image. binutils and gcc are required:
//! without them these tests fail, they do not skip.

use gpu_guard::core::compat::{judge_gpu, CompatNote, CompatVerdict, Incompatibility};
use gpu_guard::core::facts::Gpu;
use gpu_guard::core::version::Version;
use gpu_guard::scan::compat_lib::{
    self, read_host_lib, scan_root, scan_rootfs, COMPAT_DIR, MAX_LIBS,
};
use gpu_guard::scan::rootfs::{Resolver, Root};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::compat_support::*;

fn gpu(brand: &str, name: &str) -> Gpu {
    Gpu {
        index: 0,
        name: name.into(),
        brand: brand.into(),
        compute_capability: Some("9.0".into()),
        ..Gpu::default()
    }
}

fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

fn one_note(rootfs: &Path) -> (compat_lib::CompatLib, CompatNote) {
    let scan = scan_rootfs(rootfs);
    assert_eq!(scan.error, None);
    assert_eq!(scan.libs.len(), 1, "{scan:?}");
    let lib = scan.libs[0].clone();
    let note = lib.note.clone().unwrap_or_else(|e| panic!("{e}"));
    (lib, note)
}

#[test]
fn data_center_gpu_on_listed_branch_works() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("works");
    let rootfs = image(&base, "libcuda.so.575.57.08", Some(&nvidia_note(DGPU_12_9)));
    // readelf agrees that this is a well-formed NVIDIA note.
    let lib_path = rootfs.join("usr/local/cuda-12.9/compat/libcuda.so.575.57.08");
    let out = Command::new("readelf")
        .arg("-n")
        .arg(&lib_path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("NVIDIA Corporation"), "{text}");

    let (lib, note) = one_note(&rootfs);
    assert_eq!(lib.path, "usr/local/cuda/compat/libcuda.so.575.57.08");
    assert_eq!(lib.version, "575.57.08");
    assert_eq!(note.cuda_version.as_deref(), Some("12.9"));
    assert_eq!(note.driver, Some(vec![535, 550, 560, 565, 570, 575]));
    assert_eq!(read_host_lib(&lib_path), Ok(note.clone()));

    let verdict = judge_gpu(
        &gpu("tesla", "NVIDIA H100 80GB HBM3"),
        &v("535.104.05"),
        &note,
        &v(&lib.version),
    );
    assert!(
        matches!(verdict, CompatVerdict::Works { .. }),
        "{verdict:?}"
    );
    assert!(
        verdict.message().contains(
            "runs through forward compatibility (compat libcuda 575.57.08 on branch 535)"
        ),
        "{}",
        verdict.message()
    );
    // A driver as new as the library: not used at all.
    let verdict = judge_gpu(
        &gpu("geforce", "x"),
        &v("575.57.08"),
        &note,
        &v(&lib.version),
    );
    assert!(
        matches!(verdict, CompatVerdict::NotApplicable { .. }),
        "{verdict:?}"
    );
}

#[test]
fn geforce_on_listed_branch_is_error_804() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("geforce");
    let rootfs = image(&base, "libcuda.so.575.57.08", Some(&nvidia_note(DGPU_12_9)));
    let (lib, note) = one_note(&rootfs);
    let verdict = judge_gpu(
        &gpu("geforce", "NVIDIA GeForce RTX 4090"),
        &v("550.54.14"),
        &note,
        &v(&lib.version),
    );
    let CompatVerdict::Incompatible { reason, message } = &verdict else {
        panic!("{verdict:?}")
    };
    assert_eq!(reason, &Incompatibility::BrandNotListed { brand_code: 5 });
    assert_eq!(reason.cuda_error(), 804);
    for part in [
        "NVIDIA GeForce RTX 4090",
        "brand geforce",
        "branch 550",
        "compat libcuda 575.57.08",
        "forward compatibility needs a data-center GPU",
        "a driver branch that supports CUDA 12.9 natively, or a data-center GPU",
    ] {
        assert!(message.contains(part), "missing {part:?} in {message}");
    }
    assert!(!message.contains('\n'));
}

#[test]
fn data_center_gpu_on_unlisted_branch_names_the_list() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("branch");
    let rootfs = image(&base, "libcuda.so.575.57.08", Some(&nvidia_note(DGPU_12_9)));
    let (lib, note) = one_note(&rootfs);
    let verdict = judge_gpu(
        &gpu("tesla", "Tesla V100"),
        &v("545.23.06"),
        &note,
        &v(&lib.version),
    );
    let CompatVerdict::Incompatible { reason, message } = &verdict else {
        panic!("{verdict:?}")
    };
    assert_eq!(reason, &Incompatibility::BranchNotListed { branch: 545 });
    assert_eq!(reason.cuda_error(), 803);
    assert!(message.contains("branch 545"), "{message}");
    assert!(
        message.contains("535, 550, 560, 565, 570, 575"),
        "{message}"
    );
    assert!(message.contains("575.57.08"), "{message}");
}

#[test]
fn tegra_note_without_driver_list() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("tegra");
    // As in the Orin library: descsz 2 bytes longer than the section holds.
    let desc = TEGRA_13_2.as_bytes();
    let mut n = note_bytes(
        b"NVIDIA Corporation\0",
        0,
        desc,
        Some(desc.len() as u32 + 7),
    );
    n.truncate(n.len() - (n.len() % 4));
    let rootfs = image(&base, "libcuda.so.1.1", Some(&n));
    let (lib, note) = one_note(&rootfs);
    assert_eq!(lib.version, "1.1");
    assert_eq!(note.cuda_version.as_deref(), Some("13.2"));
    assert_eq!(note.driver, None);
    let verdict = judge_gpu(
        &gpu("tesla", "A100"),
        &v("535.104.05"),
        &note,
        &v(&lib.version),
    );
    assert!(
        matches!(verdict, CompatVerdict::NoDriverList { .. }),
        "{verdict:?}"
    );
}

#[test]
fn malformed_notes_are_errors_not_crashes() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("malformed");
    let rootfs = base.join("rootfs");
    let compat = rootfs.join(COMPAT_DIR);
    let cut = {
        // descsz 4000 in a section that ends with the name and 10 bytes of JSON.
        let mut n = note_bytes(
            b"NVIDIA Corporation\0",
            0,
            br#"{"driver":[535]}"#,
            Some(4000),
        );
        n.truncate(12 + 20 + 10);
        n
    };
    let cases: Vec<(&str, Option<Vec<u8>>, &str)> = vec![
        (
            "libcuda.so.575.1.1",
            Some(nvidia_note(r#"{"format":1,"CUDA version":"13.2",}"#)),
            "not valid JSON",
        ),
        (
            "libcuda.so.575.1.2",
            Some(note_bytes(b"GNU\0", 0, DGPU_12_9.as_bytes(), None)),
            "owner",
        ),
        ("libcuda.so.575.1.3", Some(cut), "runs past the end"),
        (
            "libcuda.so.575.1.4",
            None,
            "no .note.cuda.fwd_compatibility section",
        ),
        (
            "libcuda.so.575.1.5",
            Some(note_bytes(
                b"NVIDIA Corporation\0",
                1,
                DGPU_12_9.as_bytes(),
                None,
            )),
            "type",
        ),
    ];
    for (i, (name, note, _)) in cases.iter().enumerate() {
        let work = base.join(format!("w{i}"));
        fs::create_dir_all(&work).unwrap();
        build_lib(&work, &compat.join(name), note.as_deref());
    }
    // Not an ELF file at all.
    fs::write(compat.join("libcuda.so.575.1.6"), b"#!/bin/sh\necho hi\n").unwrap();
    let scan = scan_rootfs(&rootfs);
    assert_eq!(scan.libs.len(), cases.len() + 1, "{scan:?}");
    for (lib, (name, _, want)) in scan.libs.iter().zip(&cases) {
        assert!(lib.path.ends_with(name));
        let err = lib.note.as_ref().unwrap_err();
        assert!(err.contains(want), "{name}: {err}");
    }
    assert!(scan.libs[5]
        .note
        .as_ref()
        .unwrap_err()
        .contains("not an ELF"));
}

/// Offset of the section header of the compat note, from the ELF64 headers.
fn note_section_header(file: &[u8], note_len: u64) -> usize {
    let shoff = u64::from_le_bytes(file[0x28..0x30].try_into().unwrap()) as usize;
    let shnum = u16::from_le_bytes(file[0x3c..0x3e].try_into().unwrap()) as usize;
    (0..shnum)
        .map(|i| shoff + i * 64)
        .find(|&h| {
            let kind = u32::from_le_bytes(file[h + 4..h + 8].try_into().unwrap());
            let size = u64::from_le_bytes(file[h + 32..h + 40].try_into().unwrap());
            kind == 7 && size == note_len
        })
        .expect("note section header")
}

#[test]
fn huge_sparse_files_stay_fast_and_bounded() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("sparse");
    let note = nvidia_note(DGPU_12_9);
    let rootfs = image(&base, "libcuda.so.575.57.08", Some(&note));
    let lib = rootfs.join("usr/local/cuda-12.9/compat/libcuda.so.575.57.08");
    let real = fs::read(&lib).unwrap();
    let hdr = note_section_header(&real, note.len() as u64);

    // The real library followed by 10 GB of holes.
    fs::OpenOptions::new()
        .write(true)
        .open(&lib)
        .unwrap()
        .set_len(10 << 30)
        .unwrap();
    let t = Instant::now();
    let (_, parsed) = one_note(&rootfs);
    assert!(parsed.lists_branch(535));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // A note section claiming 1 TiB: refused without reading it.
    let mut f = real.clone();
    f[hdr + 32..hdr + 40].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let hostile = base.join("hostile.so");
    fs::write(&hostile, &f).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&hostile)
        .unwrap()
        .set_len(10 << 30)
        .unwrap();
    let t = Instant::now();
    let e = read_host_lib(&hostile).unwrap_err();
    assert!(e.contains("more than the 65536"), "{e}");
    // A note placed 9 GB into the holes: read (zeros), refused, quickly.
    let mut f = real.clone();
    f[hdr + 24..hdr + 32].copy_from_slice(&(9u64 << 30).to_le_bytes());
    fs::write(&hostile, &f).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&hostile)
        .unwrap()
        .set_len(10 << 30)
        .unwrap();
    let e = read_host_lib(&hostile).unwrap_err();
    assert!(e.contains("owner"), "{e}");
    // And past the end of the file.
    f[hdr + 24..hdr + 32].copy_from_slice(&(11u64 << 30).to_le_bytes());
    fs::write(&hostile, &f).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&hostile)
        .unwrap()
        .set_len(10 << 30)
        .unwrap();
    let e = read_host_lib(&hostile).unwrap_err();
    assert!(e.contains("runs past the end of the file"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

fn resolvers(rootfs: &Path) -> Vec<Root> {
    let mut v = vec![Root::open_with(rootfs, Resolver::Userspace).unwrap()];
    let auto = Root::open(rootfs).unwrap();
    if auto.resolver() == Resolver::Openat2 {
        v.push(auto);
    }
    v
}

#[test]
fn symlinks_never_leave_the_rootfs() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("escape");
    // A valid library outside the rootfs, where escaping links would lead.
    let outside = base.join("outside");
    build_lib(
        &base,
        &outside.join("compat/libcuda.so.575.57.08"),
        Some(&nvidia_note(DGPU_12_9)),
    );
    build_lib(
        &base,
        &outside.join("etc/compat/libcuda.so.575.57.08"),
        Some(&nvidia_note(DGPU_12_9)),
    );

    for (i, target) in [
        "../../../outside".to_string(),
        "../../../../../../../../outside".to_string(),
        outside.display().to_string(),
        "../../..".to_string(),
    ]
    .iter()
    .enumerate()
    {
        let rootfs = base.join(format!("rootfs{i}"));
        fs::create_dir_all(rootfs.join("usr/local")).unwrap();
        symlink(target, rootfs.join("usr/local/cuda")).unwrap();
        for root in resolvers(&rootfs) {
            let scan = scan_root(&root, COMPAT_DIR);
            assert!(
                scan.libs.is_empty(),
                "{target} ({:?}): {scan:?}",
                root.resolver()
            );
        }
    }

    // /usr/local/cuda -> /etc resolves to the rootfs's own /etc.
    let rootfs = base.join("rootfs-etc");
    fs::create_dir_all(rootfs.join("usr/local")).unwrap();
    symlink("/etc", rootfs.join("usr/local/cuda")).unwrap();
    let inside = rootfs.join("etc/compat");
    fs::create_dir_all(&inside).unwrap();
    fs::write(inside.join("libcuda.so.580.1.1"), b"not elf").unwrap();
    // A compat entry that is a symlink to the outside library: skipped, as
    // NVIDIA's hook skips symlink entries.
    symlink(
        outside.join("compat/libcuda.so.575.57.08"),
        inside.join("libcuda.so.575.57.08"),
    )
    .unwrap();
    for root in resolvers(&rootfs) {
        let scan = scan_root(&root, COMPAT_DIR);
        assert_eq!(scan.libs.len(), 1, "{scan:?}");
        assert_eq!(
            scan.libs[0].path,
            "usr/local/cuda/compat/libcuda.so.580.1.1"
        );
        assert!(scan.libs[0]
            .note
            .as_ref()
            .unwrap_err()
            .contains("not an ELF"));
    }
}

#[test]
fn bounded_number_of_files_and_no_fifo_opened() {
    let base = tmp("many");
    let rootfs = base.join("rootfs");
    let compat = rootfs.join(COMPAT_DIR);
    fs::create_dir_all(&compat).unwrap();
    run(Command::new("mkfifo").arg(compat.join("libcuda.so.1.0")));
    fs::create_dir(compat.join("libcuda.so.1.dir")).unwrap();
    for i in 0..MAX_LIBS + 5 {
        fs::write(compat.join(format!("libcuda.so.2.{i:02}")), b"x").unwrap();
    }
    let t = Instant::now();
    let scan = scan_rootfs(&rootfs);
    assert!(t.elapsed() < Duration::from_secs(2));
    assert_eq!(scan.libs.len(), MAX_LIBS);
    assert!(scan.truncated);
    assert!(scan.libs.iter().all(|l| l.version.starts_with("2.")));

    // No compat directory: nothing, and no error.
    let empty = base.join("empty");
    fs::create_dir_all(&empty).unwrap();
    assert_eq!(scan_rootfs(&empty), Default::default());
}
