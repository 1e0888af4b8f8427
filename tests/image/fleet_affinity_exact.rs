//! The label-only affinity (`check --affinity` without `--nodes`, what the
//! admission webhook writes) admits exactly the labelled nodes `check
//! --nodes` allows, in at most 16 terms and 32 KB of YAML, for every
//! official nvidia/cuda requirement string (tests/data/requirements) with
//! images built from the real fat-binary fixtures (tests/data/fatbin,
//! integration/make-fatbin-fixtures.sh: SASS and PTX from sm_52 to sm_120,
//! `a` and `f` variants), on a generated fleet of hosts labelled by
//! `gpu-guard host --node-labels` (gpu-guard's labels), by GPU Feature
//! Discovery (as it labels: the last GPU model, current and deprecated
//! names), by both, by an older gpu-guard, and by the GPU health labeller:
//! GPUs of one model, of two and of three, Tegra parts, unknown compute
//! capabilities, every brand and driver branch 418 to 615; and AMD nodes
//! (fleet_affinity_amd), on which no CUDA image is placed. The terms must
//! pass the API server's validation; `--nodes` affinities too.
//!
//! The evaluator and the validator here are written from Kubernetes, apart
//! from gpu-guard's own:
//! - matching: k8s.io/component-helpers scheduling/corev1/nodeaffinity
//!   (terms ORed, an empty term matches nothing, a term's requirements
//!   ANDed) over apimachinery pkg/labels selector.go Requirement.Matches
//!   (In needs the key; NotIn and DoesNotExist hold without it; Gt/Lt need
//!   the key and strconv.ParseInt(value, 10, 64) of both sides);
//! - validation: kubernetes pkg/apis/core/validation ValidateNodeSelector /
//!   ValidateNodeSelectorRequirement / ValidateNodeFieldSelectorRequirement,
//!   apimachinery pkg/util/validation IsQualifiedName, IsValidLabelValue,
//!   IsDNS1123Subdomain, and labels.NewRequirement (Gt/Lt values integers).

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

// ---- Kubernetes: matching -------------------------------------------------

/// strconv.ParseInt(s, 10, 64).
fn go_parse_int(s: &str) -> Option<i64> {
    let d = s
        .strip_prefix('+')
        .or_else(|| s.strip_prefix('-'))
        .unwrap_or(s);
    if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn requirement_matches(
    e: &Value,
    name: &str,
    labels: &BTreeMap<String, String>,
    field: bool,
) -> bool {
    let key = e["key"].as_str().unwrap();
    let has = if field {
        Some(name)
    } else {
        labels.get(key).map(String::as_str)
    };
    let vals: Vec<&str> = e["values"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap()).collect())
        .unwrap_or_default();
    match e["operator"].as_str().unwrap() {
        "In" => has.is_some_and(|v| vals.contains(&v)),
        "NotIn" => !has.is_some_and(|v| vals.contains(&v)),
        "Exists" => has.is_some(),
        "DoesNotExist" => has.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(l), Some(r)) = (has.and_then(go_parse_int), go_parse_int(vals[0])) else {
                return false;
            };
            if op == "Gt" {
                l > r
            } else {
                l < r
            }
        }
        op => panic!("operator {op}"),
    }
}

fn terms(affinity: &Value) -> &Vec<Value> {
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .as_array()
        .expect("nodeSelectorTerms")
}

fn admitted(affinity: &Value, name: &str, labels: &BTreeMap<String, String>) -> bool {
    terms(affinity).iter().any(|t| {
        let ex = t["matchExpressions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let fi = t["matchFields"].as_array().cloned().unwrap_or_default();
        !(ex.is_empty() && fi.is_empty())
            && ex
                .iter()
                .all(|e| requirement_matches(e, name, labels, false))
            && fi
                .iter()
                .all(|e| requirement_matches(e, name, labels, true))
    })
}

// ---- Kubernetes: validation -------------------------------------------------

/// qualifiedNameFmt, at most 63 characters.
fn name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
}

/// IsDNS1123Subdomain.
fn dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

fn qualified_name(s: &str) -> bool {
    match s.split('/').collect::<Vec<_>>()[..] {
        [n] => name_part(n),
        [p, n] => dns1123_subdomain(p) && name_part(n),
        _ => false,
    }
}

fn label_value(s: &str) -> bool {
    s.is_empty() || name_part(s)
}

/// Every error the API server (and the scheduler's NewRequirement) would raise.
fn api_errors(affinity: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let ts = terms(affinity);
    if ts.is_empty() {
        errs.push("must have at least one node selector term".into());
    }
    for t in ts {
        for e in t["matchExpressions"].as_array().into_iter().flatten() {
            let key = e["key"].as_str().unwrap_or("");
            let vals: Vec<&str> = e["values"]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap_or("\u{0}")).collect())
                .unwrap_or_default();
            let ok = match e["operator"].as_str().unwrap_or("") {
                "In" | "NotIn" => !vals.is_empty(),
                "Exists" | "DoesNotExist" => vals.is_empty(),
                "Gt" | "Lt" => vals.len() == 1 && go_parse_int(vals[0]).is_some(),
                _ => false,
            };
            if !ok {
                errs.push(format!("bad values/operator: {e}"));
            }
            if !qualified_name(key) {
                errs.push(format!("key not a qualified name: {e}"));
            }
            if vals.iter().any(|v| !label_value(v)) {
                errs.push(format!("value not a label value: {e}"));
            }
        }
        for e in t["matchFields"].as_array().into_iter().flatten() {
            let vals = e["values"].as_array().cloned().unwrap_or_default();
            let ok = e["key"] == "metadata.name"
                && matches!(e["operator"].as_str(), Some("In" | "NotIn"))
                && vals.len() == 1
                && vals[0].as_str().is_some_and(dns1123_subdomain);
            if !ok {
                errs.push(format!("field requirement: {e}"));
            }
        }
    }
    errs
}

#[test]
fn the_validator_rejects_what_the_api_server_rejects() {
    let aff = |t: Value| json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": t}}});
    for bad in [
        json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a", "b"]}]}]),
        json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-guard.io/no-node"]}]}]),
        json!([{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1", "2"]}]}]),
        json!([{"matchExpressions": [{"key": "a/b/c", "operator": "Exists"}]}]),
        json!([]),
    ] {
        assert!(!api_errors(&aff(bad.clone())).is_empty(), "{bad}");
    }
    let good = aff(
        json!([{"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["0"]}]}]),
    );
    assert!(api_errors(&good).is_empty());
}

// ---- The generated fleet --------------------------------------------------

/// (driver, the CUDA it reports): NVIDIA's branches (CUDA release notes,
/// Table 3), two-part versions, and one newer than gpu-guard's tables.
const DRIVERS: &[(&str, &str)] = &[
    ("418.67", "10.1"),
    ("470.256.02", "11.4"),
    ("520.61.05", "11.8"),
    ("525.60.13", "12.0"),
    ("535.104.05", "12.2"),
    ("545.23.08", "12.3"),
    ("550.54.15", "12.4"),
    ("560.35.03", "12.6"),
    ("570.86.15", "12.8"),
    ("575.57.08", "12.9"),
    ("580.65.06", "13.0"),
    ("590.44.01", "13.1"),
    ("615.10", "13.5"),
];

/// (name, brand, compute capability): data-center, workstation, consumer
/// and Tegra GPUs (NVIDIA's CUDA GPU Compute Capability tables).
const MODELS: &[(&str, &str, Option<&str>)] = &[
    ("Tesla K80", "tesla", Some("3.7")),
    ("Tesla M60", "tesla", Some("5.2")),
    ("Jetson Nano", "nvidia", Some("5.3")),
    ("GeForce GTX 1080", "geforce", Some("6.1")),
    ("Tesla V100", "tesla", Some("7.0")),
    ("Tesla T4", "tesla", Some("7.5")),
    ("NVIDIA A100", "tesla", Some("8.0")),
    ("NVIDIA A10", "nvidia", Some("8.6")),
    ("Jetson Orin", "nvidia", Some("8.7")),
    ("NVIDIA L4", "nvidia", Some("8.9")),
    ("GeForce RTX 4090", "geforcertx", Some("8.9")),
    ("NVIDIA H100", "tesla", Some("9.0")),
    ("NVIDIA B200", "tesla", Some("10.0")),
    ("NVIDIA B300", "nvidia", Some("10.3")),
    ("Jetson Thor", "nvidia", Some("11.0")),
    ("GeForce RTX 5090", "geforcertx", Some("12.0")),
    ("NVIDIA GB10", "nvidia", Some("12.1")),
    ("Quadro RTX 8000", "quadrortx", Some("7.5")),
    ("NVIDIA GPU", "unknown", None),
];

/// The GPU sets of the hosts: indices into [`MODELS`], one model (1 or 4
/// GPUs), two, three.
const SETS: &[&[usize]] = &[
    &[11],
    &[6, 6, 6, 6],
    &[5],
    &[7],
    &[9],
    &[12],
    &[15],
    &[8],
    &[13],
    &[16],
    &[0],
    &[1],
    &[2],
    &[3],
    &[4],
    &[10],
    &[14],
    &[17],
    &[18],
    &[5, 7],
    &[6, 11, 11],
    &[11, 12],
    &[9, 7],
    &[5, 6, 11],
    &[6, 8],
];

/// How a node was labelled.
#[derive(Clone, Copy, PartialEq)]
enum Labeller {
    /// `gpu-guard host --node-labels` and GPU Feature Discovery.
    Both,
    /// `gpu-guard host --node-labels` alone.
    GpuGuard,
    /// GPU Feature Discovery alone (current names, with the deprecated).
    Gfd,
    /// An older GFD (deprecated names only) and an older gpu-guard (brand,
    /// driver branch, lowest compute capability).
    Older,
}

pub(crate) struct GenNode {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
}

fn facts_json(driver: &str, cuda: &str, set: &[usize]) -> Value {
    let gpus: Vec<Value> = set
        .iter()
        .enumerate()
        .map(|(i, &m)| {
            let (name, brand, cc) = MODELS[m];
            json!({"index": i, "uuid": format!("GPU-{i:08}-0000-0000-0000-000000000000"),
                   "name": name, "brand": brand, "compute_capability": cc})
        })
        .collect();
    json!({"driver_version": driver, "cuda_driver_version": cuda, "gpus": gpus})
}

/// `gpu-guard host --node-labels` on a host with these facts.
fn gpu_guard_labels(dir: &Path, facts: &Value) -> BTreeMap<String, String> {
    let f = dir.join("host.json");
    std::fs::write(&f, facts.to_string()).unwrap();
    let cfg = dir.join("host-config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[log]\nsyslog = false\n",
            f.display()
        ),
    )
    .unwrap();
    let o = Command::new(*BIN)
        .env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(&cfg)
        .args(["host", "--node-labels"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// GPU Feature Discovery's labels (NVIDIA/k8s-device-plugin
/// internal/lm/nvml.go, resource.go): versions by part, an empty revision
/// for a two-part driver, the last GPU's model and compute capability.
fn gfd_labels(l: &mut BTreeMap<String, String>, facts: &Value, deprecated_only: bool) {
    let mut put = |k: &str, v: &str| {
        l.insert(k.to_string(), v.to_string());
    };
    let driver = facts["driver_version"].as_str().unwrap();
    let p: Vec<&str> = driver.split('.').collect();
    let rev = p.get(2).copied().unwrap_or("");
    put("nvidia.com/cuda.driver.major", p[0]);
    put("nvidia.com/cuda.driver.minor", p[1]);
    put("nvidia.com/cuda.driver.rev", rev);
    let (a, b) = facts["cuda_driver_version"]
        .as_str()
        .unwrap()
        .split_once('.')
        .unwrap();
    put("nvidia.com/cuda.runtime.major", a);
    put("nvidia.com/cuda.runtime.minor", b);
    if !deprecated_only {
        put("nvidia.com/cuda.driver-version.major", p[0]);
        put("nvidia.com/cuda.driver-version.minor", p[1]);
        put("nvidia.com/cuda.driver-version.revision", rev);
        put("nvidia.com/cuda.driver-version.full", driver);
        put("nvidia.com/cuda.runtime-version.major", a);
        put("nvidia.com/cuda.runtime-version.minor", b);
    }
    let gpus = facts["gpus"].as_array().unwrap();
    let last = gpus.last().unwrap();
    if let Some((x, y)) = last["compute_capability"]
        .as_str()
        .and_then(|c| c.split_once('.'))
    {
        put("nvidia.com/gpu.compute.major", x);
        put("nvidia.com/gpu.compute.minor", y);
    }
    put("nvidia.com/gpu.count", &gpus.len().to_string());
    put("nvidia.com/gpu.present", "true");
    put(
        "nvidia.com/gpu.product",
        &last["name"].as_str().unwrap().replace(' ', "-"),
    );
}

/// An older gpu-guard's labels: brand, driver branch, the lowest capability.
fn older_labels(l: &mut BTreeMap<String, String>, facts: &Value) {
    let gpus = facts["gpus"].as_array().unwrap();
    let mut brands: Vec<&str> = gpus.iter().map(|g| g["brand"].as_str().unwrap()).collect();
    brands.sort_unstable();
    brands.dedup();
    let brand = if brands.len() == 1 {
        brands[0]
    } else {
        "mixed"
    };
    l.insert("gpu-guard.io/brand".into(), brand.into());
    let branch = facts["driver_version"]
        .as_str()
        .unwrap()
        .split('.')
        .next()
        .unwrap();
    l.insert("gpu-guard.io/driver.branch".into(), branch.into());
    if let Some(c) = gpus
        .iter()
        .filter_map(|g| g["compute_capability"].as_str())
        .min()
    {
        let (a, b) = c.split_once('.').unwrap();
        l.insert("gpu-guard.io/compute.min.major".into(), a.into());
        l.insert("gpu-guard.io/compute.min.minor".into(), b.into());
    }
}

/// The fleet: every driver x GPU set, labelled in turn by every labeller;
/// some with the health labeller's counts; and a CPU node.
pub(crate) fn fleet(dir: &Path) -> Vec<GenNode> {
    let mut out = Vec::new();
    let labellers = [
        Labeller::Both,
        Labeller::Both,
        Labeller::GpuGuard,
        Labeller::Gfd,
        Labeller::Older,
    ];
    let mut i = 0usize;
    for (d, (driver, cuda)) in DRIVERS.iter().enumerate() {
        for k in 0..12 {
            i += 1;
            let set = SETS[(d * 12 + k) % SETS.len()];
            let facts = facts_json(driver, cuda, set);
            let who = labellers[(d + k) % labellers.len()];
            let mut l = match who {
                Labeller::Both | Labeller::GpuGuard => gpu_guard_labels(dir, &facts),
                Labeller::Gfd | Labeller::Older => BTreeMap::new(),
            };
            match who {
                Labeller::Both | Labeller::Gfd => gfd_labels(&mut l, &facts, false),
                Labeller::Older => {
                    gfd_labels(&mut l, &facts, true);
                    older_labels(&mut l, &facts);
                }
                Labeller::GpuGuard => {}
            }
            // The GPU health labeller: all healthy, one failed, all failed.
            let n = set.len();
            let (healthy, failed) = match i % 5 {
                0 => (n, 0),
                1 => (n - 1, 1),
                2 => (0, n),
                _ => (usize::MAX, 0),
            };
            if healthy != usize::MAX && who != Labeller::Older {
                l.insert("gpu-guard.io/gpu.healthy".into(), healthy.to_string());
                l.insert("gpu-guard.io/gpu.failed".into(), failed.to_string());
            }
            out.push(GenNode {
                name: format!("n{i}-{driver}-{}", set.len()).replace('.', "-"),
                labels: l,
            });
        }
    }
    // Nodes most images run on: recent drivers, labelled by both.
    let recent: &[(&str, &str, &[usize])] = &[
        ("550.54.15", "12.4", &[11, 11, 11, 11]),
        ("570.86.15", "12.8", &[11]),
        ("580.65.06", "13.0", &[6, 11]),
        ("575.57.08", "12.9", &[12]),
        ("615.10", "13.5", &[11, 12]),
        ("615.10", "13.5", &[15]),
        ("570.86.15", "12.8", &[9]),
        ("560.35.03", "12.6", &[5, 5]),
    ];
    for (driver, cuda, set) in recent {
        i += 1;
        let facts = facts_json(driver, cuda, set);
        let mut l = gpu_guard_labels(dir, &facts);
        gfd_labels(&mut l, &facts, false);
        if i % 2 == 0 {
            l.insert("gpu-guard.io/gpu.healthy".into(), set.len().to_string());
            l.insert("gpu-guard.io/gpu.failed".into(), "0".into());
        }
        out.push(GenNode {
            name: format!("r{i}-{driver}-{}", set.len()).replace('.', "-"),
            labels: l,
        });
    }
    // AMD nodes, labelled by gpu-guard, AMD's node labeller or both.
    out.extend(crate::fleet_affinity_amd::amd_nodes(dir));
    let mut cpu = BTreeMap::new();
    cpu.insert("kubernetes.io/os".to_string(), "linux".to_string());
    out.push(GenNode {
        name: "cpu-0".into(),
        labels: cpu,
    });
    out
}

pub(crate) fn write_nodes(dir: &Path, nodes: &[GenNode]) -> PathBuf {
    let items: Vec<Value> = nodes
        .iter()
        .map(|n| json!({"kind": "Node", "metadata": {"name": n.name, "labels": n.labels}}))
        .collect();
    let p = dir.join("nodes.json");
    std::fs::write(
        &p,
        serde_json::to_vec(&json!({"kind": "List", "apiVersion": "v1", "items": items})).unwrap(),
    )
    .unwrap();
    p
}

const CONFIG: &str = "[host]\ncache_file = \"\"\n[log]\nsyslog = false\n[kernel_image]\ncache_dir = \"\"\n[libraries]\ncache_dir = \"\"\n";

pub(crate) fn tmpdir(name: &str) -> PathBuf {
    let d = crate::support::tempdir(&format!("exact-{name}"));
    std::fs::write(d.join("config.toml"), CONFIG).unwrap();
    d
}

/// `gpu-guard check` of `image` (or of the env alone) with `args`.
fn gg(dir: &Path, image: Option<&Path>, env: &[String], args: &[&str]) -> std::process::Output {
    let mut c = Command::new(*BIN);
    c.env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("check");
    if let Some(i) = image {
        c.arg("--image").arg(i);
    }
    for e in env {
        c.arg("--env").arg(e);
    }
    c.args(args).output().unwrap()
}

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

/// An image of NVIDIA's official env for `tag` (its NVIDIA_REQUIRE_CUDA
/// and CUDA_VERSION) whose libraries are these fat-binary fixtures.
fn image(name: &str, tag: &str, req: &str, fixtures: &[&str]) -> PathBuf {
    use crate::image_support::*;
    let version = tag.split('-').next().unwrap();
    let env = vec![
        "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/sbin:/usr/bin".to_string(),
        format!("CUDA_VERSION={version}"),
        format!("NVIDIA_REQUIRE_CUDA={req}"),
        "NVIDIA_VISIBLE_DEVICES=all".to_string(),
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility".to_string(),
    ];
    let libs: Vec<(String, Vec<u8>)> = fixtures
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let name = ["libcublas", "libcudnn", "libnccl"][i % 3];
            (
                format!("usr/local/cuda/lib64/{name}.so.12"),
                std::fs::read(data(&format!("fatbin/{f}"))).unwrap(),
            )
        })
        .collect();
    let mut entries = vec![
        E::Dir("usr/"),
        E::Dir("usr/local/"),
        E::Dir("usr/local/cuda/"),
        E::Dir("usr/local/cuda/lib64/"),
    ];
    entries.extend(libs.iter().map(|(p, b)| E::File(p, b)));
    oci_layout(name, &env, &[gz(&tar_of(&entries))])
}

/// The label-only affinity (YAML, as the webhook and people read it) and
/// `check --nodes` agree on every node; the affinity is within 16 terms and
/// 32 KB, valid for the API server, and says nothing of being stricter or
/// looser. Returns how many nodes run it.
pub(crate) fn assert_exact(
    dir: &Path,
    nodes: (&Path, &[GenNode]),
    image: Option<&Path>,
    env: &[String],
    extra: &[&str],
    what: &str,
) -> usize {
    let (file, list) = nodes;
    let mut args = vec!["--nodes", file.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let fleet = gg(dir, image, env, &args);
    let v: Value = serde_json::from_slice(&fleet.stdout)
        .unwrap_or_else(|e| panic!("{what}: {e}: {}", String::from_utf8_lossy(&fleet.stderr)));
    let mut args = vec!["--affinity"];
    args.extend_from_slice(extra);
    let aff = gg(dir, image, env, &args);
    let yaml = String::from_utf8(aff.stdout).unwrap();
    let affinity: Value =
        serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("{what}: {e}: {yaml}"));
    let n_terms = terms(&affinity).len();
    assert!(n_terms <= 16, "{what}: {n_terms} terms\n{yaml}");
    assert!(
        yaml.len() <= 32 * 1024,
        "{what}: {} bytes of YAML",
        yaml.len()
    );
    assert_eq!(api_errors(&affinity), Vec::<String>::new(), "{what}");
    for word in ["not exact", "stricter", "looser"] {
        assert!(!yaml.contains(word), "{what}: {word}\n{yaml}");
    }
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), list.len());
    let mut allowed = 0;
    for (n, r) in list.iter().zip(results) {
        assert_eq!(r["host"], n.name);
        let ok = r["decision"]["verdict"] == "allow";
        allowed += usize::from(ok);
        assert_eq!(
            admitted(&affinity, &n.name, &n.labels),
            ok,
            "{what}: node {} {:?}\n{:#}\n{yaml}",
            n.name,
            n.labels,
            r["decision"]
        );
    }
    assert_eq!(v["summary"]["allowed"], allowed, "{what}");
    // 0: exact and admitting a node with some labels (maybe none of this
    // fleet); 1: no node with any labels could run it, said so.
    let none = yaml.contains("gpu-guard.io/admits-none");
    assert_eq!(aff.status.code(), Some(i32::from(none)), "{what}\n{yaml}");
    assert!(!none || allowed == 0, "{what}\n{yaml}");
    assert_eq!(
        none,
        yaml.contains("no node with any labels could run it"),
        "{what}"
    );
    eprintln!(
        "{what}: {allowed} of {} nodes, {n_terms} terms, {} bytes",
        list.len(),
        yaml.len()
    );
    allowed
}

/// The fixtures the official images are built with, in turn: every mix of
/// SASS and PTX the fixtures hold, one library or several.
const FIXTURE_MIXES: &[&[&str]] = &[
    &["multi-arch.so"],
    &["sm90a.so"],
    &["sm100f.so"],
    &["ptx-only.so"],
    &["sass-only.so"],
    &["old-arch.so"],
    &["compressed-lz4.so"],
    &["concat.so"],
    &["uncompressed.so", "sm100f.so"],
    &["multi-arch.so", "old-arch.so"],
    &["ident.so", "compressed-zstd.so"],
    &["rdc.so"],
];

#[test]
fn official_images_with_gpu_code_are_exact_on_the_generated_fleet() {
    let dir = tmpdir("official");
    let nodes = fleet(&dir);
    let file = write_nodes(&dir, &nodes);
    let mut total = 0;
    for (k, (tag, req)) in official().iter().enumerate() {
        let mix = FIXTURE_MIXES[k % FIXTURE_MIXES.len()];
        let img = image(&format!("official-{tag}"), tag, req, mix);
        let what = format!("{tag} with {mix:?}");
        assert_exact(&dir, (&file, &nodes), Some(&img), &[], &[], &what);
        total += 1;
    }
    assert_eq!(total, 16);
    // The requirement strings alone (no GPU code) are exact too.
    for (tag, req) in official().iter().step_by(5) {
        let env = vec![
            "NVIDIA_VISIBLE_DEVICES=all".to_string(),
            format!("NVIDIA_REQUIRE_CUDA={req}"),
        ];
        assert!(
            assert_exact(&dir, (&file, &nodes), None, &env, &[], tag) > 0,
            "{tag}"
        );
    }
}

/// Placement follows the prediction, not the severity: under the default
/// `[kernel_image] severity = "warn"` the nodes that run an sm_90a-only
/// library are the same as under "enforce", and the same for a pod asking
/// for four GPUs; a request by index is exact on nodes of two models too.
#[test]
fn placement_follows_the_prediction_whatever_the_severity() {
    let dir = tmpdir("severity");
    let nodes = fleet(&dir);
    let file = write_nodes(&dir, &nodes);
    let reqs: BTreeMap<String, String> = official().into_iter().collect();
    let img = image("severity", "12.4.1", &reqs["12.4.1"], &["sm90a.so"]);
    let warn = assert_exact(&dir, (&file, &nodes), Some(&img), &[], &[], "sm90a warn");
    std::fs::write(
        dir.join("config.toml"),
        CONFIG.replace(
            "[kernel_image]\n",
            "[kernel_image]\nseverity = \"enforce\"\n",
        ),
    )
    .unwrap();
    let enforce = assert_exact(&dir, (&file, &nodes), Some(&img), &[], &[], "sm90a enforce");
    assert_eq!(warn, enforce);
    assert!(warn > 0);
    let four = assert_exact(
        &dir,
        (&file, &nodes),
        Some(&img),
        &[],
        &["--gpu-count", "4"],
        "sm90a, 4 GPUs",
    );
    assert!(four < warn, "{four} {warn}");
    let by_index = ["NVIDIA_VISIBLE_DEVICES=0,1".to_string()];
    let img2 = image("by-index", "12.8.1", &reqs["12.8.1"], &["multi-arch.so"]);
    assert_exact(
        &dir,
        (&file, &nodes),
        Some(&img2),
        &by_index,
        &[],
        "multi-arch by index",
    );
}

/// A deny follows only from what the image is: a requirement no node can
/// hold is "no node could run it" (exit 1); one that needs a CUDA newer
/// than gpu-guard's tables is an affinity a node with such a driver meets.
#[test]
fn no_node_only_for_what_cannot_change() {
    let dir = tmpdir("nowhere");
    let env = |r: &str| {
        vec![
            "NVIDIA_VISIBLE_DEVICES=all".to_string(),
            format!("NVIDIA_REQUIRE_CUDA={r}"),
        ]
    };
    let o = gg(&dir, None, &env("cuda>=12.0,cuda<11.0"), &["--affinity"]);
    let yaml = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{yaml}");
    assert!(
        yaml.contains("no node with any labels could run it"),
        "{yaml}"
    );
    let o = gg(&dir, None, &env("cuda>=14.2"), &["--affinity"]);
    let yaml = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{yaml}");
    let affinity: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    let mut l = BTreeMap::new();
    for (k, v) in [
        ("gpu-guard.io/driver.int", "700001000"),
        ("gpu-guard.io/driver.branch", "700"),
        ("gpu-guard.io/cuda.int", "1402"),
    ] {
        l.insert(k.to_string(), v.to_string());
    }
    assert!(admitted(&affinity, "future", &l), "{yaml}");
    l.insert("gpu-guard.io/cuda.int".into(), "1401".into());
    assert!(!admitted(&affinity, "present", &l), "{yaml}");
}

/// `--nodes` affinities pass the API server's rules, also when they admit
/// none (an `In` on a value no node carries is not such a term).
#[test]
fn nodes_affinities_are_valid_and_admit_none_when_nothing_runs() {
    let dir = tmpdir("none");
    let nodes = data("nodes/fleet.json");
    for req in [
        "cuda>=99.0",
        "cuda>=12.4 brand=tesla,driver>=535,driver<536",
        "driver>=550.54.14",
    ] {
        let env = vec![
            "NVIDIA_VISIBLE_DEVICES=all".to_string(),
            format!("NVIDIA_REQUIRE_CUDA={req}"),
        ];
        let o = gg(
            &dir,
            None,
            &env,
            &["--nodes", nodes.to_str().unwrap(), "--affinity", "--json"],
        );
        let affinity: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            api_errors(&affinity),
            Vec::<String>::new(),
            "{req}: {affinity:#}"
        );
        let list: Value = serde_json::from_str(&std::fs::read_to_string(&nodes).unwrap()).unwrap();
        let any = list["items"].as_array().unwrap().iter().any(|n| {
            let labels: BTreeMap<String, String> =
                serde_json::from_value(n["metadata"]["labels"].clone()).unwrap();
            admitted(&affinity, n["metadata"]["name"].as_str().unwrap(), &labels)
        });
        assert_eq!(any, req != "cuda>=99.0", "{req}");
        assert_eq!(o.status.code(), Some(if any { 0 } else { 1 }));
    }
}

/// `check --strict` on one host: a container the node starts (kernel-image
/// findings are warnings by default) but whose code has nothing for the
/// GPU exits 1; code that runs through a PTX JIT is no failure.
#[test]
fn strict_counts_predicted_failures_and_not_a_jit() {
    let dir = tmpdir("strict");
    let reqs: BTreeMap<String, String> = official().into_iter().collect();
    let img = image("strict", "12.4.1", &reqs["12.4.1"], &["multi-arch.so"]);
    let host = |name: &str, cc: &str| {
        let f = dir.join(format!("{name}.json"));
        let facts = json!({"driver_version": "615.10", "cuda_driver_version": "13.5",
            "gpus": [{"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000",
                      "name": name, "brand": "tesla", "compute_capability": cc}]});
        std::fs::write(&f, facts.to_string()).unwrap();
        f
    };
    let check = |h: &Path, strict: bool| {
        let mut args = vec!["--host", h.to_str().unwrap(), "--json"];
        if strict {
            args.push("--strict");
        }
        let o = gg(&dir, Some(&img), &[], &args);
        let d: Value = serde_json::from_slice(&o.stdout).unwrap();
        (o.status.code(), d)
    };
    // sm_75, sm_80, sm_90a and compute_90: nothing for 8.7 (Tegra).
    let orin = host("orin", "8.7");
    let (code, d) = check(&orin, false);
    assert_eq!(
        (code, d["verdict"].as_str()),
        (Some(0), Some("allow")),
        "{d}"
    );
    let predicted: Vec<&Value> = d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["predicts_failure"] == true)
        .collect();
    assert!(!predicted.is_empty(), "{d}");
    assert_eq!(predicted[0]["check"], "kernel-image");
    assert_eq!(check(&orin, true).0, Some(1));
    // A B200 runs compute_90 through the JIT (the driver has CUDA 13.5).
    let b200 = host("b200", "10.0");
    let (code, d) = check(&b200, true);
    assert_eq!(code, Some(0), "{d}");
    assert!(d["findings"].to_string().contains("JIT"), "{d}");
}
