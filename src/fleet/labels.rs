//! gpu-guard's own node labels (`gpu-guard host --node-labels`): every fact
//! an exact node affinity needs, each in one label a node selector can
//! compare in one expression.
//!
//! Kubernetes compares labels with `In`/`NotIn` (strings) and `Gt`/`Lt`
//! (integers, strconv.ParseInt; apimachinery labels/selector.go). GPU
//! Feature Discovery splits each version into part labels (`major`,
//! `minor`, `revision`), so a range of versions is a union of terms, one
//! per fixed prefix, and two ranges ANDed are their cross product. So each
//! fact is also written here as one integer whose order is the version's:
//! - [`DRIVER_INT`]: the driver version `a.b.c` as `a*1000000 + b*1000 + c`
//!   (`535.104.05` is `535104005`), written when every part fits (NVIDIA's
//!   minor and revision have at most three digits);
//! - [`CUDA_INT`]: the CUDA version the driver supports, `a.b` as `a*100 + b`;
//! - [`SM`], [`SM_MIN`], [`SM_MAX`]: compute capabilities as `nvcc` numbers
//!   them (`sm_90` is `90`: major*10 + minor). GFD labels one model of a node
//!   with several (the last); the container given all GPUs must run on
//!   each. `sm` is written when every GPU has the same capability; `sm.min`
//!   and `sm.max` when there are at most two (then they are the node's whole
//!   set, so "runs on every GPU" is "runs on `sm.min` and on `sm.max`");
//!   none when a capability is unknown or there are more models;
//! - [`COUNT`]: the GPU count; [`BRAND`]: one value (the brand of every GPU,
//!   or [`MIXED`]), so one `In` list covers the many
//!   `brand=X,driver>=N,driver<N+1` alternatives of NVIDIA's images;
//!   [`DRIVER_BRANCH`]: the driver major, so a set of branches is one `In`
//!   list; [`VENDOR`]: `nvidia`, `amd` or `mixed` (both vendors' GPUs);
//! - for AMD GPUs, [`AMD_GFX`]: their processor (`gfx942`), when they share
//!   one. A label value cannot hold the `:` of a target ID
//!   (apimachinery IsValidLabelValue), and AMD's own node labeller
//!   publishes no GPU architecture (ROCm/k8s-device-plugin
//!   cmd/k8s-node-labeller: family, device-id, product-name, vram, ...), so
//!   this is the label an affinity places ROCm images by. The NVIDIA labels
//!   above are of the NVIDIA GPUs only.
//!
//! The per-brand `gpu-guard.io/brand.<brand>=true` and the
//! `compute.min[.major|.minor]` labels of earlier releases are still written
//! for affinities people wrote by hand; `check --nodes` reads the ones above.
//! `gpu-guard.io/gpu.healthy` and `gpu.failed` (GPU health) are read from
//! nodes: a pod asking for N GPUs is not placed where fewer are healthy.
//!
//! The output is node-feature-discovery's local feature-file format: one
//! `name=value` per line, `#` comments; a name with a namespace (`x.io/y`)
//! is used as the label as it is (kubernetes-sigs/node-feature-discovery
//! source/local/local.go parseFeatures). NFD releases before v0.14 also need
//! `-extra-label-ns=gpu-guard.io` on nfd-master to publish the namespace.

use crate::core::facts::HostFacts;
use crate::core::version::Version;

pub const PREFIX: &str = "gpu-guard.io/";
/// `gpu-guard.io/vendor=nvidia` on a node with NVIDIA GPUs, `amd` with
/// AMD GPUs, [`MIXED`] with both.
pub const VENDOR: &str = "gpu-guard.io/vendor";
/// The processor of the node's AMD GPUs (`gfx942`), when they share one.
pub const AMD_GFX: &str = "gpu-guard.io/amd.gfx";
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
/// The driver version as one integer ([`driver_int`]).
pub const DRIVER_INT: &str = "gpu-guard.io/driver.int";
/// The driver's CUDA version as one integer ([`cuda_int`]).
pub const CUDA_INT: &str = "gpu-guard.io/cuda.int";
/// The compute capability of every GPU, when they share one.
pub const SM: &str = "gpu-guard.io/sm";
/// The lowest and highest compute capability, with at most two models.
pub const SM_MIN: &str = "gpu-guard.io/sm.min";
pub const SM_MAX: &str = "gpu-guard.io/sm.max";
/// How many GPUs the node has.
pub const COUNT: &str = "gpu-guard.io/gpu.count";
/// GPUs not failed (core::health: health unknown counts as not failed),
/// and GPUs failed: an affinity keeps pods that need N GPUs off nodes with
/// fewer healthy ones. Written only when NVML's health of some GPU is known
/// (a host described by facts without health has neither label).
pub const HEALTHY: &str = "gpu-guard.io/gpu.healthy";
pub const FAILED: &str = "gpu-guard.io/gpu.failed";
pub const FWD_COMPAT: &str = "gpu-guard.io/fwd-compat.eligible";
/// Where NFD's local source reads feature files (node-feature-discovery
/// source/local/local.go featureFilesDir).
pub const FEATURES_FILE: &str = "/etc/kubernetes/node-feature-discovery/features.d/gpu-guard";

/// The range of [`SM`] values: compute capabilities 1.0 to 99.9 (Cc::parse).
pub const SM_LOWEST: u64 = 10;
pub const SM_HIGHEST: u64 = 999;

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

/// `a.b.c` as `a*1000000 + b*1000 + c`, when it has at most three parts and
/// the minor and revision at most three digits: the integer orders as the
/// version does (libnvidia-container dsl.c compares part by part).
pub fn driver_int(v: &Version) -> Option<u64> {
    let fits = (3..8).all(|i| v.part(i) == 0) && v.part(1) < 1000 && v.part(2) < 1000;
    fits.then(|| v.major() * 1_000_000 + v.part(1) * 1000 + v.part(2))
}

/// The version a [`DRIVER_INT`] value stands for: `535.104.05`.
pub fn driver_from_int(n: u64) -> String {
    format!("{}.{}.{:02}", n / 1_000_000, n / 1000 % 1000, n % 1000)
}

/// `a.b` as `a*100 + b`, when it has two parts and the minor two digits.
pub fn cuda_int(v: &Version) -> Option<u64> {
    let fits = (2..8).all(|i| v.part(i) == 0) && v.minor() < 100;
    fits.then(|| v.major() * 100 + v.minor())
}

/// The version a [`CUDA_INT`] value stands for: `12.4`.
pub fn cuda_from_int(n: u64) -> String {
    format!("{}.{}", n / 100, n % 100)
}

/// `8.6` as 86, as nvcc numbers `sm_86`.
fn sm_of(cc: &str) -> Option<u64> {
    crate::core::arch::Cc::parse(cc).map(|c| u64::from(c.arch_number()))
}

/// The labels for one host, sorted by name. Facts the host does not know
/// (no driver, a brand NVML could not read) produce no label: absence is
/// "unknown" to the readers of these labels.
pub fn node_labels(all: &HostFacts) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let amd: Vec<&crate::core::facts::Gpu> = all.gpus.iter().filter(|g| g.is_amd()).collect();
    let nvidia = HostFacts {
        gpus: all.gpus.iter().filter(|g| !g.is_amd()).cloned().collect(),
        ..all.clone()
    };
    let facts = &nvidia;
    if !amd.is_empty() {
        let vendor = if facts.gpus.is_empty() { "amd" } else { MIXED };
        out.push((VENDOR.into(), vendor.into()));
        if let Some(p) = one_processor(&amd) {
            out.push((AMD_GFX.into(), p));
        }
    }
    brand_labels(facts, &mut out);
    compute_labels(facts, &mut out);
    let driver = facts
        .driver_version
        .as_deref()
        .and_then(|d| Version::parse(d).ok());
    if let Some(d) = &driver {
        out.push((DRIVER_BRANCH.into(), d.major().to_string()));
    }
    // The integer labels make a node one whose every fact comes from
    // gpu-guard (fleet::node_facts): only with GPUs to judge.
    if !facts.gpus.is_empty() {
        if amd.is_empty() {
            out.push((VENDOR.into(), "nvidia".into()));
        }
        out.push((COUNT.into(), facts.gpus.len().to_string()));
        if let Some(n) = driver.as_ref().and_then(driver_int) {
            out.push((DRIVER_INT.into(), n.to_string()));
        }
        let cuda = facts
            .cuda_driver_version
            .as_deref()
            .and_then(|c| Version::parse(c).ok());
        if let Some(n) = cuda.as_ref().and_then(cuda_int) {
            out.push((CUDA_INT.into(), n.to_string()));
        }
    }
    out.sort();
    out
}

/// The processor every AMD GPU has (`gfx942` of `gfx942:sramecc+:xnack-`),
/// as a label value; None when they differ or one is unknown.
fn one_processor(amd: &[&crate::core::facts::Gpu]) -> Option<String> {
    let mut ps = amd.iter().map(|g| {
        g.target_id
            .as_deref()
            .and_then(crate::core::amd::TargetId::parse)
            .map(|t| t.processor)
    });
    let first = ps.next()??;
    ps.all(|p| p.as_deref() == Some(first.as_str()))
        .then_some(first)
}

fn brand_labels(facts: &HostFacts, out: &mut Vec<(String, String)>) {
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
    if facts.gpus.iter().any(|g| g.health.is_some()) {
        let failed = facts
            .gpus
            .iter()
            .filter(|g| {
                g.health
                    .as_ref()
                    .is_some_and(|h| h.state == crate::core::health::HealthState::Failed)
            })
            .count();
        out.push((HEALTHY.into(), (facts.gpus.len() - failed).to_string()));
        out.push((FAILED.into(), failed.to_string()));
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
}

/// [`SM`], [`SM_MIN`], [`SM_MAX`] and the older `compute.min` labels.
fn compute_labels(facts: &HostFacts, out: &mut Vec<(String, String)>) {
    let sms: Option<Vec<u64>> = facts
        .gpus
        .iter()
        .map(|g| g.compute_capability.as_deref().and_then(sm_of))
        .collect();
    let Some(mut sms) = sms.filter(|s| !s.is_empty()) else {
        return;
    };
    sms.sort_unstable();
    sms.dedup();
    let (lo, hi) = (sms[0], sms[sms.len() - 1]);
    if sms.len() == 1 {
        out.push((SM.into(), lo.to_string()));
    }
    if sms.len() <= 2 {
        out.push((SM_MIN.into(), lo.to_string()));
        out.push((SM_MAX.into(), hi.to_string()));
    }
    let (major, minor) = (lo / 10, lo % 10);
    out.push((COMPUTE_MIN.into(), format!("{major}.{minor}")));
    out.push((COMPUTE_MIN_MAJOR.into(), major.to_string()));
    out.push((COMPUTE_MIN_MINOR.into(), minor.to_string()));
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

    fn get<'a>(l: &'a [(String, String)], k: &str) -> Option<&'a str> {
        l.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str())
    }

    #[test]
    fn labels_for_a_mixed_host() {
        let f = HostFacts {
            driver_version: Some("535.104.05".into()),
            cuda_driver_version: Some("12.2".into()),
            gpus: vec![gpu("tesla", "8.0"), gpu("geforcertx", "7.5")],
            ..Default::default()
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
        assert_eq!(get(&l, DRIVER_INT), Some("535104005"));
        assert_eq!(get(&l, CUDA_INT), Some("1202"));
        assert_eq!(get(&l, SM), None);
        assert_eq!((get(&l, SM_MIN), get(&l, SM_MAX)), (Some("75"), Some("80")));
        assert_eq!(get(&l, COUNT), Some("2"));
        assert_eq!(get(&l, VENDOR), Some("nvidia"));
    }

    #[test]
    fn amd_gpus_give_the_vendor_and_their_processor() {
        use crate::core::facts::Vendor;
        let amd = |t: &str| Gpu {
            vendor: Vendor::Amd,
            brand: "unknown".into(),
            target_id: Some(t.into()),
            ..Default::default()
        };
        let f = HostFacts {
            gpus: vec![amd("gfx942:sramecc+:xnack-"), amd("gfx942:sramecc+:xnack-")],
            ..Default::default()
        };
        let l = node_labels(&f);
        assert_eq!(get(&l, VENDOR), Some("amd"));
        assert_eq!(get(&l, AMD_GFX), Some("gfx942"));
        assert_eq!(
            get(&l, COUNT),
            None,
            "NVIDIA's labels are of NVIDIA GPUs: {l:?}"
        );
        assert_eq!(get(&l, BRAND), None, "{l:?}");
        let two = HostFacts {
            gpus: vec![amd("gfx942"), amd("gfx90a:xnack-")],
            ..Default::default()
        };
        assert_eq!(get(&node_labels(&two), AMD_GFX), None);
        let mixed = HostFacts {
            driver_version: Some("550.54.15".into()),
            cuda_driver_version: Some("12.4".into()),
            gpus: vec![gpu("tesla", "9.0"), amd("gfx1100")],
            ..Default::default()
        };
        let l = node_labels(&mixed);
        assert_eq!(get(&l, VENDOR), Some("mixed"));
        assert_eq!(get(&l, AMD_GFX), Some("gfx1100"));
        assert_eq!((get(&l, COUNT), get(&l, SM)), (Some("1"), Some("90")));
    }

    #[test]
    fn one_model_three_models_and_unknowns() {
        let f = HostFacts {
            driver_version: Some("570.26".into()),
            cuda_driver_version: Some("12.8".into()),
            gpus: vec![gpu("tesla", "9.0"), gpu("tesla", "9.0")],
            ..HostFacts::default()
        };
        let l = node_labels(&f);
        assert_eq!(get(&l, SM), Some("90"));
        assert_eq!(get(&l, SM_MIN), Some("90"));
        assert_eq!(get(&l, DRIVER_INT), Some("570026000"));
        assert_eq!(driver_from_int(570_026_000), "570.26.00");
        let three = HostFacts {
            gpus: vec![
                gpu("tesla", "9.0"),
                gpu("tesla", "8.0"),
                gpu("tesla", "8.6"),
            ],
            ..f.clone()
        };
        let l = node_labels(&three);
        assert!(get(&l, SM).is_none() && get(&l, SM_MIN).is_none());
        let unknown_cc = HostFacts {
            gpus: vec![Gpu {
                compute_capability: None,
                ..gpu("tesla", "9.0")
            }],
            ..f.clone()
        };
        assert!(get(&node_labels(&unknown_cc), SM_MIN).is_none());
        // A four-part driver fits no integer; a host without GPUs gets none.
        let odd = HostFacts {
            driver_version: Some("535.104.05.1".into()),
            ..f.clone()
        };
        assert!(get(&node_labels(&odd), DRIVER_INT).is_none());
        let none = HostFacts {
            gpus: Vec::new(),
            ..f
        };
        let l = node_labels(&none);
        assert!(get(&l, DRIVER_INT).is_none() && get(&l, VENDOR).is_none());
        assert_eq!(get(&l, DRIVER_BRANCH), Some("570"));
    }

    #[test]
    fn integers_order_as_versions() {
        let v = |s: &str| Version::parse(s).unwrap();
        let ds = [
            "418.39",
            "535.54.03",
            "535.104.05",
            "535.104.5",
            "550.54.14",
            "570.26",
        ];
        for a in ds {
            for b in ds {
                let (x, y) = (v(a), v(b));
                assert_eq!(driver_int(&x).cmp(&driver_int(&y)), x.cmp(&y), "{a} {b}");
            }
            assert_eq!(v(&driver_from_int(driver_int(&v(a)).unwrap())), v(a));
        }
        assert_eq!(cuda_int(&v("12.10")), Some(1210));
        assert_eq!(cuda_from_int(1305), "13.5");
        assert!(cuda_int(&v("12.100")).is_none());
    }

    #[test]
    fn healthy_and_failed_counts() {
        use crate::core::health::{judge, NvmlHealth};
        let mut bad = gpu("tesla", "9.0");
        bad.health = Some(judge(&NvmlHealth {
            remap_failure: true,
            ..NvmlHealth::default()
        }));
        let mut pending = gpu("tesla", "9.0");
        pending.health = Some(judge(&NvmlHealth {
            remap_pending: true,
            ..NvmlHealth::default()
        }));
        let f = HostFacts {
            driver_version: Some("550.54.15".into()),
            cuda_driver_version: Some("12.4".into()),
            gpus: vec![gpu("tesla", "9.0"), bad, pending],
            ..HostFacts::default()
        };
        let text = feature_file(&node_labels(&f));
        assert!(text.contains("gpu-guard.io/gpu.healthy=2\n"), "{text}");
        assert!(text.contains("gpu-guard.io/gpu.failed=1\n"), "{text}");
        let none = feature_file(&node_labels(&HostFacts::default()));
        assert!(!none.contains("gpu.healthy"), "{none}");
        let unknown = HostFacts {
            gpus: vec![gpu("tesla", "9.0")],
            ..f
        };
        assert!(!feature_file(&node_labels(&unknown)).contains("gpu.failed"));
    }

    #[test]
    fn unknown_brand_gives_no_brand_and_no_eligibility() {
        let f = HostFacts {
            driver_version: Some("550.54.15".into()),
            cuda_driver_version: Some("12.4".into()),
            gpus: vec![gpu("unknown", "9.0")],
            ..Default::default()
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
