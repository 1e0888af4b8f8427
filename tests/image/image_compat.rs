//! Forward compatibility judged from an image (`check --image`), as from a
//! rootfs (tests/image/compat_check.rs): the image's `/usr/local/cuda` symlink is
//! resolved inside the image, the compat libcuda's note is read from the
//! layer stream, and each host's GPUs are judged by NVIDIA's rule.

use crate::compat_support;

use crate::image_support::{gz, oci_layout, tar_of, E};
use std::process::Command;

const LIB: &str = "libcuda.so.550.54.15";

/// An OCI layout whose layer holds usr/local/cuda -> cuda-12.9 and the
/// compat library with `note`, under the official cuda 12.4.1 env.
fn image_with_compat(name: &str, note: &[u8]) -> std::path::PathBuf {
    let work = compat_support::tmp(name);
    let lib = work.join("lib.so");
    compat_support::build_lib(&work, &lib, Some(note));
    let bytes = std::fs::read(&lib).unwrap();
    let path = format!("usr/local/cuda-12.9/compat/{LIB}");
    let layer = tar_of(&[
        E::Dir("usr/"),
        E::Dir("usr/local/"),
        E::Dir("usr/local/cuda-12.9/"),
        E::Dir("usr/local/cuda-12.9/compat/"),
        E::File(&path, &bytes),
        E::Sym("usr/local/cuda", "cuda-12.9"),
    ]);
    oci_layout(
        name,
        &compat_support::image_env("cuda-12.4.1-base-ubuntu2204"),
        &[gz(&layer)],
    )
}

fn check(image: &std::path::Path, profile: &str) -> (i32, serde_json::Value) {
    let base = compat_support::tmp(&format!("cfg-{profile}"));
    let cfg = compat_support::config(&base, "");
    let out = Command::new(*compat_support::BIN)
        .arg("--config")
        .arg(&cfg)
        .args(["check", "--json", "--image"])
        .arg(image)
        .arg("--host")
        .arg(compat_support::data(&format!("hosts/{profile}.json")))
        .output()
        .unwrap();
    let d = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{profile}: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), d)
}

#[test]
fn the_image_compat_library_is_judged_per_host() {
    if !compat_support::have_elf_tools() {
        return;
    }
    let img = image_with_compat("gg-imgcompat", &compat_support::note_12_4("470,525,535"));
    // A data-center GPU on a listed branch: runs through forward compat.
    let (code, d) = check(&img, "tesla-535");
    assert_eq!(code, 0, "{d:#}");
    let compat = compat_support::findings(&d, "compat");
    assert!(
        compat.iter().any(|f| f["severity"] == "info"
            && f["message"]
                .as_str()
                .unwrap()
                .contains("runs through forward compatibility")),
        "{d:#}"
    );
    // A GeForce on the same branch: the requirement's geforce alternative
    // holds, but the driver refuses forward compatibility on GeForce.
    let (code, d) = check(&img, "geforce-535");
    assert_eq!(code, 1, "{d:#}");
    let compat = compat_support::findings(&d, "compat");
    assert!(
        compat
            .iter()
            .any(|f| f["severity"] == "error" && f["message"].as_str().unwrap().contains("804")),
        "{d:#}"
    );
}
