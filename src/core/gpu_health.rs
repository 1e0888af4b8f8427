//! A GPU's health as the host facts JSON records it, and how NVML's
//! answers amount to it ([`judge`]); the rules, and what a container given
//! such a GPU gets, are in [`crate::core::health`]. Apart from it so the
//! facts can hold these types without the facts and the findings
//! depending on each other.

use crate::core::enforcement::Enforcement;
use serde::{Deserialize, Serialize};

/// What NVML said of one GPU's health, as the probe reads it and as the
/// fake NVML's `nvml_health` facts describe it (every field absent: all
/// clear).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlHealth {
    /// NVML_ERROR_GPU_IS_LOST on the GPU's handle or a query.
    pub lost: bool,
    /// NVML_FI_DEV_REMAPPED_FAILURE is non-zero.
    pub remap_failure: bool,
    /// NVML_FI_DEV_REMAPPED_PENDING is non-zero.
    pub remap_pending: bool,
    /// nvmlDeviceGetRetiredPagesPendingStatus is NVML_FEATURE_ENABLED.
    pub retired_pages_pending: bool,
    /// Uncorrectable ECC errors since the last reset (volatile counter).
    pub ecc_volatile_uncorrected: u64,
}

/// `health.state` in the host facts JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    #[default]
    Ok,
    Degraded,
    Failed,
}

impl HealthState {
    pub fn word(self) -> &'static str {
        match self {
            HealthState::Ok => "ok",
            HealthState::Degraded => "degraded",
            HealthState::Failed => "failed",
        }
    }
}

/// Per GPU `"health": {"state": ..., "reasons": [...]}` in the host facts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuHealth {
    pub state: HealthState,
    #[serde(default)]
    pub reasons: Vec<String>,
}

/// The reason words of the facts JSON (docs/interfaces.md): stable, so
/// scripts and labels can match them.
pub const LOST: &str = "GPU lost or inaccessible";
pub const REMAP_FAILURE: &str = "row remapping failed";
pub const REMAP_PENDING: &str = "row remapping pending";
pub const RETIREMENT_PENDING: &str = "page retirement pending";
/// Followed by the count: `uncorrectable ECC errors since the last reset: 3`.
pub const ECC_VOLATILE: &str = "uncorrectable ECC errors since the last reset";

/// The state and reasons NVML's answers amount to.
pub fn judge(h: &NvmlHealth) -> GpuHealth {
    let mut out = GpuHealth::default();
    let mut add = |state: HealthState, why: String| {
        out.state = out.state.max(state);
        out.reasons.push(why);
    };
    if h.lost {
        add(HealthState::Failed, LOST.into());
    }
    if h.remap_failure {
        add(HealthState::Failed, REMAP_FAILURE.into());
    }
    if h.remap_pending {
        add(HealthState::Degraded, REMAP_PENDING.into());
    }
    if h.retired_pages_pending {
        add(HealthState::Degraded, RETIREMENT_PENDING.into());
    }
    if h.ecc_volatile_uncorrected > 0 {
        add(
            HealthState::Degraded,
            format!("{ECC_VOLATILE}: {}", h.ecc_volatile_uncorrected),
        );
    }
    out
}

/// `[health]`: what a failed or degraded GPU does to a container given it,
/// and how old the health facts may be.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// A failed GPU: `enforce` (refuse, the default), `warn` or `off`.
    #[serde(with = "crate::core::enforcement::spelling::off_warn_enforce")]
    pub failed: Enforcement,
    /// A degraded GPU: `warn` (the default), `enforce` or `off`.
    #[serde(with = "crate::core::enforcement::spelling::off_warn_enforce")]
    pub degraded: Enforcement,
    /// The host facts cache serves health facts at most this old
    /// (seconds): while health is checked, the cache's lifetime is the
    /// smaller of this and `host.cache_ttl_s`. 0: every GPU container
    /// start reads NVML.
    pub max_age_s: u64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            failed: Enforcement::Refuse,
            degraded: Enforcement::Warn,
            max_age_s: 30,
        }
    }
}

impl HealthConfig {
    /// Whether any health finding can be made.
    pub fn on(&self) -> bool {
        self.failed != Enforcement::Off || self.degraded != Enforcement::Off
    }

    /// The lifetime of cached host facts: `host.cache_ttl_s`, shortened to
    /// `max_age_s` while health is checked.
    pub fn cache_ttl_s(&self, host_ttl_s: u64) -> u64 {
        if self.on() {
            host_ttl_s.min(self.max_age_s)
        } else {
            host_ttl_s
        }
    }
}
