//! `check --affinity`: the printed nodeAffinity, evaluated
//! here by a node-selector evaluator written from the Kubernetes API rules
//! (terms ORed, expressions ANDed; Gt/Lt compare integers; NotIn and
//! DoesNotExist hold on a missing label), admits exactly the nodes on which
//! `check --nodes` allows the container, including driver boundary nodes.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn check(nodes: &str, req: &str, extra: &[&str]) -> std::process::Output {
    let dir = crate::support::TempDir::new("aff");
    let cfg = dir.join("config.toml");
    std::fs::write(&cfg, "[host]\ncache_file = \"\"\n[log]\nsyslog = false\n").unwrap();
    Command::new(*BIN)
        .env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(&cfg)
        .args(["check", "--env", "NVIDIA_VISIBLE_DEVICES=all", "--env"])
        .arg(format!("NVIDIA_REQUIRE_CUDA={req}"))
        .arg("--nodes")
        .arg(data(nodes))
        .args(extra)
        .output()
        .unwrap()
}

fn holds(e: &Value, name: &str, labels: &Value) -> bool {
    let key = e["key"].as_str().unwrap();
    let v = if key == "metadata.name" {
        Some(name)
    } else {
        labels[key].as_str()
    };
    let vals: Vec<&str> = e["values"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap()).collect())
        .unwrap_or_default();
    let int = |s: &str| s.parse::<i64>().ok();
    match e["operator"].as_str().unwrap() {
        "In" => v.is_some_and(|v| vals.contains(&v)),
        "NotIn" => !v.is_some_and(|v| vals.contains(&v)),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        "Gt" => matches!((v.and_then(int), int(vals[0])), (Some(a), Some(b)) if a > b),
        "Lt" => matches!((v.and_then(int), int(vals[0])), (Some(a), Some(b)) if a < b),
        op => panic!("operator {op}"),
    }
}

fn admitted(affinity: &Value, node: &Value) -> bool {
    let name = node["metadata"]["name"].as_str().unwrap();
    let labels = &node["metadata"]["labels"];
    let terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()
        .unwrap();
    assert!(!terms.is_empty());
    terms.iter().any(|t| {
        let all = |k: &str| {
            t[k].as_array()
                .map(|a| a.iter().all(|e| holds(e, name, labels)))
                .unwrap_or(true)
        };
        all("matchExpressions") && all("matchFields")
    })
}

/// Runs `--affinity --json` and the fleet JSON, and compares node by node.
fn assert_exact(nodes: &str, req: &str) -> Vec<(String, bool)> {
    let aff = check(nodes, req, &["--affinity", "--json"]);
    let affinity: Value = serde_json::from_slice(&aff.stdout).unwrap();
    let fleet: Value = serde_json::from_slice(&check(nodes, req, &["--json"]).stdout).unwrap();
    let list: Value = serde_json::from_str(&std::fs::read_to_string(data(nodes)).unwrap()).unwrap();
    let mut out = Vec::new();
    for (node, r) in list["items"]
        .as_array()
        .unwrap()
        .iter()
        .zip(fleet["results"].as_array().unwrap())
    {
        assert_eq!(node["metadata"]["name"], r["host"]);
        let allowed = r["decision"]["verdict"] == "allow";
        assert_eq!(
            admitted(&affinity, node),
            allowed,
            "{req}: node {} ({affinity:#})",
            r["host"]
        );
        out.push((r["host"].as_str().unwrap().to_string(), allowed));
    }
    out
}

#[test]
fn driver_bound_boundaries() {
    let got = assert_exact("nodes/driver-boundary.json", "driver>=550.54.14");
    let allowed: Vec<&str> = got
        .iter()
        .filter(|(_, a)| *a)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        allowed,
        [
            "drv-550-54-14",
            "drv-550-55-0",
            "drv-551-0-0",
            "drv-550-54-15"
        ]
    );
    // Exactness comes from the expressions here, not from node names.
    let yaml = String::from_utf8(
        check(
            "nodes/driver-boundary.json",
            "driver>=550.54.14",
            &["--affinity"],
        )
        .stdout,
    )
    .unwrap();
    assert!(!yaml.contains("metadata.name"), "{yaml}");
    assert!(yaml.contains("key: \"nvidia.com/cuda.driver-version.revision\"\n          operator: Gt\n          values: [\"13\"]"), "{yaml}");
    assert_exact("nodes/driver-boundary.json", "driver<550.54.14");
    assert_exact("nodes/driver-boundary.json", "driver>=550.54.14,driver<551");
    assert_exact("nodes/driver-boundary.json", "driver=550.55");
}

#[test]
fn cuda_image_requirement_on_the_fleet() {
    let req = "cuda>=12.4 brand=tesla,driver>=535,driver<536";
    let got = assert_exact("nodes/fleet.json", req);
    assert_eq!(got.iter().filter(|(_, a)| *a).count(), 4);
    assert_exact("nodes/fleet.json", "cuda>=12.2 brand=geforcertx");
    assert_exact("nodes/fleet.json", "arch>=8.0");
    assert_exact("nodes/fleet.json", "cuda>=13.0");
}

#[test]
fn without_nodes_the_requirements_alone() {
    let cfg = crate::support::tempdir("aff-alone").join("config.toml");
    std::fs::write(&cfg, "[log]\nsyslog = false\n").unwrap();
    let o = Command::new(*BIN)
        .env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(&cfg)
        .args([
            "check",
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
            "--affinity",
        ])
        .output()
        .unwrap();
    let yaml = String::from_utf8(o.stdout).unwrap();
    assert!(yaml.starts_with("# "), "{yaml}");
    assert!(
        yaml.contains("nodeSelectorTerms:\n      - matchExpressions:"),
        "{yaml}"
    );
    assert!(yaml.contains("nvidia.com/cuda.runtime-version.major"));
}
