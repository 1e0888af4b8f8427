//! Forward compatibility end to end: `gpu-guard check --bundle` on a rootfs
//! laid out like an official nvidia/cuda 12.4 image (its env from
//! tests/data/images, a real compat libcuda built with gcc and objcopy)
//! against host profiles: tesla-535 (data-center, branch 535),
//! geforce-535 (GeForce, branch 535), tesla-470 (CUDA 11.4).

use crate::compat_support::*;
use std::fs;
use std::os::unix::fs::symlink;
use std::time::{Duration, Instant};

const IMAGE: &str = "cuda-12.4.1-base-ubuntu2204";
const LIB: &str = "libcuda.so.550.54.15";

fn msgs(fs: &[&serde_json::Value]) -> String {
    fs.iter()
        .map(|f| format!("{} {} | {}", f["severity"], f["message"], f["fix"]))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn data_center_gpu_on_listed_branch_runs_through_forward_compat() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("cc-works");
    let rootfs = image(&base, LIB, Some(&note_12_4("470, 525, 535")));
    let b = bundle(&base, &rootfs, &image_env(IMAGE), None);
    let (code, d) = check_json(&base, &b, "tesla-535", "");
    let c = findings(&d, "compat");
    assert_eq!(code, 0, "{d}");
    assert_eq!(d["verdict"], "allow");
    assert_eq!(c.len(), 1, "{}", msgs(&c));
    assert_eq!(c[0]["severity"], "info");
    assert!(
        c[0]["message"].as_str().unwrap().contains(
            "runs through forward compatibility (compat libcuda 550.54.15 on branch 535)"
        ),
        "{}",
        msgs(&c)
    );
    // A host that supports CUDA 12.4 natively never reads the library.
    let (code, d) = check_json(&base, &b, "h100x8", "");
    assert!(findings(&d, "compat").is_empty(), "{d}");
    assert_eq!(code, 0, "{d}");
}

#[test]
fn geforce_on_listed_branch_is_refused_with_804() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("cc-geforce");
    let rootfs = image(&base, LIB, Some(&note_12_4("470, 525, 535")));
    let b = bundle(&base, &rootfs, &image_env(IMAGE), None);
    let (code, d) = check_json(&base, &b, "geforce-535", "");
    assert_eq!(code, 1, "{d}");
    assert_eq!(d["verdict"], "refuse");
    let c = findings(&d, "compat");
    let err: Vec<_> = c.iter().filter(|f| f["severity"] == "error").collect();
    assert_eq!(err.len(), 1, "{}", msgs(&c));
    let m = err[0]["message"].as_str().unwrap();
    for part in [
        "CUDA error 804 predicted",
        "NVIDIA GeForce RTX 4090",
        "brand geforce",
        "branch 535",
        "compat libcuda 550.54.15",
        "forward compatibility needs a data-center GPU",
    ] {
        assert!(m.contains(part), "missing {part:?}: {m}");
    }
    let fix = err[0]["fix"].as_str().unwrap();
    assert!(
        fix.contains("supports CUDA 12.4 natively (NVIDIA driver 550.54.14 or newer)"),
        "{fix}"
    );
    assert!(fix.contains("data-center GPU"), "{fix}");
    // The diagnosis for people stays short.
    let (code, text) = check_human(&base, &b, "geforce-535", "");
    assert_eq!(code, 1);
    assert!(text.lines().count() <= 40, "{text}");
    assert!(text.contains("CUDA error 804 predicted"), "{text}");
}

#[test]
fn data_center_gpu_on_unlisted_branch_is_refused_naming_the_list() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("cc-branch");
    let rootfs = image(&base, LIB, Some(&note_12_4("470, 525")));
    let b = bundle(&base, &rootfs, &image_env(IMAGE), None);
    let (code, d) = check_json(&base, &b, "tesla-535", "");
    assert_eq!(code, 1, "{d}");
    let c = findings(&d, "compat");
    let err: Vec<_> = c.iter().filter(|f| f["severity"] == "error").collect();
    assert_eq!(err.len(), 1, "{}", msgs(&c));
    let m = err[0]["message"].as_str().unwrap();
    for part in [
        "holds only through forward compatibility",
        "branch 535",
        "lists branches 470, 525",
        "CUDA error 803",
        "the image needs CUDA 12.4 natively",
        "CUDA 12.2 (driver 535.104.05)",
    ] {
        assert!(m.contains(part), "missing {part:?}: {m}");
    }
    let fix = err[0]["fix"].as_str().unwrap();
    assert!(fix.contains("550.54.14"), "{fix}");
    assert!(fix.contains("(470, 525)"), "{fix}");
}

#[test]
fn forward_compat_alternatives_without_a_compat_library() {
    let base = tmp("cc-missing");
    let rootfs = base.join("rootfs");
    fs::create_dir_all(rootfs.join("usr/local/cuda-12.4/lib64")).unwrap();
    let b = bundle(&base, &rootfs, &image_env(IMAGE), None);
    // Default: a warning.
    let (code, d) = check_json(&base, &b, "tesla-535", "");
    assert_eq!(code, 0, "{d}");
    let c = findings(&d, "compat");
    assert_eq!(c.len(), 1, "{}", msgs(&c));
    assert_eq!(c[0]["severity"], "warning");
    let m = c[0]["message"].as_str().unwrap();
    assert!(m.contains("ships no CUDA compat library"), "{m}");
    assert!(m.contains("asks for CUDA 12.4"), "{m}");
    // compat.missing_library = "enforce".
    let (code, d) = check_json(
        &base,
        &b,
        "tesla-535",
        "[compat]\nmissing_library = \"enforce\"\n",
    );
    assert_eq!(code, 1, "{d}");
    assert_eq!(findings(&d, "compat")[0]["severity"], "error");
    // A major-version gap (CUDA 11.4 host, 12.4 image) is refused either way.
    let (code, d) = check_json(&base, &b, "tesla-470", "");
    assert_eq!(code, 1, "{d}");
    let c = findings(&d, "compat");
    assert!(
        c[0]["message"]
            .as_str()
            .unwrap()
            .contains("a whole major version behind"),
        "{}",
        msgs(&c)
    );
}

#[test]
fn orin_note_without_driver_list_is_a_warning() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("cc-orin");
    let desc = TEGRA_13_2.as_bytes();
    let mut n = note_bytes(
        b"NVIDIA Corporation\0",
        0,
        desc,
        Some(desc.len() as u32 + 7),
    );
    n.truncate(n.len() - (n.len() % 4));
    let rootfs = image(&base, "libcuda.so.1.1", Some(&n));
    let b = bundle(&base, &rootfs, &image_env(IMAGE), None);
    let (code, d) = check_json(&base, &b, "tesla-535", "");
    assert_eq!(code, 0, "{d}");
    let c = findings(&d, "compat");
    assert_eq!(c.len(), 1, "{}", msgs(&c));
    assert_eq!(c[0]["severity"], "warning");
    assert!(
        c[0]["message"]
            .as_str()
            .unwrap()
            .contains("lists no driver branches"),
        "{}",
        msgs(&c)
    );
}

#[test]
fn malformed_note_is_a_warning_not_a_crash() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("cc-malformed");
    let rootfs = image(
        &base,
        LIB,
        Some(&nvidia_note(r#"{"format":1,"CUDA version":"12.4",}"#)),
    );
    let b = bundle(&base, &rootfs, &image_env(IMAGE), None);
    let (code, d) = check_json(&base, &b, "geforce-535", "");
    assert_eq!(code, 0, "{d}");
    let c = findings(&d, "compat");
    assert_eq!(c.len(), 1, "{}", msgs(&c));
    assert_eq!(c[0]["severity"], "warning");
    let m = c[0]["message"].as_str().unwrap();
    assert!(m.contains("cannot judge forward compatibility"), "{m}");
    assert!(m.contains("not valid JSON"), "{m}");
}

#[test]
fn note_in_a_huge_sparse_file_is_read_quickly() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("cc-sparse");
    let rootfs = image(&base, LIB, Some(&note_12_4("470, 525, 535")));
    let lib = rootfs.join("usr/local/cuda-12.9/compat").join(LIB);
    fs::OpenOptions::new()
        .write(true)
        .open(&lib)
        .unwrap()
        .set_len(10 << 30)
        .unwrap();
    let b = bundle(&base, &rootfs, &image_env(IMAGE), None);
    let t = Instant::now();
    let (code, d) = check_json(&base, &b, "geforce-535", "");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(code, 1, "{d}");
    assert!(msgs(&findings(&d, "compat")).contains("CUDA error 804 predicted"));
}

#[test]
fn compat_symlink_escaping_the_rootfs_is_not_followed() {
    if !have_elf_tools() {
        return;
    }
    let base = tmp("cc-escape");
    // Outside the rootfs, a library that would predict 804 on GeForce.
    let outside = base.join("outside");
    build_lib(
        &base,
        &outside.join("compat").join(LIB),
        Some(&note_12_4("470, 525, 535")),
    );
    let rootfs = base.join("rootfs");
    fs::create_dir_all(rootfs.join("usr/local")).unwrap();
    symlink("../../../outside", rootfs.join("usr/local/cuda")).unwrap();
    let b = bundle(&base, &rootfs, &image_env(IMAGE), None);
    let (code, d) = check_json(&base, &b, "geforce-535", "");
    let c = findings(&d, "compat");
    // Inside the root, /usr/local/cuda leads nowhere: no compat library.
    assert_eq!(code, 0, "{d}");
    assert_eq!(c.len(), 1, "{}", msgs(&c));
    assert!(
        c[0]["message"]
            .as_str()
            .unwrap()
            .contains("ships no CUDA compat library"),
        "{}",
        msgs(&c)
    );
    assert!(!msgs(&c).contains("804"));
}
