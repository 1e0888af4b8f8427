//! The `[tuning]` section of the host policy as values: the environment
//! rules, the rlimits it raises (`memlock`, `stack`) and `shm_size`, with
//! their defaults. Split from [`crate::core::policy`], which re-exports them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An rlimit a tuning key raises (`tuning.memlock`, `tuning.stack`). In
/// config.toml: `""` (off), `"unlimited"`, or a number of bytes (an
/// integer, or a string of digits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Limit {
    #[default]
    Off,
    Unlimited,
    Bytes(u64),
}

/// `tuning.memlock`: RLIMIT_MEMLOCK for GPU containers (RDMA, GPUDirect).
pub type Memlock = Limit;

impl Limit {
    /// The rlimit value: RLIM_INFINITY is u64::MAX, as runc's spec writes it.
    pub fn value(self) -> Option<u64> {
        match self {
            Memlock::Off => None,
            Memlock::Unlimited => Some(u64::MAX),
            Memlock::Bytes(n) => Some(n),
        }
    }
}

impl Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Limit::Off => s.serialize_str(""),
            Limit::Unlimited => s.serialize_str("unlimited"),
            Limit::Bytes(n) => s.serialize_u64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Limit, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Limit;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"\" (off), \"unlimited\" or a number of bytes")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Memlock, E> {
                Ok(Memlock::Bytes(n))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Memlock, E> {
                u64::try_from(n)
                    .map(Memlock::Bytes)
                    .map_err(|_| E::custom("a limit must not be negative"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Memlock, E> {
                match v.trim() {
                    "" => Ok(Memlock::Off),
                    "unlimited" | "infinity" => Ok(Memlock::Unlimited),
                    t => t.parse::<u64>().map(Memlock::Bytes).map_err(|_| {
                        E::custom(format!(
                            "`{t}` is not \"\", \"unlimited\" or a number of bytes"
                        ))
                    }),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TuningConfig {
    pub enabled: bool,
    pub disable_annotation: String,
    pub frameworks: BTreeMap<String, Vec<String>>,
    /// RLIMIT_MEMLOCK for GPU containers, only ever raised.
    pub memlock: Memlock,
    /// RLIMIT_STACK for GPU containers, only ever raised.
    pub stack: Limit,
    /// The size of a GPU container's own `/dev/shm` tmpfs, only ever raised.
    pub shm_size: ShmSize,
    /// GPUs across NUMA nodes, or a cpuset far from them: `warn`; `pin`
    /// also gives a container without a cpuset its GPUs' node.
    pub numa: NumaMode,
    /// Multi-GPU containers whose GPUs have no P2P path: a `note`, or
    /// `disable` (the note and `NCCL_P2P_DISABLE=1`).
    pub nccl_p2p: NcclP2p,
    pub env: Vec<TuningRule>,
}

/// `tuning.numa` (core::tuning::numa).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NumaMode {
    Off,
    /// A `tuning` warning for GPUs on more than one NUMA node, or a cpuset
    /// with no CPU on its GPUs' node.
    #[default]
    Warn,
    /// The warnings, and `linux.resources.cpu.{cpus,mems}` of the GPUs'
    /// node for a container that has no cpuset of its own.
    Pin,
}

/// `tuning.nccl_p2p` (core::tuning::numa): what a multi-GPU container
/// whose GPUs NVML reports no P2P path between gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NcclP2p {
    Off,
    /// A `tuning` note naming the GPU pairs and NVML's status.
    #[default]
    Note,
    /// The note, and `NCCL_P2P_DISABLE=1` unless the container sets it.
    Disable,
}

/// `tuning.shm_size`: `""` (off), a number of bytes (an integer or a
/// string of digits), or digits with a binary unit `k`, `m`, `g` or `t`
/// (1024-based, as docker's `--shm-size` and tmpfs's `size=` read them;
/// `"1g"`, `"512m"`, also `"1GiB"`, `"512MB"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShmSize {
    #[default]
    Off,
    Bytes(u64),
}

impl ShmSize {
    pub fn bytes(self) -> Option<u64> {
        match self {
            ShmSize::Off => None,
            ShmSize::Bytes(n) => Some(n),
        }
    }

    /// Reads a size as the key accepts it; None when it is not one.
    pub fn parse(text: &str) -> Option<ShmSize> {
        let t = text.trim();
        if t.is_empty() {
            return Some(ShmSize::Off);
        }
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        let (num, unit) = t.split_at(digits);
        let n: u64 = num.parse().ok()?;
        let shift = match unit.trim_start().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => return None,
        };
        n.checked_mul(1u64 << shift).map(ShmSize::Bytes)
    }
}

impl Serialize for ShmSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ShmSize::Off => s.serialize_str(""),
            ShmSize::Bytes(n) => s.serialize_u64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for ShmSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ShmSize, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ShmSize;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"\" (off), a number of bytes, or a size such as \"1g\" or \"512m\"")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ShmSize, E> {
                Ok(ShmSize::Bytes(n))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ShmSize, E> {
                u64::try_from(n)
                    .map(ShmSize::Bytes)
                    .map_err(|_| E::custom("shm_size must not be negative"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ShmSize, E> {
                ShmSize::parse(v).ok_or_else(|| {
                    E::custom(format!(
                        "`{}` is not \"\", a number of bytes or a size such as \"1g\" or \"512m\"",
                        v.trim()
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuningRule {
    pub name: String,
    pub value: String,
    /// Apply only when every visible GPU has at least this compute capability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_compute_capability: Option<String>,
    /// Apply only when the image declares one of these frameworks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frameworks: Vec<String>,
    /// Skip when the image declares this framework at an older version.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub framework_min_version: BTreeMap<String, String>,
    /// Skip when the container sets any of these (a newer spelling of the same knob).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unless_env: Vec<String>,
}

impl TuningRule {
    fn plain(name: &str, value: &str) -> TuningRule {
        TuningRule {
            name: name.into(),
            value: value.into(),
            min_compute_capability: None,
            frameworks: Vec::new(),
            framework_min_version: BTreeMap::new(),
            unless_env: Vec::new(),
        }
    }
}

impl Default for TuningConfig {
    fn default() -> Self {
        let fw = |vars: &[&str]| vars.iter().map(|v| v.to_string()).collect::<Vec<_>>();
        let frameworks = BTreeMap::from([
            (
                "pytorch".to_string(),
                fw(&[
                    "PYTORCH_VERSION",
                    "PYTORCH_BUILD_VERSION",
                    "NVIDIA_PYTORCH_VERSION",
                ]),
            ),
            (
                "tensorflow".to_string(),
                fw(&[
                    "TENSORFLOW_VERSION",
                    "TF_VERSION",
                    "NVIDIA_TENSORFLOW_VERSION",
                ]),
            ),
            (
                "jax".to_string(),
                fw(&["JAX_VERSION", "NVIDIA_JAX_VERSION"]),
            ),
        ]);
        let mut alloc = TuningRule::plain("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True");
        alloc.framework_min_version = BTreeMap::from([("pytorch".into(), "2.1".into())]);
        alloc.unless_env = vec!["PYTORCH_ALLOC_CONF".into()];
        let mut tf32 = TuningRule::plain("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1");
        tf32.min_compute_capability = Some("8.0".into());
        TuningConfig {
            enabled: true,
            disable_annotation: "gpu-guard.tuning".into(),
            frameworks,
            memlock: Memlock::Off,
            stack: Limit::Off,
            shm_size: ShmSize::Off,
            numa: NumaMode::Warn,
            nccl_p2p: NcclP2p::Note,
            env: vec![
                TuningRule::plain("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
                TuningRule::plain("CUDA_DEVICE_MAX_CONNECTIONS", "32"),
                TuningRule::plain("TF_GPU_ALLOCATOR", "cuda_malloc_async"),
                alloc,
                tf32,
            ],
        }
    }
}
