//! AMD host facts through the binary: `gpu-guard host --host-root` over
//! KFD topology trees laid out as the kernel writes them
//! (tests/data/hosts/amd/: an MI210, two MI300X in an XGMI hive, a Radeon
//! RX 7900 XTX on the in-tree driver, a Phoenix APU with its CPU node, the
//! MI210 booted with amdgpu.noretry=0), the table, the exit status of a
//! host without NVIDIA's driver, and AMD facts read back by `check --host`.

use crate::support::TempDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

fn tree(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/hosts/amd")
        .join(name)
}

/// A config that keeps the probe off this machine's NVIDIA stack and cache.
fn config(dir: &TempDir) -> PathBuf {
    let p = dir.join("config.toml");
    std::fs::write(
        &p,
        "[host]\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\ncache_file = \"\"\n",
    )
    .unwrap();
    p
}

fn host(dir: &TempDir, args: &[&str], root: &Path) -> Output {
    Command::new(*BIN)
        .arg("--config")
        .arg(config(dir))
        .arg("host")
        .args(args)
        .arg("--host-root")
        .arg(root)
        .output()
        .unwrap()
}

fn facts(name: &str) -> (Value, Output) {
    let dir = TempDir::new("amd-host");
    let o = host(&dir, &["--json"], &tree(name));
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&o.stderr)));
    (v, o)
}

#[test]
fn mi210_facts_follow_design() {
    let (v, o) = facts("mi210");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(v["amdgpu_driver_version"], "6.12.12");
    assert!(v["driver_version"].is_null(), "{v}");
    assert!(v["cuda_driver_version"].is_null(), "{v}");
    let g = &v["gpus"][0];
    assert_eq!(
        v["gpus"].as_array().unwrap().len(),
        1,
        "the CPU node is not a GPU: {v}"
    );
    assert_eq!(g["index"], 0);
    assert_eq!(g["vendor"], "amd");
    assert_eq!(g["target_id"], "gfx90a:sramecc+:xnack-");
    assert_eq!(g["name"], "AMD Instinct MI210");
    assert_eq!(g["memory_mib"], 65520);
    assert_eq!(g["pci_bus_id"], "0000:c1:00.0");
    assert_eq!(g["render_node"], "/dev/dri/renderD128");
    assert_eq!(g["compute_units"], 104);
    assert_eq!(g["uuid"], "GPU-82d4c1a41244e405");
    assert_eq!(g["xnack_per_process"], true);
    // A note, not an error: the host runs AMD GPU containers.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("error"), "{err}");
}

#[test]
fn every_tree_gives_its_gpus() {
    // (tree, driver, [(target, name, memory MiB, bus, render node, CUs)])
    type G = (
        &'static str,
        &'static str,
        u64,
        &'static str,
        &'static str,
        u64,
    );
    let cases: &[(&str, &str, &[G])] = &[
        (
            "mi300x",
            "6.16.6",
            &[
                (
                    "gfx942:sramecc+:xnack-",
                    "AMD Instinct MI300X OAM",
                    196592,
                    "0000:0c:00.0",
                    "/dev/dri/renderD128",
                    304,
                ),
                (
                    "gfx942:sramecc+:xnack-",
                    "AMD Instinct MI300X OAM",
                    196592,
                    "0000:22:00.0",
                    "/dev/dri/renderD136",
                    304,
                ),
            ],
        ),
        (
            "radeon-gfx1100",
            "in-tree 6.8.0-45-generic",
            &[(
                "gfx1100",
                "AMD Radeon RX 7900 XTX",
                24560,
                "0000:03:00.0",
                "/dev/dri/renderD128",
                96,
            )],
        ),
        (
            "apu-gfx1103",
            "in-tree 6.5.0-1018-oem",
            &[(
                "gfx1103",
                "AMD Radeon 780M",
                512,
                "0000:c5:00.0",
                "/dev/dri/renderD128",
                12,
            )],
        ),
        (
            "mi210-xnack",
            "6.12.12",
            &[(
                "gfx90a:sramecc+:xnack+",
                "AMD Instinct MI210",
                65520,
                "0000:c1:00.0",
                "/dev/dri/renderD128",
                104,
            )],
        ),
    ];
    for (name, driver, gpus) in cases {
        let (v, o) = facts(name);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(v["amdgpu_driver_version"], *driver, "{name}");
        let got = v["gpus"].as_array().unwrap();
        assert_eq!(got.len(), gpus.len(), "{name}: {v}");
        for (i, (g, want)) in got.iter().zip(gpus.iter()).enumerate() {
            assert_eq!(g["index"], i as u64, "{name}");
            assert_eq!(g["vendor"], "amd", "{name}");
            assert_eq!(g["target_id"], want.0, "{name}");
            assert_eq!(g["name"], want.1, "{name}");
            assert_eq!(g["memory_mib"], want.2, "{name}");
            assert_eq!(g["pci_bus_id"], want.3, "{name}");
            assert_eq!(g["render_node"], want.4, "{name}");
            assert_eq!(g["compute_units"], want.5, "{name}");
        }
    }
    // gfx1100 cannot switch XNACK: the field is left out.
    let (v, _) = facts("radeon-gfx1100");
    assert!(v["gpus"][0].get("xnack_per_process").is_none(), "{v}");
}

#[test]
fn one_table_with_a_vendor_column() {
    let dir = TempDir::new("amd-host-table");
    let o = host(&dir, &[], &tree("mi300x"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.starts_with("Driver -, CUDA -, amdgpu 6.16.6"), "{out}");
    let head = out.lines().nth(1).unwrap();
    for col in ["GPU", "VENDOR", "NAME", "TARGET", "MEMORY", "BUS ID"] {
        assert!(head.contains(col), "{col}: {out}");
    }
    let rows: Vec<&str> = out.lines().skip(2).take(2).collect();
    for r in &rows {
        assert!(
            r.contains("amd") && r.contains("gfx942:sramecc+:xnack-"),
            "{out}"
        );
    }
    assert!(rows[1].contains("0000:22:00.0"), "{out}");
}

#[test]
fn a_host_without_nvidia_or_amd_is_an_error_and_hostile_trees_are_problems() {
    let dir = TempDir::new("amd-host-none");
    let empty = dir.join("root");
    std::fs::create_dir_all(&empty).unwrap();
    let o = host(&dir, &["--json"], &empty);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["amdgpu_driver_version"].is_null(), "{v}");
    // A GPU node whose properties are a FIFO, one naming no processor, and a
    // good one: the good one is read, the others are problem lines.
    let root = dir.join("hostile");
    let nodes = root.join("sys/class/kfd/kfd/topology/nodes");
    for n in ["0", "1", "2"] {
        std::fs::create_dir_all(nodes.join(n)).unwrap();
    }
    nix::unistd::mkfifo(
        &nodes.join("0/properties"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    std::fs::write(
        nodes.join("1/properties"),
        "simd_count 8\ngfx_target_version 0\n",
    )
    .unwrap();
    std::fs::write(
        nodes.join("2/properties"),
        "simd_count 416\nsimd_per_cu 4\ngfx_target_version 90010\ncapability 67108864\ndrm_render_minor 130\n",
    )
    .unwrap();
    let t = std::time::Instant::now();
    let o = host(&dir, &["--json"], &root);
    assert!(
        t.elapsed().as_secs() < 20,
        "a FIFO must not block the probe"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["gpus"][0]["target_id"], "gfx90a:sramecc+:xnack-");
    assert!(err.contains("KFD topology node 0"), "{err}");
    assert!(
        err.contains("KFD topology node 1: gfx_target_version 0 names no processor"),
        "{err}"
    );
}

#[test]
fn check_reads_amd_facts_files() {
    let (v, _) = facts("mi300x");
    let dir = TempDir::new("amd-facts");
    let f = dir.join("mi300x.json");
    std::fs::write(&f, serde_json::to_vec(&v).unwrap()).unwrap();
    let o = Command::new(*BIN)
        .args(["check", "--json", "--host"])
        .arg(&f)
        .args(["--env", "HSA_XNACK=1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(
        o.status.code(),
        Some(2),
        "an AMD facts file is valid input: {err}"
    );
    let d: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert!(d.get("verdict").is_some(), "{d}");
    // A vendor gpu-guard does not know is bad input, named.
    let mut bad = v.clone();
    bad["gpus"][0]["vendor"] = "intel".into();
    std::fs::write(&f, serde_json::to_vec(&bad).unwrap()).unwrap();
    let o = Command::new(*BIN)
        .args(["check", "--host"])
        .arg(&f)
        .args(["--env", "HSA_XNACK=1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("intel"), "{err}");
}

#[test]
fn amd_gpus_carry_their_numa_node_from_sysfs() {
    let (v, _) = facts("mi300x");
    assert_eq!(v["gpus"][0]["numa_node"], 0, "{v}");
    assert_eq!(v["gpus"][0]["local_cpus"], "0-47,96-143", "{v}");
    assert_eq!(v["gpus"][1]["numa_node"], 1, "{v}");
    assert_eq!(v["gpus"][1]["local_cpus"], "48-95,144-191", "{v}");
}

#[test]
fn node_labels_name_the_vendor_and_the_processor() {
    for (name, gfx) in [
        ("mi300x", "gfx942"),
        ("mi210", "gfx90a"),
        ("radeon-gfx1100", "gfx1100"),
        ("apu-gfx1103", "gfx1103"),
    ] {
        let dir = TempDir::new("amd-labels");
        let o = host(&dir, &["--node-labels"], &tree(name));
        assert_eq!(o.status.code(), Some(0), "{name}");
        let out = String::from_utf8_lossy(&o.stdout);
        let labels: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            labels,
            [
                format!("gpu-guard.io/amd.gfx={gfx}").as_str(),
                "gpu-guard.io/vendor=amd"
            ],
            "{name}: {out}"
        );
    }
}
