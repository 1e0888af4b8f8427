//! The label-only affinity (`check --affinity` without `--nodes`, issue 21
//! A4) admits exactly the labelled nodes `check --nodes` allows, for every
//! official nvidia/cuda requirement string (tests/data/requirements) and
//! more, on a generated fleet: every brand (and none, and `mixed`) x driver
//! branches 418..590 (three-part and two-part versions) x compute
//! capabilities (and none) x current vs deprecated-only GFD labels x
//! GFD-only vs gpu-guard-labelled. The terms must pass the API server's
//! validation; `--nodes` affinities too (issue 17 C6).
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

const BIN: &str = env!("CARGO_BIN_EXE_gpu-guard");

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

const BRANDS: &[&str] = &[
    "tesla",
    "geforce",
    "geforcertx",
    "quadro",
    "quadrortx",
    "nvidia",
    "nvidiartx",
    "titan",
    "titanrtx",
    "grid",
    "nvs",
    "vapps",
    "vpc",
    "vcs",
    "vws",
    "cloudgaming",
    "unknown",
];

/// Driver branch -> the CUDA it runs (CUDA release notes, Table 3).
const BRANCHES: &[(u32, &str)] = &[
    (418, "10.1"),
    (440, "10.2"),
    (450, "11.0"),
    (470, "11.4"),
    (510, "11.6"),
    (515, "11.7"),
    (520, "11.8"),
    (525, "12.0"),
    (530, "12.1"),
    (535, "12.2"),
    (545, "12.3"),
    (550, "12.4"),
    (555, "12.5"),
    (560, "12.6"),
    (565, "12.7"),
    (570, "12.8"),
    (575, "12.9"),
    (580, "13.0"),
    (590, "13.1"),
];

const CCS: &[Option<&str>] = &[
    None,
    Some("3.7"),
    Some("5.2"),
    Some("6.1"),
    Some("7.0"),
    Some("7.5"),
    Some("8.0"),
    Some("8.6"),
    Some("8.7"),
    Some("8.9"),
    Some("9.0"),
    Some("10.0"),
    Some("12.0"),
];

struct GenNode {
    name: String,
    labels: BTreeMap<String, String>,
}

/// GFD's labels for a driver and CUDA (NVIDIA/k8s-device-plugin
/// internal/lm/nvml.go): the current names with the deprecated ones, or
/// (an older GFD) the deprecated ones alone.
fn gfd_labels(
    l: &mut BTreeMap<String, String>,
    driver: &str,
    cuda: Option<&str>,
    cc: Option<&str>,
    deprecated_only: bool,
) {
    let mut put = |k: &str, v: &str| {
        l.insert(k.to_string(), v.to_string());
    };
    let p: Vec<&str> = driver.split('.').collect();
    let rev = p.get(2).copied().unwrap_or("");
    put("nvidia.com/cuda.driver.major", p[0]);
    put("nvidia.com/cuda.driver.minor", p[1]);
    put("nvidia.com/cuda.driver.rev", rev);
    if !deprecated_only {
        put("nvidia.com/cuda.driver-version.major", p[0]);
        put("nvidia.com/cuda.driver-version.minor", p[1]);
        put("nvidia.com/cuda.driver-version.revision", rev);
        put("nvidia.com/cuda.driver-version.full", driver);
    }
    if let Some(c) = cuda {
        let (a, b) = c.split_once('.').unwrap();
        put("nvidia.com/cuda.runtime.major", a);
        put("nvidia.com/cuda.runtime.minor", b);
        if !deprecated_only {
            put("nvidia.com/cuda.runtime-version.major", a);
            put("nvidia.com/cuda.runtime-version.minor", b);
            put("nvidia.com/cuda.runtime-version.full", c);
        }
    }
    if let Some(c) = cc {
        let (a, b) = c.split_once('.').unwrap();
        put("nvidia.com/gpu.compute.major", a);
        put("nvidia.com/gpu.compute.minor", b);
    }
    put("nvidia.com/gpu.count", "4");
    put("nvidia.com/gpu.present", "true");
    put("nvidia.com/gpu.product", "NVIDIA-Test-GPU");
}

/// The fleet: every brand value x branch, compute capabilities rotated
/// through, both GFD generations, with and without gpu-guard's labels,
/// plus two-part drivers, nodes without CUDA labels, and nodes whose only
/// compute capability is gpu-guard's.
fn fleet() -> Vec<GenNode> {
    let mut out = Vec::new();
    let brand_values: Vec<Option<&str>> = std::iter::once(None)
        .chain(std::iter::once(Some("mixed")))
        .chain(BRANDS.iter().map(|b| Some(*b)))
        .collect();
    let mut i = 0usize;
    for (bi, brand) in brand_values.iter().enumerate() {
        for (di, (branch, cuda)) in BRANCHES.iter().enumerate() {
            for deprecated in [false, true] {
                i += 1;
                let cc = CCS[(bi + di + usize::from(deprecated)) % CCS.len()];
                let driver = match i % 5 {
                    0 => format!("{branch}.0"),
                    1 => format!("{branch}.54.14"),
                    _ => format!("{branch}.104.05"),
                };
                let cuda = (i % 11 != 0).then_some(*cuda);
                let gfd_cc = if i % 7 == 0 { None } else { cc };
                let mut l = BTreeMap::new();
                gfd_labels(&mut l, &driver, cuda, gfd_cc, deprecated);
                if let Some(b) = brand {
                    l.insert("gpu-guard.io/brand".into(), b.to_string());
                    l.insert("gpu-guard.io/driver.branch".into(), branch.to_string());
                    if let Some(c) = cc {
                        let (a, m) = c.split_once('.').unwrap();
                        l.insert("gpu-guard.io/compute.min.major".into(), a.into());
                        l.insert("gpu-guard.io/compute.min.minor".into(), m.into());
                    }
                    if *b != "mixed" {
                        l.insert(format!("gpu-guard.io/brand.{b}"), "true".into());
                    }
                }
                out.push(GenNode {
                    name: format!("n{i}-{}-{branch}", brand.unwrap_or("nolabel")),
                    labels: l,
                });
            }
        }
    }
    let mut cpu = BTreeMap::new();
    cpu.insert("kubernetes.io/os".to_string(), "linux".to_string());
    out.push(GenNode {
        name: "cpu-0".into(),
        labels: cpu,
    });
    out
}

fn write_nodes(dir: &Path, nodes: &[GenNode]) -> PathBuf {
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

fn tmpdir(name: &str) -> PathBuf {
    let d = crate::support::tempdir(&format!("exact-{name}"));
    std::fs::write(
        d.join("config.toml"),
        "[host]\ncache_file = \"\"\n[log]\nsyslog = false\n",
    )
    .unwrap();
    d
}

fn gg(dir: &Path, env: &[String], extra: &[&str]) -> std::process::Output {
    let mut c = Command::new(BIN);
    c.env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("check");
    if let Ok(image) = std::fs::read_to_string(dir.join("image")) {
        c.arg("--image").arg(image);
    }
    for e in env {
        c.arg("--env").arg(e);
    }
    c.args(extra).output().unwrap()
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

/// For one container env: the allowed nodes of `check --nodes`, and the
/// label-only affinity's terms; asserts they agree on every node.
fn assert_exact(
    dir: &Path,
    nodes_file: &Path,
    nodes: &[GenNode],
    env: &[String],
    what: &str,
) -> (usize, Value) {
    let fleet = gg(
        dir,
        env,
        &["--nodes", nodes_file.to_str().unwrap(), "--json"],
    );
    let v: Value = serde_json::from_slice(&fleet.stdout)
        .unwrap_or_else(|e| panic!("{what}: {e}: {}", String::from_utf8_lossy(&fleet.stderr)));
    let aff = gg(dir, env, &["--affinity", "--json"]);
    let affinity: Value = serde_json::from_slice(&aff.stdout).unwrap();
    // Exit 0: exact and admitting some labelled node (a CUDA 99 node would
    // run `cuda>=99.0`); 1 only for the term that admits none.
    let none = terms(&affinity)[0]["matchExpressions"][0]["key"] == "gpu-guard.io/admits-none";
    assert_eq!(
        aff.status.code(),
        Some(i32::from(none)),
        "{what}: {}",
        String::from_utf8_lossy(&aff.stderr)
    );
    assert_eq!(api_errors(&affinity), Vec::<String>::new(), "{what}");
    let notes = String::from_utf8_lossy(&aff.stderr);
    assert!(!notes.contains("not exact"), "{what}: {notes}");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), nodes.len());
    let mut allowed = 0;
    for (n, r) in nodes.iter().zip(results) {
        assert_eq!(r["host"], n.name);
        let ok = r["decision"]["verdict"] == "allow";
        allowed += usize::from(ok);
        assert_eq!(
            admitted(&affinity, &n.name, &n.labels),
            ok,
            "{what}: node {} {:?}\n{}\n{affinity:#}",
            n.name,
            n.labels,
            r["decision"]
        );
    }
    (allowed, affinity)
}

#[test]
fn official_requirements_are_exact_on_the_generated_fleet() {
    let dir = tmpdir("official");
    let nodes = fleet();
    let file = write_nodes(&dir, &nodes);
    let mut total = 0;
    for (tag, req) in official() {
        let env = vec![
            "NVIDIA_VISIBLE_DEVICES=all".to_string(),
            format!("NVIDIA_REQUIRE_CUDA={req}"),
        ];
        let (allowed, affinity) = assert_exact(&dir, &file, &nodes, &env, &tag);
        assert!(allowed > 0, "{tag}");
        assert!(
            terms(&affinity).len() <= 8,
            "{tag}: {} terms",
            terms(&affinity).len()
        );
        total += 1;
    }
    assert_eq!(total, 16);
    eprintln!(
        "exact: {total} official requirement strings x {} nodes",
        nodes.len()
    );
}

#[test]
fn other_requirements_are_exact_too() {
    let dir = tmpdir("other");
    let nodes = fleet();
    let file = write_nodes(&dir, &nodes);
    let cases: &[&[&str]] = &[
        &["NVIDIA_REQUIRE_CUDA=driver>=550.54.14"],
        &["NVIDIA_REQUIRE_CUDA=driver<535.104.05 cuda>=12.6"],
        &["NVIDIA_REQUIRE_CUDA=cuda>=12.2 brand=geforcertx"],
        &[
            "NVIDIA_REQUIRE_CUDA=arch>=8.0",
            "NVIDIA_REQUIRE_ARCH=arch<10",
        ],
        &["NVIDIA_REQUIRE_CUDA=cuda>=12.4,arch>=8.0 brand!=geforce,driver>=535,driver<536"],
        &["NVIDIA_REQUIRE_CUDA=cuda>=99.0"],
        &["CUDA_VERSION=12.1.1"],
        &[
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
            "NVIDIA_VISIBLE_DEVICES=0,5",
        ],
        &["NVIDIA_REQUIRE_CUDA=cuda=12.2 driver=535.104.5"],
    ];
    for env in cases {
        let env: Vec<String> = env.iter().map(|s| s.to_string()).collect();
        assert_exact(&dir, &file, &nodes, &env, &env.join(" "));
    }
}

/// Issue 21 A4's two counter-examples: nodes gpu-guard refuses that the
/// old driver-label fallback admitted.
#[test]
fn official_images_are_not_admitted_where_they_are_refused() {
    let dir = tmpdir("counter");
    let reqs: BTreeMap<String, String> = official().into_iter().collect();
    let node = |driver: &str, cuda: &str, brand: &str| {
        let mut l = BTreeMap::new();
        gfd_labels(&mut l, driver, Some(cuda), Some("8.9"), false);
        l.insert("gpu-guard.io/brand".into(), brand.into());
        l.insert(
            "gpu-guard.io/driver.branch".into(),
            driver.split('.').next().unwrap().into(),
        );
        l
    };
    for (tag, driver, cuda, brand) in [
        ("12.4.1", "545.29.06", "12.3", "geforce"),
        ("12.8.1", "525.85.12", "12.0", "tesla"),
    ] {
        let env = vec![format!("NVIDIA_REQUIRE_CUDA={}", reqs[tag])];
        let o = gg(&dir, &env, &["--affinity", "--json"]);
        assert_eq!(o.status.code(), Some(0), "{tag}");
        let affinity: Value = serde_json::from_slice(&o.stdout).unwrap();
        let notes = String::from_utf8_lossy(&o.stderr);
        assert!(!notes.contains("more than 64 terms"), "{notes}");
        assert!(
            !admitted(&affinity, "x", &node(driver, cuda, brand)),
            "{tag} {affinity:#}"
        );
        // A node it does run on is admitted: a Tesla on the fwd-compat branch 535.
        assert!(
            admitted(&affinity, "y", &node("535.104.05", "12.2", "tesla")),
            "{tag}"
        );
    }
}

/// `--nodes` affinities pass the API server's rules, also when they admit
/// none (issue 17 C6): the old `In ["gpu-guard.io/no-node"]` did not.
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

/// An image whose GPU code the decision judges per compute capability (its
/// libcublas has sm_75, sm_80, sm_90a and compute_90; kernel-image findings
/// refuse): the label affinity follows the scan too.
#[test]
fn a_scanned_image_is_exact_too() {
    use crate::image_support::*;
    let dir = tmpdir("image");
    std::fs::write(
        dir.join("config.toml"),
        "[host]\ncache_file = \"\"\n[log]\nsyslog = false\n[kernel_image]\nseverity = \"enforce\"\ncache_dir = \"\"\n",
    )
    .unwrap();
    let lib = std::fs::read(data("fatbin/multi-arch.so")).unwrap();
    let layer = tar_of(&[
        E::Dir("usr/"),
        E::Dir("usr/lib/"),
        E::File("usr/lib/libcublas.so.12", &lib),
    ]);
    let layout = oci_layout(
        "exact-affinity",
        &image_env("cuda-12.4.1-base-ubuntu2204.env"),
        &[gz(&layer)],
    );
    std::fs::write(dir.join("image"), layout.to_str().unwrap()).unwrap();
    let nodes = fleet();
    let file = write_nodes(&dir, &nodes);
    let (allowed, _) = assert_exact(
        &dir,
        &file,
        &nodes,
        &[],
        "image 12.4.1 + multi-arch libcublas",
    );
    // Some node runs the requirement but not the code (sm_86, 8.7, 12.0...).
    let env_only = tmpdir("image-env");
    let req = image_env("cuda-12.4.1-base-ubuntu2204.env");
    let (allowed_env, _) = assert_exact(&env_only, &file, &nodes, &req, "12.4.1 env");
    assert!(allowed < allowed_env, "{allowed} {allowed_env}");
}
