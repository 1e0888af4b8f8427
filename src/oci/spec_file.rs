//! Reading a bundle's config.json and writing gpu-guard's edits back.
//!
//! Edits patch the `serde_json::Value` (with key order preserved) instead of
//! going through typed structs, so every field gpu-guard does not know —
//! engine annotations, newer spec fields — survives byte-for-byte in meaning
//! and in order. The file is replaced atomically or not at all.

use crate::core::capability;
use crate::core::container::Container;
use crate::core::decision::Edits;
use crate::oci::spec::parse_spec_bytes;
use crate::sys::fsutil;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Largest config.json we read. Real ones are tens of KiB; 64 MiB leaves room
/// for pathological env blocks without letting a bundle exhaust memory.
pub const MAX_SPEC_BYTES: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SpecFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: {source}")]
    Shape {
        path: PathBuf,
        #[source]
        source: crate::oci::spec::SpecError,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A loaded spec: the raw JSON (to patch) and the view (to decide on).
pub struct LoadedSpec {
    pub path: PathBuf,
    pub json: Value,
    pub container: Container,
}

/// Reads and parses a config.json; `bundle` resolves a relative root.path.
pub fn load(path: &Path, bundle: Option<&Path>) -> Result<LoadedSpec, SpecFileError> {
    let bytes =
        fsutil::read_limited(path, MAX_SPEC_BYTES).map_err(|source| SpecFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    let json = parse_spec_bytes(&bytes).map_err(|source| SpecFileError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let container = Container::from_spec(&json, bundle).map_err(|source| SpecFileError::Shape {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(LoadedSpec {
        path: path.to_path_buf(),
        json,
        container,
    })
}

/// Applies the edits to the spec JSON. Returns false when nothing changed.
pub fn apply(spec: &mut Value, edits: &Edits) -> bool {
    if edits.is_empty() {
        return false;
    }
    let Some(process) = spec.get_mut("process").and_then(|p| p.as_object_mut()) else {
        // No process: runc refuses such a spec for create/run; nothing to edit.
        return false;
    };
    let mut changed = false;
    if !edits.env.is_empty() {
        let env = process
            .entry("env")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = env {
            for (k, v) in &edits.env {
                list.push(Value::String(format!(
                    "{k}={}",
                    v.as_str().unwrap_or_default()
                )));
                changed = true;
            }
        }
    }
    if !edits.capabilities_dropped.is_empty() {
        if let Some(Value::Object(caps)) = process.get_mut("capabilities") {
            for set in crate::core::container::Capabilities::SETS {
                if let Some(Value::Array(list)) = caps.get_mut(set) {
                    let before = list.len();
                    list.retain(|c| {
                        let name = c.as_str().unwrap_or_default();
                        let norm = capability::normalize(name).unwrap_or_else(|| name.to_string());
                        !edits
                            .capabilities_dropped
                            .iter()
                            .any(|d| *d == norm || d == name)
                    });
                    changed |= list.len() != before;
                }
            }
        }
    }
    if !edits.rlimits.is_empty() {
        changed |= apply_rlimits(process, &edits.rlimits);
    }
    if edits.no_new_privileges
        && process.get("noNewPrivileges").and_then(|v| v.as_bool()) != Some(true)
    {
        process.insert("noNewPrivileges".into(), Value::Bool(true));
        changed = true;
    }
    changed
}

/// Raises `process.rlimits` entries to the edits' values: an entry of the
/// same type keeps its soft or hard value where that is already higher (the
/// decision never lowers a limit, and the spec may have changed since);
/// other rlimits are kept as they are. runc applies them with setrlimit
/// before the container's process starts (libcontainer/init_linux.go).
fn apply_rlimits(
    process: &mut serde_json::Map<String, Value>,
    rlimits: &std::collections::BTreeMap<String, crate::core::decision::Rlimit>,
) -> bool {
    let list = process
        .entry("rlimits")
        .or_insert_with(|| Value::Array(Vec::new()));
    if list.is_null() {
        *list = Value::Array(Vec::new());
    }
    let Value::Array(list) = list else {
        // Not an array: runc refuses the spec anyway; leave it alone.
        return false;
    };
    let mut changed = false;
    for (kind, want) in rlimits {
        let existing = list
            .iter_mut()
            .find(|r| r.get("type").and_then(|t| t.as_str()) == Some(kind.as_str()));
        match existing {
            Some(Value::Object(r)) => {
                for (key, v) in [("soft", want.soft), ("hard", want.hard)] {
                    let have = r.get(key).and_then(|x| x.as_u64());
                    if !have.is_some_and(|h| h >= v) {
                        r.insert(key.into(), Value::from(v));
                        changed = true;
                    }
                }
            }
            _ => {
                list.push(serde_json::json!({
                    "type": kind,
                    "hard": want.hard,
                    "soft": want.soft,
                }));
                changed = true;
            }
        }
    }
    changed
}

/// Serializes and atomically replaces the spec file.
pub fn write(path: &Path, spec: &Value) -> Result<(), SpecFileError> {
    let bytes = serde_json::to_vec(spec).map_err(|e| SpecFileError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    fsutil::replace_file(path, &bytes, 0o600).map_err(|source| SpecFileError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patches_and_keeps_unknown_fields_in_order() {
        let mut spec = json!({
            "ociVersion": "1.0.2",
            "zzz": {"keep": [1, 2]},
            "process": {
                "user": {"uid": 0},
                "env": ["PATH=/bin"],
                "capabilities": {
                    "bounding": ["CAP_CHOWN", "CAP_NET_RAW"],
                    "effective": ["CAP_NET_RAW"],
                    "ambient": []
                },
                "futureField": true
            },
            "aaa": 1
        });
        let mut edits = Edits::default();
        edits
            .env
            .insert("CUDA_DEVICE_ORDER".into(), json!("PCI_BUS_ID"));
        edits.capabilities_dropped = vec!["CAP_NET_RAW".into()];
        edits.no_new_privileges = true;
        assert!(apply(&mut spec, &edits));
        let keys: Vec<&String> = spec.as_object().unwrap().keys().collect();
        assert_eq!(keys, vec!["ociVersion", "zzz", "process", "aaa"]);
        let p = &spec["process"];
        assert_eq!(
            p["env"],
            json!(["PATH=/bin", "CUDA_DEVICE_ORDER=PCI_BUS_ID"])
        );
        assert_eq!(p["capabilities"]["bounding"], json!(["CAP_CHOWN"]));
        assert_eq!(p["capabilities"]["effective"], json!([]));
        assert_eq!(p["noNewPrivileges"], json!(true));
        assert_eq!(p["futureField"], json!(true));
        assert_eq!(spec["zzz"], json!({"keep": [1, 2]}));
        // applying nothing changes nothing
        assert!(!apply(&mut spec, &Edits::default()));
    }

    #[test]
    fn rlimits_are_raised_never_lowered() {
        use crate::core::decision::Rlimit;
        let mut spec = json!({
            "process": {
                "rlimits": [
                    {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
                    {"type": "RLIMIT_MEMLOCK", "hard": 1099511627776u64, "soft": 65536}
                ]
            }
        });
        let mut edits = Edits::default();
        edits.rlimits.insert(
            "RLIMIT_MEMLOCK".into(),
            Rlimit {
                soft: 1 << 30,
                hard: 1 << 30,
            },
        );
        assert!(apply(&mut spec, &edits));
        assert_eq!(
            spec["process"]["rlimits"],
            json!([
                {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
                {"type": "RLIMIT_MEMLOCK", "hard": 1099511627776u64, "soft": 1073741824}
            ])
        );
        // Again: nothing left to raise.
        assert!(!apply(&mut spec, &edits));
        // No rlimits at all: added, unlimited as u64::MAX.
        let mut spec = json!({"process": {"env": []}});
        edits.rlimits.insert(
            "RLIMIT_MEMLOCK".into(),
            Rlimit {
                soft: u64::MAX,
                hard: u64::MAX,
            },
        );
        assert!(apply(&mut spec, &edits));
        assert_eq!(
            spec["process"]["rlimits"],
            json!([{"type": "RLIMIT_MEMLOCK", "hard": u64::MAX, "soft": u64::MAX}])
        );
    }
}
