//! What gpu-guard knows about the host: the host facts JSON (docs/interfaces.md), and
//! the faults met while finding it out.
//!
//! Every source of facts (a facts file, NVML, /proc, the cache) sits behind
//! [`HostSource`], so the decision core never touches the machine.

use serde::{Deserialize, Serialize};

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
    /// One short description for diagnoses: `GPU 0 (NVIDIA A100-SXM4-80GB, compute capability 8.0)`.
    pub fn describe(&self) -> String {
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
    pub fn from_json(text: &str) -> Result<HostFacts, serde_json::Error> {
        serde_json::from_str(text)
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
            }],
        };
        let text = serde_json::to_string(&f).unwrap();
        assert_eq!(HostFacts::from_json(&text).unwrap(), f);
    }
}
