//! AMD nodes in the generated fleet of fleet_affinity_exact, and ROCm
//! images on it: the label-only affinity admits exactly the AMD nodes
//! `check --nodes` allows, places ROCm images (real HIP code objects of
//! tests/data/hip) on nodes whose processor the image has code for, keeps
//! them off NVIDIA nodes, and keeps CUDA images off AMD nodes (the NVIDIA
//! tests run on the same fleet).
//!
//! AMD nodes are labelled as they are in a cluster: `gpu-guard host
//! --node-labels` over the KFD trees of tests/data/hosts/amd (MI300X,
//! MI210, a Radeon gfx1100, a gfx1103 APU), gpu-guard's labels written
//! for other processors, AMD's node labeller's (`amd.com/gpu.family`,
//! `device-id`, `driver-version`, `product-name`; ROCm/k8s-device-plugin
//! cmd/k8s-node-labeller), or both.

use crate::fleet_affinity_exact::{assert_exact, fleet, tmpdir, write_nodes, GenNode};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

/// `gpu-guard host --node-labels --host-root` of a KFD tree.
fn tree_labels(dir: &Path, tree: &str) -> BTreeMap<String, String> {
    let cfg = dir.join("amd-probe.toml");
    std::fs::write(
        &cfg,
        "[host]\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\ncache_file = \"\"\n[log]\nsyslog = false\n",
    )
    .unwrap();
    let o = Command::new(*BIN)
        .env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(&cfg)
        .args(["host", "--node-labels", "--host-root"])
        .arg(data("hosts/amd").join(tree))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let l: BTreeMap<String, String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(
        l.get("gpu-guard.io/vendor").map(String::as_str),
        Some("amd"),
        "{tree}: {l:?}"
    );
    l
}

/// AMD's node labeller's labels.
fn labeller(family: &str, device: &str, driver: Option<&str>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    if !family.is_empty() {
        l.insert("amd.com/gpu.family".to_string(), family.to_string());
        l.insert(format!("beta.amd.com/gpu.family.{family}"), "1".to_string());
    }
    l.insert("amd.com/gpu.device-id".to_string(), device.to_string());
    if let Some(d) = driver {
        l.insert("amd.com/gpu.driver-version".to_string(), d.to_string());
    }
    l
}

/// gpu-guard's labels for a processor (as `host --node-labels` writes them).
fn gg(gfx: &str) -> BTreeMap<String, String> {
    [
        ("gpu-guard.io/vendor", "amd"),
        ("gpu-guard.io/amd.gfx", gfx),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The AMD nodes of the generated fleet.
pub(crate) fn amd_nodes(dir: &Path) -> Vec<GenNode> {
    let both = |mut a: BTreeMap<String, String>, b: BTreeMap<String, String>| {
        a.extend(b);
        a
    };
    let nodes: Vec<(&str, BTreeMap<String, String>)> = vec![
        (
            "amd-mi300x-both",
            both(
                tree_labels(dir, "mi300x"),
                labeller("AI", "74a1", Some("6.12.12")),
            ),
        ),
        (
            "amd-mi300x-new-driver",
            both(
                tree_labels(dir, "mi300x"),
                labeller("AI", "74a1", Some("6.14.14")),
            ),
        ),
        ("amd-mi210-gg", tree_labels(dir, "mi210")),
        (
            "amd-mi210-both",
            both(
                tree_labels(dir, "mi210-xnack"),
                labeller("AI", "740f", Some("6.14.14")),
            ),
        ),
        (
            "amd-radeon-both",
            both(
                tree_labels(dir, "radeon-gfx1100"),
                labeller("NV", "744c", Some("6.16.6")),
            ),
        ),
        (
            "amd-apu-both",
            both(
                tree_labels(dir, "apu-gfx1103"),
                labeller("GC_11_0_1", "15bf", None),
            ),
        ),
        (
            "amd-gfx1030",
            both(gg("gfx1030"), labeller("NV", "73bf", Some("6.12.12"))),
        ),
        ("amd-gfx906", gg("gfx906")),
        (
            "amd-gfx1201",
            both(gg("gfx1201"), labeller("", "7550", Some("6.14.14"))),
        ),
        ("amd-labeller-only", labeller("AI", "74a1", Some("6.12.12"))),
        ("amd-device-only", labeller("", "740f", None)),
    ];
    nodes
        .into_iter()
        .map(|(name, labels)| GenNode {
            name: name.to_string(),
            labels,
        })
        .collect()
}

/// A ROCm image: `libs` (fixtures of tests/data/hip) as ROCm's libraries,
/// `rocm` as /opt/rocm/.info/version, `env` in its config.
fn rocm_image(name: &str, libs: &[&str], rocm: Option<&str>, env: &[&str]) -> PathBuf {
    use crate::image_support::*;
    let files: Vec<(String, Vec<u8>)> = libs
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let n = ["librocsparse", "librocrand", "libamdhip64"][i % 3];
            (
                format!("opt/rocm/lib/{n}.so.1"),
                std::fs::read(data(&format!("hip/{f}"))).unwrap(),
            )
        })
        .collect();
    let version = rocm.map(|v| v.as_bytes().to_vec());
    let mut entries = vec![
        E::Dir("opt/"),
        E::Dir("opt/rocm/"),
        E::Dir("opt/rocm/lib/"),
        E::Dir("opt/rocm/.info/"),
    ];
    entries.extend(files.iter().map(|(p, b)| E::File(p, b)));
    if let Some(v) = &version {
        entries.push(E::File("opt/rocm/.info/version", v));
    }
    let mut env: Vec<String> = env.iter().map(|e| e.to_string()).collect();
    env.push("PATH=/opt/rocm/bin:/usr/bin".into());
    oci_layout(name, &env, &[gz(&tar_of(&entries))])
}

/// An image case: its name, libraries, ROCm release, env, and the AMD
/// nodes that must be among those allowed.
type Case<'a> = (
    &'a str,
    &'a [&'a str],
    Option<&'a str>,
    &'a [&'a str],
    &'a [&'a str],
);

#[test]
fn rocm_images_are_placed_exactly_on_amd_nodes() {
    let dir = tmpdir("amd");
    let nodes = fleet(&dir);
    let file = write_nodes(&dir, &nodes);
    let amd = ["AMD_VISIBLE_DEVICES=all".to_string()];
    // (image, extra env, the AMD nodes that must be among those allowed)
    let cases: &[Case] = &[
        (
            "multi",
            &["hipcc-multi.so"],
            None,
            &[],
            &["amd-gfx1030", "amd-gfx906"],
        ),
        (
            "multi-xnack",
            &["hipcc-multi.so"],
            Some("6.4.0-47"),
            &["HSA_XNACK=1"],
            &["amd-mi210-gg", "amd-gfx1030"],
        ),
        (
            "generic",
            &["clang19-generic.so"],
            Some("6.1.2"),
            &[],
            &["amd-radeon-both", "amd-apu-both", "amd-mi300x-both"],
        ),
        (
            "compressed",
            &["clang19-compressed.so"],
            Some("6.1.2"),
            &[],
            &["amd-mi300x-both", "amd-radeon-both"],
        ),
        (
            "override",
            &["hipcc-multi.so"],
            None,
            &["HSA_OVERRIDE_GFX_VERSION=10.3.0"],
            &["amd-mi300x-both", "amd-radeon-both"],
        ),
        (
            "two-libraries",
            &["clang19-compressed.so", "hipcc-two-tu.so"],
            Some("5.7.1"),
            &[],
            &[],
        ),
        (
            "no-code",
            &[],
            Some("6.1.0"),
            &[],
            &["amd-device-only", "amd-labeller-only"],
        ),
    ];
    let mut placed = 0;
    for (name, libs, rocm, env, must) in cases {
        let img = rocm_image(&format!("rocm-{name}"), libs, *rocm, env);
        let n = assert_exact(&dir, (&file, &nodes), Some(&img), &amd, &[], name);
        placed += n;
        let v = fleet_json(&dir, &img, &file);
        for node in *must {
            assert_eq!(allowed_on(&v, node), Some(true), "{name} on {node}: {v:#}");
        }
        // Never on an NVIDIA node: it asks for AMD GPUs.
        for r in v["results"].as_array().unwrap() {
            let host = r["host"].as_str().unwrap();
            if !host.starts_with("amd-") {
                assert_ne!(r["decision"]["verdict"], "allow", "{name} on {host}");
            }
        }
    }
    assert!(placed > 0);
    // Under `[kernel_image] severity = "enforce"` a ROCm outside the
    // driver's window refuses: ROCm 6.1 runs with amdgpu 6.12.12 (ROCm 6.4's
    // driver), not with 6.14.14 (30.10's, from ROCm 6.2).
    let strict = tmpdir("amd-enforce");
    std::fs::write(
        strict.join("config.toml"),
        "[host]\ncache_file = \"\"\n[log]\nsyslog = false\n[kernel_image]\ncache_dir = \"\"\nseverity = \"enforce\"\n[libraries]\ncache_dir = \"\"\n",
    )
    .unwrap();
    let strict_file = write_nodes(&strict, &nodes);
    let img = rocm_image(
        "rocm-window",
        &["clang19-compressed.so"],
        Some("6.1.2"),
        &[],
    );
    assert_exact(
        &strict,
        (&strict_file, &nodes),
        Some(&img),
        &amd,
        &[],
        "window",
    );
    let v = fleet_json(&strict, &img, &strict_file);
    assert_eq!(allowed_on(&v, "amd-mi300x-both"), Some(true), "{v:#}");
    assert_eq!(
        allowed_on(&v, "amd-mi300x-new-driver"),
        Some(false),
        "{v:#}"
    );
    // A CUDA image is placed on no AMD node, and its terms admit none.
    let cuda = [
        "NVIDIA_VISIBLE_DEVICES=all".to_string(),
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0".to_string(),
    ];
    assert_exact(&dir, (&file, &nodes), None, &cuda, &[], "cuda on amd");
}

/// `check --nodes --json` of `image` with AMD GPUs asked for.
fn fleet_json(dir: &Path, image: &Path, nodes: &Path) -> serde_json::Value {
    let o = Command::new(*BIN)
        .env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(dir.join("config.toml"))
        .args(["check", "--image"])
        .arg(image)
        .args(["--env", "AMD_VISIBLE_DEVICES=all", "--json", "--nodes"])
        .arg(nodes)
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)))
}

fn allowed_on(v: &serde_json::Value, node: &str) -> Option<bool> {
    v["results"]
        .as_array()?
        .iter()
        .find(|r| r["host"] == node)
        .map(|r| r["decision"]["verdict"] == "allow")
}

#[test]
fn amd_nodes_read_from_labels_judge_vendor_code_and_driver() {
    let dir = tmpdir("amd-facts");
    let nodes = amd_nodes(&dir);
    let file = write_nodes(&dir, &nodes);
    // A CUDA image on AMD nodes: a vendor error naming what each has.
    let o = Command::new(*BIN)
        .env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(dir.join("config.toml"))
        .args([
            "check",
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
            "--env",
            "CUDA_VERSION=12.4.1",
            "--json",
            "--nodes",
        ])
        .arg(&file)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["summary"]["allowed"], 0, "{v:#}");
    let mi300x = &v["results"][0]["decision"];
    let msgs: Vec<&str> = mi300x["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["message"].as_str())
        .collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("host facts from node labels")
                && m.contains("gfx942:sramecc+:xnack-")
                && m.contains("amdgpu driver 6.12.12")),
        "{msgs:#?}"
    );
    // A ROCm 5.7 image: outside the window of both mapped drivers, judged
    // on nodes whose driver label gpu-guard maps, not on the others.
    let img = rocm_image("rocm-57", &[], Some("5.7.1"), &[]);
    let v = fleet_json(&dir, &img, &file);
    let rocm_on = |node: &str| -> Vec<String> {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["host"] == node)
            .unwrap()["decision"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "rocm")
            .map(|f| f["message"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        rocm_on("amd-mi300x-both").iter().any(|m| m.contains("5.7")),
        "{v:#}"
    );
    assert!(rocm_on("amd-radeon-both").is_empty(), "{v:#}");
}
