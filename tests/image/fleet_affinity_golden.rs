//! The label-only affinity (`check --affinity` without `--nodes`, what the
//! admission webhook writes) is byte for byte what main printed before the
//! label grid of a scanned image was judged in two parts
//! (src/fleet/label_grid_apart.rs) and the requirements parsed once: for
//! every official nvidia/cuda requirement string (11.x to 13.x with their
//! forward-compatibility alternatives, tests/data/requirements), alone and
//! with an image whose GPU code is scanned, and for other scanned images,
//! configs and requests, the exit status, stdout (the terms) and stderr
//! (the notes) match tests/data/affinity/golden.tsv.
//!
//! That file holds, per case, the exit status and the SHA-256 of stdout
//! and stderr that main's binary printed (and the number of terms, to read
//! it by). [`the_golden_file_holds_every_case_once`] checks that file
//! against the case list and, with `GG_AFFINITY_GOLDEN_FROM` naming a
//! binary built from main before a change to the affinity, writes it anew:
//! `GG_AFFINITY_GOLDEN_FROM=/path/to/gpu-guard cargo test --test image fleet_affinity_golden::the_golden`.

use crate::image_support::{gz, image_env, oci_layout, sha, tar_of, E};
use crate::support::TempDir;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gpu-guard");

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn golden_file() -> PathBuf {
    data("affinity/golden.tsv")
}

/// One `check --affinity --json` run: the config's extra TOML, the image
/// (a key of [`image_files`], or none) and the `--env` entries.
struct Case {
    name: String,
    config: &'static str,
    image: Option<&'static str>,
    env: Vec<String>,
}

const ENFORCE: &str = "[kernel_image]\nseverity = \"enforce\"\ncache_dir = \"\"\n";
const MODE_WARN: &str =
    "mode = \"warn\"\n[kernel_image]\nseverity = \"enforce\"\ncache_dir = \"\"\n";
const MODE_AUDIT: &str =
    "mode = \"audit\"\n[kernel_image]\nseverity = \"enforce\"\ncache_dir = \"\"\n";
const MINOR_WARN: &str = "[requirements]\nminor_version_compatibility = \"warn\"\n[kernel_image]\nseverity = \"enforce\"\ncache_dir = \"\"\n";

/// Libraries (fixtures of tests/data/fatbin) at paths the shipped
/// `kernel_image.libraries` globs match (config/config.toml), or
/// (`unmatched`) at one they do not: scanned, nothing found.
fn image_files(key: &str) -> Vec<(&'static str, &'static str)> {
    match key {
        "cublas" => vec![(
            "usr/local/cuda-12.4/lib64/libcublas.so.12.4.5",
            "multi-arch.so",
        )],
        "unmatched" => vec![("usr/lib/libcublas.so.12", "multi-arch.so")],
        "blackwell" => vec![("usr/local/cuda/lib64/libcublasLt.so.12", "sm100f.so")],
        "ptx" => vec![("usr/local/cuda/lib64/libcudnn.so.9", "ptx-only.so")],
        _ => vec![
            ("usr/local/cuda/lib64/libcublas.so.11", "old-arch.so"),
            ("usr/local/cuda/lib64/libcudnn.so.8", "sass-only.so"),
        ],
    }
}

/// The OCI layout of an image with the CUDA 12.4.1 base image's env and
/// the libraries of `key`.
fn image(key: &str) -> PathBuf {
    let files: Vec<(String, Vec<u8>)> = image_files(key)
        .into_iter()
        .map(|(p, f)| {
            (
                p.to_string(),
                std::fs::read(data("fatbin").join(f)).unwrap(),
            )
        })
        .collect();
    let mut dirs: Vec<String> = Vec::new();
    for (p, _) in &files {
        let mut at = String::new();
        let parts: Vec<&str> = p.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            at.push_str(part);
            at.push('/');
            if !dirs.contains(&at) {
                dirs.push(at.clone());
            }
        }
    }
    let mut entries: Vec<E> = dirs.iter().map(|d| E::Dir(d)).collect();
    entries.extend(files.iter().map(|(p, b)| E::File(p, b)));
    let env = image_env("cuda-12.4.1-base-ubuntu2204.env");
    oci_layout(&format!("golden-{key}"), &env, &[gz(&tar_of(&entries))])
}

/// (tag, NVIDIA_REQUIRE_CUDA) of every official image.
fn official() -> Vec<(String, String)> {
    std::fs::read_to_string(data("requirements/nvidia-cuda-official.tsv"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_string(), f[2].to_string())
        })
        .collect()
}

fn require(tag: &str) -> String {
    let all: BTreeMap<String, String> = official().into_iter().collect();
    format!("NVIDIA_REQUIRE_CUDA={}", all[tag])
}

/// Every official string with the scanned cuBLAS-like image.
fn official_scanned() -> Vec<Case> {
    official()
        .into_iter()
        .map(|(tag, req)| Case {
            name: format!("official-{tag}-cublas"),
            config: ENFORCE,
            image: Some("cublas"),
            env: vec![format!("NVIDIA_REQUIRE_CUDA={req}")],
        })
        .collect()
}

/// Every official string alone (`--env`, nothing scanned).
fn official_alone() -> Vec<Case> {
    official()
        .into_iter()
        .map(|(tag, req)| Case {
            name: format!("official-{tag}-env"),
            config: "",
            image: None,
            env: vec![
                "NVIDIA_VISIBLE_DEVICES=all".into(),
                format!("NVIDIA_REQUIRE_CUDA={req}"),
            ],
        })
        .collect()
}

/// Other scanned images, and the cuBLAS-like image under other configs
/// and requests.
fn other_scanned() -> Vec<Case> {
    let mut out = Vec::new();
    for key in ["unmatched", "blackwell", "ptx", "two"] {
        for tag in ["12.4.1", "12.8.1", "13.0.2"] {
            out.push(Case {
                name: format!("official-{tag}-{key}"),
                config: ENFORCE,
                image: Some(key),
                env: vec![require(tag)],
            });
        }
    }
    let tesla = "NVIDIA_REQUIRE_CUDA=cuda>=12.6 brand=tesla,driver>=535,driver<536";
    let arch = "NVIDIA_REQUIRE_CUDA=cuda>=12.2,arch>=8.0 brand=geforce,driver>=550,driver<551";
    let variants: [(&str, &'static str, &[&str]); 8] = [
        ("own-requirement", ENFORCE, &[]),
        ("kernel-warn", "", &[]),
        ("mode-warn", MODE_WARN, &[]),
        ("mode-audit", MODE_AUDIT, &[]),
        ("minor-warn", MINOR_WARN, &[]),
        ("devices-0-5", ENFORCE, &["NVIDIA_VISIBLE_DEVICES=0,5"]),
        ("cuda-12.6", ENFORCE, &[tesla]),
        ("arch", ENFORCE, &[arch]),
    ];
    for (name, config, env) in variants {
        out.push(Case {
            name: format!("cublas-{name}"),
            config,
            image: Some("cublas"),
            env: env.iter().map(|s| s.to_string()).collect(),
        });
    }
    out
}

/// What one run printed, as a golden line: name, exit status, the
/// SHA-256 of stdout and of stderr, the number of terms; and stdout.
fn run(bin: &Path, dir: &Path, case: &Case, images: &BTreeMap<&str, PathBuf>) -> (String, String) {
    let config = dir.join(format!("{}.toml", case.name));
    // The case's part first: it may set a top-level key (`mode`).
    let base = "[host]\ncache_file = \"\"\n[log]\nsyslog = false\n";
    std::fs::write(&config, format!("{}{base}", case.config)).unwrap();
    let mut c = Command::new(bin);
    c.env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(&config)
        .arg("check");
    if let Some(key) = case.image {
        c.arg("--image").arg(&images[key]);
    }
    for e in &case.env {
        c.arg("--env").arg(e);
    }
    let o = c.args(["--affinity", "--json"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let terms = stdout.matches("\"matchExpressions\"").count();
    let line = format!(
        "{}\t{}\t{}\t{}\t{terms}",
        case.name,
        o.status.code().unwrap_or(-1),
        sha(&o.stdout),
        sha(&o.stderr)
    );
    (line, stdout)
}

fn images_for(cases: &[Case]) -> BTreeMap<&'static str, PathBuf> {
    let mut out = BTreeMap::new();
    for key in cases.iter().filter_map(|c| c.image) {
        out.entry(key).or_insert_with(|| image(key));
    }
    out
}

fn golden() -> BTreeMap<String, String> {
    std::fs::read_to_string(golden_file())
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| (l.split('\t').next().unwrap().to_string(), l.to_string()))
        .collect()
}

fn assert_golden(cases: Vec<Case>) {
    let dir = TempDir::new("golden");
    let images = images_for(&cases);
    let want = golden();
    let mut differ = Vec::new();
    for case in &cases {
        let (got, stdout) = run(Path::new(BIN), dir.path(), case, &images);
        let expected = want.get(&case.name);
        assert!(expected.is_some(), "{}: no golden line", case.name);
        if Some(&got) != expected {
            let shown: String = stdout.chars().take(2000).collect();
            differ.push(format!(
                "got  {got}\nwant {}\nstdout: {shown}",
                expected.unwrap()
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} cases differ from main's:\n{}",
        differ.len(),
        cases.len(),
        differ.join("\n")
    );
}

#[test]
fn official_requirements_with_a_scanned_image_are_unchanged() {
    let cases = official_scanned();
    assert_eq!(cases.len(), 16);
    assert_golden(cases);
}

#[test]
fn official_requirements_alone_are_unchanged() {
    assert_golden(official_alone());
}

#[test]
fn other_scanned_images_and_configs_are_unchanged() {
    assert_golden(other_scanned());
}

fn all_cases() -> Vec<Case> {
    let mut cases = official_scanned();
    cases.extend(official_alone());
    cases.extend(other_scanned());
    cases
}

/// The golden file has exactly one line per case (no case unjudged, no
/// stale line left from a case since removed). With
/// `GG_AFFINITY_GOLDEN_FROM` set, first writes it with that binary.
#[test]
fn the_golden_file_holds_every_case_once() {
    let cases = all_cases();
    if let Ok(bin) = std::env::var("GG_AFFINITY_GOLDEN_FROM") {
        record(Path::new(&bin), &cases);
    }
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    let unique: std::collections::BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len(), "case names repeat");
    let want = golden();
    let lines: Vec<&str> = want.keys().map(String::as_str).collect();
    assert_eq!(lines, unique.into_iter().collect::<Vec<_>>());
}

/// Writes tests/data/affinity/golden.tsv with `bin`'s output.
fn record(bin: &Path, cases: &[Case]) {
    let dir = TempDir::new("golden-record");
    let images = images_for(cases);
    let mut out = String::from(
        "# check --affinity --json per case (tests/image/fleet_affinity_golden.rs), printed by main's binary:\n# name, exit status, sha256 of stdout, sha256 of stderr, terms\n",
    );
    for case in cases {
        out.push_str(&run(bin, dir.path(), case, &images).0);
        out.push('\n');
    }
    std::fs::create_dir_all(golden_file().parent().unwrap()).unwrap();
    std::fs::write(golden_file(), out).unwrap();
}
