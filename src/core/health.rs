//! GPU health at container start (docs/health.md; docs/interfaces.md, "GPU
//! health and topology at start"): what NVML says of each GPU, judged
//! `ok`, `degraded` or `failed`, and the `health` findings for the GPUs a
//! container will get.
//!
//! The facts are NVML's (crate::host::nvml_health reads them in the probe
//! child); the judgement ([`judge`], crate::core::gpu_health) is pure, so
//! a facts file, the cache and the probe are judged alike:
//!
//! - `failed`: the GPU is lost (NVML_ERROR_GPU_IS_LOST, "fallen off the bus
//!   or otherwise inaccessible", nvml.h), or a row-remapping failure
//!   (NVML_FI_DEV_REMAPPED_FAILURE): NVIDIA's memory error management guide
//!   (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt, "Row Remapping")
//!   treats a failed remap as grounds to replace the board;
//! - `degraded`: a row remap pending (NVML_FI_DEV_REMAPPED_PENDING) or a
//!   page retirement pending (nvmlDeviceGetRetiredPagesPendingStatus): the
//!   memory that failed is still mapped until the GPU is reset; or
//!   uncorrectable ECC errors counted since the last reset
//!   (nvmlDeviceGetTotalEccErrors, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
//!   NVML_VOLATILE_ECC).
//!
//! Only the GPUs a container gets are judged for it: a container given the
//! healthy GPUs of a node with a failed one starts.

use crate::core::decision::{Check, Finding};
use crate::core::enforcement::Enforcement;
use crate::core::facts::Gpu;
pub use crate::core::gpu_health::*;

/// `GPU 1 (NVIDIA H100 80GB HBM3, GPU-..., bus 00000000:2A:00.0)`: index,
/// name, UUID and bus id, as far as they are known.
pub fn name_gpu(g: &Gpu) -> String {
    let mut parts = Vec::new();
    if !g.name.is_empty() {
        parts.push(g.name.clone());
    }
    if !g.uuid.is_empty() {
        parts.push(g.uuid.clone());
    }
    if let Some(b) = &g.pci_bus_id {
        parts.push(format!("bus {b}"));
    }
    if parts.is_empty() {
        format!("GPU {}", g.index)
    } else {
        format!("GPU {} ({})", g.index, parts.join(", "))
    }
}

/// What to do about a GPU in this state, for these reasons.
fn fix_for(g: &Gpu, h: &GpuHealth) -> String {
    let i = g.index;
    let has = |r: &str| h.reasons.iter().any(|x| x.starts_with(r));
    let reset = format!(
        "reset it when idle (`nvidia-smi -r -i {i}`, or reboot the node) so the pending remap or retirement takes effect"
    );
    if has(REMAP_FAILURE) {
        format!("drain this node (`kubectl drain`, or stop scheduling GPU {i}) and replace the board: a failed row remap is NVIDIA's replacement criterion (`nvidia-smi -q -d ROW_REMAPPER` shows it)")
    } else if has(LOST) {
        format!("drain this node, look for Xid 79 (\"GPU has fallen off the bus\") with `dmesg | grep -i xid`, and reset GPU {i} (`nvidia-smi -r -i {i}`) or reboot; if it recurs, check its power and seating and replace the board")
    } else if has(ECC_VOLATILE) && !has(REMAP_PENDING) && !has(RETIREMENT_PENDING) {
        format!("drain GPU {i} and reset it (`nvidia-smi -r -i {i}`) to clear the volatile counters; `nvidia-smi -q -d ECC,ROW_REMAPPER` shows the errors; if uncorrectable errors come back, replace the board")
    } else {
        format!("drain GPU {i} and {reset}; `nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT` shows what is pending")
    }
}

/// The `health` findings for a container given `visible`: one per GPU it
/// gets that is failed or degraded (severity by `[health]`), and an info
/// note per failed GPU of the host it does not get.
pub fn findings(visible: &[&Gpu], all: &[Gpu], cfg: &HealthConfig) -> Vec<Finding> {
    let mut out = Vec::new();
    for g in visible {
        let Some(h) = &g.health else { continue };
        let rule = match h.state {
            HealthState::Ok => continue,
            HealthState::Degraded => cfg.degraded,
            HealthState::Failed => cfg.failed,
        };
        let key = match h.state {
            HealthState::Failed => "failed",
            _ => "degraded",
        };
        let verb = match h.state {
            HealthState::Failed => "has failed",
            _ => "is degraded",
        };
        let message = format!(
            "{} {verb}: NVML reports {}",
            name_gpu(g),
            h.reasons.join(", ")
        );
        let f = match rule {
            Enforcement::Off => continue,
            Enforcement::Warn => Finding::warning(
                Check::Health,
                format!("{message} (health.{key} = \"warn\": the container starts)"),
            ),
            Enforcement::Refuse => Finding::error(Check::Health, message),
        };
        out.push(f.with_fix(fix_for(g, h)));
    }
    if cfg.failed != Enforcement::Off {
        for g in all {
            let failed = g
                .health
                .as_ref()
                .is_some_and(|h| h.state == HealthState::Failed);
            if failed && !visible.iter().any(|v| v.index == g.index) {
                out.push(Finding::info(
                    Check::Health,
                    format!("{} has failed; this container does not get it", name_gpu(g)),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::decision::Severity;

    fn gpu(index: u32, h: NvmlHealth) -> Gpu {
        Gpu {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: Some(format!("00000000:{:02X}:00.0", index + 0x18)),
            health: Some(judge(&h)),
            ..Gpu::default()
        }
    }

    #[test]
    fn states_and_reasons() {
        assert_eq!(judge(&NvmlHealth::default()), GpuHealth::default());
        let h = judge(&NvmlHealth {
            remap_pending: true,
            ecc_volatile_uncorrected: 3,
            ..NvmlHealth::default()
        });
        assert_eq!(h.state, HealthState::Degraded);
        assert_eq!(
            h.reasons,
            [
                "row remapping pending",
                "uncorrectable ECC errors since the last reset: 3"
            ]
        );
        let h = judge(&NvmlHealth {
            remap_failure: true,
            retired_pages_pending: true,
            ..NvmlHealth::default()
        });
        assert_eq!(h.state, HealthState::Failed);
        assert_eq!(h.reasons[0], "row remapping failed");
        let j = serde_json::to_value(&h).unwrap();
        assert_eq!(j["state"], "failed");
    }

    #[test]
    fn only_the_gpus_a_container_gets_decide() {
        let all = vec![
            gpu(0, NvmlHealth::default()),
            gpu(
                1,
                NvmlHealth {
                    remap_failure: true,
                    ..NvmlHealth::default()
                },
            ),
            gpu(
                2,
                NvmlHealth {
                    retired_pages_pending: true,
                    ..NvmlHealth::default()
                },
            ),
        ];
        let cfg = HealthConfig::default();
        let f = findings(&[&all[0]], &all, &cfg);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Info);
        let f = findings(&[&all[1], &all[2]], &all, &cfg);
        assert_eq!(f[0].severity, Severity::Error);
        assert!(f[0].message.contains("GPU 1 (NVIDIA H100 80GB HBM3, GPU-1, bus 00000000:19:00.0) has failed: NVML reports row remapping failed"), "{}", f[0].message);
        assert!(f[0].fix.as_deref().unwrap().contains("replace the board"));
        assert_eq!(f[1].severity, Severity::Warning);
        assert!(f[1].fix.as_deref().unwrap().contains("nvidia-smi -r -i 2"));
        let off = HealthConfig {
            failed: Enforcement::Off,
            degraded: Enforcement::Refuse,
            max_age_s: 30,
        };
        let f = findings(&[&all[1], &all[2]], &all, &off);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Error);
        assert!(f[0].message.contains("GPU 2"));
    }

    #[test]
    fn cache_lifetime_follows_health() {
        let on = HealthConfig::default();
        assert_eq!(on.cache_ttl_s(300), 30);
        assert_eq!(on.cache_ttl_s(10), 10);
        let off = HealthConfig {
            failed: Enforcement::Off,
            degraded: Enforcement::Off,
            max_age_s: 30,
        };
        assert_eq!(off.cache_ttl_s(300), 300);
    }
}
