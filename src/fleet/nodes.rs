//! Host facts from Kubernetes nodes (`check --nodes FILE`, the output of
//! `kubectl get nodes -o json`), built from the labels NVIDIA GPU Feature
//! Discovery (GFD) puts on GPU nodes, and from gpu-guard's own
//! (`host --node-labels`, [`super::labels`]).
//!
//! Label names, from NVIDIA/k8s-device-plugin internal/lm:
//! - nvml.go newVersionLabeler: `nvidia.com/cuda.driver-version.{major,minor,
//!   revision,full}` and `nvidia.com/cuda.runtime-version.{major,minor,full}`
//!   (the CUDA version the driver supports, nvmlSystemGetCudaDriverVersion),
//!   plus the deprecated `nvidia.com/cuda.driver.{major,minor,rev}` and
//!   `nvidia.com/cuda.runtime.{major,minor}`;
//! - resource.go: `nvidia.com/gpu.{product,count,memory}` and, from
//!   newArchitectureLabels, `nvidia.com/gpu.compute.{major,minor}`;
//! - mig-strategy.go: `nvidia.com/mig.strategy`; with strategy `single` the
//!   `nvidia.com/gpu.*` labels describe the MIG devices (product
//!   `<GPU>-MIG-<profile>`); with `mixed` each profile has
//!   `nvidia.com/mig-<profile>.{count,product,...}`.
//!
//! GFD has no brand label: without gpu-guard's `gpu-guard.io/brand.*` labels
//! the brand is unknown (an empty brand, which the requirement evaluation
//! judges as "cannot judge", never as a pass or a failure).

use super::{labels, Host, HostFacts as Facts};
use crate::core::facts::{Gpu, HostFacts, HostReport};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum NodesError {
    #[error("cannot read nodes file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not `kubectl get nodes -o json` output: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// A node list is a few MiB even for thousands of nodes.
const MAX_NODES_FILE: u64 = 256 << 20;
/// More GPUs than any node has: a label claiming more is capped.
const MAX_GPUS: u32 = 64;

#[derive(serde::Deserialize)]
struct NodeList {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    items: Vec<Node>,
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(serde::Deserialize)]
struct Node {
    metadata: Metadata,
}

#[derive(serde::Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// A node: its name and labels.
#[derive(Clone, Debug)]
pub struct NodeLabels {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// Reads a `kubectl get nodes -o json` list (or one `kubectl get node X -o json`).
pub fn read_nodes(path: &Path) -> Result<Vec<NodeLabels>, NodesError> {
    let text =
        crate::sys::fsutil::read_to_string_limited(path, MAX_NODES_FILE).map_err(|source| {
            NodesError::Read {
                path: path.to_path_buf(),
                source,
            }
        })?;
    parse_nodes(&text).map_err(|source| NodesError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

pub fn parse_nodes(text: &str) -> Result<Vec<NodeLabels>, serde_json::Error> {
    let list: NodeList = serde_json::from_str(text)?;
    let single = (list.kind == "Node").then_some(list.metadata).flatten();
    let metas = match single {
        Some(m) => vec![m],
        None => list.items.into_iter().map(|n| n.metadata).collect(),
    };
    Ok(metas
        .into_iter()
        .map(|m| NodeLabels {
            name: m.name,
            labels: m.labels,
        })
        .collect())
}

/// The first of `keys` that the node has, non-empty.
fn first<'a>(l: &'a BTreeMap<String, String>, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .filter_map(|k| l.get(*k))
        .map(|v| v.trim())
        .find(|v| !v.is_empty())
}

/// The driver version GFD labelled: `.full` when present, else the parts.
fn driver_version(l: &BTreeMap<String, String>) -> Option<String> {
    if let Some(full) = first(l, &["nvidia.com/cuda.driver-version.full"]) {
        return Some(full.to_string());
    }
    let major = first(
        l,
        &[
            "nvidia.com/cuda.driver-version.major",
            "nvidia.com/cuda.driver.major",
        ],
    )?;
    let minor = first(
        l,
        &[
            "nvidia.com/cuda.driver-version.minor",
            "nvidia.com/cuda.driver.minor",
        ],
    )?;
    let rev = first(
        l,
        &[
            "nvidia.com/cuda.driver-version.revision",
            "nvidia.com/cuda.driver.rev",
        ],
    );
    Some(match rev {
        Some(r) => format!("{major}.{minor}.{r}"),
        None => format!("{major}.{minor}"),
    })
}

fn cuda_version(l: &BTreeMap<String, String>) -> Option<String> {
    let major = first(
        l,
        &[
            "nvidia.com/cuda.runtime-version.major",
            "nvidia.com/cuda.runtime.major",
        ],
    )?;
    let minor = first(
        l,
        &[
            "nvidia.com/cuda.runtime-version.minor",
            "nvidia.com/cuda.runtime.minor",
        ],
    )?;
    Some(format!("{major}.{minor}"))
}

/// Compute capability: GFD's, else gpu-guard's lowest.
fn compute_capability(l: &BTreeMap<String, String>) -> Option<String> {
    let gfd = first(l, &["nvidia.com/gpu.compute.major"])
        .zip(first(l, &["nvidia.com/gpu.compute.minor"]))
        .map(|(a, b)| format!("{a}.{b}"));
    gfd.or_else(|| first(l, &[labels::COMPUTE_MIN]).map(str::to_string))
}

/// The brands gpu-guard labelled, sorted; empty when it did not label.
fn brands(l: &BTreeMap<String, String>) -> Vec<String> {
    l.iter()
        .filter(|(_, v)| v.as_str() == "true")
        .filter_map(|(k, _)| k.strip_prefix(labels::BRAND_PREFIX))
        .filter(|b| crate::core::facts::BRANDS.contains(b))
        .map(str::to_string)
        .collect()
}

/// The MIG part of the info line: strategy and, for `mixed`, the profiles.
fn mig_note(l: &BTreeMap<String, String>) -> Option<String> {
    let strategy = first(l, &["nvidia.com/mig.strategy"])?;
    if strategy == "none" {
        return None;
    }
    let profiles: Vec<String> = l
        .iter()
        .filter_map(|(k, v)| {
            let p = k.strip_prefix("nvidia.com/mig-")?.strip_suffix(".count")?;
            Some(format!("{v}× {p}"))
        })
        .collect();
    Some(if profiles.is_empty() {
        format!("MIG strategy {strategy}")
    } else {
        format!("MIG strategy {strategy}: {}", profiles.join(", "))
    })
}

/// A node as a host. A node without driver labels has no GPU facts.
pub fn host_from_node(node: &NodeLabels) -> Host {
    let l = &node.labels;
    let Some(driver) = driver_version(l) else {
        return Host {
            name: node.name.clone(),
            facts: Facts::NoGpuFacts,
        };
    };
    let cuda = cuda_version(l);
    let product = first(l, &["nvidia.com/gpu.product"]).unwrap_or("");
    // A node with driver labels but no count still has at least one GPU:
    // GFD labels nothing on a node without devices (nvml.go).
    let count = first(l, &["nvidia.com/gpu.count"])
        .and_then(|c| c.parse::<u32>().ok())
        .unwrap_or(1)
        .min(MAX_GPUS);
    let cc = compute_capability(l);
    let brands = brands(l);
    // Each labelled brand is on at least one GPU; the requirement check
    // needs every GPU's (brand, compute capability), and the node has one
    // compute capability, so the set of brands is all that matters.
    let gpus = (0..count)
        .map(|i| Gpu {
            index: i,
            name: product.to_string(),
            brand: match brands.len() {
                0 => String::new(),
                n => brands[(i as usize).min(n - 1)].clone(),
            },
            compute_capability: cc.clone(),
            ..Default::default()
        })
        .collect();
    let note = label_note(
        &driver,
        cuda.as_deref(),
        count,
        product,
        cc.as_deref(),
        &brands,
        l,
    );
    let facts = HostFacts {
        driver_version: Some(driver),
        cuda_driver_version: cuda,
        gpus,
    };
    Host {
        name: node.name.clone(),
        facts: Facts::Known {
            report: HostReport::from_facts(facts, format!("node labels of {}", node.name)),
            from_labels: Some(note),
        },
    }
}

/// "host facts from node labels: driver 550.54.15, CUDA 12.4, 8×
/// NVIDIA-H100-80GB-HBM3, cc 9.0; brand unknown".
fn label_note(
    driver: &str,
    cuda: Option<&str>,
    count: u32,
    product: &str,
    cc: Option<&str>,
    brands: &[String],
    l: &BTreeMap<String, String>,
) -> String {
    let esc = crate::core::sanitize::esc;
    let mut s = format!(
        "host facts from node labels: driver {}, CUDA {}, {count}× {}, cc {}",
        esc(driver),
        esc(cuda.unwrap_or("unknown")),
        esc(if product.is_empty() { "GPU" } else { product }),
        esc(cc.unwrap_or("unknown")),
    );
    if let Some(m) = mig_note(l) {
        s.push_str(&format!(", {}", esc(&m)));
    }
    if brands.is_empty() {
        s.push_str("; brand unknown (no gpu-guard.io/brand.* label)");
    } else {
        s.push_str(&format!(
            "; brand {} (gpu-guard.io labels)",
            esc(&brands.join(", "))
        ));
    }
    s
}
