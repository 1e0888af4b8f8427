//! Docker: `/etc/docker/daemon.json`.
//!
//! dockerd registers extra OCI runtimes from `runtimes.<name>.path` and picks
//! the default from `default-runtime` (Docker docs, "dockerd" reference,
//! "Configure container runtimes"; NVIDIA's `nvidia-ctk runtime configure`
//! writes the same two keys: nvidia-container-toolkit
//! pkg/config/engine/docker/docker.go, `AddRuntime`). Every other key is kept
//! in its order (serde_json `preserve_order`); JSON has no comments to lose.

use std::path::Path;

use serde_json::{Map, Value};

use super::RUNTIME_NAME;

use super::state::{merge_state, note_created, EngineState};
use super::{
    change, config_file, edit, require_binary, InstallError, Options, Plan, DOCKER_CONFIG,
};

#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("is not valid JSON ({source}); fix it by hand, it was left untouched")]
    Json {
        #[source]
        source: serde_json::Error,
    },
    #[error("{0} is not a JSON object; it was left untouched")]
    Shape(&'static str),
}

/// The result of editing daemon.json.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    pub text: String,
    /// The `default-runtime` that `--set-default` replaced, to restore on uninstall.
    pub replaced_default: Option<String>,
    /// Nothing but `{}` is left (uninstall of a file install created).
    pub empty: bool,
}

const DEFAULT_KEY: &str = "default-runtime";
const RUNTIMES_KEY: &str = "runtimes";

fn parse(text: Option<&str>) -> Result<Map<String, Value>, DockerError> {
    let text = text.unwrap_or("");
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text).map_err(|source| DockerError::Json { source })? {
        Value::Object(m) => Ok(m),
        _ => Err(DockerError::Shape("the top level")),
    }
}

/// The indent the file already uses (first indented line), so a re-written
/// file keeps its look and the diff shows only what changed. Four spaces
/// (what nvidia-ctk writes) for a new file.
fn indent_of(text: Option<&str>) -> String {
    text.unwrap_or("")
        .lines()
        .find_map(|l| {
            let ws: String = l.chars().take_while(|c| *c == ' ' || *c == '\t').collect();
            (!ws.is_empty() && ws.len() < l.len()).then_some(ws)
        })
        .unwrap_or_else(|| "    ".to_string())
}

fn render(map: &Map<String, Value>, indent: &str) -> String {
    use serde::Serialize;
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    // Serializing a Map of Values into a Vec cannot fail.
    let _ = map.serialize(&mut ser);
    let mut s = String::from_utf8_lossy(&out).into_owned();
    s.push('\n');
    s
}

/// Keeps the original text when the document did not change, so a second
/// install (or an uninstall with nothing to do) rewrites nothing.
fn finish(
    before: Option<&str>,
    original: &Map<String, Value>,
    map: Map<String, Value>,
    replaced_default: Option<String>,
) -> Edited {
    let empty = map.is_empty();
    let text = match before {
        Some(b) if *original == map => b.to_string(),
        _ => render(&map, &indent_of(before)),
    };
    Edited {
        text,
        replaced_default,
        empty,
    }
}

/// The path of dockerd's default runtime when daemon.json names one:
/// `default-runtime` (or, where that is gpu-guard, `replaced_default`),
/// then `runtimes.<name>.path`. `None` for runc (dockerd's built-in
/// default) and for an unreadable file.
pub fn default_runtime_path(text: Option<&str>, replaced_default: Option<&str>) -> Option<String> {
    let map = parse(text).ok()?;
    let name = match map.get(DEFAULT_KEY)?.as_str()? {
        RUNTIME_NAME => replaced_default?,
        n => n,
    };
    map.get(RUNTIMES_KEY)?
        .get(name)?
        .get("path")?
        .as_str()
        .map(str::to_string)
}

/// What daemon.json registers: the default runtime's name (`runc`, dockerd's
/// built-in default, when unset) and each runtime's (name, path). An
/// unreadable file registers nothing.
pub fn registered_runtimes(text: Option<&str>) -> (String, Vec<(String, String)>) {
    let map = parse(text).unwrap_or_default();
    let default = map
        .get(DEFAULT_KEY)
        .and_then(Value::as_str)
        .unwrap_or("runc")
        .to_string();
    let runtimes = map
        .get(RUNTIMES_KEY)
        .and_then(Value::as_object)
        .map(|r| {
            r.iter()
                .filter_map(|(n, v)| Some((n.clone(), v.get("path")?.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    (default, runtimes)
}

/// Adds `runtimes.gpu-guard.path = runtime_path` (other keys of that
/// runtime, such as `runtimeArgs`, are kept) and, with `set_default`,
/// `default-runtime = "gpu-guard"`.
pub fn install(
    before: Option<&str>,
    runtime_path: &str,
    set_default: bool,
) -> Result<Edited, DockerError> {
    let original = parse(before)?;
    let mut map = original.clone();
    let runtimes = map
        .entry(RUNTIMES_KEY)
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or(DockerError::Shape("\"runtimes\""))?;
    let ours = runtimes
        .entry(RUNTIME_NAME)
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or(DockerError::Shape("\"runtimes.gpu-guard\""))?;
    ours.insert("path".into(), Value::String(runtime_path.to_string()));
    let mut replaced_default = None;
    if set_default {
        match map.get(DEFAULT_KEY) {
            Some(Value::String(s)) if s == RUNTIME_NAME => {}
            Some(Value::String(s)) => replaced_default = Some(s.clone()),
            None => {}
            Some(_) => return Err(DockerError::Shape("\"default-runtime\" (not a string)")),
        }
        map.insert(DEFAULT_KEY.into(), Value::String(RUNTIME_NAME.into()));
    }
    Ok(finish(before, &original, map, replaced_default))
}

/// Removes what install added: `runtimes.gpu-guard` (and `runtimes` when it
/// is left empty), and `default-runtime` when it names gpu-guard, restoring
/// `restore_default` (the value install replaced) when there was one.
pub fn uninstall(
    before: Option<&str>,
    restore_default: Option<&str>,
) -> Result<Edited, DockerError> {
    let original = parse(before)?;
    let mut map = original.clone();
    if let Some(v) = map.get_mut(RUNTIMES_KEY) {
        let runtimes = v
            .as_object_mut()
            .ok_or(DockerError::Shape("\"runtimes\""))?;
        runtimes.shift_remove(RUNTIME_NAME);
        if runtimes.is_empty() {
            map.shift_remove(RUNTIMES_KEY);
        }
    }
    if map.get(DEFAULT_KEY).and_then(Value::as_str) == Some(RUNTIME_NAME) {
        match restore_default {
            Some(prev) if prev != RUNTIME_NAME => {
                map.insert(DEFAULT_KEY.into(), Value::String(prev.to_string()));
            }
            _ => {
                map.shift_remove(DEFAULT_KEY);
            }
        }
    }
    Ok(finish(before, &original, map, None))
}

/// dockerd gives its runtimes the root `<exec-root>/runtime-runc`
/// (core::runtime_engines): when daemon.json moves `exec-root`, the
/// wrapper knows docker only if gpu-guard's config says so; the warning
/// names the key. `root` is `runtime.engines.docker.root` in effect.
pub fn root_warning(text: Option<&str>, root: &str) -> Option<String> {
    let map = parse(text).ok()?;
    let exec_root = map.get("exec-root")?.as_str()?.trim_end_matches('/');
    let want = format!("{exec_root}/runtime-runc");
    let same = crate::core::runtime_engines::root_is_under(Path::new(&want), Path::new(root))
        && crate::core::runtime_engines::root_is_under(Path::new(root), Path::new(&want));
    (!same).then(|| {
        format!(
            "daemon.json sets exec-root = \"{exec_root}\": dockerd passes gpu-guard's runtime --root {want}/moby; set runtime.engines.docker.root = \"{want}\" in gpu-guard's config so the wrapper knows docker invoked it"
        )
    })
}

/// Whether daemon.json makes gpu-guard dockerd's default runtime.
pub fn default_is_ours(text: &str) -> bool {
    parse(Some(text))
        .map(|m| m.get(DEFAULT_KEY).and_then(Value::as_str) == Some(RUNTIME_NAME))
        .unwrap_or(false)
}

/// Whether daemon.json runs gpu-guard as registered: `runtimes.gpu-guard.path`
/// is the wrapper and, with `default`, `default-runtime` is gpu-guard.
/// dockerd reads only this file (and its command line, which gpu-guard
/// cannot see: a `--default-runtime` flag conflicts with the file and
/// dockerd refuses to start).
pub fn judge(text: Option<&str>, wrapper: &str, default: bool) -> Option<String> {
    let map = match parse(text) {
        Ok(m) => m,
        Err(e) => return Some(format!("daemon.json {e}")),
    };
    let path = map
        .get(RUNTIMES_KEY)
        .and_then(|r| r.get(RUNTIME_NAME))
        .and_then(|r| r.get("path"))
        .and_then(Value::as_str);
    match path {
        None => return Some(format!("daemon.json registers no `{RUNTIME_NAME}` runtime")),
        Some(p) if p != wrapper => {
            return Some(format!(
                "daemon.json's `{RUNTIME_NAME}` runtime runs `{p}`, not the wrapper {wrapper}"
            ))
        }
        Some(_) => {}
    }
    let d = map
        .get(DEFAULT_KEY)
        .and_then(Value::as_str)
        .unwrap_or("runc");
    (default && d != RUNTIME_NAME).then(|| {
        format!("dockerd's default runtime is `{d}`, not `{RUNTIME_NAME}`: `docker run` without --runtime bypasses gpu-guard")
    })
}

/// Whether daemon.json still names gpu-guard (for the uninstall check).
pub fn mentions_gpu_guard(text: &str) -> bool {
    parse(Some(text))
        .map(|m| {
            m.get(DEFAULT_KEY).and_then(Value::as_str) == Some(RUNTIME_NAME)
                || m.get(RUNTIMES_KEY)
                    .and_then(Value::as_object)
                    .is_some_and(|r| r.contains_key(RUNTIME_NAME))
        })
        .unwrap_or(false)
}

// Planning: what install and uninstall change on the host.

pub(super) fn plan_install(opts: &Options, old: Option<EngineState>) -> Result<Plan, InstallError> {
    require_binary(opts, "runtime wrapper", opts.runtime_path())?;
    let host = opts
        .config_path
        .clone()
        .unwrap_or_else(|| DOCKER_CONFIG.into());
    let path = config_file(opts, &host)?;
    let before = edit::read_optional(&path)?;
    let edited = install(
        before.as_deref(),
        &opts.runtime_path().to_string_lossy(),
        opts.set_default,
    )
    .map_err(|source| InstallError::Docker {
        path: path.clone(),
        source,
    })?;
    let mut state = merge_state(old, &host);
    if before.is_none() {
        note_created(opts, &mut state, &host);
    }
    if state.replaced_default.is_none() {
        state.replaced_default = edited.replaced_default;
    }
    state.set_default |= opts.set_default || default_is_ours(&edited.text);
    state.binary = Some(opts.runtime_path());
    let warnings = root_warning(before.as_deref(), &opts.root)
        .into_iter()
        .collect();
    Ok(Plan {
        changes: vec![change(path, before, Some(edited.text))],
        state: Some(state),
        warnings,
        remove_dirs: vec![],
        not_effective: vec![],
    })
}

pub(super) fn plan_uninstall(
    opts: &Options,
    old: Option<EngineState>,
) -> Result<Plan, InstallError> {
    let host = opts
        .config_path
        .clone()
        .or_else(|| old.as_ref().map(|s| s.config.clone()))
        .unwrap_or_else(|| DOCKER_CONFIG.into());
    let path = config_file(opts, &host)?;
    let before = edit::read_optional(&path)?;
    let mut changes = vec![];
    if before.is_some() {
        let restore = old.as_ref().and_then(|s| s.replaced_default.as_deref());
        let edited =
            uninstall(before.as_deref(), restore).map_err(|source| InstallError::Docker {
                path: path.clone(),
                source,
            })?;
        let created = old.as_ref().is_some_and(|s| s.created.contains(&host));
        let after = (!(edited.empty && created)).then_some(edited.text);
        changes.push(change(path, before, after));
    }
    Ok(Plan {
        changes,
        state: None,
        warnings: vec![],
        remove_dirs: vec![],
        not_effective: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indent_is_detected() {
        assert_eq!(indent_of(Some("{\n  \"a\": 1\n}")), "  ");
        assert_eq!(indent_of(Some("{\n\t\"a\": 1\n}")), "\t");
        assert_eq!(indent_of(None), "    ");
    }

    #[test]
    fn replaced_default_is_reported_once() {
        let a = install(Some("{\"default-runtime\": \"runc\"}"), "/x", true).unwrap();
        assert_eq!(a.replaced_default.as_deref(), Some("runc"));
        let b = install(Some(&a.text), "/x", true).unwrap();
        assert_eq!(b.replaced_default, None);
        assert_eq!(b.text, a.text);
    }
}
