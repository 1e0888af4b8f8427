//! Host facts from Kubernetes nodes (`check --nodes FILE|-`, the output of
//! `kubectl get nodes -o json` or `-o yaml`), built from the labels NVIDIA
//! GPU Feature Discovery (GFD) puts on GPU nodes and from gpu-guard's own
//! (`host --node-labels`, [`super::labels`]).
//!
//! Which labels give which fact, and from which source, is
//! [`super::node_facts`]'s; a node without NVIDIA driver labels may be an
//! AMD GPU node ([`super::amd_nodes`]).

use super::node_facts::{self, LabelFacts, Source, CC_GFD, DRIVER_FULL};
use super::{labels, Host, HostFacts as Facts, LabelInfo};
use crate::core::facts::{Gpu, HostFacts, HostReport};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

pub use super::node_labels::{NodeLabels, NodesError};

/// A node list is a few MiB even for thousands of nodes.
const MAX_NODES_FILE: u64 = 256 << 20;
/// More GPUs than any node has: GPUs past this are not built (they would
/// all be alike), the count shown is the label's.
const MAX_GPUS: u32 = 64;

/// A label value. Kubernetes labels are strings; a hand-written YAML list
/// may leave `count: 8` unquoted, which is read as the string it spells.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Scalar {
    S(String),
    U(u64),
    I(i64),
    F(f64),
    B(bool),
}

fn label_map<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let raw: Option<BTreeMap<String, Scalar>> = serde::Deserialize::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Scalar::S(s) => s,
                Scalar::U(n) => n.to_string(),
                Scalar::I(n) => n.to_string(),
                Scalar::F(n) => n.to_string(),
                Scalar::B(b) => b.to_string(),
            };
            (k, v)
        })
        .collect())
}

#[derive(serde::Deserialize)]
struct NodeList {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    items: Option<Vec<Node>>,
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(serde::Deserialize)]
struct Node {
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(serde::Deserialize)]
struct Metadata {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, deserialize_with = "label_map")]
    labels: BTreeMap<String, String>,
}

/// Reads a node list (or one `kubectl get node X -o json|yaml`) from a
/// file, or from standard input when `path` is `-`.
pub fn read_nodes(path: &Path) -> Result<Vec<NodeLabels>, NodesError> {
    let read_err = |source| NodesError::Read {
        path: path.to_path_buf(),
        source,
    };
    let text = if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_NODES_FILE + 1)
            .read_to_end(&mut buf)
            .map_err(read_err)?;
        if buf.len() as u64 > MAX_NODES_FILE {
            return Err(read_err(std::io::Error::other("more than 256 MiB")));
        }
        String::from_utf8(buf).map_err(|_| read_err(std::io::Error::other("not UTF-8")))?
    } else {
        crate::sys::fsutil::read_to_string_limited(path, MAX_NODES_FILE).map_err(read_err)?
    };
    parse_nodes(&text).map_err(|reason| NodesError::Parse {
        path: path.to_path_buf(),
        reason,
    })
}

/// Parses JSON (a document starting with `{`) or YAML. Names must be
/// present; duplicates are left to [`check_unique`].
pub fn parse_nodes(text: &str) -> Result<Vec<NodeLabels>, String> {
    let list: NodeList = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| e.to_string())?
    } else {
        serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?
    };
    let metas: Vec<Option<Metadata>> = match (list.kind.as_deref(), list.items) {
        (Some("Node"), _) => vec![list.metadata],
        (_, Some(items)) => items.into_iter().map(|n| n.metadata).collect(),
        (kind, None) => {
            return Err(format!(
                "no `items` (kind {})",
                kind.map(crate::core::sanitize::esc)
                    .unwrap_or("missing".into())
            ))
        }
    };
    metas
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let m = m.ok_or_else(|| format!("item {i} has no metadata"))?;
            match m.name {
                Some(name) if !name.is_empty() => Ok(NodeLabels {
                    name,
                    labels: m.labels,
                }),
                _ => Err(format!("item {i} has no metadata.name")),
            }
        })
        .collect()
}

/// Node names are keys: an allowed and a refused node of one name cannot
/// both be placed, so a list naming a node twice is refused whole.
pub fn check_unique<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), NodesError> {
    let mut seen = BTreeSet::new();
    for n in names {
        if !seen.insert(n) {
            return Err(NodesError::Duplicate(crate::core::sanitize::esc(n)));
        }
    }
    Ok(())
}

pub use node_facts::label_facts;

/// A node as a host. A node without driver labels has no GPU facts. With
/// two compute capabilities the first GPU has the lower, the others the
/// higher: a container given every GPU runs on both (which GPU has which
/// is not labelled: a request by index is judged without them, see
/// [`LabelInfo::mixed_models`]).
pub fn host_from_node(node: &NodeLabels) -> Result<Host, NodesError> {
    let Some(f) = label_facts(node)? else {
        if let Some(h) = super::amd_nodes::amd_host(node)? {
            return Ok(h);
        }
        return Ok(Host {
            name: node.name.clone(),
            facts: Facts::NoGpuFacts {
                why: no_facts_note(&node.labels),
            },
        });
    };
    let l = &node.labels;
    let product = l
        .get("nvidia.com/gpu.product")
        .map(|s| s.trim())
        .unwrap_or("");
    let cc = |sm: u32| format!("{}.{}", sm / 10, sm % 10);
    let gpus = (0..f.count.min(MAX_GPUS))
        .map(|i| Gpu {
            index: i,
            name: product.to_string(),
            brand: f.brand.clone().unwrap_or_default(),
            compute_capability: f.sms.map(|(lo, hi)| cc(if i == 0 { lo } else { hi })),
            ..Default::default()
        })
        .collect();
    let info = LabelInfo {
        note: label_note(&f, product, l),
        healthy: f.healthy,
        mixed_models: f.sms.is_some_and(|(a, b)| a != b),
    };
    let facts = HostFacts {
        driver_version: Some(f.driver),
        cuda_driver_version: f.cuda.map(|(a, b)| format!("{a}.{b}")),
        gpus,
        ..Default::default()
    };
    Ok(Host {
        name: node.name.clone(),
        facts: Facts::Known {
            report: HostReport::from_facts(facts, format!("node labels of {}", node.name)),
            labels: Some(info),
        },
    })
}

/// Why a node has no GPU facts, for its finding.
fn no_facts_note(l: &BTreeMap<String, String>) -> String {
    if l.contains_key(DRIVER_FULL) {
        format!("the node has {DRIVER_FULL} but not the driver-version.major/minor/revision labels GPU Feature Discovery writes with it; gpu-guard compares only those")
    } else {
        "the node has no GPU Feature Discovery driver labels (nvidia.com/cuda.driver-version.*)"
            .into()
    }
}

/// The MIG part of the info line: strategy and, for `mixed`, the profiles.
fn mig_note(l: &BTreeMap<String, String>) -> Option<String> {
    let strategy = l.get("nvidia.com/mig.strategy")?.trim();
    if strategy == "none" || strategy.is_empty() {
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

/// "host facts from node labels: driver 550.54.15, CUDA 12.4, 8×
/// NVIDIA-H100-80GB-HBM3, cc 9.0; brand unknown (...)".
fn label_note(f: &LabelFacts, product: &str, l: &BTreeMap<String, String>) -> String {
    let esc = crate::core::sanitize::esc;
    let cuda = f.cuda.map(|(a, b)| format!("{a}.{b}"));
    let cc = |sm: u32| format!("{}.{}", sm / 10, sm % 10);
    let ccs = match f.sms {
        Some((a, b)) if a == b => cc(a),
        Some((a, b)) => format!("{} and {}", cc(a), cc(b)),
        None => cc_unknown(f, l),
    };
    let mut s = format!(
        "host facts from node labels: driver {}, CUDA {}, {}× {}, cc {ccs}",
        esc(&f.driver),
        cuda.as_deref().unwrap_or("unknown"),
        f.count,
        esc(if product.is_empty() { "GPU" } else { product }),
    );
    if let Some(m) = mig_note(l) {
        s.push_str(&format!(", {}", esc(&m)));
    }
    if let Some(h) = f.healthy {
        s.push_str(&format!(", {h} healthy"));
    }
    let old_brand_labels = l.keys().any(|k| k.starts_with(labels::BRAND_PREFIX));
    match (&f.brand, f.mixed) {
        (Some(b), _) => s.push_str(&format!("; brand {b} (gpu-guard.io labels)")),
        (None, true) => s.push_str(&format!(
            "; brand unknown ({}={}: GPUs of several brands, judged per GPU only on the node)",
            labels::BRAND,
            labels::MIXED
        )),
        (None, false) if old_brand_labels => s.push_str(&format!(
            "; brand unknown (gpu-guard.io/brand.* labels from an older gpu-guard, no {})",
            labels::BRAND
        )),
        (None, false) => s.push_str(&format!("; brand unknown (no {} label)", labels::BRAND)),
    }
    s
}

/// Why the compute capability is unknown, naming what the node shows.
fn cc_unknown(f: &LabelFacts, l: &BTreeMap<String, String>) -> String {
    let gfd = match (l.get(CC_GFD[0]), l.get(CC_GFD[1])) {
        (Some(a), Some(b)) => format!(
            " (GPU Feature Discovery shows {}.{} for one GPU model, and the node may have more)",
            crate::core::sanitize::esc(a),
            crate::core::sanitize::esc(b)
        ),
        _ => String::new(),
    };
    match f.source {
        Source::Own => format!(
            "unknown (no {}: a GPU without a known compute capability, or more than two models){gfd}",
            labels::SM_MIN
        ),
        _ => format!(
            "unknown without gpu-guard's {} labels{gfd}",
            labels::SM_MIN
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_json_read_alike() {
        let json = r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"a","labels":{"nvidia.com/gpu.count":"2"}}}]}"#;
        let yaml = "apiVersion: v1\nkind: List\nitems:\n- kind: Node\n  metadata:\n    name: a\n    labels:\n      nvidia.com/gpu.count: 2\n";
        let a = parse_nodes(json).unwrap();
        let b = parse_nodes(yaml).unwrap();
        assert_eq!(a[0].labels, b[0].labels);
        assert_eq!(a[0].name, "a");
        assert!(parse_nodes("kind: List\nitems:\n- metadata: {}\n").is_err());
        assert!(parse_nodes("{\"driver_version\": null}").is_err());
        assert!(check_unique(["a", "b", "a"]).is_err());
    }

    #[test]
    fn two_models_make_two_gpus_and_a_mixed_node() {
        let n = NodeLabels {
            name: "n".into(),
            labels: [
                ("gpu-guard.io/driver.int", "550054015"),
                ("gpu-guard.io/driver.branch", "550"),
                ("gpu-guard.io/sm.min", "80"),
                ("gpu-guard.io/sm.max", "90"),
                ("gpu-guard.io/gpu.count", "3"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        };
        let h = host_from_node(&n).unwrap();
        let Facts::Known { report, labels } = &h.facts else {
            panic!("no facts");
        };
        let ccs: Vec<_> = report
            .facts
            .as_ref()
            .unwrap()
            .gpus
            .iter()
            .map(|g| g.compute_capability.clone().unwrap())
            .collect();
        assert_eq!(ccs, ["8.0", "9.0", "9.0"]);
        let info = labels.as_ref().unwrap();
        assert!(info.mixed_models);
        assert!(info.note.contains("cc 8.0 and 9.0"), "{}", info.note);
    }
}
