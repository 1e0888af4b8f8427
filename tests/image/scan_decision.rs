//! The `kernel-image` check end to end: the shipped library globs find a
//! framework's libraries in an image laid out as real images are, each
//! visible GPU is judged, and the cache makes the second start parse nothing.

use crate::scan_support::*;
use gpu_guard::core::decision::{Check, Severity};
use gpu_guard::core::facts::Gpu;
use gpu_guard::core::policy::{Config, Enforcement, KernelImageConfig};
use gpu_guard::core::version::Version;
use gpu_guard::scan::kernel_image_findings;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

fn gpu(index: u32, name: &str, cc: &str) -> Gpu {
    Gpu {
        index,
        name: name.into(),
        compute_capability: Some(cc.into()),
        ..Default::default()
    }
}

fn shipped(severity: Enforcement, cache: &Path) -> KernelImageConfig {
    KernelImageConfig {
        severity,
        cache_dir: cache.to_str().unwrap().into(),
        ..Config::default().kernel_image
    }
}

/// An NGC-style PyTorch image: torch in dist-packages, cuDNN from the
/// distro with its .so.N -> .so.N.M.K symlink, cuBLAS under /usr/local/cuda.
fn pytorch_image() -> PathBuf {
    let root = tempdir("image");
    let torch = root.join("usr/local/lib/python3.12/dist-packages/torch/lib");
    fs::create_dir_all(&torch).unwrap();
    // sm_75, sm_80, sm_90a SASS and compute_90 PTX (ISA 9.5).
    fs::copy(fixture("multi-arch.so"), torch.join("libtorch_cuda.so")).unwrap();
    fs::copy(fixture("no-device-code.so"), torch.join("libtorch_cpu.so")).unwrap();
    let distro = root.join("usr/lib/x86_64-linux-gnu");
    fs::create_dir_all(&distro).unwrap();
    // sm_86 only.
    fs::copy(
        fixture("sass-only.so"),
        distro.join("libcudnn_engines_precompiled.so.9.1.0"),
    )
    .unwrap();
    symlink(
        "libcudnn_engines_precompiled.so.9.1.0",
        distro.join("libcudnn_engines_precompiled.so.9"),
    )
    .unwrap();
    let cuda = root.join("usr/local/cuda-12.9/targets/x86_64-linux/lib");
    fs::create_dir_all(&cuda).unwrap();
    symlink("cuda-12.9", root.join("usr/local/cuda")).unwrap();
    symlink(
        "targets/x86_64-linux/lib",
        root.join("usr/local/cuda-12.9/lib64"),
    )
    .unwrap();
    fs::copy(
        fixture("no-device-code.so"),
        cuda.join("libcublas.so.12.9.1.4"),
    )
    .unwrap();
    root
}

#[test]
fn judges_each_gpu_with_the_shipped_globs() {
    let root = pytorch_image();
    let cache = tempdir("cache-a");
    let gpus = [
        gpu(0, "Tesla T4", "7.5"),
        gpu(1, "NVIDIA A10", "8.6"),
        gpu(2, "NVIDIA H100 80GB HBM3", "9.0"),
        gpu(3, "NVIDIA B200", "10.0"),
        gpu(4, "Tesla P100-PCIE-16GB", "6.0"),
    ];
    let drv = Version::parse("12.8").unwrap();
    let f = kernel_image_findings(
        &root,
        &gpus,
        Some(&drv),
        &shipped(Enforcement::Refuse, &cache),
    );
    let text: Vec<String> = f
        .iter()
        .map(|f| format!("{:?} {} | {:?}", f.severity, f.message, f.fix))
        .collect();
    let text = text.join("\n");
    assert!(f.iter().all(|f| f.check == Check::KernelImage));
    let torch = "usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so";
    let cudnn_a = "usr/lib/x86_64-linux-gnu/libcudnn_engines_precompiled.so.9";
    let about = |lib: &str, gpu: &str| {
        f.iter()
            .filter(|x| x.message.contains(lib) && x.message.contains(gpu))
            .collect::<Vec<_>>()
    };
    // torch: T4, A10 (sm_80 runs on 8.6), H100 (sm_90a) run natively; B200
    // would JIT compute_90 but its PTX ISA 9.5 needs CUDA 13.5 > 12.8; P100
    // has nothing.
    assert!(about(torch, "GPU 0 ").is_empty(), "{text}");
    assert!(about(torch, "GPU 1 ").is_empty(), "{text}");
    assert!(about(torch, "GPU 2 ").is_empty(), "{text}");
    let b200 = about(torch, "GPU 3 ");
    assert_eq!(b200.len(), 1, "{text}");
    assert_eq!(b200[0].severity, Severity::Error);
    assert!(
        b200[0]
            .message
            .contains("PTX ISA 9.5, newer than the host driver (CUDA 12.8)"),
        "{text}"
    );
    assert!(
        b200[0].fix.as_deref().unwrap().contains("CUDA 13.5"),
        "{text}"
    );
    let p100 = about(torch, "GPU 4 ");
    assert_eq!(p100.len(), 1, "{text}");
    assert!(
        p100[0]
            .message
            .contains("sm_75, sm_80, sm_90a, compute_90 (PTX ISA 9.5)"),
        "{text}"
    );
    assert!(p100[0].fix.as_deref().unwrap().contains("12.9"), "{text}");
    assert!(
        p100[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("TORCH_CUDA_ARCH_LIST=\"6.0\""),
        "{text}"
    );
    // cuDNN (sm_86 only), found once through either name: runs on A10 only.
    let cudnn: Vec<_> = f
        .iter()
        .filter(|x| x.message.contains("libcudnn_engines_precompiled"))
        .collect();
    assert_eq!(cudnn.len(), 4, "{text}");
    assert!(
        about(cudnn_a, "GPU 1 ").is_empty() && cudnn.iter().all(|x| !x.message.contains("GPU 1 ")),
        "{text}"
    );
    // Libraries without device code say nothing.
    assert!(
        !text.contains("libcublas") && !text.contains("libtorch_cpu"),
        "{text}"
    );
    // A newer driver turns B200 into a JIT warning.
    let drv = Version::parse("13.5").unwrap();
    let f = kernel_image_findings(
        &root,
        &gpus[3..4],
        Some(&drv),
        &shipped(Enforcement::Refuse, &cache),
    );
    let t = f
        .iter()
        .find(|x| x.message.contains(torch))
        .expect("torch finding");
    assert_eq!(t.severity, Severity::Warning);
    assert!(
        t.message.contains("JIT-compile its PTX compute_90"),
        "{}",
        t.message
    );
    // warn severity: no errors; off: nothing; no GPUs: nothing.
    let f = kernel_image_findings(&root, &gpus, None, &shipped(Enforcement::Warn, &cache));
    assert!(!f.is_empty() && f.iter().all(|x| x.severity == Severity::Warning));
    assert!(
        kernel_image_findings(&root, &gpus, None, &shipped(Enforcement::Off, &cache)).is_empty()
    );
    assert!(
        kernel_image_findings(&root, &[], None, &shipped(Enforcement::Refuse, &cache)).is_empty()
    );
    fs::remove_dir_all(&root).unwrap();
    fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn second_start_reads_the_cache_not_the_library() {
    let root = pytorch_image();
    let cache = tempdir("cache-b");
    let gpus = [gpu(0, "Tesla P100-PCIE-16GB", "6.0")];
    let cfg = shipped(Enforcement::Refuse, &cache);
    let first = kernel_image_findings(&root, &gpus, None, &cfg);
    assert!(
        first.iter().any(|f| f.severity == Severity::Error),
        "{first:?}"
    );
    let entries = fs::read_dir(&cache).unwrap().count();
    assert_eq!(
        entries, 3,
        "one cache entry per distinct library (torch, cuDNN, cuBLAS)"
    );

    // Overwrite the library in place with garbage of the same size and put
    // its mtime back: same (dev, ino, size, mtime). A parse would now fail;
    // the cache answers as before, so nothing was parsed.
    let torch = root.join("usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so");
    let meta = fs::metadata(&torch).unwrap();
    let mtime = meta.modified().unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new().write(true).open(&torch).unwrap();
        f.write_all_at(&vec![0xAB; meta.len() as usize], 0).unwrap();
        f.set_modified(mtime).unwrap();
    }
    let second = kernel_image_findings(&root, &gpus, None, &cfg);
    assert_eq!(first, second);

    // Without the cache the garbage is read: an unreadable-library warning.
    let no_cache = KernelImageConfig {
        cache_dir: String::new(),
        ..cfg.clone()
    };
    let third = kernel_image_findings(&root, &gpus, None, &no_cache);
    assert!(
        third.iter().any(|f| f.message.contains("cannot read the GPU code in usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so")),
        "{third:?}"
    );

    // A corrupt cache entry is ignored and rebuilt from the file.
    for e in fs::read_dir(&cache).unwrap() {
        fs::write(e.unwrap().path(), b"\0\0garbage").unwrap();
    }
    let fourth = kernel_image_findings(&root, &gpus, None, &cfg);
    assert_eq!(fourth, third);

    // A cache dir that cannot be created: scan without caching.
    let blocker = cache.join("file");
    fs::write(&blocker, b"x").unwrap();
    let bad = KernelImageConfig {
        cache_dir: blocker.join("sub").to_str().unwrap().into(),
        ..cfg
    };
    assert_eq!(kernel_image_findings(&root, &gpus, None, &bad), third);
    fs::remove_dir_all(&root).unwrap();
    fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn shipped_globs_cover_the_frameworks() {
    // One library per shipped location; each must be found (a finding on a
    // GPU none of them supports proves it was scanned).
    let layouts = [
        "opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
        "usr/lib/python3/dist-packages/tensorflow/libtensorflow_cc.so.2",
        "usr/local/lib/python3.10/dist-packages/tensorflow/python/_pywrap_tensorflow_internal.so",
        "usr/local/lib/python3.12/site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so",
        "usr/local/lib/python3.12/site-packages/jax_cuda12_plugin/_cuda_linalg.so",
        "opt/conda/envs/rapids/lib/python3.11/site-packages/cupy/cuda/thrust.cpython-311-x86_64-linux-gnu.so",
        "usr/local/lib/python3.12/dist-packages/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9",
        "usr/local/lib/python3.12/dist-packages/nvidia/cu13/lib/libcublasLt.so.13",
        "usr/lib/aarch64-linux-gnu/libcublasLt.so.12.4.5.8",
        "usr/local/cuda-13.0/lib64/libcudnn_adv.so.9.10.0",
        "opt/conda/lib/libcublas.so.11",
    ];
    let root = tempdir("layouts");
    for (i, l) in layouts.iter().enumerate() {
        let p = root.join(l);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        // Distinct inodes with the same content.
        fs::copy(
            fixture(if i % 2 == 0 {
                "sass-only.so"
            } else {
                "sm90a.so"
            }),
            &p,
        )
        .unwrap();
    }
    let cfg = KernelImageConfig {
        cache_dir: String::new(),
        ..Config::default().kernel_image
    };
    let f = kernel_image_findings(&root, &[gpu(0, "Tesla T4", "7.5")], None, &cfg);
    for l in layouts {
        assert!(
            f.iter().any(|x| x.message.starts_with(l)),
            "{l} not found by the shipped globs: {f:#?}"
        );
    }
    assert_eq!(f.len(), layouts.len());
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn config_rejects_bad_globs_naming_the_key() {
    for (glob, what) in [
        ("usr/{lib", "unbalanced"),
        ("usr/../etc/*.so", "`..`"),
        ("usr/lib[abc.so", "unterminated"),
        ("/", "empty"),
    ] {
        let text = format!("[kernel_image]\nlibraries = [\"usr/lib/*.so\", \"{glob}\"]\n");
        let e = gpu_guard::config::parse(&text).unwrap_err();
        assert!(
            e.contains("kernel_image.libraries[1]") && e.contains(what),
            "{glob}: {e}"
        );
    }
    let ok = gpu_guard::config::parse("[kernel_image]\nmax_entries = 10\n").unwrap();
    assert_eq!(ok.kernel_image.max_entries, 10);
    assert!(gpu_guard::config::parse("[kernel_image]\nmax_entrys = 10\n").is_err());
}
