//! AMD decisions through the binary: `check --bundle` of a rootfs holding a
//! real HIP library (tests/data/hip/hipcc-multi.so: gfx1030,
//! gfx906:sramecc+:xnack-, gfx90a:xnack+) against AMD host facts that
//! `gpu-guard host --json --host-root` reads from the KFD trees
//! (tests/data/hosts/amd/): LLVM's code-object rule per visible GPU with the
//! container's HSA_XNACK and HSA_OVERRIDE_GFX_VERSION, AMD_VISIBLE_DEVICES,
//! and an image built for one vendor given the other's GPUs, both ways.

use crate::support::TempDir;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn config(dir: &TempDir) -> PathBuf {
    let p = dir.join("config.toml");
    std::fs::write(
        &p,
        "[host]\ncache_file = \"\"\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n\
         [kernel_image]\ncache_dir = \"\"\nseverity = \"enforce\"\n[libraries]\ncache_dir = \"\"\n\
         [log]\nsyslog = false\n",
    )
    .unwrap();
    p
}

/// The host facts of a KFD tree, as `gpu-guard host --json` writes them.
fn facts(dir: &TempDir, tree: &str) -> PathBuf {
    let o = Command::new(*BIN)
        .arg("--config")
        .arg(config(dir))
        .args(["host", "--json", "--host-root"])
        .arg(data("hosts/amd").join(tree))
        .output()
        .unwrap();
    assert!(
        !o.stdout.is_empty(),
        "{tree}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let p = dir.join(format!("{tree}.json"));
    std::fs::write(&p, &o.stdout).unwrap();
    p
}

/// A bundle whose rootfs has `lib` (a fixture, or none) as ROCm's
/// librocsparse; `devices` in the spec, `env` in its process.
fn bundle(dir: &TempDir, lib: Option<&str>, devices: &[(&str, u32, u32)], env: &[&str]) -> PathBuf {
    let b = dir.join("bundle");
    let rootfs = b.join("rootfs");
    let libdir = rootfs.join("opt/rocm/lib");
    std::fs::create_dir_all(&libdir).unwrap();
    if let Some(lib) = lib {
        std::fs::copy(data("hip").join(lib), libdir.join("librocsparse.so.1")).unwrap();
    }
    let devs: Vec<Value> = devices
        .iter()
        .map(|(p, major, minor)| json!({ "path": p, "type": "c", "major": major, "minor": minor }))
        .collect();
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": { "args": ["true"], "cwd": "/", "env": env },
        "root": { "path": rootfs },
        "linux": { "devices": devs }
    });
    std::fs::write(b.join("config.json"), spec.to_string()).unwrap();
    b
}

const KFD: [(&str, u32, u32); 2] = [("/dev/kfd", 235, 0), ("/dev/dri/renderD128", 226, 128)];

/// `--device=/dev/kfd --device=/dev/dri` on the MI300X host: its two GPUs'
/// render nodes (KFD `drm_render_minor` 128 and 136) and their card nodes.
const MI300X_ALL: [(&str, u32, u32); 5] = [
    ("/dev/kfd", 235, 0),
    ("/dev/dri/card0", 226, 0),
    ("/dev/dri/renderD128", 226, 128),
    ("/dev/dri/card1", 226, 1),
    ("/dev/dri/renderD136", 226, 136),
];

fn check(dir: &TempDir, b: &Path, host: &Path, extra: &[&str]) -> (i32, Value) {
    let o = Command::new(*BIN)
        .arg("--config")
        .arg(config(dir))
        .args(["check", "--json", "--bundle"])
        .arg(b)
        .arg("--host")
        .arg(host)
        .args(extra)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code().unwrap_or(-1), v)
}

fn of_check<'a>(d: &'a Value, check: &str) -> Vec<&'a Value> {
    d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect()
}

#[test]
fn code_objects_are_judged_per_visible_gpu_with_the_container_env() {
    let dir = TempDir::new("amd-decide");
    let mi300x = facts(&dir, "mi300x");
    let b = bundle(&dir, Some("hipcc-multi.so"), &MI300X_ALL, &[]);
    let (_, d) = check(&dir, &b, &mi300x, &[]);
    assert_eq!(d["verdict"], "refuse", "{d}");
    let f = of_check(&d, "kernel-image");
    assert_eq!(f.len(), 1, "one finding for GPUs of one target: {d}");
    let m = f[0]["message"].as_str().unwrap();
    for want in [
        "AMD GPU 0",
        "gfx942:sramecc+:xnack-",
        "librocsparse.so.1",
        "gfx1030, gfx906:sramecc+:xnack-, gfx90a:xnack+",
        "AMD GPUs 1",
    ] {
        assert!(m.contains(want), "{want}: {m}");
    }
    assert!(
        f[0]["fix"]
            .as_str()
            .unwrap()
            .contains("--offload-arch=gfx942"),
        "{d}"
    );

    let b = bundle(&dir, Some("hipcc-multi.so"), &KFD, &[]);
    // MI210: gfx90a, XNACK per process. The library's gfx90a is xnack+ only:
    // refused with the default (off), loadable with HSA_XNACK=1.
    let mi210 = facts(&dir, "mi210");
    let (_, d) = check(&dir, &b, &mi210, &[]);
    assert_eq!(d["verdict"], "refuse", "{d}");
    assert!(
        of_check(&d, "kernel-image")[0]["fix"]
            .as_str()
            .unwrap()
            .contains("HSA_XNACK=1"),
        "{d}"
    );
    let (code, d) = check(&dir, &b, &mi210, &["--env", "HSA_XNACK=1"]);
    assert_eq!((code, d["verdict"].as_str()), (0, Some("allow")), "{d}");
    assert!(of_check(&d, "kernel-image").is_empty(), "{d}");

    // Radeon gfx1100: no code; HSA_OVERRIDE_GFX_VERSION=10.3.0 makes the
    // runtime load gfx1030, and a failing override is named.
    let radeon = facts(&dir, "radeon-gfx1100");
    let (_, d) = check(&dir, &b, &radeon, &[]);
    assert_eq!(d["verdict"], "refuse", "{d}");
    let (_, d) = check(
        &dir,
        &b,
        &radeon,
        &["--env", "HSA_OVERRIDE_GFX_VERSION=10.3.0"],
    );
    assert_eq!(d["verdict"], "allow", "{d}");
    let (_, d) = check(
        &dir,
        &b,
        &radeon,
        &["--env", "HSA_OVERRIDE_GFX_VERSION=11.0.1"],
    );
    let m = of_check(&d, "kernel-image")[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        m.contains("gfx1101") && m.contains("HSA_OVERRIDE_GFX_VERSION") && m.contains("gfx1100"),
        "{m}"
    );
}

#[test]
fn amd_visible_devices_selects_gpus_and_unknown_ones_are_named() {
    let dir = TempDir::new("amd-visible");
    let mi300x = facts(&dir, "mi300x");
    let b = bundle(
        &dir,
        Some("hipcc-multi.so"),
        &KFD,
        &["AMD_VISIBLE_DEVICES=1"],
    );
    let (_, d) = check(&dir, &b, &mi300x, &[]);
    assert_eq!(d["visible_gpus"], json!([1]), "{d}");
    let m = of_check(&d, "kernel-image")[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(m.starts_with("AMD GPU 1 "), "{m}");
    let b = bundle(&dir, None, &KFD, &["AMD_VISIBLE_DEVICES=5"]);
    let (_, d) = check(&dir, &b, &mi300x, &[]);
    let dev = of_check(&d, "device");
    assert!(
        dev.iter()
            .any(|f| f["message"].as_str().unwrap().contains("AMD GPU 5")),
        "{d}"
    );
    assert_eq!(d["verdict"], "refuse", "{d}");
}

#[test]
fn an_image_for_the_other_vendor_is_a_vendor_error_both_ways() {
    let dir = TempDir::new("amd-vendor");
    // A CUDA image given AMD GPUs.
    let mi210 = facts(&dir, "mi210");
    let b = bundle(
        &dir,
        None,
        &KFD,
        &["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"],
    );
    let (code, d) = check(&dir, &b, &mi210, &[]);
    assert_eq!(code, 1, "{d}");
    let v = of_check(&d, "vendor");
    assert_eq!(v.len(), 1, "{d}");
    assert_eq!(v[0]["severity"], "error");
    let m = v[0]["message"].as_str().unwrap();
    assert!(
        m.contains("CUDA") && m.contains("AMD GPU 0") && m.contains("gfx90a"),
        "{m}"
    );
    // No "no NVIDIA driver" on an AMD host for an AMD container.
    assert!(of_check(&d, "host").is_empty(), "{d}");
    // A ROCm image (AMD code only) given NVIDIA GPUs.
    let b = bundle(
        &dir,
        Some("hipcc-multi.so"),
        &[("/dev/nvidiactl", 195, 255), ("/dev/nvidia0", 195, 0)],
        &["NVIDIA_VISIBLE_DEVICES=all"],
    );
    let (code, d) = check(&dir, &b, &data("hosts/a100.json"), &[]);
    assert_eq!(code, 1, "{d}");
    let v = of_check(&d, "vendor");
    assert_eq!(v.len(), 1, "{d}");
    let m = v[0]["message"].as_str().unwrap();
    assert!(
        m.contains("AMD GPUs only") && m.contains("librocsparse.so.1") && m.contains("A100"),
        "{m}"
    );
    // A container asking for AMD GPUs on an NVIDIA-only host.
    let b = bundle(&dir, None, &KFD, &[]);
    let (_, d) = check(&dir, &b, &data("hosts/a100.json"), &[]);
    assert!(
        of_check(&d, "device")
            .iter()
            .any(|f| f["message"].as_str().unwrap().contains("asks for AMD GPUs")),
        "{d}"
    );
    assert_eq!(d["verdict"], "refuse");
}

/// The messages of `d`'s findings of `check`, joined.
fn messages(d: &Value, check: &str) -> String {
    of_check(d, check)
        .iter()
        .map(|f| f["message"].as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn render_nodes_select_the_gpus_by_device_number() {
    let dir = TempDir::new("amd-render");
    let mi300x = facts(&dir, "mi300x");
    // `--device=/dev/kfd --device=/dev/dri/renderD136`, the node renamed:
    // the GPU whose KFD drm_render_minor is 136, AMD GPU 1, only.
    let one = [("/dev/kfd", 235, 0), ("/dev/gpu-b", 226, 136)];
    let b = bundle(&dir, Some("hipcc-multi.so"), &one, &[]);
    let (code, d) = check(&dir, &b, &mi300x, &[]);
    assert_eq!((code, &d["visible_gpus"]), (1, &json!([1])), "{d}");
    let m = messages(&d, "kernel-image");
    assert!(m.starts_with("AMD GPU 1 ") && m.contains("gfx942"), "{m}");
    assert!(!m.contains("GPU 0") && !m.contains("GPUs 0"), "{m}");
    // `/dev/kfd` alone, and every render node (`--device=/dev/dri`): both.
    for nodes in [&one[..1], &MI300X_ALL[..]] {
        let b = bundle(&dir, Some("hipcc-multi.so"), nodes, &[]);
        let (_, d) = check(&dir, &b, &mi300x, &[]);
        assert_eq!(d["visible_gpus"], json!([0, 1]), "{nodes:?}: {d}");
        assert!(of_check(&d, "device").is_empty(), "{d}");
    }
    // A CUDA image on the render node of GPU 0: the vendor finding names
    // that GPU only (a fresh rootfs: no HIP library).
    let dir = TempDir::new("amd-render-cuda");
    let b = bundle(
        &dir,
        None,
        &[("/dev/kfd", 235, 0), ("/dev/dri/renderD128", 226, 128)],
        &["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"],
    );
    let (_, d) = check(&dir, &b, &mi300x, &[]);
    let m = messages(&d, "vendor");
    assert!(m.contains("AMD GPU 0") && !m.contains("GPU 1"), "{m}");
}

#[test]
fn a_render_node_of_no_amd_gpu_is_named() {
    let dir = TempDir::new("amd-render-unknown");
    let mi300x = facts(&dir, "mi300x");
    // /dev/kfd and only a render node no AMD GPU has: ROCm sees no GPU.
    let b = bundle(
        &dir,
        None,
        &[("/dev/kfd", 235, 0), ("/dev/dri/renderD131", 226, 131)],
        &[],
    );
    let (code, d) = check(&dir, &b, &mi300x, &[]);
    assert_eq!((code, d["verdict"].as_str()), (1, Some("refuse")), "{d}");
    assert_eq!(d["visible_gpus"], json!([]), "{d}");
    let f = of_check(&d, "device");
    assert_eq!(f.len(), 1, "{d}");
    assert_eq!(f[0]["severity"], "error");
    let m = f[0]["message"].as_str().unwrap();
    for want in [
        "/dev/dri/renderD131 (c 226:131)",
        "render node of no AMD GPU",
        "finds no GPU",
        "/dev/dri/renderD128 (AMD GPU 0), /dev/dri/renderD136 (AMD GPU 1)",
    ] {
        assert!(m.contains(want), "{want}: {m}");
    }
    assert!(
        f[0]["fix"].as_str().unwrap().contains("--device=/dev/dri"),
        "{d}"
    );
    // Beside an AMD GPU's node (another vendor's GPU in `--device=/dev/dri`):
    // a warning, and the container gets that GPU.
    let b = bundle(
        &dir,
        None,
        &[
            ("/dev/kfd", 235, 0),
            ("/dev/dri/renderD129", 226, 129),
            ("/dev/dri/renderD136", 226, 136),
        ],
        &[],
    );
    let (_, d) = check(&dir, &b, &mi300x, &[]);
    assert_eq!(d["visible_gpus"], json!([1]), "{d}");
    let f = of_check(&d, "device");
    assert_eq!(f.len(), 1, "{d}");
    assert_eq!(f[0]["severity"], "warning", "{d}");
    assert!(
        f[0]["message"].as_str().unwrap().contains("renderD129"),
        "{d}"
    );
    // A node path with a control character is escaped.
    let b = bundle(
        &dir,
        None,
        &[("/dev/kfd", 235, 0), ("/dev/r\x1b[2J", 226, 131)],
        &[],
    );
    let (_, d) = check(&dir, &b, &mi300x, &[]);
    let m = messages(&d, "device");
    assert!(m.contains("/dev/r") && !m.contains('\x1b'), "{m}");
}

#[test]
fn render_nodes_without_kfd_are_no_amd_request() {
    let dir = TempDir::new("amd-render-no-kfd");
    let a100 = data("hosts/a100.json");
    // A media server given an iGPU's render node on an NVIDIA host: not a
    // GPU container, nothing refused.
    let b = bundle(&dir, None, &[("/dev/dri/renderD128", 226, 128)], &[]);
    let (code, d) = check(&dir, &b, &a100, &[]);
    assert_eq!((code, d["verdict"].as_str()), (0, Some("skip")), "{d}");
    // NVIDIA's CDI edits (a GPU and nvidia-drm's render node): judged as
    // NVIDIA's alone, no AMD finding.
    let b = bundle(
        &dir,
        None,
        &[
            ("/dev/nvidiactl", 195, 255),
            ("/dev/nvidia0", 195, 0),
            ("/dev/dri/renderD128", 226, 128),
        ],
        &["NVIDIA_VISIBLE_DEVICES=all"],
    );
    let (code, d) = check(&dir, &b, &a100, &[]);
    assert_eq!((code, d["verdict"].as_str()), (0, Some("allow")), "{d}");
    assert!(
        of_check(&d, "device").is_empty() && of_check(&d, "vendor").is_empty(),
        "{d}"
    );
    // On an AMD host, a render node alone opens no ROCm GPU either.
    let mi300x = facts(&dir, "mi300x");
    let b = bundle(
        &dir,
        Some("hipcc-multi.so"),
        &[("/dev/dri/renderD128", 226, 128)],
        &[],
    );
    let (_, d) = check(&dir, &b, &mi300x, &[]);
    assert_eq!(d["verdict"], "skip", "{d}");
}

#[test]
fn amd_gpu_containers_get_the_policy_but_not_cudas_env_tuning() {
    let dir = TempDir::new("amd-tuning");
    let mi210 = facts(&dir, "mi210");
    let caps = ["CAP_SYS_ADMIN", "CAP_CHOWN"];
    let with_caps = |b: &Path| {
        let p = b.join("config.json");
        let mut spec: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        spec["process"]["capabilities"] =
            json!({ "bounding": caps, "effective": caps, "permitted": caps });
        std::fs::write(&p, spec.to_string()).unwrap();
    };
    let b = bundle(&dir, None, &KFD, &[]);
    with_caps(&b);
    let (code, d) = check(&dir, &b, &mi210, &[]);
    assert_eq!((code, d["verdict"].as_str()), (0, Some("allow")), "{d}");
    // The host policy holds for an AMD GPU container as for NVIDIA's.
    assert_eq!(
        d["edits"]["capabilities_dropped"],
        json!(["CAP_SYS_ADMIN"]),
        "{d}"
    );
    assert_eq!(d["edits"]["no_new_privileges"], true, "{d}");
    // CUDA's env tuning does not reach it: TensorFlow's ROCm build aborts
    // on TF_GPU_ALLOCATOR=cuda_malloc_async.
    let env = d["edits"]["env"].as_object().cloned().unwrap_or_default();
    assert!(env.is_empty(), "{d}");
    // An NVIDIA GPU container on an NVIDIA host still gets it.
    let b = bundle(
        &dir,
        None,
        &[("/dev/nvidiactl", 195, 255), ("/dev/nvidia0", 195, 0)],
        &["NVIDIA_VISIBLE_DEVICES=all"],
    );
    let (_, d) = check(&dir, &b, &data("hosts/a100.json"), &[]);
    assert_eq!(
        d["edits"]["env"]["TF_GPU_ALLOCATOR"], "cuda_malloc_async",
        "{d}"
    );
}
