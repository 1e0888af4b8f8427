//! What gpu-guard knows about the host: the host facts JSON (docs/interfaces.md), and
//! the faults met while finding it out.
//!
//! Every source of facts (a facts file, NVML, /proc, the cache) sits behind
//! [`HostSource`], so the decision core never touches the machine.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::core::gpu_health::{GpuHealth, NvmlHealth};

/// The host facts JSON (docs/interfaces.md, "Host facts JSON"). Unknown fields are
/// ignored on read, as the design asks of readers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    /// `nvmlSystemGetDriverVersion`; null when the host has no NVIDIA driver.
    pub driver_version: Option<String>,
    /// From `nvmlSystemGetCudaDriverVersion` as `major.minor`; null without a driver.
    pub cuda_driver_version: Option<String>,
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    /// The amdgpu kernel driver's version (`/sys/module/amdgpu/version`, the
    /// amdgpu-dkms module version, e.g. `6.16.6`); absent (null) without the
    /// amdgpu driver (docs/interfaces.md, "AMD GPUs"). An in-tree driver, which has
    /// no version of its own, is `in-tree <kernel release>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amdgpu_driver_version: Option<String>,
}

/// Who made a GPU. Absent in the facts JSON means NVIDIA.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    #[default]
    Nvidia,
    Amd,
}

impl Vendor {
    pub fn is_nvidia(&self) -> bool {
        *self == Vendor::Nvidia
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub index: u32,
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub name: String,
    /// Lowercase NVML brand name (tesla, geforce, ...); see [`BRANDS`].
    #[serde(default = "unknown_brand")]
    pub brand: String,
    /// `major.minor`; null when it could not be read (the /proc fallback).
    #[serde(default)]
    pub compute_capability: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_devices: Vec<MigDevice>,
    /// Extension: the N of `/dev/nvidiaN` (nvmlDeviceGetMinorNumber, or
    /// "Device Minor" in /proc/driver/nvidia/gpus/*/information). Lets a spec
    /// that names device nodes be mapped to GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor_number: Option<u32>,
    /// `nvidia` (left out) or `amd`.
    #[serde(default, skip_serializing_if = "Vendor::is_nvidia")]
    pub vendor: Vendor,
    /// AMD: the LLVM target ID with the host's feature modes
    /// (`gfx942:sramecc+:xnack-`); see core::amd::fit for how a container's
    /// env changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_id: Option<String>,
    /// AMD: `/dev/dri/renderD<drm_render_minor>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render_node: Option<String>,
    /// AMD: compute units (KFD `simd_count / simd_per_cu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_units: Option<u32>,
    /// Extension, AMD: XNACK switches per process on this GPU (gfx90a,
    /// gfx94x, gfx950), so the container's `HSA_XNACK` decides its mode;
    /// `target_id` carries the default a process gets.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub xnack_per_process: bool,
    /// Extension, AMD: the KFD topology node (`/sys/class/kfd/kfd/topology/nodes/<N>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kfd_node: Option<u32>,
    /// `ok`, `degraded` or `failed`, and why (core::health); absent when
    /// not known (the /proc fallback, a facts file that does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<GpuHealth>,
    /// Input only: NVML's raw health answers (the fake NVML's
    /// `nvml_health`); a facts file that has them but no `health` is
    /// judged from them ([`HostFacts::from_json`]).
    #[serde(default, skip_serializing)]
    pub nvml_health: Option<NvmlHealth>,
    /// The GPU's NUMA node (sysfs `numa_node`): absent when not read,
    /// `null` when the kernel knows none (-1).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nullable")]
    pub numa_node: Option<Option<u32>>,
    /// The CPUs local to the GPU (sysfs `local_cpulist`, cpulist syntax).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_cpus: Option<String>,
    /// Extension: peers (by index) NVML reports no P2P path to, with
    /// NVML's status (`nvmlDeviceGetP2PStatus`, read capability:
    /// `ioh_topology_not_supported`, `chipset_not_supported`, ...). Absent
    /// or empty: P2P works to every peer, or was not read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub p2p: BTreeMap<String, String>,
}

/// serde for a field that is absent (None), `null` (Some(None)) or a
/// value: serde's own `Option<Option<T>>` reads `null` as absent.
mod nullable {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MigDevice {
    pub uuid: String,
}

fn unknown_brand() -> String {
    "unknown".to_string()
}

/// NVML brand names as the host facts JSON spells them (lowercase nvmlBrandType_t names).
pub const BRANDS: &[&str] = &[
    "tesla",
    "geforce",
    "geforcertx",
    "quadro",
    "quadrortx",
    "nvidia",
    "nvidiartx",
    "titan",
    "titanrtx",
    "grid",
    "nvs",
    "vapps",
    "vpc",
    "vcs",
    "vws",
    "cloudgaming",
    "unknown",
];

impl Gpu {
    pub fn is_amd(&self) -> bool {
        self.vendor == Vendor::Amd
    }

    /// One short description for diagnoses: `GPU 0 (NVIDIA A100-SXM4-80GB, compute capability 8.0)`.
    pub fn describe(&self) -> String {
        if self.is_amd() {
            let t = self.target_id.as_deref().unwrap_or("unknown target");
            return if self.name.is_empty() {
                format!("AMD GPU {} ({t})", self.index)
            } else {
                format!("AMD GPU {} ({}, {t})", self.index, self.name)
            };
        }
        let cc = self.compute_capability.as_deref().unwrap_or("unknown");
        if self.name.is_empty() {
            format!("GPU {} (compute capability {cc})", self.index)
        } else {
            format!(
                "GPU {} ({}, compute capability {cc})",
                self.index, self.name
            )
        }
    }
}

impl HostFacts {
    /// Parses the facts JSON, naming what is wrong in one line.
    /// A GPU with NVML's raw health answers (`nvml_health`, what the fake
    /// NVML answers from) but no `health` is judged from them, so a
    /// profile decides the same through `--host` as through the probe.
    pub fn from_json(text: &str) -> Result<HostFacts, serde_json::Error> {
        let mut f: HostFacts = serde_json::from_str(text)?;
        for g in &mut f.gpus {
            if g.health.is_none() {
                g.health = g.nvml_health.as_ref().map(crate::core::gpu_health::judge);
            }
        }
        Ok(f)
    }

    /// Short list of the host's GPUs for "you asked for X; the host has ..." lines.
    pub fn gpu_list(&self) -> String {
        if self.gpus.is_empty() {
            return "no GPUs".to_string();
        }
        self.gpus
            .iter()
            .map(|g| {
                let mut s = format!("{} {}", g.index, g.name);
                if !g.uuid.is_empty() {
                    s.push_str(&format!(" ({})", g.uuid));
                }
                if !g.mig_devices.is_empty() {
                    s.push_str(&format!(" with {} MIG devices", g.mig_devices.len()));
                }
                s
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What a host source found: the facts it could establish and the faults it met.
#[derive(Clone, Debug, Default)]
pub struct HostReport {
    /// None when nothing could be established (probe failed or timed out).
    pub facts: Option<HostFacts>,
    pub problems: Vec<HostProblem>,
    /// Where the facts came from, for logs and `check` output: "facts file /x",
    /// "NVML", "cache", "/proc/driver/nvidia".
    pub source: String,
}

/// A fault in the host itself, as a person meets it.
#[derive(Clone, Debug, PartialEq)]
pub struct HostProblem {
    pub kind: HostProblemKind,
    pub message: String,
    pub fix: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostProblemKind {
    /// No NVIDIA kernel driver at all: GPU containers cannot work.
    NoDriver,
    /// The probe failed or ran past its deadline; facts are unknown. What
    /// happens follows the policy (`host.on_probe_failure`).
    ProbeFailed,
    /// One GPU is lost (fell off the bus). Containers that see it are refused.
    GpuLost { index: u32 },
    /// Facts are partial (NVML missing, device nodes missing): a warning.
    Degraded,
    /// The configured facts file (`host.facts_file`) could have been
    /// written by someone other than root: facts that decide what starts
    /// are not taken from it, whatever `host.on_probe_failure` says.
    Untrusted,
}

impl HostReport {
    pub fn from_facts(facts: HostFacts, source: impl Into<String>) -> HostReport {
        HostReport {
            facts: Some(facts),
            problems: Vec::new(),
            source: source.into(),
        }
    }

    pub fn failed(source: impl Into<String>, problem: HostProblem) -> HostReport {
        HostReport {
            facts: None,
            problems: vec![problem],
            source: source.into(),
        }
    }
}

/// Anything that can tell gpu-guard about the host.
pub trait HostSource {
    fn report(&self) -> HostReport;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_design_example_and_ignores_unknown_fields() {
        let text = r#"{
          "driver_version": "535.104.05", "cuda_driver_version": "12.2", "future": 1,
          "gpus": [ { "index": 0, "uuid": "GPU-5f0d1c6e", "name": "NVIDIA A100-SXM4-80GB",
                      "brand": "tesla", "compute_capability": "8.0", "memory_mib": 81920,
                      "pci_bus_id": "00000000:07:00.0", "extra": true,
                      "mig_devices": [ { "uuid": "MIG-0b7c4e52" } ] } ] }"#;
        let f = HostFacts::from_json(text).unwrap();
        assert_eq!(f.driver_version.as_deref(), Some("535.104.05"));
        assert_eq!(f.gpus[0].mig_devices[0].uuid, "MIG-0b7c4e52");
        assert_eq!(f.gpus[0].memory_mib, Some(81920));
    }

    #[test]
    fn no_driver_host() {
        let f = HostFacts::from_json(
            r#"{"driver_version": null, "cuda_driver_version": null, "gpus": []}"#,
        )
        .unwrap();
        assert!(f.driver_version.is_none());
        assert!(f.gpus.is_empty());
    }

    #[test]
    fn roundtrip_keeps_fields() {
        let f = HostFacts {
            driver_version: Some("550.54.14".into()),
            cuda_driver_version: Some("12.4".into()),
            gpus: vec![Gpu {
                index: 1,
                uuid: "GPU-1".into(),
                name: "Tesla T4".into(),
                brand: "tesla".into(),
                compute_capability: Some("7.5".into()),
                memory_mib: Some(15360),
                pci_bus_id: Some("00000000:3B:00.0".into()),
                mig_devices: vec![],
                minor_number: None,
                health: Some(GpuHealth::default()),
                nvml_health: None,
                numa_node: Some(None),
                local_cpus: Some("0-15,32-47".into()),
                p2p: BTreeMap::from([("1".into(), "ioh_topology_not_supported".into())]),
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = serde_json::to_string(&f).unwrap();
        assert!(text.contains(r#""numa_node":null"#), "{text}");
        assert_eq!(HostFacts::from_json(&text).unwrap(), f);
        let mut g = f.clone();
        g.gpus[0].numa_node = None;
        let text = serde_json::to_string(&g).unwrap();
        assert!(!text.contains("numa_node"), "{text}");
        assert_eq!(HostFacts::from_json(&text).unwrap(), g);
    }

    #[test]
    fn nvml_health_is_judged_when_health_is_absent() {
        let f = HostFacts::from_json(
            r#"{"driver_version": "550.54.14", "cuda_driver_version": "12.4", "gpus": [
                {"index": 0, "nvml_health": {"remap_failure": true}},
                {"index": 1, "nvml_health": {"remap_pending": true},
                 "health": {"state": "ok", "reasons": []}},
                {"index": 2, "numa_node": 1}]}"#,
        )
        .unwrap();
        let state = |i: usize| f.gpus[i].health.as_ref().map(|h| h.state.word());
        assert_eq!(state(0), Some("failed"));
        assert_eq!(state(1), Some("ok"));
        assert_eq!(state(2), None);
        assert_eq!(f.gpus[2].numa_node, Some(Some(1)));
        assert!(!serde_json::to_string(&f).unwrap().contains("nvml_health"));
    }
}
