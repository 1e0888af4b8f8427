//! Host facts from Kubernetes nodes (`check --nodes FILE|-`, the output of
//! `kubectl get nodes -o json` or `-o yaml`), built from the labels NVIDIA
//! GPU Feature Discovery (GFD) puts on GPU nodes and from gpu-guard's own
//! (`host --node-labels`, [`super::labels`]).
//!
//! Label names, from NVIDIA/k8s-device-plugin internal/lm:
//! - nvml.go newVersionLabeler: `nvidia.com/cuda.driver-version.{major,minor,
//!   revision,full}` and `nvidia.com/cuda.runtime-version.{major,minor,full}`
//!   (the CUDA version the driver supports, nvmlSystemGetCudaDriverVersion),
//!   written together with the deprecated `nvidia.com/cuda.driver.{major,
//!   minor,rev}` and `nvidia.com/cuda.runtime.{major,minor}`; the revision is
//!   empty for a two-part driver version;
//! - resource.go: `nvidia.com/gpu.{product,count,memory}` and, from
//!   newArchitectureLabels, `nvidia.com/gpu.compute.{major,minor}`;
//! - mig-strategy.go: `nvidia.com/mig.strategy`.
//!
//! Each fact has one source, chosen by which labels exist, so that a node
//! affinity written over the same labels ([`super::label_affinity`]) admits
//! exactly the nodes judged allowed here:
//! - driver: the `driver-version.*` parts, else (an older GFD) the
//!   deprecated `driver.*` parts; neither: no GPU facts. `.full` is shown,
//!   never compared (Kubernetes can only compare the numeric parts);
//! - CUDA: the `runtime-version.*` parts with the first, `runtime.*` with
//!   the second; absent: unknown;
//! - compute capability: GFD's `gpu.compute.*`, else gpu-guard's
//!   `compute.min.*`; absent: unknown;
//! - brand: gpu-guard's single-valued `gpu-guard.io/brand`; absent or
//!   `mixed` (GPUs of several brands): unknown. GFD has no brand label.
//!
//! Unknown facts are never a pass ([`super::unknown`]). Labels that no
//! labeller writes (a part that is not a number, a count of 0, a driver
//! branch that disagrees with the driver, a brand gpu-guard does not know)
//! are input errors naming the node: a guess would be a silent answer.

use super::{labels, Host, HostFacts as Facts};
use crate::core::facts::{Gpu, HostFacts, HostReport, BRANDS};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum NodesError {
    #[error("cannot read nodes file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not `kubectl get nodes -o json` or `-o yaml` output: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("node {node}: label {key}={value:?} {why}")]
    Label {
        node: String,
        key: String,
        value: String,
        why: String,
    },
    #[error("node {node}: {why}")]
    Node { node: String, why: String },
    #[error("node {0} is listed twice; give each node once")]
    Duplicate(String),
}

/// A node list is a few MiB even for thousands of nodes.
const MAX_NODES_FILE: u64 = 256 << 20;
/// More GPUs than any node has: GPUs past this are not built (they would
/// all be alike), the count shown is the label's.
const MAX_GPUS: u32 = 64;

pub const DRIVER_NEW: [&str; 3] = [
    "nvidia.com/cuda.driver-version.major",
    "nvidia.com/cuda.driver-version.minor",
    "nvidia.com/cuda.driver-version.revision",
];
pub const DRIVER_OLD: [&str; 3] = [
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/cuda.driver.rev",
];
pub const CUDA_NEW: [&str; 2] = [
    "nvidia.com/cuda.runtime-version.major",
    "nvidia.com/cuda.runtime-version.minor",
];
pub const CUDA_OLD: [&str; 2] = [
    "nvidia.com/cuda.runtime.major",
    "nvidia.com/cuda.runtime.minor",
];
pub const CC_GFD: [&str; 2] = [
    "nvidia.com/gpu.compute.major",
    "nvidia.com/gpu.compute.minor",
];
pub const CC_OWN: [&str; 2] = [labels::COMPUTE_MIN_MAJOR, labels::COMPUTE_MIN_MINOR];
pub const COUNT: &str = "nvidia.com/gpu.count";
const DRIVER_FULL: &str = "nvidia.com/cuda.driver-version.full";

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

/// A node: its name and labels.
#[derive(Clone, Debug)]
pub struct NodeLabels {
    pub name: String,
    pub labels: BTreeMap<String, String>,
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

/// The facts one node's labels give, before they become [`HostFacts`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelFacts {
    /// The driver version as labelled (`535.104.05`): parts joined.
    pub driver: String,
    pub driver_major: u32,
    pub cuda: Option<(u32, u32)>,
    pub cc: Option<(u32, u32)>,
    pub count: u32,
    /// An NVML brand, or None: unknown (absent, or `mixed`).
    pub brand: Option<String>,
    /// `gpu-guard.io/brand=mixed`.
    pub mixed: bool,
}

struct Reader<'a> {
    node: &'a str,
    l: &'a BTreeMap<String, String>,
}

impl Reader<'_> {
    fn bad(&self, key: &str, why: &str) -> NodesError {
        let value = self.l.get(key).cloned().unwrap_or_default();
        NodesError::Label {
            node: crate::core::sanitize::esc(self.node),
            key: key.to_string(),
            value: crate::core::sanitize::esc(&value),
            why: why.to_string(),
        }
    }

    /// A decimal number as Kubernetes' `Gt`/`Lt` read it (strconv.ParseInt,
    /// base 10) within 32 bits: digits only, leading zeros allowed.
    fn num(&self, key: &str) -> Result<Option<u32>, NodesError> {
        let Some(v) = self.l.get(key) else {
            return Ok(None);
        };
        let ok = !v.is_empty() && v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit());
        match v.parse::<u32>() {
            Ok(n) if ok => Ok(Some(n)),
            _ => Err(self.bad(key, "is not a number from 0 to 4294967295")),
        }
    }

    /// `major.minor` from two labels: absent major is None; a major
    /// without its minor is an input error.
    fn pair(&self, keys: &[&str; 2]) -> Result<Option<(u32, u32)>, NodesError> {
        let Some(major) = self.num(keys[0])? else {
            return Ok(None);
        };
        match self.num(keys[1])? {
            Some(minor) => Ok(Some((major, minor))),
            None => Err(self.bad(keys[1], &format!("is missing (it comes with {})", keys[0]))),
        }
    }

    /// The driver from one family of part labels: the text and the major.
    fn driver(&self, keys: &[&str; 3]) -> Result<Option<(String, u32)>, NodesError> {
        let Some(major) = self.num(keys[0])? else {
            return Ok(None);
        };
        if self.num(keys[1])?.is_none() {
            return Err(self.bad(keys[1], &format!("is missing (it comes with {})", keys[0])));
        }
        // GFD writes an empty revision for a two-part version (nvml.go).
        let rev = self.l.get(keys[2]).filter(|r| !r.is_empty());
        if rev.is_some() {
            self.num(keys[2])?;
        }
        let mut text = format!("{}.{}", self.l[keys[0]], self.l[keys[1]]);
        if let Some(r) = rev {
            text.push('.');
            text.push_str(r);
        }
        Ok(Some((text, major)))
    }

    fn brand(&self) -> Result<(Option<String>, bool), NodesError> {
        match self.l.get(labels::BRAND).map(String::as_str) {
            None => Ok((None, false)),
            Some(labels::MIXED) => Ok((None, true)),
            Some(b) if BRANDS.contains(&b) => Ok((Some(b.to_string()), false)),
            Some(_) => Err(self.bad(
                labels::BRAND,
                "is not an NVML brand gpu-guard knows, nor `mixed`",
            )),
        }
    }

    /// gpu-guard's branch label must agree with the driver the facts come
    /// from, written as gpu-guard writes it: affinities match it with `In`.
    fn check_branch(&self, major: u32, brand_set: bool) -> Result<(), NodesError> {
        match self.l.get(labels::DRIVER_BRANCH) {
            Some(b) if *b == major.to_string() => Ok(()),
            Some(_) => Err(self.bad(
                labels::DRIVER_BRANCH,
                &format!("disagrees with the node's driver labels (branch {major}): stale labels; rerun `gpu-guard host --node-labels --write` on the node"),
            )),
            None if brand_set => Err(NodesError::Node {
                node: crate::core::sanitize::esc(self.node),
                why: format!("{} without {}: incomplete gpu-guard labels; rerun `gpu-guard host --node-labels --write` on the node", labels::BRAND, labels::DRIVER_BRANCH),
            }),
            None => Ok(()),
        }
    }
}

/// The facts of a node's labels; None for a node without driver labels.
pub fn label_facts(node: &NodeLabels) -> Result<Option<LabelFacts>, NodesError> {
    let r = Reader {
        node: &node.name,
        l: &node.labels,
    };
    let (driver, cuda_keys) = match r.driver(&DRIVER_NEW)? {
        Some(d) => (d, &CUDA_NEW),
        None => match r.driver(&DRIVER_OLD)? {
            Some(d) => (d, &CUDA_OLD),
            None => return Ok(None),
        },
    };
    let cuda = r.pair(cuda_keys)?;
    let cc = match r.pair(&CC_GFD)? {
        Some(cc) => Some(cc),
        None => r.pair(&CC_OWN)?,
    };
    let count = match r.num(COUNT)? {
        None => 1,
        Some(0) => return Err(r.bad(COUNT, "is not a GPU count: GFD labels only nodes with GPUs")),
        Some(n) => n,
    };
    let (brand, mixed) = r.brand()?;
    r.check_branch(driver.1, node.labels.contains_key(labels::BRAND))?;
    Ok(Some(LabelFacts {
        driver: driver.0,
        driver_major: driver.1,
        cuda,
        cc,
        count,
        brand,
        mixed,
    }))
}

/// A node as a host. A node without driver labels has no GPU facts.
pub fn host_from_node(node: &NodeLabels) -> Result<Host, NodesError> {
    let Some(f) = label_facts(node)? else {
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
    let cc = f.cc.map(|(a, b)| format!("{a}.{b}"));
    let gpus = (0..f.count.min(MAX_GPUS))
        .map(|i| Gpu {
            index: i,
            name: product.to_string(),
            brand: f.brand.clone().unwrap_or_default(),
            compute_capability: cc.clone(),
            ..Default::default()
        })
        .collect();
    let note = label_note(&f, product, l);
    let facts = HostFacts {
        driver_version: Some(f.driver),
        cuda_driver_version: f.cuda.map(|(a, b)| format!("{a}.{b}")),
        gpus,
    };
    Ok(Host {
        name: node.name.clone(),
        facts: Facts::Known {
            report: HostReport::from_facts(facts, format!("node labels of {}", node.name)),
            from_labels: Some(note),
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
    let cc = f.cc.map(|(a, b)| format!("{a}.{b}"));
    let mut s = format!(
        "host facts from node labels: driver {}, CUDA {}, {}× {}, cc {}",
        esc(&f.driver),
        cuda.as_deref().unwrap_or("unknown"),
        f.count,
        esc(if product.is_empty() { "GPU" } else { product }),
        cc.as_deref().unwrap_or("unknown"),
    );
    if let Some(m) = mig_note(l) {
        s.push_str(&format!(", {}", esc(&m)));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node(pairs: &[(&str, &str)]) -> NodeLabels {
        NodeLabels {
            name: "n".into(),
            labels: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    const GFD: &[(&str, &str)] = &[
        ("nvidia.com/cuda.driver-version.major", "535"),
        ("nvidia.com/cuda.driver-version.minor", "104"),
        ("nvidia.com/cuda.driver-version.revision", "05"),
        ("nvidia.com/cuda.runtime-version.major", "12"),
        ("nvidia.com/cuda.runtime-version.minor", "2"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> NodeLabels {
        let mut v: Vec<(&str, &str)> = GFD.to_vec();
        v.extend_from_slice(extra);
        node(&v)
    }

    #[test]
    fn families_and_sources() {
        let f = label_facts(&with(&[])).unwrap().unwrap();
        assert_eq!(f.driver, "535.104.05");
        assert_eq!(
            (f.cuda, f.cc, f.count, f.brand),
            (Some((12, 2)), None, 1, None)
        );
        let old = node(&[
            ("nvidia.com/cuda.driver.major", "550"),
            ("nvidia.com/cuda.driver.minor", "54"),
            ("nvidia.com/cuda.driver.rev", ""),
            ("nvidia.com/cuda.runtime.major", "12"),
            ("nvidia.com/cuda.runtime.minor", "4"),
            ("nvidia.com/cuda.runtime-version.major", "99"),
            ("nvidia.com/cuda.runtime-version.minor", "9"),
        ]);
        let f = label_facts(&old).unwrap().unwrap();
        // The deprecated driver labels come with the deprecated CUDA ones.
        assert_eq!((f.driver.as_str(), f.cuda), ("550.54", Some((12, 4))));
        let cc = with(&[
            ("gpu-guard.io/compute.min.major", "7"),
            ("gpu-guard.io/compute.min.minor", "5"),
        ]);
        assert_eq!(label_facts(&cc).unwrap().unwrap().cc, Some((7, 5)));
        let both = with(&[
            ("nvidia.com/gpu.compute.major", "8"),
            ("nvidia.com/gpu.compute.minor", "0"),
            ("gpu-guard.io/compute.min.major", "7"),
            ("gpu-guard.io/compute.min.minor", "5"),
        ]);
        assert_eq!(label_facts(&both).unwrap().unwrap().cc, Some((8, 0)));
        assert!(label_facts(&node(&[(DRIVER_FULL, "535.104.05")]))
            .unwrap()
            .is_none());
    }

    #[test]
    fn labels_no_labeller_writes_are_input_errors() {
        for bad in [
            ("nvidia.com/gpu.count", "-1"),
            ("nvidia.com/gpu.count", "4294967296"),
            ("nvidia.com/gpu.count", "0"),
            ("nvidia.com/gpu.count", "8x"),
            ("nvidia.com/gpu.compute.major", "8"),
            ("gpu-guard.io/brand", "teslaa"),
            ("gpu-guard.io/driver.branch", "550"),
            ("gpu-guard.io/driver.branch", "0535"),
        ] {
            let e = label_facts(&with(&[bad])).unwrap_err().to_string();
            assert!(e.starts_with("node n: "), "{bad:?}: {e}");
        }
        let e = label_facts(&with(&[("gpu-guard.io/brand", "tesla")])).unwrap_err();
        assert!(e.to_string().contains("incomplete"), "{e}");
        let ok = with(&[
            ("gpu-guard.io/brand", "tesla"),
            ("gpu-guard.io/driver.branch", "535"),
        ]);
        assert_eq!(
            label_facts(&ok).unwrap().unwrap().brand.as_deref(),
            Some("tesla")
        );
        let mixed = with(&[
            ("gpu-guard.io/brand", "mixed"),
            ("gpu-guard.io/driver.branch", "535"),
        ]);
        let f = label_facts(&mixed).unwrap().unwrap();
        assert!(f.mixed && f.brand.is_none());
    }

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
}
