//! The facts one Kubernetes node's labels give ([`super::nodes`] reads the
//! node list), from one source per node, so that a node affinity written
//! over the same labels ([`super::label_affinity`]) admits exactly the
//! nodes judged allowed:
//! - [`Source::Own`]: a node with gpu-guard's integer labels
//!   (`gpu-guard.io/driver.int`, [`super::labels`]): every fact from
//!   gpu-guard's labels (driver, CUDA, compute capabilities, GPU count,
//!   brand). GFD's labels are shown, never compared;
//! - [`Source::Gfd`], [`Source::GfdDeprecated`]: any other node, from GPU
//!   Feature Discovery's `cuda.driver-version.*`/`cuda.runtime-version.*`
//!   (else, an older GFD, the deprecated `cuda.driver.*`/`cuda.runtime.*`)
//!   and `gpu.count`, with an older gpu-guard's `gpu-guard.io/brand` and
//!   `driver.branch`. Its compute capability is unknown: GFD's
//!   `gpu.compute.*` shows one model of a node that may have several (the
//!   last; NVIDIA/k8s-device-plugin internal/lm/resource.go), and an older
//!   gpu-guard's `compute.min.*` only the lowest, so neither says what every
//!   GPU of the container runs.
//!
//! Label names, from NVIDIA/k8s-device-plugin internal/lm: nvml.go
//! newVersionLabeler writes `nvidia.com/cuda.driver-version.{major,minor,
//! revision,full}` and `nvidia.com/cuda.runtime-version.{major,minor,full}`
//! (the CUDA version the driver supports) with the deprecated
//! `nvidia.com/cuda.driver.{major,minor,rev}` and
//! `nvidia.com/cuda.runtime.{major,minor}`; the revision is empty for a
//! two-part driver version; resource.go writes `nvidia.com/gpu.{product,
//! count,memory}` and `gpu.compute.{major,minor}`; mig-strategy.go
//! `nvidia.com/mig.strategy`.
//!
//! `gpu-guard.io/gpu.healthy` (GPU health) is read on every node. Labels
//! that no labeller writes (a part that is not a number in canonical form, a
//! count of 0, labels that contradict each other) are input errors naming
//! the node: a guess would be a silent answer.

use super::labels;
use super::node_labels::{NodeLabels, NodesError};
use crate::core::facts::BRANDS;
use std::collections::BTreeMap;

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
pub const GFD_COUNT: &str = "nvidia.com/gpu.count";
/// gpu-guard's driver label, as the one part of its version.
pub const DRIVER_INT_KEY: [&str; 1] = [labels::DRIVER_INT];
pub const DRIVER_FULL: &str = "nvidia.com/cuda.driver-version.full";

/// Where a node's facts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// gpu-guard's integer labels.
    Own,
    /// GFD's `cuda.driver-version.*` labels.
    Gfd,
    /// Only GFD's deprecated `cuda.driver.*` labels (an older GFD).
    GfdDeprecated,
}

impl Source {
    pub const ALL: [Source; 3] = [Source::Own, Source::Gfd, Source::GfdDeprecated];
}

/// The facts one node's labels give, before they become host facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelFacts {
    pub source: Source,
    /// The driver version as labelled (`535.104.05`).
    pub driver: String,
    pub driver_major: u32,
    pub cuda: Option<(u32, u32)>,
    /// The lowest and highest compute capability as `sm` numbers (86 for
    /// 8.6): the node's whole set; None: unknown.
    pub sms: Option<(u32, u32)>,
    pub count: u32,
    /// An NVML brand, or None: unknown (absent, or `mixed`).
    pub brand: Option<String>,
    /// `gpu-guard.io/brand=mixed`.
    pub mixed: bool,
    /// `gpu-guard.io/gpu.healthy`, when labelled.
    pub healthy: Option<u32>,
}

pub(super) struct Reader<'a> {
    pub(super) node: &'a str,
    pub(super) l: &'a BTreeMap<String, String>,
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

    fn node_error(&self, why: String) -> NodesError {
        NodesError::Node {
            node: crate::core::sanitize::esc(self.node),
            why,
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

    /// A number as gpu-guard writes it (no leading zero), since affinities
    /// also match it with `In`/`NotIn`, which compare strings.
    fn canonical(&self, key: &str) -> Result<Option<u32>, NodesError> {
        let n = self.num(key)?;
        match (n, self.l.get(key)) {
            (Some(n), Some(v)) if *v != n.to_string() => Err(self.bad(
                key,
                "is not written as gpu-guard writes it (no leading zero); rerun `gpu-guard host --node-labels --write` on the node",
            )),
            _ => Ok(n),
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

    /// The driver from one family of GFD part labels: the text and the major.
    fn gfd_driver(&self, keys: &[&str; 3]) -> Result<Option<(String, u32)>, NodesError> {
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
    /// `required`: the facts' source writes it (gpu-guard's labels, or an
    /// older gpu-guard's brand label).
    fn check_branch(&self, major: u32, required: bool) -> Result<(), NodesError> {
        match self.l.get(labels::DRIVER_BRANCH) {
            Some(b) if *b == major.to_string() => Ok(()),
            Some(_) => Err(self.bad(
                labels::DRIVER_BRANCH,
                &format!("disagrees with the node's driver labels (branch {major}): stale labels; rerun `gpu-guard host --node-labels --write` on the node"),
            )),
            None if required => Err(self.node_error(format!(
                "gpu-guard labels without {}: incomplete gpu-guard labels; rerun `gpu-guard host --node-labels --write` on the node",
                labels::DRIVER_BRANCH
            ))),
            None => Ok(()),
        }
    }

    /// The compute capabilities of gpu-guard's `sm` labels.
    fn sms(&self) -> Result<Option<(u32, u32)>, NodesError> {
        let sm = |key: &str| -> Result<Option<u32>, NodesError> {
            let n = self.canonical(key)?;
            match n {
                Some(x) if !(labels::SM_LOWEST..=labels::SM_HIGHEST).contains(&u64::from(x)) => {
                    Err(self.bad(
                        key,
                        "is not a compute capability (10 for 1.0 to 999 for 99.9)",
                    ))
                }
                _ => Ok(n),
            }
        };
        let (one, lo, hi) = (sm(labels::SM)?, sm(labels::SM_MIN)?, sm(labels::SM_MAX)?);
        let range = match (lo, hi) {
            (Some(a), Some(b)) if a <= b => Some((a, b)),
            (None, None) => None,
            _ => {
                return Err(self.node_error(format!(
                    "{} and {} must come together, the first not above the second",
                    labels::SM_MIN,
                    labels::SM_MAX
                )))
            }
        };
        match (one, range) {
            (Some(s), Some((a, b))) if a == s && b == s => Ok(Some((s, s))),
            (None, r) => Ok(r),
            _ => Err(self.node_error(format!(
                "{} disagrees with {} and {}",
                labels::SM,
                labels::SM_MIN,
                labels::SM_MAX
            ))),
        }
    }
}

/// The facts of a node's labels; None for a node without driver labels.
pub fn label_facts(node: &NodeLabels) -> Result<Option<LabelFacts>, NodesError> {
    let r = Reader {
        node: &node.name,
        l: &node.labels,
    };
    if let Some(n) = r.num(labels::DRIVER_INT)? {
        let healthy = r.canonical(labels::HEALTHY)?;
        let (brand, mixed) = r.brand()?;
        return own_facts(&r, n, healthy, brand, mixed).map(Some);
    }
    let (source, (driver, major), cuda_keys) = match r.gfd_driver(&DRIVER_NEW)? {
        Some(d) => (Source::Gfd, d, &CUDA_NEW),
        None => match r.gfd_driver(&DRIVER_OLD)? {
            Some(d) => (Source::GfdDeprecated, d, &CUDA_OLD),
            None => return Ok(None),
        },
    };
    let healthy = r.canonical(labels::HEALTHY)?;
    let (brand, mixed) = r.brand()?;
    let count = match r.num(GFD_COUNT)? {
        None => 1,
        Some(0) => {
            return Err(r.bad(
                GFD_COUNT,
                "is not a GPU count: GFD labels only nodes with GPUs",
            ))
        }
        Some(n) => n,
    };
    r.check_branch(major, node.labels.contains_key(labels::BRAND))?;
    Ok(Some(LabelFacts {
        source,
        driver,
        driver_major: major,
        cuda: r.pair(cuda_keys)?,
        sms: None,
        count,
        brand,
        mixed,
        healthy,
    }))
}

/// The facts of a node with gpu-guard's integer labels.
fn own_facts(
    r: &Reader,
    driver: u32,
    healthy: Option<u32>,
    brand: Option<String>,
    mixed: bool,
) -> Result<LabelFacts, NodesError> {
    let n = u64::from(driver);
    let major = (n / 1_000_000) as u32;
    r.check_branch(major, true)?;
    let cuda = r.num(labels::CUDA_INT)?.map(|c| (c / 100, c % 100));
    let sms = r.sms()?;
    let models = sms.map_or(1, |(a, b)| if a == b { 1 } else { 2 });
    let count =
        match r.canonical(labels::COUNT)? {
            None => models,
            Some(c) if c >= models => c,
            Some(_) => return Err(r.bad(
                labels::COUNT,
                "is fewer GPUs than the compute capabilities labelled (0, or 1 with two models)",
            )),
        };
    // Shown as GFD's `full` label spells it when it is the same version.
    let decoded = labels::driver_from_int(n);
    let text =
        r.l.get(DRIVER_FULL)
            .filter(|full| same_version(full, &decoded))
            .cloned()
            .unwrap_or(decoded);
    Ok(LabelFacts {
        source: Source::Own,
        driver: text,
        driver_major: major,
        cuda,
        sms,
        count,
        brand,
        mixed,
        healthy,
    })
}

fn same_version(a: &str, b: &str) -> bool {
    use crate::core::version::Version;
    matches!((Version::parse(a), Version::parse(b)), (Ok(x), Ok(y)) if x == y)
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
        ("nvidia.com/gpu.compute.major", "8"),
        ("nvidia.com/gpu.compute.minor", "0"),
    ];

    const OWN: &[(&str, &str)] = &[
        ("gpu-guard.io/driver.int", "550054015"),
        ("gpu-guard.io/driver.branch", "550"),
        ("gpu-guard.io/cuda.int", "1204"),
        ("gpu-guard.io/sm.min", "80"),
        ("gpu-guard.io/sm.max", "90"),
        ("gpu-guard.io/gpu.count", "8"),
    ];

    fn with(
        base: &[(&'static str, &'static str)],
        extra: &[(&'static str, &'static str)],
    ) -> NodeLabels {
        let mut v: Vec<(&str, &str)> = base.to_vec();
        v.extend_from_slice(extra);
        node(&v)
    }

    #[test]
    fn sources() {
        let f = label_facts(&with(GFD, &[])).unwrap().unwrap();
        assert_eq!(f.source, Source::Gfd);
        assert_eq!(f.driver, "535.104.05");
        // GFD's compute labels show one model: not a fact.
        assert_eq!(
            (f.cuda, f.sms, f.count, f.brand),
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
        assert_eq!(f.source, Source::GfdDeprecated);
        assert_eq!((f.driver.as_str(), f.cuda), ("550.54", Some((12, 4))));
        // gpu-guard's labels win over GFD's, which they need not match.
        let own = with(GFD, OWN);
        let f = label_facts(&own).unwrap().unwrap();
        assert_eq!(f.source, Source::Own);
        assert_eq!((f.driver.as_str(), f.driver_major), ("550.54.15", 550));
        assert_eq!((f.cuda, f.sms, f.count), (Some((12, 4)), Some((80, 90)), 8));
        let full = with(OWN, &[(DRIVER_FULL, "550.54.15")]);
        assert_eq!(label_facts(&full).unwrap().unwrap().driver, "550.54.15");
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
            ("nvidia.com/cuda.runtime-version.minor", "x"),
            ("gpu-guard.io/brand", "teslaa"),
            ("gpu-guard.io/driver.branch", "550"),
            ("gpu-guard.io/driver.branch", "0535"),
            ("gpu-guard.io/gpu.healthy", "08"),
        ] {
            let e = label_facts(&with(GFD, &[bad])).unwrap_err().to_string();
            assert!(e.starts_with("node n: "), "{bad:?}: {e}");
        }
        let e = label_facts(&with(GFD, &[("gpu-guard.io/brand", "tesla")])).unwrap_err();
        assert!(e.to_string().contains("incomplete"), "{e}");
        for bad in [
            ("gpu-guard.io/sm.min", "079"),
            ("gpu-guard.io/sm.max", "1000"),
            ("gpu-guard.io/sm.max", "75"),
            ("gpu-guard.io/sm", "80"),
            ("gpu-guard.io/gpu.count", "1"),
            ("gpu-guard.io/driver.branch", "535"),
        ] {
            let l: Vec<(&str, &str)> = OWN
                .iter()
                .copied()
                .filter(|(k, _)| *k != bad.0)
                .chain([bad])
                .collect();
            let e = label_facts(&node(&l)).unwrap_err().to_string();
            assert!(e.starts_with("node n: "), "{bad:?}: {e}");
        }
        let no_branch: Vec<(&str, &str)> = OWN
            .iter()
            .copied()
            .filter(|(k, _)| *k != labels::DRIVER_BRANCH)
            .collect();
        assert!(label_facts(&node(&no_branch)).is_err());
        let ok = with(
            GFD,
            &[
                ("gpu-guard.io/brand", "tesla"),
                ("gpu-guard.io/driver.branch", "535"),
            ],
        );
        assert_eq!(
            label_facts(&ok).unwrap().unwrap().brand.as_deref(),
            Some("tesla")
        );
        let mixed = with(
            OWN,
            &[
                ("gpu-guard.io/brand", "mixed"),
                ("gpu-guard.io/gpu.healthy", "7"),
            ],
        );
        let f = label_facts(&mixed).unwrap().unwrap();
        assert!(f.mixed && f.brand.is_none());
        assert_eq!(f.healthy, Some(7));
    }
}
