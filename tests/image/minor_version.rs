//! CUDA minor-version compatibility (`requirements.minor_version_compatibility`)
//! end to end: `gpu-guard check --bundle` on a rootfs holding the nvcc-built
//! fatbin fixtures (tests/data/fatbin) where the shipped kernel-image globs
//! find them, on a CUDA 12.2 host (a10-535: driver 535.104.05, A10 sm_86)
//! with an image asking for cuda>=12.4.

use crate::compat_support::*;
use std::fs;
use std::path::{Path, PathBuf};

fn env() -> Vec<String> {
    [
        "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        "CUDA_VERSION=12.4.1",
        "NVIDIA_VISIBLE_DEVICES=all",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A rootfs with the fixture (if any) as a distro cuDNN library.
fn rootfs_with(base: &Path, fixture: Option<&str>) -> PathBuf {
    let rootfs = base.join("rootfs");
    let lib = rootfs.join("usr/lib/x86_64-linux-gnu");
    fs::create_dir_all(&lib).unwrap();
    if let Some(f) = fixture {
        fs::copy(
            data(&format!("fatbin/{f}")),
            lib.join("libcudnn_engines_precompiled.so.9"),
        )
        .unwrap();
    }
    rootfs
}

fn case(name: &str, fixture: Option<&str>, profile: &str, mode: &str) -> (i32, serde_json::Value) {
    let base = tmp(name);
    let rootfs = rootfs_with(&base, fixture);
    let b = bundle(&base, &rootfs, &env(), None);
    check_json(
        &base,
        &b,
        profile,
        &format!("[requirements]\nminor_version_compatibility = \"{mode}\"\n"),
    )
}

fn requirement_error(d: &serde_json::Value) -> String {
    let r = findings(d, "requirement");
    assert_eq!(r.len(), 1, "{d}");
    assert_eq!(r[0]["severity"], "error");
    r[0].to_string()
}

#[test]
fn sass_only_for_the_gpu_is_admitted_under_allow() {
    let (code, d) = case("mv-sass", Some("sass-only.so"), "a10-535", "allow");
    assert_eq!(code, 0, "{d}");
    assert!(findings(&d, "requirement").is_empty(), "{d}");
    let c = findings(&d, "compat");
    assert_eq!(c.len(), 1, "{d}");
    assert_eq!(c[0]["severity"], "warning");
    let m = c[0]["message"].as_str().unwrap();
    for part in [
        "cuda>=12.4 fails only on the minor version",
        "CUDA minor-version compatibility",
        "525.60.13",
        "all 1 scanned CUDA libraries carry machine code (SASS)",
        "cudaErrorCallRequiresNewerDriver",
        "PTX from the newer toolkit cannot be JIT-compiled",
    ] {
        assert!(m.contains(part), "missing {part:?}: {m}");
    }
    // multi-arch: sm_80 SASS runs on sm_86.
    let (code, d) = case("mv-multi", Some("multi-arch.so"), "a10-535", "allow");
    assert_eq!(code, 0, "{d}");
}

#[test]
fn ptx_only_newer_than_the_driver_is_refused() {
    let (code, d) = case("mv-ptx", Some("ptx-only.so"), "a10-535", "allow");
    assert_eq!(code, 1, "{d}");
    let e = requirement_error(&d);
    assert!(
        e.contains("minor-version compatibility does not admit it"),
        "{e}"
    );
    assert!(
        e.contains("is PTX compute_80 (ISA 9.5), newer than this driver"),
        "{e}"
    );
}

#[test]
fn no_libraries_is_refused() {
    let (code, d) = case("mv-none", None, "a10-535", "allow");
    assert_eq!(code, 1, "{d}");
    let e = requirement_error(&d);
    assert!(e.contains("no libraries found"), "{e}");
}

#[test]
fn a_major_gap_is_refused() {
    let (code, d) = case("mv-major", Some("sass-only.so"), "tesla-470", "allow");
    assert_eq!(code, 1, "{d}");
    let e = requirement_error(&d);
    assert!(e.contains("a major-version gap"), "{e}");
    assert!(e.contains("CUDA 12.4"), "{e}");
}

#[test]
fn warn_mode_refuses_and_says_what_allow_would_do() {
    let (code, d) = case("mv-warn", Some("sass-only.so"), "a10-535", "warn");
    assert_eq!(code, 1, "{d}");
    requirement_error(&d);
    let c = findings(&d, "compat");
    assert_eq!(c.len(), 1, "{d}");
    assert_eq!(c[0]["severity"], "info");
    assert!(
        c[0]["message"]
            .as_str()
            .unwrap()
            .contains("would admit this image"),
        "{d}"
    );
    let (code, d) = case("mv-warn-ptx", Some("ptx-only.so"), "a10-535", "warn");
    assert_eq!(code, 1, "{d}");
    let c = findings(&d, "compat");
    assert!(
        c[0]["message"]
            .as_str()
            .unwrap()
            .contains("would not admit this image"),
        "{d}"
    );
    // Off: NVIDIA's behaviour, no compat finding.
    let (code, d) = case("mv-off", Some("sass-only.so"), "a10-535", "off");
    assert_eq!(code, 1, "{d}");
    assert!(findings(&d, "compat").is_empty(), "{d}");
}
