//! The health and P2P calls, answered from each GPU's facts:
//!
//! ```json
//! "nvml_health": { "lost": false, "remap_failure": false, "remap_pending": false,
//!                  "retired_pages_pending": false, "ecc_volatile_uncorrected": 0,
//!                  "ecc_enabled": true },
//! "p2p": { "1": "ioh_topology_not_supported" }
//! ```
//!
//! Every key is optional (absent: all clear, ECC on, P2P `ok` to every
//! peer); `p2p` is symmetric (either GPU's entry answers for the pair).
//! - `lost`: the GPU's handle answers NVML_ERROR_GPU_IS_LOST (device.rs).
//! - nvmlDeviceGetFieldValues: NVML_FI_DEV_REMAPPED_COR/UNC (142, 143: 0),
//!   NVML_FI_DEV_REMAPPED_PENDING (144), NVML_FI_DEV_REMAPPED_FAILURE (145),
//!   NVML_FI_DEV_RETIRED_PENDING (31), as 0 or 1 of type unsigned int, as
//!   nvmlDeviceGetRemappedRows' answers; any other field NOT_SUPPORTED.
//! - nvmlDeviceGetRetiredPagesPendingStatus: `retired_pages_pending`.
//! - nvmlDeviceGetEccMode: `ecc_enabled` (current and pending).
//! - nvmlDeviceGetTotalEccErrors: uncorrected errors (volatile or
//!   aggregate) are `ecc_volatile_uncorrected`, corrected ones 0;
//!   NOT_SUPPORTED with ECC off, as nvml.h documents.
//! - nvmlDeviceGetP2PStatus: the `p2p` status to that peer, for every
//!   capability index.

use std::ffi::{c_int, c_longlong, c_uint, c_ulonglong};

use crate::device::{decode, with_device};
use crate::facts::{str_field, Gpu};
use crate::*;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Health {
    pub(crate) lost: bool,
    pub(crate) remap_failure: bool,
    pub(crate) remap_pending: bool,
    pub(crate) retired_pages_pending: bool,
    pub(crate) ecc_uncorrected: u64,
    pub(crate) ecc_enabled: bool,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            lost: false,
            remap_failure: false,
            remap_pending: false,
            retired_pages_pending: false,
            ecc_uncorrected: 0,
            ecc_enabled: true,
        }
    }
}

/// nvmlGpuP2PStatus_t (nvml.h), by the words of the facts JSON.
const P2P_STATUS: &[(&str, c_uint)] = &[
    ("ok", 0),
    ("chipset_not_supported", 1),
    ("gpu_not_supported", 2),
    ("ioh_topology_not_supported", 3),
    ("disabled_by_regkey", 4),
    ("not_supported", 5),
    ("unknown", 6),
];

// nvml.h field ids and value types.
const FI_RETIRED_PENDING: c_uint = 31;
const FI_REMAPPED_COR: c_uint = 142;
const FI_REMAPPED_UNC: c_uint = 143;
const FI_REMAPPED_PENDING: c_uint = 144;
const FI_REMAPPED_FAILURE: c_uint = 145;
const NVML_VALUE_TYPE_UNSIGNED_INT: c_uint = 1;
const NVML_MEMORY_ERROR_TYPE_UNCORRECTED: c_uint = 1;

fn bool_field(v: &serde_json::Value, key: &str, i: usize) -> Result<Option<bool>, String> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("gpus[{i}].nvml_health.{key} must be true or false")),
    }
}

/// `gpus[i].nvml_health`, strictly: a misspelt key is an error, not a
/// healthy GPU.
pub(crate) fn parse_health(g: &serde_json::Value, i: usize) -> Result<Health, String> {
    let mut h = Health::default();
    let Some(v) = g.get("nvml_health").filter(|v| !v.is_null()) else {
        return Ok(h);
    };
    let Some(obj) = v.as_object() else {
        return Err(format!("gpus[{i}].nvml_health must be an object"));
    };
    for (k, _) in obj {
        match k.as_str() {
            "lost"
            | "remap_failure"
            | "remap_pending"
            | "retired_pages_pending"
            | "ecc_volatile_uncorrected"
            | "ecc_enabled" => {}
            other => return Err(format!("gpus[{i}].nvml_health.{other} is not a known key")),
        }
    }
    let b = |key| bool_field(v, key, i);
    h.lost = b("lost")?.unwrap_or(false);
    h.remap_failure = b("remap_failure")?.unwrap_or(false);
    h.remap_pending = b("remap_pending")?.unwrap_or(false);
    h.retired_pages_pending = b("retired_pages_pending")?.unwrap_or(false);
    h.ecc_enabled = b("ecc_enabled")?.unwrap_or(true);
    h.ecc_uncorrected = match v.get("ecc_volatile_uncorrected") {
        None | Some(serde_json::Value::Null) => 0,
        Some(n) => n.as_u64().ok_or_else(|| {
            format!("gpus[{i}].nvml_health.ecc_volatile_uncorrected must be a count")
        })?,
    };
    Ok(h)
}

/// `gpus[i].p2p`: `{"<peer index>": "<status>"}`.
pub(crate) fn parse_p2p(
    g: &serde_json::Value,
    i: usize,
    count: usize,
) -> Result<Vec<(u32, c_uint)>, String> {
    let Some(v) = g.get("p2p").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Some(obj) = v.as_object() else {
        return Err(format!("gpus[{i}].p2p must be an object"));
    };
    let mut out = Vec::new();
    for (peer, _) in obj {
        let p: u32 = peer
            .parse()
            .ok()
            .filter(|p| (*p as usize) < count && *p as usize != i)
            .ok_or_else(|| format!("gpus[{i}].p2p: `{peer}` is not another GPU's index"))?;
        let word = str_field(v, peer)?.unwrap_or_default();
        let code = P2P_STATUS
            .iter()
            .find(|(w, _)| *w == word)
            .map(|(_, c)| *c)
            .ok_or_else(|| format!("gpus[{i}].p2p.{peer}: `{word}` is not an NVML P2P status"))?;
        out.push((p, code));
    }
    Ok(out)
}

/// nvmlValue_t (nvml.h): 8 bytes, aligned as its widest member.
#[repr(C)]
#[derive(Clone, Copy)]
pub union NvmlValue {
    pub d_val: f64,
    pub si_val: c_int,
    pub ui_val: c_uint,
    pub ul_val: std::ffi::c_ulong,
    pub ull_val: c_ulonglong,
    pub sll_val: c_longlong,
    pub us_val: std::ffi::c_ushort,
}

/// nvmlFieldValue_t (nvml.h), as nvml-wrapper-sys 0.10 binds it.
#[repr(C)]
pub struct NvmlFieldValue {
    pub field_id: c_uint,
    pub scope_id: c_uint,
    pub timestamp: c_longlong,
    pub latency_usec: c_longlong,
    pub value_type: c_uint,
    pub nvml_return: NvmlReturn,
    pub value: NvmlValue,
}

fn field_answer(g: &Gpu, id: c_uint) -> Option<c_uint> {
    let h = &g.health;
    Some(match id {
        FI_REMAPPED_COR | FI_REMAPPED_UNC => 0,
        FI_REMAPPED_PENDING => h.remap_pending.into(),
        FI_REMAPPED_FAILURE => h.remap_failure.into(),
        FI_RETIRED_PENDING => h.retired_pages_pending.into(),
        _ => return None,
    })
}

/// # Safety
/// `values` must be valid for `count` elements.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: NvmlDevice,
    count: c_int,
    values: *mut NvmlFieldValue,
) -> NvmlReturn {
    with_device(device, |g, _| {
        if values.is_null() || count <= 0 {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        for i in 0..count as usize {
            let v = &mut *values.add(i);
            match field_answer(g, v.field_id) {
                Some(n) => {
                    v.value_type = NVML_VALUE_TYPE_UNSIGNED_INT;
                    v.value = NvmlValue { ui_val: n };
                    v.nvml_return = NVML_SUCCESS;
                }
                None => v.nvml_return = NVML_ERROR_NOT_SUPPORTED,
            }
        }
        NVML_SUCCESS
    })
}

/// # Safety
/// `pending` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    device: NvmlDevice,
    pending: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |g, _| {
        if pending.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        *pending = g.health.retired_pages_pending.into();
        NVML_SUCCESS
    })
}

/// # Safety
/// `current` and `pending` must be valid pointers or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |g, _| {
        if current.is_null() || pending.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        *current = g.health.ecc_enabled.into();
        *pending = g.health.ecc_enabled.into();
        NVML_SUCCESS
    })
}

/// # Safety
/// `count` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: NvmlDevice,
    error_type: c_uint,
    _counter_type: c_uint,
    count: *mut c_ulonglong,
) -> NvmlReturn {
    with_device(device, |g, _| {
        if count.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        if !g.health.ecc_enabled {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        *count = if error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED {
            g.health.ecc_uncorrected
        } else {
            0
        };
        NVML_SUCCESS
    })
}

/// # Safety
/// `status` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    device1: NvmlDevice,
    device2: NvmlDevice,
    _caps_index: c_uint,
    status: *mut c_uint,
) -> NvmlReturn {
    with_host(|h, _| {
        let (Some((a, None)), Some((b, None))) = (decode(h, device1), decode(h, device2)) else {
            return NVML_ERROR_INVALID_ARGUMENT;
        };
        if status.is_null() || a == b {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let of = |x: usize, y: usize| {
            h.gpus[x]
                .p2p
                .iter()
                .find(|(p, _)| *p as usize == y)
                .map(|(_, s)| *s)
        };
        *status = of(a, b).or_else(|| of(b, a)).unwrap_or(0);
        NVML_SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::parse_host;

    #[test]
    fn health_and_p2p_parse_strictly() {
        let h = parse_host(
            r#"{"driver_version":"550.54.14","gpus":[
              {"index":0,"nvml_health":{"remap_failure":true,"ecc_volatile_uncorrected":2},
               "p2p":{"1":"ioh_topology_not_supported"}},
              {"index":1}]}"#,
        )
        .unwrap()
        .unwrap();
        assert!(h.gpus[0].health.remap_failure);
        assert_eq!(h.gpus[0].health.ecc_uncorrected, 2);
        assert!(h.gpus[0].health.ecc_enabled);
        assert_eq!(h.gpus[0].p2p, vec![(1, 3)]);
        assert_eq!(h.gpus[1].health, Health::default());
        for bad in [
            r#"{"index":0,"nvml_health":{"lost":"yes"}}"#,
            r#"{"index":0,"nvml_health":{"remap_fail":true}}"#,
            r#"{"index":0,"nvml_health":{"ecc_volatile_uncorrected":-1}}"#,
            r#"{"index":0,"p2p":{"0":"ok"}}"#,
            r#"{"index":0,"p2p":{"5":"ok"}}"#,
            r#"{"index":0,"p2p":{"1":"fast"}}"#,
        ] {
            let text = format!(r#"{{"driver_version":"1","gpus":[{bad},{{"index":1}}]}}"#);
            assert!(parse_host(&text).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_value_layout_matches_nvml() {
        // nvml-wrapper-sys: 4 + 4 + 8 + 8 + 4 + 4 + 8 bytes.
        assert_eq!(std::mem::size_of::<NvmlFieldValue>(), 40);
        assert_eq!(std::mem::size_of::<NvmlValue>(), 8);
        let g = crate::facts::Gpu {
            health: Health {
                remap_pending: true,
                ..Health::default()
            },
            ..parse_host(r#"{"driver_version":"1","gpus":[{"index":0}]}"#)
                .unwrap()
                .unwrap()
                .gpus[0]
                .clone()
        };
        assert_eq!(field_answer(&g, FI_REMAPPED_PENDING), Some(1));
        assert_eq!(field_answer(&g, FI_REMAPPED_FAILURE), Some(0));
        assert_eq!(field_answer(&g, 1), None);
    }
}
