//! What a config that cannot be used still says about the two things an
//! invalid config must never change: which runtime the wrapper chains for
//! each engine, and which containers are GPU containers.
//!
//! An invalid config refuses GPU containers (docs/configuration.md). But
//! a config is invalid for reasons that have nothing to do with either: a
//! key a newer gpu-guard wrote and this (rolled back) binary does not know
//! (`[tuning] new_future_key = 1`), a typo in another table, a syntax
//! error in the admin's `config.toml` beside an intact
//! `config.d/50-chain-containerd.toml`. Falling back to built-in defaults
//! there would chain the first `runc` on PATH instead of NVIDIA's runtime,
//! and would not count an env-only GPU request (`NVIDIA_VISIBLE_DEVICES`,
//! the device plugin's envvar strategy), which only NVIDIA's runtime acts
//! on: the pod would start, exit 0, without its GPUs. So the same files
//! are read again, leniently, for exactly those settings:
//!
//! - every file is read as policy (owner, mode, directory: the trust rule
//!   of [`super::load_detailed`]); one that fails it says nothing;
//! - a file that parses as TOML gives its tables whatever else is wrong
//!   in them (an unknown key or a bad value elsewhere is ignored here);
//!   one that does not is split at its table headers, and each table that
//!   parses on its own is kept;
//! - the keys read are `runtime.path`, `runtime.engines.ENGINE.{path,root}`,
//!   `detect.*` and `log.*`, each on its own; every other setting is the
//!   built-in default, and `mode` is `enforce`;
//! - when something that could set the chain or the detection rules could
//!   not be read (an untrusted or unreadable file, a `[runtime]` or
//!   `[detect]` table or top level that does not parse, a value of the
//!   wrong type), the chain it names is unknown, so a GPU request in the
//!   env counts whether or not NVIDIA's runtime is chained
//!   (`detect.env_requests = "always"`): such a container is refused with
//!   the config's error instead of started without its GPUs.

use super::{drop_in_dir, list_drop_ins, merge_tables, read_config_file};
use crate::core::policy::{Config, EnvRequests, Mode};
use crate::core::runtime_engines::Engine;
use crate::core::runtime_engines::EngineRuntime;
use crate::sys::policy_file::TrustedDirs;
use std::path::Path;

/// The settings an invalid config still gives.
#[derive(Clone, Debug, PartialEq)]
pub struct Fallback {
    /// Built-in defaults with the chain, detection and log settings that
    /// could be read; `mode` is enforce.
    pub config: Config,
    /// What could have set the chain or detection rules but could not be
    /// read, one line each (then env requests count, see the module doc).
    pub unread: Vec<String>,
}

impl Fallback {
    /// Built-in defaults, nothing read.
    pub fn defaults() -> Fallback {
        Fallback {
            config: Config::default(),
            unread: Vec::new(),
        }
    }
}

/// The top-level tables whose keys decide the chain and which containers
/// are GPU containers.
const CLASSIFYING: &[&str] = &["runtime", "detect"];

/// Reads the config files `flag` names (as [`super::load`] does) for the
/// chain, detection and log settings alone.
pub fn read(flag: Option<&Path>) -> Fallback {
    let (path, explicit) = super::config_path(flag);
    let mut unread = Vec::new();
    let mut merged = toml::Table::new();
    let mut known = TrustedDirs::default();
    match read_config_file(&path, &mut known) {
        Ok(text) => absorb(&path, &text, &mut merged, &mut unread),
        Err(e) if e.absent && !explicit => {}
        Err(e) => unread.push(not_read(&e.error)),
    }
    match list_drop_ins(&drop_in_dir(&path), &mut known) {
        Ok(list) => {
            for p in list {
                match read_config_file(&p, &mut known) {
                    Ok(text) => absorb(&p, &text, &mut merged, &mut unread),
                    Err(e) => unread.push(not_read(&e.error)),
                }
            }
        }
        Err(e) => unread.push(not_read(&e)),
    }
    let mut config = Config {
        mode: Mode::Enforce,
        ..Config::default()
    };
    take(&merged, &mut config, &mut unread);
    if !unread.is_empty() {
        config.detect.env_requests = EnvRequests::Always;
    }
    super::read_host_detection(&mut config);
    Fallback { config, unread }
}

/// A file or directory that says nothing here, briefly (the config's own
/// error says why at length).
fn not_read(e: &super::ConfigError) -> String {
    let why = if e.unreadable {
        "cannot be read"
    } else {
        "not trusted"
    };
    format!("{} {why}", e.path.display())
}

/// Merges what `text` (the file at `path`) gives into `merged`.
fn absorb(path: &Path, text: &str, merged: &mut toml::Table, unread: &mut Vec<String>) {
    if let Ok(t) = text.parse::<toml::Table>() {
        merge_tables(merged, t);
        return;
    }
    for chunk in chunks(text) {
        match chunk.text.parse::<toml::Table>() {
            Ok(t) => merge_tables(merged, t),
            Err(e) => {
                let relevant = chunk
                    .table
                    .as_deref()
                    .map_or(true, |t| CLASSIFYING.contains(&t));
                if relevant {
                    let line = chunk.first_line
                        + e.span().map_or(0, |s| {
                            chunk.text[..s.start.min(chunk.text.len())]
                                .matches('\n')
                                .count()
                        });
                    unread.push(format!(
                        "{}: line {line}: {}",
                        path.display(),
                        crate::core::sanitize::one_line(e.message())
                    ));
                }
            }
        }
    }
}

/// A run of lines from one table header to the next.
struct Chunk {
    /// The first key of the header (`runtime` for `[runtime.engines.crio]`);
    /// None before the first header (top-level keys).
    table: Option<String>,
    text: String,
    /// 1-based line number of the chunk's first line in the file.
    first_line: usize,
}

/// Splits TOML text at its table headers (`[a.b]`, `[[a.b]]`), so that a
/// table that does not parse costs only itself.
fn chunks(text: &str) -> Vec<Chunk> {
    let mut out = vec![Chunk {
        table: None,
        text: String::new(),
        first_line: 1,
    }];
    for (i, line) in text.lines().enumerate() {
        if let Some(table) = header(line) {
            out.push(Chunk {
                table: Some(table),
                text: String::new(),
                first_line: i + 1,
            });
        }
        if let Some(c) = out.last_mut() {
            c.text.push_str(line);
            c.text.push('\n');
        }
    }
    out
}

/// The first key of a table header line, if `line` is one.
fn header(line: &str) -> Option<String> {
    let code = line.split('#').next().unwrap_or("").trim();
    let inner = code.strip_prefix('[')?.strip_suffix(']')?;
    let inner = inner
        .strip_prefix('[')
        .and_then(|i| i.strip_suffix(']'))
        .unwrap_or(inner);
    if inner.contains(['=', ',', '[', ']']) {
        return None;
    }
    let first = inner.split('.').next()?.trim().trim_matches(['"', '\'']);
    (!first.is_empty()).then(|| first.to_string())
}

/// A string at `keys` in `t`: None when absent, Err when it is there but
/// not a string.
fn string_at(t: &toml::Table, keys: &[&str]) -> Result<Option<String>, ()> {
    let mut v: Option<&toml::Value> = None;
    let mut table = t;
    for (i, k) in keys.iter().enumerate() {
        let Some(x) = table.get(*k) else {
            return Ok(None);
        };
        if i + 1 == keys.len() {
            v = Some(x);
        } else {
            match x.as_table() {
                Some(next) => table = next,
                None => return Err(()),
            }
        }
    }
    match v {
        Some(toml::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(()),
        None => Ok(None),
    }
}

/// The chain, detection and log settings of `merged`, each on its own.
fn take(merged: &toml::Table, cfg: &mut Config, unread: &mut Vec<String>) {
    let wrong = |key: &str, unread: &mut Vec<String>| {
        unread.push(format!("key `{key}` cannot be read"));
    };
    match string_at(merged, &["runtime", "path"]) {
        Ok(Some(p)) => cfg.runtime.path = p,
        Ok(None) => {}
        Err(()) => wrong("runtime.path", unread),
    }
    for e in Engine::ALL {
        let name = e.name();
        let slot = engine_slot(cfg, e);
        for (field, value) in [("path", &mut slot.path), ("root", &mut slot.root)] {
            match string_at(merged, &["runtime", "engines", name, field]) {
                Ok(v @ Some(_)) => *value = v,
                Ok(None) => {}
                Err(()) => wrong(&format!("runtime.engines.{name}.{field}"), unread),
            }
        }
    }
    if let Err(m) = cfg.runtime.engines.validate() {
        // Roots that overlap or are not absolute tell no engine apart.
        for e in Engine::ALL {
            engine_slot(cfg, e).root = None;
        }
        unread.push(m);
    }
    take_detect(merged, cfg, unread);
    take_log(merged, cfg);
}

fn engine_slot(cfg: &mut Config, e: Engine) -> &mut EngineRuntime {
    match e {
        Engine::Docker => &mut cfg.runtime.engines.docker,
        Engine::Containerd => &mut cfg.runtime.engines.containerd,
        Engine::Crio => &mut cfg.runtime.engines.crio,
        Engine::Podman => &mut cfg.runtime.engines.podman,
    }
}

/// `[detect]`, key by key: a key of a newer gpu-guard is ignored, a value
/// that cannot be read is unread (its default is used).
fn take_detect(merged: &toml::Table, cfg: &mut Config, unread: &mut Vec<String>) {
    let Some(detect) = merged.get("detect") else {
        return;
    };
    let Some(d) = detect.as_table() else {
        unread.push("key `detect` cannot be read".into());
        return;
    };
    if let Some(v) = d.get("env_requests") {
        match v.clone().try_into::<EnvRequests>() {
            Ok(r) => cfg.detect.env_requests = r,
            Err(_) => unread.push("key `detect.env_requests` cannot be read".into()),
        }
    }
    if let Some(v) = d.get("cdi_kinds") {
        match v.clone().try_into::<Vec<String>>() {
            Ok(k) => cfg.detect.cdi_kinds = k,
            Err(_) => unread.push("key `detect.cdi_kinds` cannot be read".into()),
        }
    }
    if let Some(v) = d.get("nvidia_config") {
        match v.as_str() {
            Some(s) => cfg.detect.nvidia_config = s.to_string(),
            None => unread.push("key `detect.nvidia_config` cannot be read".into()),
        }
    }
}

/// `[log]`: where the refusals under an invalid config are logged, as the
/// admin set it where that can be read.
fn take_log(merged: &toml::Table, cfg: &mut Config) {
    let Some(log) = merged.get("log").and_then(toml::Value::as_table) else {
        return;
    };
    if let Some(b) = log.get("syslog").and_then(toml::Value::as_bool) {
        cfg.log.syslog = b;
    }
    if let Some(s) = log.get("syslog_socket").and_then(toml::Value::as_str) {
        cfg.log.syslog_socket = s.to_string();
    }
}

/// What could not be read, as one line for a decision (None: all was read).
pub fn describe_unread(f: &Fallback) -> Option<String> {
    if f.unread.is_empty() {
        return None;
    }
    Some(format!(
        "what chains the runtime or recognises GPU containers could not all be read ({}); until the config is fixed, a GPU request in the environment counts as one whatever runtime is chained",
        f.unread
            .iter()
            .map(|u| crate::core::sanitize::one_line(u))
            .collect::<Vec<_>>()
            .join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_chunks() {
        assert_eq!(header("[runtime]").as_deref(), Some("runtime"));
        assert_eq!(
            header("  [[tuning.env]]  # rules").as_deref(),
            Some("tuning")
        );
        assert_eq!(
            header("[\"runtime\".engines.crio]").as_deref(),
            Some("runtime")
        );
        assert_eq!(header("[1, 2]"), None);
        assert_eq!(header("a = [1]"), None);
        let c = chunks("mode = \"enforce\"\n[tuning]\nx = \n[runtime]\npath = \"/r\"\n");
        assert_eq!(c.len(), 3);
        assert_eq!(c[1].table.as_deref(), Some("tuning"));
        assert_eq!(c[2].first_line, 4);
    }

    #[test]
    fn a_broken_table_costs_only_itself() {
        let mut merged = toml::Table::new();
        let mut unread = Vec::new();
        let text = "[tuning]\nbroken = = 1\n[runtime.engines.containerd]\npath = \"/usr/bin/nvidia-container-runtime\"\n";
        absorb(Path::new("/c.toml"), text, &mut merged, &mut unread);
        assert!(unread.is_empty(), "{unread:?}");
        let mut cfg = Config::default();
        take(&merged, &mut cfg, &mut unread);
        assert_eq!(
            cfg.chained_runtime(Some(Engine::Containerd)),
            "/usr/bin/nvidia-container-runtime"
        );
        // A broken [runtime] table (or top level) is unread: its chain is unknown.
        for text in ["[runtime]\npath = \n", "mode = \n[tuning]\n"] {
            let mut unread = Vec::new();
            absorb(
                Path::new("/c.toml"),
                text,
                &mut toml::Table::new(),
                &mut unread,
            );
            assert_eq!(unread.len(), 1, "{text}");
            assert!(unread[0].starts_with("/c.toml: line "), "{unread:?}");
        }
    }

    #[test]
    fn keys_are_read_one_by_one() {
        let merged: toml::Table = "[runtime]\npath = 5\nfuture = 1\n[runtime.engines.crio]\npath = \"/crun\"\n[detect]\nenv_requests = \"always\"\nnew_key = true\n[log]\nsyslog = false\n"
            .parse()
            .unwrap();
        let mut cfg = Config::default();
        let mut unread = Vec::new();
        take(&merged, &mut cfg, &mut unread);
        assert_eq!(unread, vec!["key `runtime.path` cannot be read"]);
        assert_eq!(cfg.chained_runtime(Some(Engine::Crio)), "/crun");
        assert_eq!(cfg.detect.env_requests, EnvRequests::Always);
        assert!(!cfg.log.syslog);
    }
}
