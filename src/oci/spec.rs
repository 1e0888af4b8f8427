//! Reads the container view from an OCI config.json.
//!
//! We read config.json as a `serde_json::Value` rather than through oci-spec
//! types: oci-spec rejects unknown capability names and drops unknown fields
//! (shared/research/oci-integration.md), and a spec runc accepts must never be
//! one we choke on.

use crate::core::container::{Capabilities, Container, Env, Hook, Mount};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("config.json is not a JSON object")]
    NotAnObject,
    #[error("config.json field `{0}` has the wrong type")]
    WrongType(&'static str),
}

fn strings(v: Option<&Value>, field: &'static str) -> Result<Option<Vec<String>>, SpecError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(String::from)
                    .ok_or(SpecError::WrongType(field))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(SpecError::WrongType(field)),
    }
}

/// `annotations`: string values only (the spec allows no others; runc
/// ignores what it cannot use).
fn annotations(obj: &Map<String, Value>) -> Result<BTreeMap<String, String>, SpecError> {
    match obj.get("annotations") {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => Ok(m
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
            .collect()),
        Some(_) => Err(SpecError::WrongType("annotations")),
    }
}

/// One string field of every object in the array at `list`.
fn field_of_each(list: Option<&Value>, field: &str) -> Vec<String> {
    list.and_then(|l| l.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|item| item.get(field).and_then(|v| v.as_str()).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The string items of an array, others skipped.
fn str_items(v: Option<&Value>) -> Vec<String> {
    v.and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Every hook with a path, all stages, in stage-name order (its args tell
/// `nvidia-ctk hook ...` from other nvidia-ctk uses).
fn hooks(obj: &Map<String, Value>) -> Vec<Hook> {
    let Some(Value::Object(stages)) = obj.get("hooks") else {
        return Vec::new();
    };
    stages
        .values()
        .filter_map(|list| list.as_array())
        .flatten()
        .filter_map(|h| {
            let path = h.get("path")?.as_str()?.to_string();
            Some(Hook {
                path,
                args: str_items(h.get("args")),
            })
        })
        .collect()
}

/// `mounts[]`, source and destination (either may be absent: empty).
fn mounts(obj: &Map<String, Value>) -> Vec<Mount> {
    let text = |m: &Value, f: &str| m.get(f).and_then(|v| v.as_str()).unwrap_or("").to_string();
    obj.get("mounts")
        .and_then(|l| l.as_array())
        .map(|a| {
            a.iter()
                .map(|m| Mount {
                    source: text(m, "source"),
                    destination: text(m, "destination"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `process.capabilities`, each set kept apart (absent is not empty).
fn capabilities(process: Option<&Value>) -> Result<Capabilities, SpecError> {
    let caps = process.and_then(|p| p.get("capabilities"));
    match caps {
        None | Some(Value::Null) => Ok(Capabilities::default()),
        Some(Value::Object(_)) => {
            let set =
                |name: &str, field: &'static str| strings(caps.and_then(|c| c.get(name)), field);
            Ok(Capabilities {
                bounding: set("bounding", "process.capabilities.bounding")?,
                effective: set("effective", "process.capabilities.effective")?,
                inheritable: set("inheritable", "process.capabilities.inheritable")?,
                permitted: set("permitted", "process.capabilities.permitted")?,
                ambient: set("ambient", "process.capabilities.ambient")?,
            })
        }
        Some(_) => Err(SpecError::WrongType("process.capabilities")),
    }
}

/// `root.path`, made absolute: runtime-spec resolves a relative one against
/// the bundle; without a bundle it cannot be known.
fn rootfs(obj: &Map<String, Value>, bundle: Option<&Path>) -> Option<PathBuf> {
    let p = obj
        .get("root")
        .and_then(|r| r.get("path"))
        .and_then(|p| p.as_str())
        .filter(|p| !p.is_empty())?;
    let p = PathBuf::from(p);
    match (p.is_absolute(), bundle) {
        (true, _) => Some(p),
        (false, Some(b)) => Some(b.join(p)),
        (false, None) => None,
    }
}

/// `process.rlimits[]` as type -> (soft, hard); entries without a type or
/// numeric values are left out (runc would refuse them anyway).
fn rlimits(
    process: Option<&Value>,
) -> std::collections::BTreeMap<String, crate::core::decision::Rlimit> {
    let mut out = std::collections::BTreeMap::new();
    let list = process
        .and_then(|p| p.get("rlimits"))
        .and_then(|r| r.as_array());
    for r in list.into_iter().flatten() {
        let (Some(kind), Some(soft), Some(hard)) = (
            r.get("type").and_then(|t| t.as_str()),
            r.get("soft").and_then(|v| v.as_u64()),
            r.get("hard").and_then(|v| v.as_u64()),
        ) else {
            continue;
        };
        out.insert(
            kind.to_string(),
            crate::core::decision::Rlimit { soft, hard },
        );
    }
    out
}

impl Container {
    /// Builds the view from a parsed config.json. `bundle` resolves a relative
    /// `root.path` (runtime-spec: relative to the bundle).
    pub fn from_spec(spec: &Value, bundle: Option<&Path>) -> Result<Container, SpecError> {
        let obj = spec.as_object().ok_or(SpecError::NotAnObject)?;
        let process = obj.get("process");
        if process.is_some_and(|p| !p.is_object() && !p.is_null()) {
            return Err(SpecError::WrongType("process"));
        }
        let env_list =
            strings(process.and_then(|p| p.get("env")), "process.env")?.unwrap_or_default();
        let no_new_privileges = process
            .and_then(|p| p.get("noNewPrivileges"))
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        Ok(Container {
            id: None,
            env: Env::from_entries(env_list),
            annotations: annotations(obj)?,
            devices: field_of_each(obj.get("linux").and_then(|l| l.get("devices")), "path"),
            hooks: hooks(obj),
            mounts: mounts(obj),
            capabilities: capabilities(process)?,
            no_new_privileges,
            rlimits: rlimits(process),
            uid: process
                .and_then(|p| p.get("user"))
                .and_then(|u| u.get("uid"))
                .and_then(|v| v.as_u64())
                .and_then(|v| u32::try_from(v).ok()),
            rootfs: rootfs(obj, bundle),
            chained_runtime: None,
            assume_attached: false,
        })
    }
}

/// Parses config.json bytes. Go's encoding/json (runc, containerd) accepts
/// invalid UTF-8 inside strings and reads it as U+FFFD; serde_json refuses
/// it. A spec runc runs must not make us fail, so we retry lossily.
pub fn parse_spec_bytes(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(e) => match std::str::from_utf8(bytes) {
            Ok(_) => Err(e),
            Err(_) => serde_json::from_str(&String::from_utf8_lossy(bytes)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::Container;
    use serde_json::json;

    #[test]
    fn reads_the_parts_we_need() {
        let spec = json!({
            "ociVersion": "1.0.2",
            "process": {
                "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=1", "BROKEN"],
                "capabilities": { "bounding": ["CAP_CHOWN", "CAP_NET_RAW"], "effective": ["CAP_CHOWN"] },
                "noNewPrivileges": true
            },
            "root": { "path": "rootfs" },
            "annotations": { "cdi.k8s.io/x": "nvidia.com/gpu=0", "n": 5 },
            "hooks": { "prestart": [ { "path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"] } ],
                       "createContainer": [ { "args": ["no-path"] } ] },
            "linux": { "devices": [ { "path": "/dev/nvidia0", "type": "c" } ] },
            "mounts": [ { "destination": "/proc" }, { "source": "/dev/nvidia0", "destination": "/dev/nvidia0" } ],
            "unknownField": { "kept": true }
        });
        let c = Container::from_spec(&spec, Some(Path::new("/b"))).unwrap();
        assert_eq!(c.env.get("NVIDIA_VISIBLE_DEVICES"), Some("1"));
        assert_eq!(c.env.get("BROKEN"), None);
        assert_eq!(c.annotations.len(), 1);
        assert_eq!(c.devices, vec!["/dev/nvidia0"]);
        assert_eq!(
            c.hooks,
            vec![Hook {
                path: "/usr/bin/nvidia-container-runtime-hook".into(),
                args: vec!["nvidia-container-runtime-hook".into(), "prestart".into()],
            }]
        );
        assert_eq!(c.mounts.len(), 2);
        assert_eq!(c.mounts[0].source, "");
        assert_eq!(c.mounts[1].source, "/dev/nvidia0");
        assert!(!c.assume_attached);
        assert_eq!(c.rootfs.as_deref(), Some(Path::new("/b/rootfs")));
        assert!(c.no_new_privileges);
        assert_eq!(c.capabilities.union(), vec!["CAP_CHOWN", "CAP_NET_RAW"]);
        assert_eq!(c.capabilities.inheritable, None);
    }

    #[test]
    fn wrong_shapes_are_errors_not_panics() {
        assert!(Container::from_spec(&json!([1]), None).is_err());
        assert!(Container::from_spec(&json!({"process": {"env": "x"}}), None).is_err());
        assert!(Container::from_spec(&json!({"process": {"env": [1]}}), None).is_err());
        assert!(Container::from_spec(&json!({"process": 3}), None).is_err());
        assert!(Container::from_spec(&json!({}), None).is_ok());
    }

    #[test]
    fn invalid_utf8_is_read_lossily() {
        let mut bytes = br#"{"process":{"env":["A="#.to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(br#"","B=2"]}}"#);
        let v = parse_spec_bytes(&bytes).unwrap();
        let c = Container::from_spec(&v, None).unwrap();
        assert_eq!(c.env.get("B"), Some("2"));
        assert!(parse_spec_bytes(b"{not json").is_err());
    }
}
