//! AMD GPU nodes from their labels (`check --nodes`): a node without
//! NVIDIA driver labels (super::node_facts gives it no facts) is an AMD
//! node when gpu-guard labelled it so (`gpu-guard.io/vendor=amd`,
//! super::labels) or AMD's node labeller did (`amd.com/gpu.family` or
//! `amd.com/gpu.device-id`; ROCm/k8s-device-plugin cmd/k8s-node-labeller
//! writes `amd.com/gpu.<property>=<value>`). Its facts:
//!
//! - the processor from gpu-guard's `gpu-guard.io/amd.gfx` (AMD's labeller
//!   publishes no GPU architecture); without it the target is unknown, and
//!   GPU code is not judged there (super::placement refuses it);
//! - the target ID's feature modes are the kernel's defaults for that
//!   processor: SRAM ECC on where the processor has it (Instinct boards ship
//!   with ECC on), XNACK as amdgpu's `noretry` default leaves it
//!   (core::amd::target::target_of), switched per process where KFD allows;
//! - the amdgpu driver from `amd.com/gpu.driver-version` when it is a module
//!   version gpu-guard maps to a release of AMD's support matrix
//!   (core::amd::rocm::DKMS_RELEASE), exactly; any other value is shown but
//!   not judged (the ROCm window of an unmapped driver is unknown either way),
//!   so that a node affinity, which matches label values exactly, can say
//!   the same (super::label_amd);
//! - one GPU: the labels do not count AMD GPUs.

use super::node_labels::{NodeLabels, NodesError};
use super::{labels, Host, HostFacts as Facts, LabelInfo};
use crate::core::amd::rocm::DKMS_RELEASE;
use crate::core::facts::{Gpu, HostFacts, HostReport, Vendor};
use crate::core::sanitize::esc;

pub const AMD_FAMILY: &str = "amd.com/gpu.family";
pub const AMD_DEVICE_ID: &str = "amd.com/gpu.device-id";
pub const AMD_DRIVER: &str = "amd.com/gpu.driver-version";
pub const AMD_PRODUCT: &str = "amd.com/gpu.product-name";

/// What an AMD node's labels give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmdLabelFacts {
    pub processor: Option<String>,
    /// The driver label when gpu-guard maps it, else None.
    pub driver: Option<String>,
    /// The driver label as written.
    pub driver_label: Option<String>,
}

/// Whether the labels make an AMD node (given no NVIDIA driver labels).
pub fn is_amd_node(l: &std::collections::BTreeMap<String, String>) -> bool {
    l.get(labels::VENDOR).is_some_and(|v| v == "amd")
        || l.contains_key(AMD_FAMILY)
        || l.contains_key(AMD_DEVICE_ID)
}

/// A processor name as gpu-guard writes it: `gfx` and three or four
/// digits or lowercase hex letters (`gfx90a`, `gfx1100`).
pub fn valid_gfx(p: &str) -> bool {
    p.strip_prefix("gfx").is_some_and(|rest| {
        (3..=4).contains(&rest.len())
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The AMD facts of a node's labels; None for a node that is not AMD's.
pub fn amd_label_facts(node: &NodeLabels) -> Result<Option<AmdLabelFacts>, NodesError> {
    let l = &node.labels;
    if !is_amd_node(l) {
        return Ok(None);
    }
    let processor = match l.get(labels::AMD_GFX) {
        None => None,
        Some(p) if valid_gfx(p) => Some(p.clone()),
        Some(p) => {
            return Err(NodesError::Label {
                node: esc(&node.name),
                key: labels::AMD_GFX.into(),
                value: esc(p),
                why: "is not an AMD processor as gpu-guard writes it (gfx942, gfx1100)".into(),
            })
        }
    };
    let driver_label = l.get(AMD_DRIVER).cloned();
    let driver = driver_label
        .clone()
        .filter(|d| DKMS_RELEASE.iter().any(|(v, _)| v == d));
    Ok(Some(AmdLabelFacts {
        processor,
        driver,
        driver_label,
    }))
}

/// The major GFX version of a processor (`gfx90a` 9, `gfx1100` 11).
fn gfx_major(p: &str) -> u32 {
    let rest = p.strip_prefix("gfx").unwrap_or("");
    let digits = rest.len().saturating_sub(2);
    rest.get(..digits).and_then(|d| d.parse().ok()).unwrap_or(0)
}

/// The GPU a labelled AMD node is taken to have.
pub fn label_gpu(f: &AmdLabelFacts, name: &str) -> Gpu {
    const SRAM_ECC: u64 = crate::core::amd::target::HSA_CAP_SRAM_EDCSUPPORTED;
    let target = f
        .processor
        .as_deref()
        .map(|p| crate::core::amd::target::target_of(p, gfx_major(p), SRAM_ECC, -1));
    let per_process = match (&f.processor, &target) {
        (Some(p), Some(t)) => {
            crate::core::amd::target::xnack_per_process(p)
                && t.xnack != crate::core::amd::Feature::Any
        }
        _ => false,
    };
    Gpu {
        index: 0,
        name: name.to_string(),
        brand: "unknown".into(),
        vendor: Vendor::Amd,
        target_id: target.map(|t| t.to_string()),
        xnack_per_process: per_process,
        ..Gpu::default()
    }
}

/// An AMD node as a host, or None when the node is not AMD's.
pub fn amd_host(node: &NodeLabels) -> Result<Option<Host>, NodesError> {
    let Some(f) = amd_label_facts(node)? else {
        return Ok(None);
    };
    let l = &node.labels;
    let name = match (l.get(AMD_PRODUCT), l.get(AMD_DEVICE_ID)) {
        (Some(p), _) if !p.trim().is_empty() => p.trim().to_string(),
        (_, Some(d)) => format!("AMD GPU (device {})", d.trim()),
        _ => "AMD GPU".to_string(),
    };
    let gpu = label_gpu(&f, &name);
    let note = format!(
        "host facts from node labels: 1× {}, {}, amdgpu driver {}",
        esc(&name),
        match &gpu.target_id {
            Some(t) => format!("target {t} (the processor's default feature modes)"),
            None => format!("target unknown (no {})", labels::AMD_GFX),
        },
        match (&f.driver, &f.driver_label) {
            (Some(d), _) => esc(d),
            (None, Some(d)) => format!("{} (not a version gpu-guard maps: not judged)", esc(d)),
            (None, None) => format!("unknown (no {AMD_DRIVER})"),
        }
    );
    let facts = HostFacts {
        amdgpu_driver_version: f.driver.clone(),
        gpus: vec![gpu],
        ..HostFacts::default()
    };
    Ok(Some(Host {
        name: node.name.clone(),
        facts: Facts::Known {
            report: HostReport::from_facts(facts, format!("node labels of {}", node.name)),
            labels: Some(LabelInfo {
                note,
                healthy: None,
                mixed_models: false,
            }),
        },
    }))
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

    #[test]
    fn amd_nodes_by_either_labeller() {
        let f = amd_label_facts(&node(&[
            ("gpu-guard.io/vendor", "amd"),
            ("gpu-guard.io/amd.gfx", "gfx942"),
            ("amd.com/gpu.driver-version", "6.12.12"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(f.processor.as_deref(), Some("gfx942"));
        assert_eq!(f.driver.as_deref(), Some("6.12.12"));
        let g = label_gpu(&f, "x");
        assert_eq!(g.target_id.as_deref(), Some("gfx942:sramecc+:xnack-"));
        assert!(g.xnack_per_process);
        let f = amd_label_facts(&node(&[
            ("amd.com/gpu.family", "AI"),
            ("amd.com/gpu.driver-version", "6.16.6"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((f.processor, f.driver), (None, None));
        assert_eq!(f.driver_label.as_deref(), Some("6.16.6"));
        assert!(amd_label_facts(&node(&[("gpu-guard.io/vendor", "nvidia")]))
            .unwrap()
            .is_none());
        let bad = node(&[
            ("gpu-guard.io/vendor", "amd"),
            ("gpu-guard.io/amd.gfx", "GFX942"),
        ]);
        assert!(amd_label_facts(&bad).is_err());
        assert_eq!(gfx_major("gfx90a"), 9);
        assert_eq!(gfx_major("gfx1100"), 11);
        let g = label_gpu(
            &AmdLabelFacts {
                processor: Some("gfx1100".into()),
                driver: None,
                driver_label: None,
            },
            "r",
        );
        assert_eq!(g.target_id.as_deref(), Some("gfx1100"));
        assert!(!g.xnack_per_process);
    }
}
