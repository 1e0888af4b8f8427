//! Kubernetes' node-affinity rules, for the tests: how the scheduler
//! matches `nodeSelectorTerms` against node labels
//! (kubernetes `staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity`:
//! terms ORed, expressions ANDed; `In`/`NotIn`/`Exists`/`DoesNotExist`;
//! `Gt`/`Lt` parse the label and the one value as integers), and what the
//! API server accepts (`pkg/apis/core/validation/validation.go`,
//! `validateNodeSelectorRequirement`, `validateNodeFieldSelectorRequirement`).
#![allow(dead_code)]

use std::collections::BTreeMap;

pub type Labels = BTreeMap<String, String>;

fn holds(e: &serde_json::Value, labels: &Labels) -> bool {
    let key = e["key"].as_str().unwrap_or("");
    let vals: Vec<&str> = e["values"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let got = labels.get(key);
    match e["operator"].as_str().unwrap_or("") {
        "In" => got.is_some_and(|g| vals.contains(&g.as_str())),
        "NotIn" => got.is_none_or(|g| !vals.contains(&g.as_str())),
        "Exists" => got.is_some(),
        "DoesNotExist" => got.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(g), [v]) = (got, vals.as_slice()) else {
                return false;
            };
            match (g.parse::<i64>(), v.parse::<i64>()) {
                (Ok(g), Ok(v)) => {
                    if op == "Gt" {
                        g > v
                    } else {
                        g < v
                    }
                }
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether a node with `labels` (named `name`) satisfies the required terms.
pub fn admits(terms: &serde_json::Value, name: &str, labels: &Labels) -> bool {
    terms.as_array().into_iter().flatten().any(|t| {
        let ex = t["matchExpressions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let fl = t["matchFields"].as_array().cloned().unwrap_or_default();
        if ex.is_empty() && fl.is_empty() {
            return false;
        }
        let mut name_labels = Labels::new();
        name_labels.insert("metadata.name".into(), name.into());
        ex.iter().all(|e| holds(e, labels)) && fl.iter().all(|e| holds(e, &name_labels))
    })
}

fn qualified_name(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    name_ok && prefix_ok
}

/// The API server's errors for a required node affinity (empty: valid).
pub fn validate(terms: &serde_json::Value) -> Vec<String> {
    let mut errs = Vec::new();
    let Some(ts) = terms.as_array() else {
        return vec!["nodeSelectorTerms is not a list".into()];
    };
    if ts.is_empty() {
        errs.push("nodeSelectorTerms: must have at least one term".into());
    }
    for t in ts {
        for e in t["matchExpressions"].as_array().into_iter().flatten() {
            let key = e["key"].as_str().unwrap_or("");
            if !qualified_name(key) {
                errs.push(format!("invalid label key {key:?}"));
            }
            let n = e["values"].as_array().map_or(0, |a| a.len());
            match e["operator"].as_str().unwrap_or("") {
                "In" | "NotIn" if n == 0 => errs.push(format!("{key}: In/NotIn need values")),
                "Exists" | "DoesNotExist" if n != 0 => {
                    errs.push(format!("{key}: Exists/DoesNotExist take no values"))
                }
                "Gt" | "Lt"
                    if n != 1
                        || e["values"][0]
                            .as_str()
                            .and_then(|v| v.parse::<i64>().ok())
                            .is_none() =>
                {
                    errs.push(format!("{key}: Gt/Lt take one integer"))
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
                op => errs.push(format!("{key}: unknown operator {op}")),
            }
        }
        for f in t["matchFields"].as_array().into_iter().flatten() {
            let n = f["values"].as_array().map_or(0, |a| a.len());
            if f["key"] != "metadata.name"
                || !matches!(f["operator"].as_str(), Some("In" | "NotIn"))
                || n != 1
            {
                errs.push("matchFields: only metadata.name In/NotIn with exactly one value".into());
            }
        }
    }
    errs
}

/// The labels GPU Feature Discovery and `gpu-guard host --node-labels`
/// give an 8 x H100 node with this driver and CUDA.
pub fn gfd_labels(driver: &str, cuda: &str) -> Labels {
    let d: Vec<&str> = driver.split('.').collect();
    let c: Vec<&str> = cuda.split('.').collect();
    [
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("nvidia.com/cuda.driver-version.major", d[0]),
        ("nvidia.com/cuda.driver-version.minor", d[1]),
        ("nvidia.com/cuda.driver-version.revision", d[2]),
        ("nvidia.com/cuda.driver-version.full", driver),
        ("nvidia.com/cuda.runtime-version.major", c[0]),
        ("nvidia.com/cuda.runtime-version.minor", c[1]),
        ("nvidia.com/cuda.runtime-version.full", cuda),
        ("nvidia.com/gpu.compute.major", "9"),
        ("nvidia.com/gpu.compute.minor", "0"),
        ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
        ("nvidia.com/gpu.count", "8"),
        ("nvidia.com/gpu.present", "true"),
        ("gpu-guard.io/brand", "tesla"),
        ("gpu-guard.io/brand.tesla", "true"),
        ("gpu-guard.io/driver.branch", d[0]),
        ("gpu-guard.io/compute.min", "9.0"),
        ("gpu-guard.io/compute.min.major", "9"),
        ("gpu-guard.io/compute.min.minor", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}
