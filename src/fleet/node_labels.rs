//! A Kubernetes node as gpu-guard reads it (its name and labels), and what
//! can be wrong with a node list: shared by the reader (fleet::nodes) and
//! the facts its labels give (fleet::node_facts).

use std::collections::BTreeMap;
use std::path::PathBuf;

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

/// A node: its name and labels.
#[derive(Clone, Debug)]
pub struct NodeLabels {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}
