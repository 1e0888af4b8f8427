//! A read-only view of one container, built from its OCI config.json.
//!
//! We read config.json as a `serde_json::Value` rather than through oci-spec
//! types: oci-spec rejects unknown capability names and drops unknown fields
//! (shared/research/oci-integration.md), and a spec runc accepts must never be
//! one we choke on.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The container's environment: `KEY=VALUE` entries in order. Lookups take
/// the last entry for a key, as NVIDIA's toolkit builds its env map
/// (internal/config/image/cuda_image.go NewCUDAImageFromEnv).
#[derive(Clone, Debug, Default)]
pub struct Env {
    entries: Vec<(String, String)>,
}

impl Env {
    pub fn from_entries<I, S>(entries: I) -> Env
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut env = Env::default();
        for e in entries {
            env.push_entry(e.as_ref());
        }
        env
    }

    /// Adds `KEY=VALUE`. An entry without `=` is passed to the process as it
    /// is by runc, and getenv never finds it, so it is skipped here.
    pub fn push_entry(&mut self, entry: &str) {
        if let Some((k, v)) = entry.split_once('=') {
            if !k.is_empty() {
                self.entries.push((k.to_string(), v.to_string()));
            }
        }
    }

    /// Sets a variable, replacing earlier values (`check --env` overrides the spec).
    pub fn set(&mut self, key: &str, value: &str) {
        self.entries.retain(|(k, _)| k != key);
        self.entries.push((key.to_string(), value.to_string()));
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Each distinct variable once, with its effective (last) value, sorted by name.
    pub fn vars(&self) -> BTreeMap<&str, &str> {
        self.entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

/// The five capability sets of `process.capabilities`; None where the spec
/// has no such list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Capabilities {
    pub bounding: Option<Vec<String>>,
    pub effective: Option<Vec<String>>,
    pub inheritable: Option<Vec<String>>,
    pub permitted: Option<Vec<String>>,
    pub ambient: Option<Vec<String>>,
}

impl Capabilities {
    pub const SETS: [&'static str; 5] = [
        "bounding",
        "effective",
        "inheritable",
        "permitted",
        "ambient",
    ];

    pub fn set(&self, name: &str) -> Option<&Vec<String>> {
        match name {
            "bounding" => self.bounding.as_ref(),
            "effective" => self.effective.as_ref(),
            "inheritable" => self.inheritable.as_ref(),
            "permitted" => self.permitted.as_ref(),
            "ambient" => self.ambient.as_ref(),
            _ => None,
        }
    }

    /// Every capability in any set, once.
    pub fn union(&self) -> Vec<&str> {
        let mut all: Vec<&str> = Self::SETS
            .iter()
            .filter_map(|s| self.set(s))
            .flatten()
            .map(|s| s.as_str())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

#[derive(Clone, Debug, Default)]
pub struct Container {
    pub id: Option<String>,
    pub env: Env,
    pub annotations: BTreeMap<String, String>,
    /// `linux.devices[].path`.
    pub devices: Vec<String>,
    /// Paths of every hook in the spec (all stages).
    pub hook_paths: Vec<String>,
    /// `mounts[].destination`.
    pub mount_destinations: Vec<String>,
    pub capabilities: Capabilities,
    pub no_new_privileges: bool,
    /// Absolute path of the root filesystem, when known.
    pub rootfs: Option<PathBuf>,
}

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

impl Container {
    /// Builds the view from a parsed config.json. `bundle` resolves a relative
    /// `root.path` (runtime-spec: relative to the bundle).
    pub fn from_spec(spec: &Value, bundle: Option<&Path>) -> Result<Container, SpecError> {
        let obj = spec.as_object().ok_or(SpecError::NotAnObject)?;
        let process = obj.get("process");
        if let Some(p) = process {
            if !p.is_object() && !p.is_null() {
                return Err(SpecError::WrongType("process"));
            }
        }
        let env_list =
            strings(process.and_then(|p| p.get("env")), "process.env")?.unwrap_or_default();
        let env = Env::from_entries(env_list);

        let mut annotations = BTreeMap::new();
        match obj.get("annotations") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    if let Some(s) = v.as_str() {
                        annotations.insert(k.clone(), s.to_string());
                    }
                }
            }
            Some(_) => return Err(SpecError::WrongType("annotations")),
        }

        let devices = obj
            .get("linux")
            .and_then(|l| l.get("devices"))
            .and_then(|d| d.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|d| d.get("path").and_then(|p| p.as_str()).map(String::from))
                    .collect()
            })
            .unwrap_or_default();

        let mut hook_paths = Vec::new();
        if let Some(Value::Object(stages)) = obj.get("hooks") {
            for hooks in stages.values() {
                if let Some(list) = hooks.as_array() {
                    for h in list {
                        if let Some(p) = h.get("path").and_then(|p| p.as_str()) {
                            hook_paths.push(p.to_string());
                        }
                    }
                }
            }
        }

        let mount_destinations = obj
            .get("mounts")
            .and_then(|m| m.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|m| {
                        m.get("destination")
                            .and_then(|d| d.as_str())
                            .map(String::from)
                    })
                    .collect()
            })
            .unwrap_or_default();

        let caps = process.and_then(|p| p.get("capabilities"));
        let capabilities = match caps {
            None | Some(Value::Null) => Capabilities::default(),
            Some(Value::Object(_)) => Capabilities {
                bounding: strings(
                    caps.and_then(|c| c.get("bounding")),
                    "process.capabilities.bounding",
                )?,
                effective: strings(
                    caps.and_then(|c| c.get("effective")),
                    "process.capabilities.effective",
                )?,
                inheritable: strings(
                    caps.and_then(|c| c.get("inheritable")),
                    "process.capabilities.inheritable",
                )?,
                permitted: strings(
                    caps.and_then(|c| c.get("permitted")),
                    "process.capabilities.permitted",
                )?,
                ambient: strings(
                    caps.and_then(|c| c.get("ambient")),
                    "process.capabilities.ambient",
                )?,
            },
            Some(_) => return Err(SpecError::WrongType("process.capabilities")),
        };
        let no_new_privileges = process
            .and_then(|p| p.get("noNewPrivileges"))
            .and_then(|v| v.as_bool())
            .unwrap_or(false);

        let rootfs = obj
            .get("root")
            .and_then(|r| r.get("path"))
            .and_then(|p| p.as_str())
            .filter(|p| !p.is_empty())
            .map(|p| {
                let p = PathBuf::from(p);
                match (p.is_absolute(), bundle) {
                    (true, _) => Some(p),
                    (false, Some(b)) => Some(b.join(p)),
                    (false, None) => None,
                }
            })
            .unwrap_or(None);

        Ok(Container {
            id: None,
            env,
            annotations,
            devices,
            hook_paths,
            mount_destinations,
            capabilities,
            no_new_privileges,
            rootfs,
        })
    }

    /// A container described by its environment alone (`check --env`).
    pub fn from_env(env: Env) -> Container {
        Container {
            env,
            ..Default::default()
        }
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
            "hooks": { "prestart": [ { "path": "/usr/bin/nvidia-container-runtime-hook" } ] },
            "linux": { "devices": [ { "path": "/dev/nvidia0", "type": "c" } ] },
            "mounts": [ { "destination": "/proc" } ],
            "unknownField": { "kept": true }
        });
        let c = Container::from_spec(&spec, Some(Path::new("/b"))).unwrap();
        assert_eq!(c.env.get("NVIDIA_VISIBLE_DEVICES"), Some("1"));
        assert_eq!(c.env.get("BROKEN"), None);
        assert_eq!(c.annotations.len(), 1);
        assert_eq!(c.devices, vec!["/dev/nvidia0"]);
        assert_eq!(c.hook_paths, vec!["/usr/bin/nvidia-container-runtime-hook"]);
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
