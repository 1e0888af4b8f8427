//! The health and P2P calls of the NVML probe (core::health judges what
//! they return). Runs only in the probe child, beside [`super::nvml`].
//!
//! Every call here may be missing from an older library
//! (`FailedToLoadSymbol`) or unsupported by the GPU (`NotSupported`:
//! consumer boards have no ECC, pre-Ampere GPUs retire pages instead of
//! remapping rows): either is "nothing to report", never a failed probe.
//! NVML_ERROR_GPU_IS_LOST from any of them is the GPU lost.

use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, P2pCapabilitiesIndex, P2pStatus,
};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

use crate::core::facts::Gpu;
use crate::core::health::NvmlHealth;

/// nvml.h field ids (nvmlDeviceGetFieldValues): NVML_FI_DEV_REMAPPED_PENDING
/// and NVML_FI_DEV_REMAPPED_FAILURE, the two answers of
/// nvmlDeviceGetRemappedRows (isPending, failureOccurred), which
/// nvml-wrapper 0.13 has no safe call for. Ids below 251 are the same in
/// every driver's numbering (nvml-wrapper `translate_field_id`).
pub const FI_REMAPPED_PENDING: u32 = 144;
pub const FI_REMAPPED_FAILURE: u32 = 145;

/// A GPU lost during one of these calls: what failed.
#[derive(Debug)]
pub struct Lost(pub String);

fn lost(what: &str) -> Lost {
    Lost(format!(
        "{what}: {}",
        super::nvml_error::describe(&NvmlError::GpuLost)
    ))
}

/// The value of a call that may be unsupported: `None` for anything but
/// success or a lost GPU.
fn known<T>(r: Result<T, NvmlError>, what: &str) -> Result<Option<T>, Lost> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::GpuLost) => Err(lost(what)),
        Err(_) => Ok(None),
    }
}

fn nonzero(v: &SampleValue) -> bool {
    match v {
        SampleValue::F64(x) => *x != 0.0,
        SampleValue::U32(x) => *x != 0,
        SampleValue::U64(x) => *x != 0,
        SampleValue::I64(x) => *x != 0,
    }
}

/// Reads one GPU's health answers.
pub fn read(dev: &Device) -> Result<NvmlHealth, Lost> {
    let mut h = NvmlHealth::default();
    let ids = [FieldId(FI_REMAPPED_PENDING), FieldId(FI_REMAPPED_FAILURE)];
    if let Some(values) = known(dev.field_values_for(&ids), "nvmlDeviceGetFieldValues")? {
        for v in values.into_iter().flatten() {
            let set = match &v.value {
                Ok(x) => nonzero(x),
                Err(NvmlError::GpuLost) => return Err(lost("nvmlDeviceGetFieldValues")),
                Err(_) => false,
            };
            match v.field.0 {
                FI_REMAPPED_PENDING => h.remap_pending |= set,
                FI_REMAPPED_FAILURE => h.remap_failure |= set,
                _ => {}
            }
        }
    }
    h.retired_pages_pending = known(
        dev.are_pages_pending_retired(),
        "nvmlDeviceGetRetiredPagesPendingStatus",
    )?
    .unwrap_or(false);
    // The ECC counters exist only with ECC on (nvml.h
    // nvmlDeviceGetTotalEccErrors: "Requires ECC Mode to be enabled").
    let ecc_on =
        known(dev.is_ecc_enabled(), "nvmlDeviceGetEccMode")?.is_some_and(|m| m.currently_enabled);
    if ecc_on {
        h.ecc_volatile_uncorrected = known(
            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
            "nvmlDeviceGetTotalEccErrors",
        )?
        .unwrap_or(0);
    }
    Ok(h)
}

/// The facts JSON's words for NVML's P2P statuses (nvml.h
/// nvmlGpuP2PStatus_t, lowercased without the prefix).
pub fn p2p_word(s: &P2pStatus) -> &'static str {
    match s {
        P2pStatus::Ok => "ok",
        P2pStatus::ChipsetNotSupported => "chipset_not_supported",
        P2pStatus::GpuNotSupported => "gpu_not_supported",
        P2pStatus::IohTopologyNotSupported => "ioh_topology_not_supported",
        P2pStatus::DisabledByRegkey => "disabled_by_regkey",
        P2pStatus::NotSupported => "not_supported",
        P2pStatus::Unknown => "unknown",
    }
}

/// Fills each GPU's `p2p` with the peers NVML reports no P2P read or
/// write path to (nvmlDeviceGetP2PStatus; CUDA's cudaDeviceCanAccessPeer
/// needs both). Lost GPUs and calls that fail are left out: unknown, not
/// "no path".
pub fn fill_p2p(nvml: &Nvml, gpus: &mut [Gpu], lost: &[u32]) {
    if gpus.len() < 2 {
        return;
    }
    let handles: Vec<(usize, Device)> = gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| !lost.contains(&g.index))
        .filter_map(|(i, g)| nvml.device_by_index(g.index).ok().map(|d| (i, d)))
        .collect();
    let mut found: Vec<(usize, String, String)> = Vec::new();
    for (a, (i, da)) in handles.iter().enumerate() {
        for (j, db) in handles.iter().skip(a + 1) {
            let status = [P2pCapabilitiesIndex::Read, P2pCapabilitiesIndex::Write]
                .into_iter()
                .filter_map(|cap| da.p2p_status(db, cap).ok())
                .find(|s| *s != P2pStatus::Ok);
            if let Some(s) = status {
                let word = p2p_word(&s).to_string();
                found.push((*i, gpus[*j].index.to_string(), word.clone()));
                found.push((*j, gpus[*i].index.to_string(), word));
            }
        }
    }
    for (i, peer, word) in found {
        gpus[i].p2p.insert(peer, word);
    }
}
