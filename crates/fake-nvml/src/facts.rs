//! The host facts JSON the fake answers from (docs/interfaces.md, "Host
//! facts JSON", and the fake's own fields: `nvml_health`, `p2p`).

use std::ffi::{c_int, c_uint};

use crate::health::{parse_health, parse_p2p, Health};
use crate::MAX_MIG_DEVICES;

/// nvmlBrandType_t values (nvml.h), keyed by the lowercase names of the host facts JSON.
const BRANDS: &[(&str, c_uint)] = &[
    ("unknown", 0),
    ("quadro", 1),
    ("tesla", 2),
    ("nvs", 3),
    ("grid", 4),
    ("geforce", 5),
    ("titan", 6),
    ("vapps", 7),
    ("vpc", 8),
    ("vcs", 9),
    ("vws", 10),
    ("cloudgaming", 11),
    ("quadrortx", 12),
    ("nvidiartx", 13),
    ("nvidia", 14),
    ("geforcertx", 15),
    ("titanrtx", 16),
];

/// `NVML_STRUCT_VERSION(Memory, 2)` = sizeof(nvmlMemory_v2_t) | 2 << 24 (nvml.h).

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Gpu {
    pub(crate) uuid: String,
    pub(crate) name: String,
    pub(crate) brand: c_uint,
    pub(crate) cc: Option<(c_int, c_int)>,
    pub(crate) memory_bytes: Option<u64>,
    pub(crate) pci_bus_id: Option<String>,
    pub(crate) minor: Option<u32>,
    pub(crate) migs: Vec<String>,
    /// `nvml_health`: what the health calls answer.
    pub(crate) health: Health,
    /// `p2p`: peers (by index) and the nvmlGpuP2PStatus_t to them.
    pub(crate) p2p: Vec<(u32, c_uint)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Host {
    pub(crate) driver: String,
    /// nvmlSystemGetCudaDriverVersion's integer: major * 1000 + minor * 10.
    pub(crate) cuda: Option<c_int>,
    pub(crate) gpus: Vec<Gpu>,
}

pub(crate) fn str_field(v: &serde_json::Value, key: &str) -> Result<Option<String>, String> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{key}` must be a string or null")),
    }
}

/// "12.4" -> 12040, the encoding of nvmlSystemGetCudaDriverVersion
/// (nvml.h NVML_CUDA_DRIVER_VERSION_MAJOR(v) = v / 1000,
/// NVML_CUDA_DRIVER_VERSION_MINOR(v) = (v % 1000) / 10).
fn cuda_int(s: &str) -> Result<c_int, String> {
    let (maj, min) = s.split_once('.').unwrap_or((s, "0"));
    let maj: c_int = maj.parse().map_err(|_| format!("bad CUDA version `{s}`"))?;
    let min: c_int = min.parse().map_err(|_| format!("bad CUDA version `{s}`"))?;
    if !(0..100).contains(&min) || !(0..2_000_000).contains(&maj) {
        return Err(format!("bad CUDA version `{s}`"));
    }
    Ok(maj * 1000 + min * 10)
}

fn parse_cc(s: &str) -> Result<(c_int, c_int), String> {
    let (maj, min) = s
        .split_once('.')
        .ok_or_else(|| format!("bad compute capability `{s}`"))?;
    match (maj.parse(), min.parse()) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        _ => Err(format!("bad compute capability `{s}`")),
    }
}

/// Parses the facts JSON. `Ok(None)`: no driver (driver_version null).
pub(crate) fn parse_host(text: &str) -> Result<Option<Host>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Some(driver) = str_field(&v, "driver_version")? else {
        return Ok(None);
    };
    let cuda = str_field(&v, "cuda_driver_version")?
        .map(|s| cuda_int(&s))
        .transpose()?;
    let mut gpus = Vec::new();
    let empty = Vec::new();
    let list = match v.get("gpus") {
        None | Some(serde_json::Value::Null) => &empty,
        Some(serde_json::Value::Array(a)) => a,
        Some(_) => return Err("`gpus` must be an array".into()),
    };
    for (i, g) in list.iter().enumerate() {
        // The real NVML numbers GPUs 0..count; a profile must list them so.
        let index = g.get("index").and_then(|x| x.as_u64());
        if index != Some(i as u64) {
            return Err(format!("gpus[{i}].index must be {i}"));
        }
        let brand_name = str_field(g, "brand")?.unwrap_or_else(|| "unknown".into());
        let brand = BRANDS
            .iter()
            .find(|(n, _)| *n == brand_name)
            .map(|(_, b)| *b)
            .ok_or_else(|| format!("gpus[{i}].brand `{brand_name}` is not an NVML brand"))?;
        let migs = match g.get("mig_devices") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .map(|m| {
                    str_field(m, "uuid")?.ok_or_else(|| format!("gpus[{i}].mig_devices: uuid"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err(format!("gpus[{i}].mig_devices must be an array")),
        };
        if migs.len() > MAX_MIG_DEVICES as usize {
            return Err(format!(
                "gpus[{i}] has more than {MAX_MIG_DEVICES} MIG devices"
            ));
        }
        gpus.push(Gpu {
            uuid: str_field(g, "uuid")?.unwrap_or_default(),
            name: str_field(g, "name")?.unwrap_or_default(),
            brand,
            cc: str_field(g, "compute_capability")?
                .map(|s| parse_cc(&s))
                .transpose()?,
            memory_bytes: g
                .get("memory_mib")
                .and_then(|m| m.as_u64())
                .map(|m| m.saturating_mul(1 << 20)),
            pci_bus_id: str_field(g, "pci_bus_id")?,
            minor: g
                .get("minor_number")
                .and_then(|m| m.as_u64())
                .and_then(|m| u32::try_from(m).ok()),
            migs,
            health: parse_health(g, i)?,
            p2p: parse_p2p(g, i, list.len())?,
        });
    }
    Ok(Some(Host { driver, cuda, gpus }))
}

pub(crate) fn load_host() -> Result<Option<Host>, String> {
    let path = std::env::var_os("FAKE_NVML_FACTS").ok_or("FAKE_NVML_FACTS is not set")?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", std::path::Path::new(&path).display()))?;
    parse_host(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_parse() {
        let h = parse_host(
            r#"{"driver_version":"550.54.14","cuda_driver_version":"12.10","gpus":[
              {"index":0,"uuid":"GPU-1","name":"NVIDIA A100","brand":"tesla",
               "compute_capability":"8.0","memory_mib":40960,"pci_bus_id":"00000000:07:00.0",
               "mig_devices":[{"uuid":"MIG-1"}],"minor_number":3}]}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.cuda, Some(12100));
        assert_eq!(h.gpus[0].brand, 2);
        assert_eq!(h.gpus[0].cc, Some((8, 0)));
        assert_eq!(h.gpus[0].memory_bytes, Some(40960 << 20));
        assert_eq!(h.gpus[0].minor, Some(3));
        assert_eq!(h.gpus[0].migs, vec!["MIG-1".to_string()]);
        assert_eq!(
            parse_host(r#"{"driver_version":null,"cuda_driver_version":null,"gpus":[]}"#).unwrap(),
            None
        );
        assert!(parse_host(r#"{"driver_version":"1","gpus":[{"index":1}]}"#).is_err());
        assert!(
            parse_host(r#"{"driver_version":"1","gpus":[{"index":0,"brand":"acme"}]}"#).is_err()
        );
        assert!(parse_host("{").is_err());
    }
}
