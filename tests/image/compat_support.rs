//! Shared helpers for the compat tests: real ELF libraries built with gcc
//! and given a `.note.cuda.fwd_compatibility` section with objcopy, rootfs
//! layouts like nvidia/cuda images, and `gpu-guard check --bundle` runs.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::have_tool;

pub const DGPU_12_9: &str = r#"{"format":1,"CUDA version":"12.9","driver":[535,550,560,565,570,575],"device":[1,2,7,8,9,10,11,12,13,14]}"#;
pub const TEGRA_13_2: &str = r#"{"format":1,"CUDA version":"13.2"}"#;

/// Whether gcc and binutils are here to build the compat libraries (and
/// readelf to cross-check them); when not, the shared rule skips locally
/// and fails under CI. Every test that builds a library starts with it.
pub fn have_elf_tools() -> bool {
    // Debian packages: gcc, binutils (objcopy, readelf).
    ["gcc", "objcopy", "readelf"].iter().all(|t| have_tool(t))
}

/// Temp dirs come from the shared support module.
pub use crate::support::tempdir as tmp;

pub fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An ELF note: namesz, descsz (or a lie), type, name and descriptor padded to 4.
pub fn note_bytes(owner: &[u8], kind: u32, desc: &[u8], descsz: Option<u32>) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(owner.len() as u32).to_le_bytes());
    v.extend_from_slice(&descsz.unwrap_or(desc.len() as u32).to_le_bytes());
    v.extend_from_slice(&kind.to_le_bytes());
    v.extend_from_slice(owner);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v.extend_from_slice(desc);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

pub fn nvidia_note(json: &str) -> Vec<u8> {
    let mut desc = json.as_bytes().to_vec();
    desc.push(0);
    note_bytes(b"NVIDIA Corporation\0", 0, &desc, None)
}

/// Builds a real shared library at `out`, with `note` as its
/// `.note.cuda.fwd_compatibility` section (None: no such section).
pub fn build_lib(work: &Path, out: &Path, note: Option<&[u8]>) {
    let src = work.join("t.c");
    fs::write(
        &src,
        "int cuInit(unsigned int flags) { return (int)flags; }\n",
    )
    .unwrap();
    let base = work.join("base.so");
    run(Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&base)
        .arg(&src));
    fs::create_dir_all(out.parent().unwrap()).unwrap();
    let Some(note) = note else {
        fs::copy(&base, out).unwrap();
        return;
    };
    let bin = work.join("note.bin");
    fs::write(&bin, note).unwrap();
    let tmp = work.join("with-note.so");
    let sec = ".note.cuda.fwd_compatibility";
    run(Command::new("objcopy")
        .arg("--add-section")
        .arg(format!("{sec}={}", bin.display()))
        .arg("--set-section-flags")
        .arg(format!("{sec}=alloc,readonly"))
        .arg(&base)
        .arg(&tmp));
    // As in NVIDIA's libraries: a 4-byte aligned SHT_NOTE section.
    run(Command::new("objcopy")
        .arg("--set-section-alignment")
        .arg(format!("{sec}=4"))
        .arg(&tmp)
        .arg(out));
}

/// rootfs/usr/local/cuda -> cuda-12.9, with the library and a libcuda.so.1 symlink to it.
pub fn image(base: &Path, lib_name: &str, note: Option<&[u8]>) -> PathBuf {
    let rootfs = base.join("rootfs");
    let compat = rootfs.join("usr/local/cuda-12.9/compat");
    build_lib(base, &compat.join(lib_name), note);
    symlink(lib_name, compat.join("libcuda.so.1")).unwrap();
    symlink("cuda-12.9", rootfs.join("usr/local/cuda")).unwrap();
    rootfs
}

/// A compat note for the CUDA 12.4 images' library (cuda-compat-12-4,
/// libcuda.so.550.54.15): the branches their requirement admits, the
/// data-center and professional brands.
pub fn note_12_4(branches: &str) -> Vec<u8> {
    nvidia_note(&format!(
        r#"{{"format":1,"CUDA version":"12.4","driver":[{branches}],"device":[1,2,7,8,9,10,11,12,13,14]}}"#
    ))
}

pub static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

/// The env of an official image (tests/data/images/NAME.env).
pub fn image_env(name: &str) -> Vec<String> {
    fs::read_to_string(data(&format!("images/{name}.env")))
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// A bundle at `base/bundle` whose root is `rootfs`, with `env`, NVIDIA's
/// prestart hook (so it is a GPU container) and optional process.rlimits.
pub fn bundle(
    base: &Path,
    rootfs: &Path,
    env: &[String],
    rlimits: Option<serde_json::Value>,
) -> PathBuf {
    let b = base.join("bundle");
    fs::create_dir_all(&b).unwrap();
    let mut process = serde_json::json!({ "args": ["true"], "cwd": "/", "env": env });
    if let Some(r) = rlimits {
        process["rlimits"] = r;
    }
    let spec = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": process,
        "root": { "path": rootfs },
        "hooks": { "prestart": [ {
            "path": "/usr/bin/nvidia-container-runtime-hook",
            "args": ["nvidia-container-runtime-hook", "prestart"]
        } ] }
    });
    fs::write(b.join("config.json"), spec.to_string()).unwrap();
    b
}

/// A config that never probes the host nor logs; `extra` is appended.
pub fn config(base: &Path, extra: &str) -> PathBuf {
    let p = base.join("config.toml");
    fs::write(
        &p,
        format!(
            "[host]\ncache_file = \"\"\n[kernel_image]\ncache_dir = \"\"\n[libraries]\ncache_dir = \"\"\n[log]\nsyslog = false\n{extra}"
        ),
    )
    .unwrap();
    p
}

/// `gpu-guard check --bundle B --host hosts/PROFILE.json --json`: exit
/// code and the decision.
pub fn check_json(
    base: &Path,
    bundle: &Path,
    profile: &str,
    extra: &str,
) -> (i32, serde_json::Value) {
    let cfg = config(base, extra);
    let out = Command::new(*BIN)
        .arg("--config")
        .arg(&cfg)
        .args(["check", "--json", "--bundle"])
        .arg(bundle)
        .arg("--host")
        .arg(data(&format!("hosts/{profile}.json")))
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), v)
}

/// The same, for people: exit code and text.
pub fn check_human(base: &Path, bundle: &Path, profile: &str, extra: &str) -> (i32, String) {
    let cfg = config(base, extra);
    let out = Command::new(*BIN)
        .arg("--config")
        .arg(&cfg)
        .args(["check", "--bundle"])
        .arg(bundle)
        .arg("--host")
        .arg(data(&format!("hosts/{profile}.json")))
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The findings of a decision with `check` value `check`.
pub fn findings<'a>(d: &'a serde_json::Value, check: &str) -> Vec<&'a serde_json::Value> {
    d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect()
}
