//! `gpu-guard check --image` end to end, on images built here offline:
//! OCI layout and docker-archive, gzip/zstd/plain layers, a library deleted
//! by a whiteout and one replaced by a later layer, the fatbin fixtures as
//! libraries, an official CUDA image's env; verdicts on tests/data/hosts;
//! hostile images exit 2 with one line, write nothing and never hang.

use crate::image_support::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpu-guard"))
}

fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(p)
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(data("fatbin").join(name)).unwrap()
}

/// A config judging kernel images strictly, without a cache.
fn config(dir: &Path) -> PathBuf {
    let p = dir.join("config.toml");
    std::fs::write(
        &p,
        "mode = \"enforce\"\n[kernel_image]\nseverity = \"enforce\"\ncache_dir = \"\"\n",
    )
    .unwrap();
    p
}

/// Runs gpu-guard with a 60 s limit (hostile inputs must not hang).
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin());
    c.args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("gpu-guard {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const LIB: &str = "usr/lib/x86_64-linux-gnu";

/// Layer 0 (gzip): libcublas = sm90a.so (nothing for sm_80), libcudnn =
/// sm100f.so (nothing for sm_80 or sm_90). Layer 1 (zstd): libcublas
/// replaced by multi-arch.so (sm_75 sm_80 sm_90a compute_90), libcudnn
/// deleted by a whiteout. So an A100 is allowed only if both took effect.
fn layers() -> Vec<Vec<u8>> {
    let (a, b, c) = (
        fixture("sm90a.so"),
        fixture("sm100f.so"),
        fixture("multi-arch.so"),
    );
    let l0 = tar_of(&[
        E::Dir("usr/"),
        E::Dir("usr/lib/"),
        E::Dir(&format!("{LIB}/")),
        E::File(&format!("{LIB}/libcublas.so.12.4.5"), &a),
        E::Sym(&format!("{LIB}/libcublas.so.12"), "libcublas.so.12.4.5"),
        E::File(&format!("{LIB}/libcudnn.so.9.1.0"), &b),
    ]);
    let l1 = tar_of(&[
        E::File(&format!("{LIB}/libcublas.so.12.4.5"), &c),
        E::File(&format!("{LIB}/.wh.libcudnn.so.9.1.0"), b""),
    ]);
    vec![gz(&l0), zst(&l1)]
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn kernel_findings(d: &serde_json::Value) -> Vec<String> {
    d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "kernel-image")
        .map(|f| format!("{} {}", f["severity"], f["message"]))
        .collect()
}

fn check(image: &Path, cfg: &Path, extra: &[&str]) -> Output {
    let mut a = vec![
        "--config",
        cfg.to_str().unwrap(),
        "check",
        "--image",
        image.to_str().unwrap(),
    ];
    a.extend_from_slice(extra);
    run(&a, &[])
}

#[test]
fn whiteout_and_replacement_decide_the_verdict() {
    let env = image_env("cuda-12.4.1-base-ubuntu2204.env");
    let oci = oci_layout("wr-oci", &env, &layers());
    let dock = docker_archive("wr-docker", &env, &layers(), |_| {});
    let cfg = config(&oci);
    for img in [&oci, &dock] {
        // H100 (CUDA 12.4, sm_90): allowed; the replaced library has sm_90a.
        let h100 = data("hosts/h100x8.json");
        let o = check(img, &cfg, &["--host", h100.to_str().unwrap(), "--json"]);
        let d = json(&o);
        assert_eq!(o.status.code(), Some(0), "{d:#}");
        assert_eq!(d["verdict"], "allow");
        assert!(
            kernel_findings(&d)
                .iter()
                .all(|f| !f.starts_with("\"error\"")),
            "{d:#}"
        );
        // A100 (sm_80; CUDA 12.2, but driver 535 on a tesla matches an
        // alternative of NVIDIA_REQUIRE_CUDA): allowed, with no kernel-image
        // finding: the whiteout removed the sm100f library and the
        // replacement has sm_80.
        let a100 = data("hosts/a100.json");
        let o = check(img, &cfg, &["--host", a100.to_str().unwrap(), "--json"]);
        let d = json(&o);
        assert_eq!(o.status.code(), Some(0), "{d:#}");
        assert!(kernel_findings(&d).is_empty(), "{d:#}");
        // A GeForce on driver 545 (CUDA 12.3): refused by the requirement
        // alone.
        let gf = data("hosts/geforce-545.json");
        let o = check(img, &cfg, &["--host", gf.to_str().unwrap(), "--json"]);
        let d = json(&o);
        assert_eq!(o.status.code(), Some(1), "{d:#}");
        let errs: Vec<&serde_json::Value> = d["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["severity"] == "error")
            .collect();
        assert!(!errs.is_empty());
        assert!(errs.iter().all(|f| f["check"] == "requirement"), "{d:#}");
        // The requirement waived: allowed there too (sm_80 SASS runs on sm_89).
        let o = check(
            img,
            &cfg,
            &[
                "--host",
                gf.to_str().unwrap(),
                "--json",
                "--env",
                "NVIDIA_DISABLE_REQUIRE=1",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{:#}", json(&o));
    }
    // Without the second layer: the early libcublas (sm_90a only) and the
    // sm100f libcudnn have nothing for an A100 (kernel image, enforce).
    let early = oci_layout("wr-early", &env, &layers()[..1]);
    let a100 = data("hosts/a100.json");
    let o = check(
        &early,
        &cfg,
        &[
            "--host",
            a100.to_str().unwrap(),
            "--json",
            "--env",
            "NVIDIA_DISABLE_REQUIRE=1",
        ],
    );
    let d = json(&o);
    assert_eq!(o.status.code(), Some(1), "{d:#}");
    let k = kernel_findings(&d);
    assert!(
        k.iter()
            .any(|f| f.starts_with("\"error\"") && f.contains("libcudnn")),
        "{k:?}"
    );
    assert!(
        k.iter()
            .any(|f| f.starts_with("\"error\"") && f.contains("libcublas")),
        "{k:?}"
    );
}

#[test]
fn env_and_gpu_request() {
    let layer = vec![gz(&tar_of(&[E::File("etc/hostname", b"x")]))];
    let a100 = data("hosts/a100.json");
    let a100 = a100.to_str().unwrap();
    // No NVIDIA_VISIBLE_DEVICES and not a legacy image: --gpus all.
    let img = oci_layout("env-plain", &["PATH=/bin".to_string()], &layer);
    let cfg = config(&img);
    let d = json(&check(&img, &cfg, &["--host", a100, "--json"]));
    assert_eq!(d["gpu_container"], true, "{d:#}");
    // The image says void: not a GPU container.
    let img = oci_layout(
        "env-void",
        &["NVIDIA_VISIBLE_DEVICES=void".to_string()],
        &layer,
    );
    let o = check(&img, &cfg, &["--host", a100, "--json"]);
    assert_eq!(json(&o)["verdict"], "skip");
    // --env overrides the image.
    let o = check(
        &img,
        &cfg,
        &[
            "--host",
            a100,
            "--json",
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
        ],
    );
    assert_eq!(json(&o)["gpu_container"], true);
    // A legacy image (CUDA 8 era): all GPUs, its own rule.
    let img = oci_layout("env-legacy", &image_env("cuda-8.0-legacy.env"), &layer);
    let d = json(&check(&img, &cfg, &["--host", a100, "--json"]));
    assert_eq!(d["gpu_container"], true, "{d:#}");
}

#[test]
fn several_hosts_read_the_image_once() {
    let env = image_env("cuda-12.4.1-base-ubuntu2204.env");
    let img = oci_layout("fleet", &env, &layers());
    let cfg = config(&img);
    let (a, h) = (data("hosts/geforce-545.json"), data("hosts/h100x8.json"));
    let o = check(
        &img,
        &cfg,
        &[
            "--host",
            a.to_str().unwrap(),
            "--host",
            h.to_str().unwrap(),
            "--json",
        ],
    );
    let v = json(&o);
    assert_eq!(o.status.code(), Some(1), "{v:#}");
    let i = &v["image"];
    assert_eq!(i["format"], "oci-layout");
    assert_eq!(i["reference"], "test:1");
    assert!(i["digest"].as_str().unwrap().starts_with("sha256:"));
    assert!(i["config_digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(i["platform"], "linux/amd64");
    assert_eq!(
        i["labels"]["org.opencontainers.image.title"],
        "gpu-guard test"
    );
    assert_eq!(i["env_used"]["CUDA_VERSION"], "12.4.1");
    assert_eq!(i["env"]["CUDA_VERSION"], "12.4.1");
    assert_eq!(
        i["libraries"],
        serde_json::json!([format!("{LIB}/libcublas.so.12")])
    );
    assert_eq!(v["results"][0]["decision"]["verdict"], "refuse");
    assert_eq!(v["results"][1]["decision"]["verdict"], "allow");
    // The table for people names the image.
    let o = check(
        &img,
        &cfg,
        &["--host", a.to_str().unwrap(), "--host", h.to_str().unwrap()],
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("test:1"));
}

/// Exit 2, one line on stderr, nothing on stdout.
fn refused_input(img: &Path, env: &[(&str, &str)], want: &str) {
    let a100 = data("hosts/a100.json");
    let cfg = config(img.parent().unwrap());
    let o = run(
        &[
            "--config",
            cfg.to_str().unwrap(),
            "check",
            "--image",
            img.to_str().unwrap(),
            "--host",
            a100.to_str().unwrap(),
            "--json",
        ],
        env,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{}: {err}", img.display());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(want), "{err} lacks {want}");
    assert!(o.stdout.is_empty());
}

#[test]
fn hostile_images_exit_2() {
    let env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_string()];
    // ../ in a layer.
    let evil = gz(&tar_of(&[E::File("../../etc/evil", b"x")]));
    let img = oci_layout("h-dotdot", &env, &[evil]);
    refused_input(&img, &[], "escapes the image root");
    assert!(!Path::new("/etc/evil").exists());
    // A layer blob that is a symlink.
    let img = oci_layout("h-symlink", &env, &layers());
    let idx: serde_json::Value =
        serde_json::from_slice(&std::fs::read(img.join("index.json")).unwrap()).unwrap();
    let m = img
        .join("blobs/sha256")
        .join(&idx["manifests"][0]["digest"].as_str().unwrap()[7..]);
    let man: serde_json::Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
    let l0 = img
        .join("blobs/sha256")
        .join(&man["layers"][0]["digest"].as_str().unwrap()[7..]);
    std::fs::remove_file(&l0).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &l0).unwrap();
    refused_input(&img, &[], "not a regular file");
    // A gzip bomb: 64 MiB of zeros against a 16 MiB budget.
    let bomb = gz(&tar_of(&[E::File(
        "usr/lib/x86_64-linux-gnu/libcublas.so.12",
        &vec![0u8; 64 << 20],
    )]));
    let img = oci_layout("h-bomb", &env, &[bomb]);
    refused_input(&img, &[("GPU_GUARD_IMAGE_MAX_BYTES", "16777216")], "budget");
    // A manifest pointing outside the archive.
    let img = docker_archive("h-outside", &env, &layers(), |m| {
        m[0]["Config"] = "../../etc/passwd".into()
    });
    refused_input(&img, &[], "outside the image");
    // A layer whose digest does not match.
    let img = oci_layout("h-digest", &env, &layers());
    let blobs: Vec<PathBuf> = std::fs::read_dir(img.join("blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let l = blobs
        .iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut b = std::fs::read(l).unwrap();
    let n = b.len();
    b[n - 9] ^= 0x55; // the gzip trailer's CRC, or zstd data
    std::fs::write(l, &b).unwrap();
    refused_input(&img, &[], "layer");
    // A truncated layer.
    let img = oci_layout("h-trunc", &env, &layers());
    let blobs: Vec<PathBuf> = std::fs::read_dir(img.join("blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let l = blobs
        .iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let b = std::fs::read(l).unwrap();
    std::fs::write(l, &b[..b.len() / 2]).unwrap();
    refused_input(&img, &[], "truncated");
    // Not an image at all, and a bad platform.
    let junk = tmp("h-junk").join("junk");
    std::fs::write(&junk, b"junk").unwrap();
    refused_input(&junk, &[], "not an OCI image layout");
    let img = oci_layout("h-plat", &env, &layers());
    let cfg = config(&img);
    let o = check(&img, &cfg, &["--platform", "linux/arm64"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("linux/arm64"));
}
