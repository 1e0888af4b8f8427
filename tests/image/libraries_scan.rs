//! The libraries scan on real NVIDIA binaries from PyPI, on an
//! image built from them, on driver capabilities, and on hostile rootfs
//! trees.
//!
//! The real binaries are the nvidia-cuda-runtime 13.x and nvidia-curand
//! wheels (integration/setup.sh installs them): `libcurand.so.10` has
//! `RPATH $ORIGIN` and needs `libcudart.so.13`; the runtime wheel's
//! `.dist-info/METADATA` gives the version. Each layout copies the host's
//! C library in, as an image would have it.

use crate::scan_support::site_packages;
use crate::support::{require, tempdir};
use gpu_guard::core::decision::{Check, Finding, Severity};
use gpu_guard::core::facts::HostFacts;
use gpu_guard::core::libraries::{assess, RequestKind};
use gpu_guard::core::policy::{Enforcement, LibrariesConfig};
use gpu_guard::scan::ldso::resolve::{Resolved, StartEnv};
use gpu_guard::scan::ldso::scan_rootfs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T: &str = "x86_64-linux-gnu";
const SP: &str = "usr/local/lib/python3.11/site-packages";

/// The wheel files: (site-packages dir, runtime dist-info name).
fn wheels() -> Option<(PathBuf, String)> {
    for sp in site_packages() {
        let lib = sp.join("nvidia/cu13/lib");
        if !lib.join("libcudart.so.13").is_file() || !lib.join("libcurand.so.10").is_file() {
            continue;
        }
        let di = std::fs::read_dir(&sp)
            .ok()?
            .filter_map(|e| e.ok())
            .find_map(|e| {
                let n = e.file_name().to_string_lossy().to_string();
                (n.starts_with("nvidia_cuda_runtime-") && n.ends_with(".dist-info")).then_some(n)
            })?;
        return Some((sp, di));
    }
    None
}

/// Hard link when it can (the wheels' libraries are large), else copy.
fn put(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}

/// A Debian-like base: the host's C library, loader and C++ runtime.
fn base(r: &Path) {
    let lib = r.join(format!("usr/lib/{T}"));
    std::fs::create_dir_all(&lib).unwrap();
    for n in [
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "libpthread.so.0",
        "librt.so.1",
        "libgcc_s.so.1",
        "ld-linux-x86-64.so.2",
        "libstdc++.so.6",
    ] {
        let host = [format!("/lib/{T}/{n}"), format!("/usr/lib/{T}/{n}")]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("the host has no {n}"));
        std::fs::copy(std::fs::canonicalize(host).unwrap(), lib.join(n)).unwrap();
    }
    symlink("usr/lib", r.join("lib")).unwrap();
    std::fs::create_dir_all(r.join("lib64")).unwrap();
    symlink(
        format!("/lib/{T}/ld-linux-x86-64.so.2"),
        r.join("lib64/ld-linux-x86-64.so.2"),
    )
    .unwrap();
    std::fs::create_dir_all(r.join("etc/ld.so.conf.d")).unwrap();
    std::fs::write(r.join("etc/debian_version"), "12.0\n").unwrap();
    std::fs::write(
        r.join("etc/ld.so.conf"),
        "include /etc/ld.so.conf.d/*.conf\n",
    )
    .unwrap();
    std::fs::write(
        r.join(format!("etc/ld.so.conf.d/{T}.conf")),
        format!("/lib/{T}\n/usr/lib/{T}\n"),
    )
    .unwrap();
}

/// A rootfs with the two wheels installed under Python 3.11.
fn wheel_rootfs(tag: &str, with_runtime: bool) -> Option<PathBuf> {
    let (sp, di) = require(
        wheels(),
        "the nvidia-cuda-runtime 13 and nvidia-curand wheels",
    )?;
    let r = tempdir(tag);
    base(&r);
    let dst = r.join(SP);
    put(
        &sp.join("nvidia/cu13/lib/libcurand.so.10"),
        &dst.join("nvidia/cu13/lib/libcurand.so.10"),
    );
    if with_runtime {
        put(
            &sp.join("nvidia/cu13/lib/libcudart.so.13"),
            &dst.join("nvidia/cu13/lib/libcudart.so.13"),
        );
        put(
            &sp.join(&di).join("METADATA"),
            &dst.join(&di).join("METADATA"),
        );
    }
    Some(r)
}

fn cfg(severity: Enforcement) -> LibrariesConfig {
    LibrariesConfig {
        severity,
        cache_dir: String::new(),
        ..LibrariesConfig::default()
    }
}

fn inputs(caps: Option<&str>) -> StartEnv {
    StartEnv {
        cwd: "/".into(),
        gpu: true,
        capabilities: caps.map(String::from),
        ..StartEnv::default()
    }
}

fn host(driver: &str, cuda: &str) -> HostFacts {
    HostFacts {
        driver_version: Some(driver.into()),
        cuda_driver_version: Some(cuda.into()),
        gpus: Vec::new(),
        ..Default::default()
    }
}

fn scan(r: &Path, caps: Option<&str>) -> Resolved {
    scan_rootfs(r, &inputs(caps), &cfg(Enforcement::Refuse), false)
}

fn errors(f: &[Finding]) -> Vec<&Finding> {
    f.iter().filter(|f| f.severity == Severity::Error).collect()
}

#[test]
fn a_pip_cuda_13_runtime_is_a_driver_bound_whatever_the_image_declares() {
    let Some(r) = wheel_rootfs("libs-cu13", true) else {
        return;
    };
    let s = scan(&r, None).scan;
    assert!(s.missing.is_empty(), "{:?}", s.missing);
    assert!(s.judged >= 1, "{s:?}");
    assert_eq!(s.cuda_runtimes.len(), 1, "{:?}", s.cuda_runtimes);
    let rt = &s.cuda_runtimes[0];
    assert_eq!(rt.path, format!("{SP}/nvidia/cu13/lib/libcudart.so.13"));
    assert!(rt.version.starts_with("13."), "{rt:?}");
    assert!(
        rt.source.starts_with("pip nvidia-cuda-runtime 13."),
        "{rt:?}"
    );
    assert_eq!(rt.min_driver.as_deref(), Some("580.65.06"));
    let enforce = cfg(Enforcement::Refuse);
    // A CUDA 12.8 host: NVIDIA_REQUIRE_CUDA=cuda>=12.8 would hold there,
    // the runtime the image ships does not.
    let f = assess(&s, Some(&host("570.86.15", "12.8")), &enforce);
    let e = errors(&f);
    assert_eq!(e.len(), 1, "{f:?}");
    assert_eq!(e[0].check, Check::CudaRuntime);
    assert!(e[0].message.contains("libcudart.so.13"), "{}", e[0].message);
    assert!(
        e[0].message.contains("CUDA driver version is insufficient"),
        "{}",
        e[0].message
    );
    // A host of the runtime's CUDA: allowed.
    let v = rt.version.clone();
    let f = assess(&s, Some(&host("610.43.02", &v)), &enforce);
    assert!(errors(&f).is_empty(), "{f:?}");
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn a_missing_runtime_is_named_with_what_needs_it_and_the_fix() {
    let Some(r) = wheel_rootfs("libs-nort", false) else {
        return;
    };
    let s = scan(&r, None).scan;
    let m = s
        .missing
        .iter()
        .find(|m| m.name == "libcudart.so.13")
        .unwrap_or_else(|| panic!("{:?}", s.missing));
    assert_eq!(m.needed_by, format!("{SP}/nvidia/cu13/lib/libcurand.so.10"));
    assert_eq!(m.via, RequestKind::Needed);
    assert!(s.cuda_runtimes.is_empty());
    let f = assess(&s, None, &cfg(Enforcement::Refuse));
    let e = errors(&f);
    assert_eq!(e.len(), 1, "{f:?}");
    assert!(
        e[0].title()
            .contains("libcurand.so.10 → libcudart.so.13: cannot open shared object file"),
        "{}",
        e[0].title()
    );
    assert!(
        e[0].fix
            .as_deref()
            .unwrap()
            .contains("pip install nvidia-cuda-runtime"),
        "{:?}",
        e[0].fix
    );
    // Under warn: the same, as a warning.
    let f = assess(&s, None, &cfg(Enforcement::Warn));
    assert!(errors(&f).is_empty() && !f.is_empty());
    std::fs::remove_dir_all(&r).unwrap();
}

/// A library linked against `libcuda.so.1`, built with the C compiler.
fn needs_libcuda(r: &Path) -> Option<()> {
    if !crate::support::have_tool("gcc") {
        return None;
    }
    let stub = r.join("tmp/libcuda.so.1");
    std::fs::create_dir_all(r.join("tmp")).unwrap();
    let src = r.join("tmp/a.c");
    std::fs::write(&src, "int f(void) { return 0; }\n").unwrap();
    let cc = |args: &[&str]| {
        let o = std::process::Command::new("gcc")
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        stub.to_str()?,
        src.to_str()?,
        "-Wl,-soname,libcuda.so.1",
    ]);
    let lib = r.join("opt/app/lib/libuses_cuda.so");
    std::fs::create_dir_all(lib.parent()?).unwrap();
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        lib.to_str()?,
        src.to_str()?,
        "-Wl,--no-as-needed",
        stub.to_str()?,
    ]);
    std::fs::remove_file(&stub).unwrap();
    Some(())
}

#[test]
fn libcuda_is_there_with_compute_and_missing_with_utility_only() {
    let r = tempdir("libs-caps");
    base(&r);
    if needs_libcuda(&r).is_none() {
        return;
    }
    let s = scan(&r, Some("compute,utility")).scan;
    assert!(s.missing.is_empty(), "{:?}", s.missing);
    let s = scan(&r, Some("utility")).scan;
    let m = s
        .missing
        .iter()
        .find(|m| m.name == "libcuda.so.1")
        .expect("libcuda.so.1 missing");
    assert_eq!(m.needed_by, "opt/app/lib/libuses_cuda.so");
    assert_eq!(m.capability.as_deref(), Some("compute"));
    let f = assess(&s, None, &cfg(Enforcement::Refuse));
    assert!(
        f[0].fix
            .as_deref()
            .unwrap()
            .contains("NVIDIA_DRIVER_CAPABILITIES"),
        "{f:?}"
    );
    // A container not given GPUs gets nothing injected.
    let mut none = inputs(Some("all"));
    none.gpu = false;
    let s = scan_rootfs(&r, &none, &cfg(Enforcement::Refuse), false).scan;
    assert!(
        s.missing.iter().any(|m| m.name == "libcuda.so.1"),
        "{:?}",
        s.missing
    );
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn a_warm_start_reads_the_result_from_the_cache() {
    let Some(r) = wheel_rootfs("libs-cache", true) else {
        return;
    };
    let dir = tempdir("libs-cache-dir");
    let c = LibrariesConfig {
        cache_dir: dir.join("c").to_string_lossy().into_owned(),
        ..cfg(Enforcement::Refuse)
    };
    let cold = scan_rootfs(&r, &inputs(None), &c, false);
    assert_eq!(std::fs::read_dir(dir.join("c")).unwrap().count(), 1);
    let warm = scan_rootfs(&r, &inputs(None), &c, false);
    assert_eq!(cold.scan, warm.scan);
    // Served from the cache: the resolution's own counters are not there.
    assert_eq!(warm.cache_entries, 0);
    // A changed file is a different key.
    std::fs::write(r.join(format!("usr/lib/{T}/libextra.so.1")), b"x").unwrap();
    let changed = scan_rootfs(&r, &inputs(None), &c, false);
    assert_ne!(changed.cache_entries, 0);
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An ELF shared object needing `names` (DT_NEEDED, in order).
pub(crate) fn elf_needing(names: &[String]) -> Vec<u8> {
    let mut strtab = vec![0u8];
    let mut offs = Vec::new();
    for n in names {
        offs.push(strtab.len() as u64);
        strtab.extend_from_slice(n.as_bytes());
        strtab.push(0);
    }
    let str_off = 64 + 2 * 56u64;
    let dyn_off = (str_off + strtab.len() as u64).div_ceil(8) * 8;
    let mut dyns: Vec<(u64, u64)> = offs.iter().map(|o| (1, *o)).collect();
    dyns.push((5, str_off));
    dyns.push((10, strtab.len() as u64));
    dyns.push((0, 0));
    let total = dyn_off + dyns.len() as u64 * 16;
    let mut out = vec![0u8; total as usize];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 2;
    out[5] = 1;
    out[6] = 1;
    out[16] = 3;
    out[18] = 62;
    out[20] = 1;
    out[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
    out[0x36] = 56;
    out[0x38] = 2;
    let ph = |kind: u32, off: u64, size: u64| {
        let mut p = [0u8; 56];
        p[0..4].copy_from_slice(&kind.to_le_bytes());
        p[8..16].copy_from_slice(&off.to_le_bytes());
        p[16..24].copy_from_slice(&off.to_le_bytes());
        p[32..40].copy_from_slice(&size.to_le_bytes());
        p
    };
    out[64..120].copy_from_slice(&ph(1, 0, total));
    out[120..176].copy_from_slice(&ph(2, dyn_off, dyns.len() as u64 * 16));
    out[str_off as usize..str_off as usize + strtab.len()].copy_from_slice(&strtab);
    for (k, (t, v)) in dyns.iter().enumerate() {
        let at = dyn_off as usize + k * 16;
        out[at..at + 8].copy_from_slice(&t.to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&v.to_le_bytes());
    }
    out
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn hostile_rootfs_trees_stay_bounded_and_inside() {
    let r = tempdir("libs-hostile");
    base(&r);
    let lib = r.join(format!("usr/lib/{T}"));
    // A host file outside the rootfs that links point at: were it read,
    // libcudnn.so.9 would resolve.
    let outside = tempdir("libs-outside");
    std::fs::write(outside.join("libcudnn.so.9"), elf_needing(&[])).unwrap();
    let out_path = outside.join("libcudnn.so.9").to_string_lossy().into_owned();
    symlink(&out_path, lib.join("libcudnn.so.9")).unwrap();
    symlink(
        format!("../../../../../..{out_path}"),
        lib.join("libcudnn_ops.so.9"),
    )
    .unwrap();
    // Symlink loops: between two names, and a directory into itself.
    symlink("libcurand.so.10", lib.join("libcusolver.so.11")).unwrap();
    symlink("libcusolver.so.11", lib.join("libcurand.so.10")).unwrap();
    symlink(".", lib.join("selfdir")).unwrap();
    // A FIFO where a library should be (the real loader would block).
    nix::unistd::mkfifo(&lib.join("libcufft.so.11"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let one = names(&[
        "libcudnn.so.9",
        "libcudnn_ops.so.9",
        "libcurand.so.10",
        "libc.so.6",
        "libcufft.so.11",
    ]);
    std::fs::write(lib.join("libcuone.so.1"), elf_needing(&one)).unwrap();
    // A 4 GiB sparse "library", needed by another.
    let sparse = std::fs::File::create(lib.join("libcublas.so.12")).unwrap();
    sparse.set_len(4 << 30).unwrap();
    std::fs::write(
        lib.join("libcutwo.so.1"),
        elf_needing(&names(&["libcublas.so.12"])),
    )
    .unwrap();
    // 100,000 DT_NEEDED names in one GPU library.
    let many: Vec<String> = (0..100_000)
        .map(|k| format!("libcuhostile{k}.so"))
        .collect();
    std::fs::write(lib.join("libcuhostile.so.1"), elf_needing(&many)).unwrap();
    // The shipped loader cache is a FIFO: reading it would block. It is
    // never read (NVIDIA's stack rebuilds it at start).
    nix::unistd::mkfifo(&r.join("etc/ld.so.cache"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let started = Instant::now();
    let res = scan_rootfs(&r, &inputs(None), &cfg(Enforcement::Refuse), true);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    let s = &res.scan;
    assert!(
        s.not_judged
            .iter()
            .any(|n| n.contains("libcuhostile.so.1") && n.contains("DT_NEEDED")),
        "{s:?}"
    );
    assert!(s.incomplete.is_some());
    let missing = |n: &str| s.missing.iter().find(|m| m.name == n);
    // Links out of the rootfs find nothing, however they climb.
    assert!(
        missing("libcudnn.so.9").is_some_and(|m| m.error.is_none()),
        "{s:?}"
    );
    assert!(missing("libcudnn_ops.so.9").is_some(), "{s:?}");
    // A loop ends the search: not found.
    assert!(missing("libcurand.so.10").is_some(), "{s:?}");
    // The FIFO stops the program as the loader would, without blocking.
    let fifo = missing("libcufft.so.11").expect("the FIFO is reported");
    assert!(
        fifo.error
            .as_deref()
            .unwrap()
            .contains("not a regular file"),
        "{fifo:?}"
    );
    // The sparse file: read a header's worth, refused as the loader refuses it.
    let sp = missing("libcublas.so.12").expect("the sparse file is reported");
    assert!(
        sp.error.as_deref().unwrap().contains("invalid ELF header"),
        "{sp:?}"
    );
    for t in &res.trees {
        for l in &t.lines {
            assert!(
                !l.path.as_deref().unwrap_or("").contains(&out_path),
                "{l:?}"
            );
        }
    }
    // The same through the binary: bounded, inside, the unfinished part
    // named in a finding.
    let c = outside.join("config.toml");
    std::fs::write(
        &c,
        "[libraries]\nseverity = \"enforce\"\ncache_dir = \"\"\n[log]\nsyslog = false\n",
    )
    .unwrap();
    let started = Instant::now();
    let o = std::process::Command::new(crate::scan_support::gpu_guard())
        .arg("--config")
        .arg(&c)
        .args(["scan", "--rootfs", "--libraries", "--json"])
        .arg(&r)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!out.contains(&out_path), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let v = &v["rootfs"][0];
    assert!(v["libraries"]["incomplete"].is_string(), "{v}");
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["message"]
                .as_str()
                .unwrap_or("")
                .contains("libcuhostile.so.1")),
        "{v}"
    );
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&outside).unwrap();
}

/// A layer entry: path, a file's bytes, a symlink's target (neither: a
/// directory).
pub(crate) type Entry = (String, Option<Vec<u8>>, Option<String>);

/// Every entry of a rootfs directory as layer entries (files read whole).
pub(crate) fn entries_of(root: &Path, rel: &str, out: &mut Vec<Entry>) {
    let dir = root.join(rel);
    let mut list: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .collect();
    list.sort_by_key(|e| e.file_name());
    for e in list {
        let name = format!(
            "{rel}{}{}",
            if rel.is_empty() { "" } else { "/" },
            e.file_name().to_string_lossy()
        );
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            let t = std::fs::read_link(e.path()).unwrap();
            out.push((name, None, Some(t.to_string_lossy().into_owned())));
        } else if ft.is_dir() {
            out.push((name.clone(), None, None));
            entries_of(root, &name, out);
        } else {
            out.push((name, Some(std::fs::read(e.path()).unwrap()), None));
        }
    }
}

pub(crate) fn layer(entries: &[Entry]) -> Vec<u8> {
    use crate::image_support::{tar_of, E};
    let es: Vec<E> = entries
        .iter()
        .map(|(p, data, link)| match (data, link) {
            (Some(d), _) => E::File(p, d),
            (None, Some(t)) => E::Sym(p, t),
            (None, None) => E::Dir(p),
        })
        .collect();
    tar_of(&es)
}

#[test]
fn an_image_of_the_wheels_reads_as_its_rootfs_does() {
    use gpu_guard::image::{Image, Options};
    let Some(r) = wheel_rootfs("libs-image", true) else {
        return;
    };
    let rootfs_scan = scan(&r, None).scan;
    // Layer 0: the base; layer 1: the wheels, one file through the `lib`
    // symlink of layer 0; layer 2: a symlink to the runtime across layers,
    // and a whiteout of a file layer 1 added.
    let mut base_entries = Vec::new();
    for top in ["etc", "lib", "lib64", "usr"] {
        let mut e = Vec::new();
        entries_of(&r, top, &mut e);
        e.insert(
            0,
            (
                top.to_string(),
                None,
                std::fs::read_link(r.join(top))
                    .ok()
                    .map(|t| t.to_string_lossy().into_owned()),
            ),
        );
        base_entries.extend(
            e.into_iter()
                .filter(|(p, _, _)| !p.starts_with("usr/local")),
        );
    }
    let mut wheel_entries = Vec::new();
    entries_of(&r, "usr/local", &mut wheel_entries);
    wheel_entries.push((
        format!("lib/{T}/libgone.so.1"),
        Some(b"to be deleted".to_vec()),
        None,
    ));
    let top = vec![
        (
            format!("usr/lib/{T}/.wh.libgone.so.1"),
            Some(Vec::new()),
            None,
        ),
        ("opt".to_string(), None, None),
        (
            "opt/libcudart.so.13".to_string(),
            None,
            Some(format!("/{SP}/nvidia/cu13/lib/libcudart.so.13")),
        ),
    ];
    let layers = vec![layer(&base_entries), layer(&wheel_entries), layer(&top)];
    let layout = crate::image_support::oci_layout("libs-oci", &[], &layers);
    let img = Image::open(&layout, &Options::default()).unwrap();
    let from_image =
        gpu_guard::image::libraries::scan(&img, &inputs(None), false, &cfg(Enforcement::Warn))
            .unwrap()
            .scan;
    assert_eq!(from_image.missing, rootfs_scan.missing);
    assert_eq!(from_image.cuda_runtimes, rootfs_scan.cuda_runtimes);
    assert_eq!(from_image.judged, rootfs_scan.judged);
    // The runtime deleted by a later layer: missing, as in the rootfs.
    let mut gone = top.clone();
    gone.push((
        format!("{SP}/nvidia/cu13/lib/.wh.libcudart.so.13"),
        Some(Vec::new()),
        None,
    ));
    let layers = vec![layer(&base_entries), layer(&wheel_entries), layer(&gone)];
    let layout2 = crate::image_support::oci_layout("libs-oci-gone", &[], &layers);
    let img = Image::open(&layout2, &Options::default()).unwrap();
    let s = gpu_guard::image::libraries::scan(&img, &inputs(None), false, &cfg(Enforcement::Warn))
        .unwrap()
        .scan;
    assert!(
        s.missing.iter().any(|m| m.name == "libcudart.so.13"),
        "{s:?}"
    );
    assert!(s.cuda_runtimes.is_empty(), "{s:?}");
    // The same through `check --image`: the three layers with the
    // cross-layer symlink give the runtime; the whiteout removes it.
    let d = tempdir("libs-image-run");
    let host = facts_file(&d, "610.43.02", "13.5");
    let config = check_config(&d, "enforce");
    let (code, out) = check(&config, &["--image", layout.to_str().unwrap()], &host, true);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        serde_json::to_value(&from_image.missing).unwrap(),
        v["libraries"]["missing"],
        "{v}"
    );
    assert_eq!(
        v["libraries"]["cuda_runtimes"].as_array().unwrap().len(),
        1,
        "{v}"
    );
    let (code, out) = check(
        &config,
        &["--image", layout2.to_str().unwrap()],
        &host,
        true,
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("libcudart.so.13: cannot open shared object file"),
        "{out}"
    );
    for d in [&r, &layout, &layout2, &d] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// A host facts file: one H100 on this driver and CUDA.
fn facts_file(dir: &Path, driver: &str, cuda: &str) -> PathBuf {
    let p = dir.join(format!("host-{cuda}.json"));
    let v = serde_json::json!({
        "driver_version": driver, "cuda_driver_version": cuda,
        "gpus": [ { "index": 0, "uuid": "GPU-1", "name": "NVIDIA H100 80GB HBM3", "brand": "tesla",
                    "compute_capability": "9.0", "memory_mib": 81920, "pci_bus_id": "00000000:01:00.0" } ]
    });
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

/// A config for `check`: no probe, no logs, no caches; `[libraries]` as given.
fn check_config(dir: &Path, severity: &str) -> PathBuf {
    let p = dir.join(format!("config-{severity}.toml"));
    std::fs::write(
        &p,
        format!(
            "[host]\ncache_file = \"\"\n[kernel_image]\ncache_dir = \"\"\n[libraries]\nseverity = \"{severity}\"\ncache_dir = \"\"\n[log]\nsyslog = false\n"
        ),
    )
    .unwrap();
    p
}

/// The env of an image whose base declares CUDA 12.8 while its wheels are
/// CUDA 13.
fn understated_env() -> Vec<String> {
    [
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.8",
        "CUDA_VERSION=12.8.0",
        "PATH=/usr/local/bin:/usr/bin:/bin",
    ]
    .map(String::from)
    .to_vec()
}

fn check(config: &Path, target: &[&str], host: &Path, json: bool) -> (i32, String) {
    let mut cmd = std::process::Command::new(crate::scan_support::gpu_guard());
    cmd.arg("--config")
        .arg(config)
        .arg("check")
        .args(target)
        .arg("--host")
        .arg(host);
    if json {
        cmd.arg("--json");
    }
    let o = cmd.env_remove("GPU_GUARD_CONFIG").output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn check_bundle_refuses_the_understated_image_on_cuda_12_8_and_allows_it_on_cuda_13() {
    let Some(r) = wheel_rootfs("libs-bundle", true) else {
        return;
    };
    let d = tempdir("libs-bundle-run");
    let bundle = crate::compat_support::bundle(&d, &r, &understated_env(), None);
    let b = bundle.to_str().unwrap();
    let rt = scan(&r, None).scan.cuda_runtimes[0].version.clone();
    let h128 = facts_file(&d, "570.86.15", "12.8");
    let h13 = facts_file(&d, "610.43.02", &rt);
    let enforce = check_config(&d, "enforce");
    let (code, out) = check(&enforce, &["--bundle", b], &h128, true);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["verdict"], "refuse");
    let f: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "cuda-runtime")
        .collect();
    assert_eq!(f.len(), 1, "{v}");
    assert_eq!(f[0]["severity"], "error");
    assert_eq!(
        v["libraries"]["cuda_runtimes"][0]["min_driver"], "580.65.06",
        "{v}"
    );
    assert!(
        v["libraries"]["missing"].as_array().unwrap().is_empty(),
        "{v}"
    );
    // NVIDIA's own check passes: the requirement holds on 12.8.
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["check"] != "requirement" || f["severity"] != "error"),
        "{v}"
    );
    let (code, out) = check(&enforce, &["--bundle", b], &h13, true);
    assert_eq!(code, 0, "{out}");
    // For people: the library, where it came from, the fix.
    let (code, out) = check(&enforce, &["--bundle", b], &h128, false);
    assert_eq!(code, 1);
    assert!(
        out.contains("[cuda-runtime]") && out.contains("pip nvidia-cuda-runtime"),
        "{out}"
    );
    assert!(
        out.contains("fix: install NVIDIA driver 580.65.06 or newer"),
        "{out}"
    );
    // Under the default (warn) it starts, with the warning.
    let warn = check_config(&d, "warn");
    let (code, out) = check(&warn, &["--bundle", b], &h128, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("[cuda-runtime]"), "{out}");
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn check_names_a_missing_runtime_with_its_chain() {
    let Some(r) = wheel_rootfs("libs-bundle-nort", false) else {
        return;
    };
    let d = tempdir("libs-bundle-nort-run");
    let bundle = crate::compat_support::bundle(&d, &r, &understated_env(), None);
    let h = facts_file(&d, "610.43.02", "13.5");
    let (code, out) = check(
        &check_config(&d, "enforce"),
        &["--bundle", bundle.to_str().unwrap()],
        &h,
        false,
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "nvidia/cu13/lib/libcurand.so.10 → libcudart.so.13: cannot open shared object file"
        ),
        "{out}"
    );
    assert!(
        out.contains("fix: pip install nvidia-cuda-runtime"),
        "{out}"
    );
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

/// A rootfs as one layer's entries, its top-level symlinks kept.
fn one_layer(r: &Path) -> Vec<Entry> {
    let mut all = Vec::new();
    for top in ["etc", "lib", "lib64", "usr"] {
        all.push((
            top.to_string(),
            None,
            std::fs::read_link(r.join(top))
                .ok()
                .map(|t| t.to_string_lossy().into_owned()),
        ));
        if !r.join(top).is_symlink() {
            entries_of(r, top, &mut all);
        }
    }
    all
}

#[test]
fn check_image_of_the_wheels_decides_as_check_bundle() {
    let Some(r) = wheel_rootfs("libs-image-check", true) else {
        return;
    };
    let d = tempdir("libs-image-check-run");
    let layout = crate::image_support::oci_layout(
        "libs-image-check-oci",
        &understated_env(),
        &[layer(&one_layer(&r))],
    );
    let rt = scan(&r, None).scan.cuda_runtimes[0].version.clone();
    let enforce = check_config(&d, "enforce");
    let img = layout.to_str().unwrap();
    let (code, out) = check(
        &enforce,
        &["--image", img],
        &facts_file(&d, "570.86.15", "12.8"),
        true,
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("\"check\": \"cuda-runtime\""), "{out}");
    let (code, out) = check(
        &enforce,
        &["--image", img],
        &facts_file(&d, "610.43.02", &rt),
        true,
    );
    assert_eq!(code, 0, "{out}");
    for p in [&r, &d, &layout] {
        std::fs::remove_dir_all(p).unwrap();
    }
}

/// `check --image` reads the libraries in the kernel-image scan's pass over
/// the layers when that scan is on, and in a pass of its own when it is
/// off: the same `libraries` either way, here libcurand's need of the
/// runtime its image lacks (its dynamic section is where patchelf moved it,
/// past the string table).
#[test]
fn check_image_names_a_missing_runtime_with_the_kernel_image_scan_on_or_off() {
    let Some(r) = wheel_rootfs("libs-image-nort", false) else {
        return;
    };
    let d = tempdir("libs-image-nort-run");
    let layout = crate::image_support::oci_layout(
        "libs-image-nort-oci",
        &understated_env(),
        &[layer(&one_layer(&r))],
    );
    let host = facts_file(&d, "610.43.02", "13.5");
    let img = layout.to_str().unwrap();
    let on = check_config(&d, "enforce");
    let off = d.join("config-kernel-off.toml");
    std::fs::write(
        &off,
        "[host]\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[libraries]\nseverity = \"enforce\"\ncache_dir = \"\"\n[log]\nsyslog = false\n",
    )
    .unwrap();
    let mut seen = Vec::new();
    for config in [&on, &off] {
        let (code, out) = check(config, &["--image", img], &host, true);
        assert_eq!(code, 1, "{out}");
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let missing = v["libraries"]["missing"].as_array().unwrap();
        assert!(
            missing.iter().any(|m| m["name"] == "libcudart.so.13"
                && m["via"] == "DT_NEEDED"
                && m["needed_by"] == format!("{SP}/nvidia/cu13/lib/libcurand.so.10")),
            "{v}"
        );
        assert!(
            v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["check"] == "library" && f["severity"] == "error"),
            "{v}"
        );
        seen.push(v["libraries"].clone());
        let (_, human) = check(config, &["--image", img], &host, false);
        assert!(
            human.contains(
                "nvidia/cu13/lib/libcurand.so.10 → libcudart.so.13: cannot open shared object file"
            ),
            "{human}"
        );
    }
    assert_eq!(seen[0], seen[1]);
    for p in [&r, &d, &layout] {
        std::fs::remove_dir_all(p).unwrap();
    }
}

/// An H100 node labelled by GPU Feature Discovery with this driver and CUDA.
fn node(name: &str, driver: &str, cuda: &str) -> serde_json::Value {
    let d: Vec<&str> = driver.split('.').collect();
    let c: Vec<&str> = cuda.split('.').collect();
    serde_json::json!({ "apiVersion": "v1", "kind": "Node", "status": {},
        "metadata": { "name": name, "labels": {
            "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "nvidia.com/cuda.driver-version.major": d[0], "nvidia.com/cuda.driver-version.minor": d[1],
            "nvidia.com/cuda.driver-version.revision": d[2], "nvidia.com/cuda.driver-version.full": driver,
            "nvidia.com/cuda.runtime-version.major": c[0], "nvidia.com/cuda.runtime-version.minor": c[1],
            "nvidia.com/cuda.runtime-version.full": cuda,
            "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.present": "true", "gpu-guard.io/brand": "tesla",
            "gpu-guard.io/brand.tesla": "true", "gpu-guard.io/driver.branch": d[0],
            "gpu-guard.io/compute.min": "9.0", "gpu-guard.io/compute.min.major": "9",
            "gpu-guard.io/compute.min.minor": "0" } } })
}

/// Does a node selector expression hold on these labels (Kubernetes'
/// rules: NotIn and DoesNotExist hold on a missing label)?
fn holds(e: &serde_json::Value, labels: &serde_json::Value) -> bool {
    let v = labels[e["key"].as_str().unwrap()].as_str();
    let vals: Vec<&str> = e["values"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap()).collect())
        .unwrap_or_default();
    let int = |s: &str| s.parse::<i64>().ok();
    match e["operator"].as_str().unwrap() {
        "In" => v.is_some_and(|v| vals.contains(&v)),
        "NotIn" => !v.is_some_and(|v| vals.contains(&v)),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        "Gt" => matches!((v.and_then(int), int(vals[0])), (Some(a), Some(b)) if a > b),
        "Lt" => matches!((v.and_then(int), int(vals[0])), (Some(a), Some(b)) if a < b),
        op => panic!("operator {op}"),
    }
}

fn admits(affinity: &serde_json::Value, labels: &serde_json::Value) -> bool {
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| {
            t["matchExpressions"]
                .as_array()
                .map(|a| a.iter().all(|e| holds(e, labels)))
                .unwrap_or(true)
        })
}

#[test]
fn fleets_and_label_affinities_see_a_shipped_cuda_13_runtime_as_a_driver_bound() {
    let Some(r) = wheel_rootfs("libs-fleet", true) else {
        return;
    };
    let d = tempdir("libs-fleet-run");
    let bundle = crate::compat_support::bundle(&d, &r, &understated_env(), None);
    let rt = scan(&r, None).scan.cuda_runtimes[0].version.clone();
    let nodes = serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": [
        node("h100-570", "570.86.15", "12.8"),
        node("h100-580", "580.65.06", "13.0"),
        node("h100-new", "610.43.02", &rt),
    ] });
    let nodes_file = d.join("nodes.json");
    std::fs::write(&nodes_file, nodes.to_string()).unwrap();
    let cfg = check_config(&d, "enforce");
    let run = |extra: &[&str]| {
        let o = std::process::Command::new(crate::scan_support::gpu_guard())
            .arg("--config")
            .arg(&cfg)
            .args(["check", "--bundle"])
            .arg(&bundle)
            .args(extra)
            .arg("--json")
            .env_remove("GPU_GUARD_CONFIG")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        serde_json::from_str::<serde_json::Value>(&text)
            .unwrap_or_else(|e| panic!("{e}: {text}{}", String::from_utf8_lossy(&o.stderr)))
    };
    let fleet = run(&["--nodes", nodes_file.to_str().unwrap()]);
    let verdicts: Vec<(&str, &str)> = fleet["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["host"].as_str().unwrap(),
                r["decision"]["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    // CUDA 12.8 cannot run the runtime; 13.0 runs it through CUDA's
    // minor-version compatibility (driver 580.65.06, the CUDA 13 family
    // minimum); the runtime's own CUDA runs it natively.
    assert_eq!(
        verdicts,
        [
            ("h100-570", "refuse"),
            ("h100-580", "allow"),
            ("h100-new", "allow")
        ],
        "{fleet:#}"
    );
    // The label-only affinity (no node list) admits exactly those nodes.
    let aff = run(&["--affinity"]);
    for n in nodes["items"].as_array().unwrap() {
        let name = n["metadata"]["name"].as_str().unwrap();
        let allowed = verdicts.iter().any(|(h, v)| *h == name && *v == "allow");
        assert_eq!(
            admits(&aff, &n["metadata"]["labels"]),
            allowed,
            "{name}: {aff:#}"
        );
    }
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

/// `scan --rootfs --libraries --json --host` on a rootfs with a CUDA 12.8
/// toolkit directory (its `version.json`) and a conda CUDA 11 runtime (its
/// SONAME only): each runtime's version and where it came from; on a CUDA
/// 12.2 host the 12.8 runtime runs by CUDA's minor-version compatibility
/// (a warning, whatever `requirements.minor_version_compatibility` says),
/// on a CUDA 11 host it cannot; the CUDA 11 one is fine.
#[test]
fn toolkit_and_conda_runtimes_through_scan_follow_the_minor_version_rule() {
    let r = tempdir("libs-toolkit");
    base(&r);
    let lib = r.join("usr/local/cuda-12.8/targets/x86_64-linux/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("libcudart.so.12.8.90"), b"\x7fELF stand-in").unwrap();
    symlink("libcudart.so.12.8.90", lib.join("libcudart.so.12")).unwrap();
    std::fs::write(
        r.join("usr/local/cuda-12.8/version.json"),
        r#"{"cuda": {"name": "CUDA SDK", "version": "12.8.1"}, "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": "12.8.90"}}"#,
    )
    .unwrap();
    std::fs::create_dir_all(r.join("opt/conda/lib")).unwrap();
    std::fs::write(
        r.join("opt/conda/lib/libcudart.so.11.0"),
        b"\x7fELF stand-in",
    )
    .unwrap();
    let d = tempdir("libs-toolkit-run");
    let h122 = facts_file(&d, "535.104.05", "12.2");
    let run = |minor: &str, host: &Path| {
        let c = d.join(format!("config-{minor}.toml"));
        std::fs::write(
            &c,
            format!("[requirements]\nminor_version_compatibility = \"{minor}\"\n[libraries]\nseverity = \"enforce\"\ncache_dir = \"\"\n[log]\nsyslog = false\n"),
        )
        .unwrap();
        let o = std::process::Command::new(crate::scan_support::gpu_guard())
            .arg("--config")
            .arg(&c)
            .args(["scan", "--rootfs", "--libraries", "--json", "--host"])
            .arg(host)
            .arg(&r)
            .env_remove("GPU_GUARD_CONFIG")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        let v: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{e}: {out}{}", String::from_utf8_lossy(&o.stderr)));
        (o.status.code(), v["rootfs"][0].clone())
    };
    let (_, v) = run("off", &h122);
    let rts = v["libraries"]["cuda_runtimes"].as_array().unwrap();
    let by_path = |p: &str| {
        rts.iter()
            .find(|x| x["path"] == p)
            .unwrap_or_else(|| panic!("{p}: {v}"))
    };
    let tk = by_path("usr/local/cuda-12.8/targets/x86_64-linux/lib/libcudart.so.12.8.90");
    assert_eq!(tk["version"], "12.8", "{tk}");
    assert!(
        tk["source"].as_str().unwrap().contains("version.json"),
        "{tk}"
    );
    let conda = by_path("opt/conda/lib/libcudart.so.11.0");
    assert_eq!(conda["version"], "11", "{conda}");
    let rt_findings = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "cuda-runtime")
            .cloned()
            .collect()
    };
    // CUDA's rule, whatever requirements.minor_version_compatibility says
    // (it governs declared requirements): 12.8 runs on 535 (CUDA 12.2),
    // above 525.60.13, with a warning naming what needs driver 570.
    for rule in ["off", "allow"] {
        let (code, v) = run(rule, &h122);
        let f = rt_findings(&v);
        assert_eq!(code, Some(0), "{rule}: {v}");
        assert_eq!(f.len(), 1, "{v}");
        assert_eq!(f[0]["severity"], "warning");
        let m = f[0]["message"].as_str().unwrap();
        assert!(
            m.contains("cuda-12.8") && m.contains("minor-version compatibility"),
            "{m}"
        );
        assert!(m.contains("570.26"), "{m}");
        assert!(f[0].get("predicts_failure").is_none(), "{f:?}");
    }
    // A CUDA 11 driver: the 12.8 runtime's major is newer; the 11 one runs.
    let (code, v) = run("off", &facts_file(&d, "520.61.05", "11.8"));
    let f = rt_findings(&v);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(f.len(), 1, "{v}");
    assert_eq!(f[0]["severity"], "error");
    assert_eq!(f[0]["predicts_failure"], true);
    let m = f[0]["message"].as_str().unwrap();
    assert!(m.contains("cuda-12.8") && m.contains("insufficient"), "{m}");
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

/// Runs `gpu-guard --config CONFIG ARGS` with `stdin`: (exit status, stderr).
fn gg(config: &Path, args: &[&str], stdin: &[u8]) -> (Option<i32>, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(crate::scan_support::gpu_guard())
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("GPU_GUARD_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let o = child.wait_with_output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The prestart hook and the runtime wrapper read the container's rootfs
/// as a start would: the understated wheels are refused on a CUDA 12.8
/// host under enforce (the wrapper never runs the real runtime) and
/// started on CUDA 13; the first start leaves one cache entry, and a warm
/// start answers from it, not from the files (an entry edited to say
/// CUDA 12.8 admits the container; a corrupt one is read past).
#[test]
fn hooks_and_wrapper_judge_the_rootfs_and_a_warm_start_reads_the_cache() {
    let Some(r) = wheel_rootfs("libs-hook", true) else {
        return;
    };
    let d = tempdir("libs-hook-run");
    let bundle = crate::compat_support::bundle(&d, &r, &understated_env(), None);
    // As the wrapper would have edited it: the hook then has only the
    // libraries to judge.
    let spec = bundle.join("config.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&spec).unwrap()).unwrap();
    v["process"]["noNewPrivileges"] = true.into();
    std::fs::write(&spec, v.to_string()).unwrap();
    let rt = scan(&r, None).scan.cuda_runtimes[0].version.clone();
    let record = d.join("runtime-ran");
    let runc = d.join("fake-runc");
    std::fs::write(
        &runc,
        format!("#!/bin/sh\necho \"$*\" > '{}'\n", record.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&runc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = d.join("libcache");
    let config = |host: &Path, name: &str| {
        let p = d.join(name);
        std::fs::write(
            &p,
            format!(
                "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\ncache_dir = \"\"\n[libraries]\nseverity = \"enforce\"\ncache_dir = \"{}\"\n[runtime]\npath = \"{}\"\n[log]\nsyslog = false\n",
                host.display(),
                cache.display(),
                runc.display()
            ),
        )
        .unwrap();
        p
    };
    let c128 = config(&facts_file(&d, "570.86.15", "12.8"), "c128.toml");
    let c13 = config(&facts_file(&d, "610.43.02", &rt), "c13.toml");
    let state = format!(
        r#"{{"ociVersion":"1.0.2","id":"libs1","status":"creating","pid":4242,"bundle":"{}"}}"#,
        bundle.display()
    );
    let hook = ["hook", "prestart"];
    let (code, err) = gg(&c128, &hook, state.as_bytes());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("CUDA driver version is insufficient for CUDA runtime version"),
        "{err}"
    );
    let entries = || -> Vec<PathBuf> {
        std::fs::read_dir(&cache)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    assert_eq!(entries().len(), 1, "one cache entry for the rootfs");
    let (code, err) = gg(&c13, &hook, state.as_bytes());
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(entries().len(), 1, "the same rootfs, the same entry");
    // The wrapper: refused before the real runtime runs; then started.
    let b = bundle.to_str().unwrap();
    let create = ["runtime", "create", "--bundle", b, "libs1"];
    let (code, err) = gg(&c128, &create, b"");
    assert_ne!(code, Some(0), "{err}");
    assert!(!record.exists(), "a refused container reached the runtime");
    let (code, err) = gg(&c13, &create, b"");
    assert_eq!(code, Some(0), "{err}");
    assert!(std::fs::read_to_string(&record).unwrap().contains("create"));
    // Warm: the entry answers. Edited to say the runtime is CUDA 12.8's,
    // it admits the container on the 12.8 host; nothing else changed.
    let e = entries().remove(0);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&e).unwrap()).unwrap();
    for x in v["scan"]["cuda_runtimes"].as_array_mut().unwrap() {
        x["version"] = "12.8".into();
        x["min_driver"] = "525.60.13".into();
        x["toolkit_driver"] = "570.26".into();
    }
    std::fs::write(&e, v.to_string()).unwrap();
    let (code, err) = gg(&c128, &hook, state.as_bytes());
    assert_eq!(
        code,
        Some(0),
        "the warm start read the files, not the cache: {err}"
    );
    // A corrupt entry is read past: the files again, refused again.
    std::fs::write(&e, b"\0garbage").unwrap();
    let (code, err) = gg(&c128, &hook, state.as_bytes());
    assert_eq!(code, Some(1), "{err}");
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

/// `scan --rootfs --libraries` for people: the resolution tree like
/// lddtree (absolute paths, `dlopen` marked, NVIDIA's injected libraries
/// marked), the CUDA runtime with where it came from, and a missing
/// runtime as `=> not found` with the chain and the fix.
#[test]
fn scan_prints_the_resolution_tree_marking_injected_libraries() {
    let Some(with) = wheel_rootfs("libs-tree", true) else {
        return;
    };
    let without = wheel_rootfs("libs-tree-nort", false).unwrap();
    let d = tempdir("libs-tree-run");
    let c = d.join("config.toml");
    std::fs::write(&c, "[libraries]\ncache_dir = \"\"\n[log]\nsyslog = false\n").unwrap();
    let run = |r: &Path| {
        let o = std::process::Command::new(crate::scan_support::gpu_guard())
            .arg("--config")
            .arg(&c)
            .args(["scan", "--rootfs", "--libraries"])
            .arg(r)
            .env_remove("GPU_GUARD_CONFIG")
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let lib = format!("/{SP}/nvidia/cu13/lib");
    let (code, out) = run(&with);
    assert_eq!(code, Some(0), "{out}");
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    assert!(
        lines.contains(&format!("{lib}/libcurand.so.10").as_str()),
        "{out}"
    );
    assert!(
        lines.contains(&format!("libcudart.so.13 => {lib}/libcudart.so.13").as_str()),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("libcuda.so.1 [dlopen] => /usr/lib/")
                && l.ends_with("[injected by NVIDIA's runtime]")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "CUDA runtime: {SP}/nvidia/cu13/lib/libcudart.so.13 (CUDA 13."
        )) && out.contains("from pip nvidia-cuda-runtime 13.")
            && out.contains("needs NVIDIA driver 580.65.06 or newer"),
        "{out}"
    );
    // Without the runtime: not found, with the chain and the fix (a
    // warning under the default severity: exit 0).
    let (code, out) = run(&without);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.lines()
            .any(|l| l.trim() == "libcudart.so.13 => not found"),
        "{out}"
    );
    assert!(
        out.contains("libcurand.so.10 → libcudart.so.13: cannot open shared object file")
            && out.contains("fix: pip install nvidia-cuda-runtime"),
        "{out}"
    );
    for p in [&with, &without, &d] {
        std::fs::remove_dir_all(p).unwrap();
    }
}

/// An image's own `/etc/ld.so.cache` that lies (a count of 4 billion
/// entries, string offsets past its end, an entry naming the missing
/// runtime at a path outside the rootfs) changes nothing: NVIDIA's stack
/// rebuilds the cache at start, so the scan never reads it.
#[test]
fn a_lying_shipped_loader_cache_is_not_read() {
    let Some(r) = wheel_rootfs("libs-lying-cache", false) else {
        return;
    };
    let clean = scan(&r, None).scan;
    let mut cache = b"glibc-ld.so.cache1.1".to_vec();
    cache.extend_from_slice(&u32::MAX.to_le_bytes()); // nlibs
    cache.extend_from_slice(&u32::MAX.to_le_bytes()); // len_strings
    cache.extend_from_slice(&[0u8; 24]); // flags, padding, extension offset, unused
    for _ in 0..64 {
        // flags, key, value (offsets far past the end), osversion, hwcap
        cache.extend_from_slice(&0x0303i32.to_le_bytes());
        cache.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        cache.extend_from_slice(&0x7FFF_FFF0u32.to_le_bytes());
        cache.extend_from_slice(&0u32.to_le_bytes());
        cache.extend_from_slice(&0u64.to_le_bytes());
    }
    cache.extend_from_slice(b"libcudart.so.13\0/outside/libcudart.so.13\0");
    std::fs::write(r.join("etc/ld.so.cache"), &cache).unwrap();
    let started = Instant::now();
    let lying = scan(&r, None).scan;
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(lying.missing, clean.missing);
    assert!(
        lying.missing.iter().any(|m| m.name == "libcudart.so.13"),
        "{lying:?}"
    );
    // And through the binary.
    let d = tempdir("libs-lying-cache-run");
    let c = d.join("config.toml");
    std::fs::write(
        &c,
        "[libraries]\nseverity = \"enforce\"\ncache_dir = \"\"\n[log]\nsyslog = false\n",
    )
    .unwrap();
    let o = std::process::Command::new(crate::scan_support::gpu_guard())
        .arg("--config")
        .arg(&c)
        .args(["scan", "--rootfs", "--libraries", "--json"])
        .arg(&r)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(!out.contains("/outside/"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["rootfs"][0]["libraries"]["missing"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "libcudart.so.13"),
        "{v}"
    );
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}
