//! The OCI State a runtime hands a hook on stdin (runtime-spec runtime.md
//! "State", config.md "Hooks"): we need the bundle (its config.json says what
//! the container is) and the container id (for the log).
//!
//! It is read as oci-spec's typed [`oci_spec::runtime::State`] first. A State
//! that a real runtime sends but that oci-spec refuses must never make the
//! hook fail a container, so every refusal falls back to a lenient reading
//! through `serde_json::Value` that needs only `bundle` to be a non-empty
//! string. oci-spec refuses, or reads differently from the spec, when:
//! - `status` is not one of the four spec values: runc's and crun's own
//!   status lists add `paused` (and runc `pausing`), which `runc state` and
//!   `crun state` print, and older or other runtimes send what they like;
//! - `pid` does not fit an `i32` or is not a number;
//! - an annotation value is not a string (the spec allows only strings, but
//!   runc ignores what it cannot use) or `ociVersion` is not a string;
//! - a key appears twice (serde's derive refuses duplicate fields; serde_json
//!   keeps the last one, as Go's encoding/json does);
//! - strings are not valid UTF-8 ([`parse_spec_bytes`] reads them lossily);
//! - `id` or `bundle` is missing: oci-spec defaults them to empty, so the
//!   lenient reading tells a missing id from an empty one and gives the
//!   "no bundle path" error.
//!
//! Unknown fields (`rootfs`, `created`, `owner`, `systemd-scope` in
//! `runc state`/`crun state` output) are ignored by both readings, and a
//! missing `pid` or `annotations` is fine for both.

use crate::oci::spec::parse_spec_bytes;
use std::path::PathBuf;

/// OCI State is a few hundred bytes plus annotations.
pub const MAX_STATE_BYTES: u64 = 16 << 20;

/// The fields of OCI State the hook uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookState {
    pub id: Option<String>,
    pub bundle: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("OCI state on stdin is not valid JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("OCI state on stdin is not a JSON object")]
    NotAnObject,
    #[error("OCI state on stdin has no bundle path")]
    NoBundle,
}

/// Reads the State a runtime wrote to a hook's stdin.
pub fn parse_state(bytes: &[u8]) -> Result<HookState, StateError> {
    match typed(bytes) {
        Some(s) => Ok(s),
        None => lenient(bytes),
    }
}

/// oci-spec's reading; None when it refuses or leaves `id`/`bundle` empty.
fn typed(bytes: &[u8]) -> Option<HookState> {
    // serde's derived structs also accept a JSON array (fields by position);
    // a State is an object, so anything else goes to the lenient reading and
    // its error.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let state: oci_spec::runtime::State = serde_json::from_slice(bytes).ok()?;
    if state.id().is_empty() || state.bundle().as_os_str().is_empty() {
        return None;
    }
    Some(HookState {
        id: Some(state.id().clone()),
        bundle: state.bundle().clone(),
    })
}

/// Only `bundle` (a non-empty string) is required; `id` is read when it is a
/// string.
fn lenient(bytes: &[u8]) -> Result<HookState, StateError> {
    let v = parse_spec_bytes(bytes).map_err(StateError::NotJson)?;
    let obj = v.as_object().ok_or(StateError::NotAnObject)?;
    let bundle = obj
        .get("bundle")
        .and_then(|b| b.as_str())
        .filter(|b| !b.is_empty())
        .ok_or(StateError::NoBundle)?;
    let id = obj.get("id").and_then(|i| i.as_str()).map(String::from);
    Ok(HookState {
        id,
        bundle: PathBuf::from(bundle),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(id: Option<&str>, bundle: &str) -> HookState {
        HookState {
            id: id.map(String::from),
            bundle: PathBuf::from(bundle),
        }
    }

    /// runc's prestart/createRuntime State (libcontainer/process_linux.go:
    /// specs.State with Status "creating", the init's pid, the annotations).
    const RUNC: &str = r#"{"ociVersion":"1.2.0","id":"4f1c0e9a","status":"creating","pid":41822,"bundle":"/run/containerd/io.containerd.runtime.v2.task/moby/4f1c0e9a","annotations":{"org.opencontainers.image.ref.name":"ubuntu"}}"#;

    /// podman (via crun/runc) with libpod's annotations and no-op fields.
    const PODMAN: &str = r#"{
        "ociVersion": "1.0.0",
        "id": "b7d0a1f3c2e4",
        "status": "created",
        "pid": 90210,
        "bundle": "/var/lib/containers/storage/overlay-containers/b7d0a1f3c2e4/userdata",
        "annotations": {
            "io.container.manager": "libpod",
            "io.podman.annotations.autoremove": "FALSE",
            "org.opencontainers.image.stopSignal": "15"
        }
    }"#;

    /// crun's State (the same object `crun state` prints, with its extra
    /// fields: rootfs, created, owner, systemd-scope).
    const CRUN: &str = r#"{"ociVersion":"1.0.0","id":"c1","pid":1234,"status":"created","bundle":"/b/c1","rootfs":"/b/c1/rootfs","created":"2026-11-30T20:09:10.123456Z","owner":"root","systemd-scope":"libpod-c1.scope"}"#;

    #[test]
    fn runtimes_states_read_typed() {
        let cases = [
            (
                RUNC,
                state(
                    Some("4f1c0e9a"),
                    "/run/containerd/io.containerd.runtime.v2.task/moby/4f1c0e9a",
                ),
            ),
            (
                PODMAN,
                state(
                    Some("b7d0a1f3c2e4"),
                    "/var/lib/containers/storage/overlay-containers/b7d0a1f3c2e4/userdata",
                ),
            ),
            (CRUN, state(Some("c1"), "/b/c1")),
            // no pid (the spec makes it optional), no annotations
            (
                r#"{"ociVersion":"1.0.2","id":"x","status":"creating","bundle":"/b"}"#,
                state(Some("x"), "/b"),
            ),
        ];
        for (json, want) in cases {
            assert_eq!(typed(json.as_bytes()), Some(want.clone()), "{json}");
            assert_eq!(parse_state(json.as_bytes()).unwrap(), want);
        }
    }

    #[test]
    fn what_oci_spec_refuses_is_read_leniently() {
        let cases: &[&str] = &[
            // status outside the spec's four (runc/crun `state`: paused)
            r#"{"ociVersion":"1.0.2","id":"a","status":"paused","pid":7,"bundle":"/b"}"#,
            r#"{"id":"a","status":"pausing","bundle":"/b"}"#,
            // pid that is no i32
            r#"{"id":"a","status":"creating","pid":4294967296,"bundle":"/b"}"#,
            r#"{"id":"a","status":"creating","pid":"7","bundle":"/b"}"#,
            // annotation values that are not strings
            r#"{"id":"a","status":"creating","bundle":"/b","annotations":{"n":1,"o":{"x":true}}}"#,
            // ociVersion of the wrong type
            r#"{"ociVersion":1,"id":"a","bundle":"/b"}"#,
            // duplicate key: the last one wins, as in Go
            r#"{"id":"a","bundle":"/old","bundle":"/b"}"#,
        ];
        for json in cases {
            assert_eq!(typed(json.as_bytes()), None, "{json}");
            assert_eq!(
                parse_state(json.as_bytes()).unwrap(),
                state(Some("a"), "/b"),
                "{json}"
            );
        }
        // invalid UTF-8 in a string
        let mut bytes = br#"{"id":"a"#.to_vec();
        bytes.push(0xff);
        bytes.extend_from_slice(br#"","bundle":"/b"}"#);
        assert_eq!(typed(&bytes), None);
        assert_eq!(parse_state(&bytes).unwrap(), state(Some("a\u{fffd}"), "/b"));
    }

    #[test]
    fn missing_and_empty_ids_stay_apart() {
        assert_eq!(
            parse_state(br#"{"bundle":"/b"}"#).unwrap(),
            state(None, "/b")
        );
        assert_eq!(
            parse_state(br#"{"id":"","bundle":"/b"}"#).unwrap(),
            state(Some(""), "/b")
        );
        assert_eq!(
            parse_state(br#"{"id":7,"bundle":"/b"}"#).unwrap(),
            state(None, "/b")
        );
    }

    #[test]
    fn errors_keep_their_messages() {
        let err = |b: &[u8]| parse_state(b).unwrap_err().to_string();
        assert!(err(b"{").starts_with("OCI state on stdin is not valid JSON: "));
        assert_eq!(err(b"[]"), "OCI state on stdin is not a JSON object");
        // an array in State's field order is still not a State
        assert_eq!(
            err(br#"["1.0.2","a","creating",1,"/b"]"#),
            "OCI state on stdin is not a JSON object"
        );
        assert_eq!(
            err(br#"{"id":"x"}"#),
            "OCI state on stdin has no bundle path"
        );
        assert_eq!(
            err(br#"{"bundle":""}"#),
            "OCI state on stdin has no bundle path"
        );
        assert_eq!(
            err(br#"{"bundle":7}"#),
            "OCI state on stdin has no bundle path"
        );
    }
}
