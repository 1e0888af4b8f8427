//! gpu-guard's own node labels (`gpu-guard host --node-labels`): the facts
//! GPU Feature Discovery does not label, the brand above all, so that
//! `check --nodes` and `--affinity` can judge `brand=` alternatives.
//!
//! They are made for node affinities: `gpu-guard.io/brand` holds one value
//! (the brand of every GPU, or `mixed`), so one `In` expression covers the
//! many `brand=X,driver>=N,driver<N+1` alternatives of NVIDIA's images, and
//! `gpu-guard.io/driver.branch` holds the driver major as a plain decimal,
//! so a set of branches is one `In` list. The per-brand
//! `gpu-guard.io/brand.<brand>=true` labels of earlier releases are still
//! written for affinities people wrote by hand; gpu-guard reads only the
//! single-valued one.
//!
//! The output is node-feature-discovery's local feature-file format: one
//! `name=value` per line, `#` comments; a name with a namespace (`x.io/y`)
//! is used as the label as it is (kubernetes-sigs/node-feature-discovery
//! source/local/local.go parseFeatures). NFD releases before v0.14 also need
//! `-extra-label-ns=gpu-guard.io` on nfd-master to publish the namespace.

use crate::core::facts::HostFacts;
use crate::core::version::Version;

pub const PREFIX: &str = "gpu-guard.io/";
/// `gpu-guard.io/brand=<nvml brand>`, or [`MIXED`].
pub const BRAND: &str = "gpu-guard.io/brand";
/// The brand value of a node whose GPUs are not all of one brand.
pub const MIXED: &str = "mixed";
/// `gpu-guard.io/brand.<nvml brand>=true`, one per brand on the node.
pub const BRAND_PREFIX: &str = "gpu-guard.io/brand.";
pub const COMPUTE_MIN: &str = "gpu-guard.io/compute.min";
pub const COMPUTE_MIN_MAJOR: &str = "gpu-guard.io/compute.min.major";
pub const COMPUTE_MIN_MINOR: &str = "gpu-guard.io/compute.min.minor";
pub const DRIVER_BRANCH: &str = "gpu-guard.io/driver.branch";
pub const FWD_COMPAT: &str = "gpu-guard.io/fwd-compat.eligible";
/// Where NFD's local source reads feature files (node-feature-discovery
/// source/local/local.go featureFilesDir).
pub const FEATURES_FILE: &str = "/etc/kubernetes/node-feature-discovery/features.d/gpu-guard";

/// Brands that CUDA forward compatibility serves: data-center and
/// professional boards, NVML `nvmlBrandType_t` codes 1, 2 and 7-14 (nvml.h:
/// QUADRO=1, TESLA=2, NVIDIA_VAPPS=7 ... NVIDIA=14); not NVS (3), GRID (4),
/// GeForce (5, 15) or Titan (6, 16). The CUDA compatibility guide limits
/// forward compatibility to data-center GPUs and select professional SKUs.
const FWD_COMPAT_BRANDS: &[&str] = &[
    "quadro",
    "tesla",
    "vapps",
    "vpc",
    "vcs",
    "vws",
    "cloudgaming",
    "quadrortx",
    "nvidiartx",
    "nvidia",
];

/// The labels for one host, sorted by name. Facts the host does not know
/// (no driver, a brand NVML could not read) produce no label: absence is
/// "unknown" to the readers of these labels.
pub fn node_labels(facts: &HostFacts) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut brands: Vec<&str> = facts
        .gpus
        .iter()
        .map(|g| g.brand.as_str())
        .filter(|b| !b.is_empty())
        .collect();
    brands.sort_unstable();
    brands.dedup();
    match brands[..] {
        [] => {}
        [one] => out.push((BRAND.to_string(), one.to_string())),
        _ => out.push((BRAND.to_string(), MIXED.to_string())),
    }
    for b in &brands {
        out.push((format!("{BRAND_PREFIX}{b}"), "true".to_string()));
    }
    let min_cc = facts
        .gpus
        .iter()
        .filter_map(|g| g.compute_capability.as_deref())
        .filter_map(|c| Version::parse(c).ok())
        .min();
    if let Some(cc) = min_cc {
        out.push((COMPUTE_MIN.into(), format!("{}.{}", cc.major(), cc.minor())));
        // Kubernetes Gt/Lt compare integers only, so the parts are labels too.
        out.push((COMPUTE_MIN_MAJOR.into(), cc.major().to_string()));
        out.push((COMPUTE_MIN_MINOR.into(), cc.minor().to_string()));
    }
    let branch = facts
        .driver_version
        .as_deref()
        .and_then(|d| Version::parse(d).ok());
    if let Some(d) = branch {
        out.push((DRIVER_BRANCH.into(), d.major().to_string()));
    }
    let all_known = !facts.gpus.is_empty()
        && facts
            .gpus
            .iter()
            .all(|g| !g.brand.is_empty() && g.brand != "unknown");
    if all_known {
        let eligible = facts
            .gpus
            .iter()
            .all(|g| FWD_COMPAT_BRANDS.contains(&g.brand.as_str()));
        out.push((FWD_COMPAT.into(), eligible.to_string()));
    }
    out.sort();
    out
}

/// The feature file's text: a comment naming the writer, then the labels.
pub fn feature_file(labels: &[(String, String)]) -> String {
    let mut s = String::from("# written by gpu-guard host --node-labels; do not edit\n");
    for (k, v) in labels {
        s.push_str(&format!("{k}={v}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::facts::Gpu;

    fn gpu(brand: &str, cc: &str) -> Gpu {
        Gpu {
            brand: brand.into(),
            compute_capability: Some(cc.into()),
            ..Default::default()
        }
    }

    #[test]
    fn labels_for_a_mixed_host() {
        let f = HostFacts {
            driver_version: Some("535.104.05".into()),
            cuda_driver_version: Some("12.2".into()),
            gpus: vec![gpu("tesla", "8.0"), gpu("geforcertx", "7.5")],
        };
        let l = node_labels(&f);
        let text = feature_file(&l);
        assert!(text.contains("gpu-guard.io/brand.tesla=true\n"), "{text}");
        assert!(text.contains("gpu-guard.io/brand=mixed\n"), "{text}");
        assert!(text.contains("gpu-guard.io/brand.geforcertx=true\n"));
        assert!(text.contains("gpu-guard.io/compute.min=7.5\n"));
        assert!(text.contains("gpu-guard.io/compute.min.major=7\n"));
        assert!(text.contains("gpu-guard.io/driver.branch=535\n"));
        assert!(text.contains("gpu-guard.io/fwd-compat.eligible=false\n"));
    }

    #[test]
    fn unknown_brand_gives_no_brand_and_no_eligibility() {
        let f = HostFacts {
            driver_version: Some("550.54.15".into()),
            cuda_driver_version: Some("12.4".into()),
            gpus: vec![gpu("unknown", "9.0")],
        };
        let l = node_labels(&f);
        assert!(l.iter().all(|(k, _)| k != FWD_COMPAT));
        let f = HostFacts {
            gpus: vec![gpu("tesla", "9.0"), gpu("nvidia", "9.0")],
            ..f
        };
        assert!(node_labels(&f).contains(&(FWD_COMPAT.to_string(), "true".to_string())));
        let one = HostFacts {
            gpus: vec![gpu("tesla", "9.0"), gpu("tesla", "8.0")],
            ..f
        };
        assert!(node_labels(&one).contains(&(BRAND.to_string(), "tesla".to_string())));
    }
}
