//! CRI-O: a drop-in `/etc/crio/crio.conf.d/99-gpu-guard.toml` holding a
//! runtime handler, never an edit of crio.conf.
//!
//! crio.conf.d(5): the main crio.conf is read first, then every file of the
//! drop-in directory in lexical order, later files winning; so `99-` sorts
//! after the distribution's files and uninstall is "remove the file". The
//! handler is `[crio.runtime.runtimes.gpu-guard]` with `runtime_path` and
//! `runtime_type = "oci"`; `--set-default` adds `[crio.runtime]
//! default_runtime` (crio.conf(5), "CRIO.RUNTIME.RUNTIMES TABLE"). Like
//! `nvidia-ctk runtime configure --runtime=crio`
//! (pkg/config/engine/crio/crio.go, `AddRuntime`), the handler starts as a
//! copy of the runtime CRI-O uses now, so `monitor_path`, `runtime_root`
//! and the like carry over.
//!
//! Hooks: CRI-O reads `hooks_dir`, by default only
//! /usr/share/containers/oci/hooks.d (cri-o pkg/config/config.go,
//! `DefaultConfig`: `HooksDir: []string{hooks.DefaultDir}`, and
//! containers/common pkg/hooks: `DefaultDir`).

use toml_edit::{DocumentMut, Item, Table};

use super::RUNTIME_NAME;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::hooks::{self, HookStage};
use super::state::{merge_state, note_created, EngineState};
use super::{change, edit, require_binary, InstallError, Options, Plan, CRIO_DROP_IN};

pub const DROP_IN_NAME: &str = "99-gpu-guard.toml";
pub const DEFAULT_HOOKS_DIR: &str = "/usr/share/containers/oci/hooks.d";

#[derive(Debug, thiserror::Error)]
pub enum CrioError {
    #[error("is not valid TOML ({})", super::toml_error_line(.text, .source))]
    Toml {
        text: String,
        #[source]
        source: Box<toml_edit::TomlError>,
    },
}

/// What gpu-guard needs from CRI-O's configuration (crio.conf, then the
/// other drop-ins in lexical order).
#[derive(Debug, Clone, Default)]
pub struct Effective {
    /// `crio.runtime.hooks_dir`, CRI-O's default when no file sets it.
    pub hooks_dirs: Vec<String>,
    pub default_runtime: Option<String>,
    /// `crio.runtime.runtimes.<name>`, last definition of each name.
    pub runtimes: Vec<(String, Table)>,
}

/// Folds CRI-O config files (in the order CRI-O reads them) into the
/// settings gpu-guard uses.
pub fn effective<'a>(files: impl IntoIterator<Item = &'a str>) -> Result<Effective, CrioError> {
    let mut eff = Effective::default();
    let mut hooks: Option<Vec<String>> = None;
    for text in files {
        let doc = text
            .parse::<DocumentMut>()
            .map_err(|source| CrioError::Toml {
                text: text.to_string(),
                source: Box::new(source),
            })?;
        let Some(runtime) = doc
            .get("crio")
            .and_then(|c| c.get("runtime"))
            .and_then(Item::as_table_like)
        else {
            continue;
        };
        if let Some(dirs) = runtime.get("hooks_dir").and_then(Item::as_array) {
            hooks = Some(
                dirs.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
            );
        }
        if let Some(d) = runtime.get("default_runtime").and_then(Item::as_str) {
            eff.default_runtime = Some(d.to_string());
        }
        if let Some(rts) = runtime.get("runtimes").and_then(Item::as_table) {
            for (name, item) in rts.iter() {
                if let Some(t) = item.as_table() {
                    eff.runtimes.retain(|(n, _)| n != name);
                    eff.runtimes.push((name.to_string(), t.clone()));
                }
            }
        }
    }
    eff.hooks_dirs = hooks.unwrap_or_else(|| vec![DEFAULT_HOOKS_DIR.to_string()]);
    Ok(eff)
}

fn base_runtime(eff: &Effective) -> Option<&Table> {
    let default = eff
        .default_runtime
        .as_deref()
        .filter(|d| *d != RUNTIME_NAME);
    default
        .into_iter()
        .chain(["crun", "runc"])
        .filter_map(|name| eff.runtimes.iter().find(|(n, _)| n == name).map(|(_, t)| t))
        .find(|t| {
            t.get("runtime_type")
                .and_then(Item::as_str)
                .map_or(true, |ty| ty == "oci")
        })
}

/// The `runtime_path` of CRI-O's default runtime (`default_runtime`, runc
/// when unset), when the configs set one.
pub fn default_runtime_path(eff: &Effective) -> Option<String> {
    let name = eff.default_runtime.as_deref().unwrap_or("runc");
    eff.runtimes
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, t)| t.get("runtime_path"))
        .and_then(Item::as_str)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
}

/// Each runtime handler's (name, `runtime_path`), where it sets one.
pub fn registered_runtimes(eff: &Effective) -> Vec<(String, String)> {
    eff.runtimes
        .iter()
        .filter_map(|(n, t)| {
            let p = t.get("runtime_path")?.as_str()?;
            (!p.is_empty()).then(|| (n.clone(), p.to_string()))
        })
        .collect()
}

/// Whether a drop-in makes gpu-guard CRI-O's default runtime.
pub fn default_is_ours(drop_in: &str) -> bool {
    effective([drop_in])
        .map(|e| e.default_runtime.as_deref() == Some(RUNTIME_NAME))
        .unwrap_or(false)
}

/// The drop-in's content, with gpu-guard's runtime root.
pub fn drop_in(eff: &Effective, runtime_path: &str, set_default: bool) -> String {
    drop_in_rooted(
        eff,
        runtime_path,
        crate::core::runtime_engines::CRIO_ROOT,
        set_default,
    )
}

/// The drop-in's content: the handler runs `runtime_path` with the runtime
/// root `root` (`runtime_root`, passed to the runtime as `--root`), by which
/// the wrapper knows CRI-O invoked it.
pub fn drop_in_rooted(
    eff: &Effective,
    runtime_path: &str,
    root: &str,
    set_default: bool,
) -> String {
    let mut doc = DocumentMut::new();
    doc.decor_mut().set_prefix(
        "# Written by `gpu-guard install crio`; `gpu-guard uninstall crio` removes it.\n",
    );
    let mut crio = Table::new();
    crio.set_implicit(true);
    let mut runtime = Table::new();
    runtime.set_implicit(true);
    if set_default {
        runtime.insert("default_runtime", toml_edit::value(RUNTIME_NAME));
    }
    let mut runtimes = Table::new();
    runtimes.set_implicit(true);
    let mut ours = Table::new();
    if let Some(base) = base_runtime(eff) {
        for (k, item) in base.iter() {
            if let Some(v) = item.as_value() {
                let mut v = v.clone();
                v.decor_mut().clear();
                ours.insert(k, Item::Value(v));
            }
        }
    }
    ours.insert("runtime_path", toml_edit::value(runtime_path));
    ours.insert("runtime_type", toml_edit::value("oci"));
    if root.is_empty() {
        ours.remove("runtime_root");
    } else {
        ours.insert("runtime_root", toml_edit::value(root));
    }
    runtimes.insert(RUNTIME_NAME, Item::Table(ours));
    runtime.insert("runtimes", Item::Table(runtimes));
    crio.insert("runtime", Item::Table(runtime));
    doc.insert("crio", Item::Table(crio));
    doc.to_string()
}

// Planning: what install changes on the host (uninstall removes the
// drop-in and what install created: `super::plan_owned_uninstall`).

pub(super) fn drop_in_path(opts: &Options) -> PathBuf {
    opts.config_path
        .clone()
        .unwrap_or_else(|| CRIO_DROP_IN.into())
}

/// CRI-O's configuration files as it reads them: crio.conf (beside the
/// drop-in directory), then every other file of the drop-in directory in
/// lexical order (crio.conf.d(5)); gpu-guard's drop-in left out unless
/// `with_ours`. Paths are this machine's.
pub(super) fn read_files(
    opts: &Options,
    drop_in_host: &Path,
    with_ours: bool,
) -> Result<Vec<(PathBuf, String)>, InstallError> {
    let dir_host = drop_in_host.parent().unwrap_or(Path::new("/"));
    let main_host = dir_host
        .parent()
        .unwrap_or(Path::new("/"))
        .join("crio.conf");
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    let main = opts.fs_path(&main_host);
    if let Some(t) = edit::read_optional(&main)? {
        files.push((main, t));
    }
    let dir = opts.fs_path(dir_host);
    match fs::read_dir(&dir) {
        Ok(entries) => {
            let mut names: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.path())
                .filter(|p| with_ours || p.file_name() != drop_in_host.file_name())
                .collect();
            names.sort();
            for p in names {
                if let Some(t) = edit::read_optional(&p)? {
                    files.push((p, t));
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(InstallError::ListDir { path: dir, source }),
    }
    // Parse one by one so an error names the file at fault.
    for (p, t) in &files {
        effective([t.as_str()]).map_err(|source| InstallError::Crio {
            path: p.clone(),
            source,
        })?;
    }
    Ok(files)
}

/// CRI-O's configuration without gpu-guard's drop-in.
pub(super) fn read_effective(
    opts: &Options,
    drop_in_host: &Path,
) -> Result<Effective, InstallError> {
    let files = read_files(opts, drop_in_host, false)?;
    effective(files.iter().map(|(_, t)| t.as_str())).map_err(|source| InstallError::Crio {
        path: opts.fs_path(drop_in_host),
        source,
    })
}

/// Whether CRI-O's files (in reading order, gpu-guard's drop-in included)
/// run gpu-guard as registered: the handler's `runtime_path` and
/// `runtime_root`, and with `default` the `default_runtime`. A problem
/// names the last file that set what is wrong.
pub fn judge(
    files: &[(PathBuf, String)],
    wrapper: &str,
    root: &str,
    default: bool,
) -> Option<(Option<PathBuf>, String)> {
    let mut handler_from = None;
    let mut default_from = None;
    for (p, t) in files {
        let Ok(e) = effective([t.as_str()]) else {
            continue;
        };
        if e.runtimes.iter().any(|(n, _)| n == RUNTIME_NAME) {
            handler_from = Some(p.clone());
        }
        if e.default_runtime.is_some() {
            default_from = Some(p.clone());
        }
    }
    let eff = effective(files.iter().map(|(_, t)| t.as_str())).ok()?;
    let ours = eff.runtimes.iter().find(|(n, _)| n == RUNTIME_NAME);
    let field = |k: &str| {
        ours.and_then(|(_, t)| t.get(k))
            .and_then(Item::as_str)
            .unwrap_or("")
            .to_string()
    };
    if ours.is_none() {
        return Some((
            None,
            format!("CRI-O reads no `{RUNTIME_NAME}` runtime handler"),
        ));
    }
    if field("runtime_path") != wrapper {
        let msg = format!(
            "CRI-O's `{RUNTIME_NAME}` handler runs `{}`, not the wrapper {wrapper}",
            field("runtime_path")
        );
        return Some((handler_from, msg));
    }
    if !root.is_empty() && field("runtime_root") != root {
        let msg = format!("CRI-O's `{RUNTIME_NAME}` handler has runtime_root `{}`, not {root} (the wrapper cannot tell CRI-O invoked it)", field("runtime_root"));
        return Some((handler_from, msg));
    }
    let d = eff.default_runtime.unwrap_or_else(|| "runc".into());
    if default && d != RUNTIME_NAME {
        let msg = format!("CRI-O's default runtime is `{d}`, not `{RUNTIME_NAME}`: pods without a runtime class bypass gpu-guard");
        return Some((default_from, msg));
    }
    None
}

pub(super) fn plan_install(opts: &Options, old: Option<EngineState>) -> Result<Plan, InstallError> {
    require_binary(opts, "runtime wrapper", opts.runtime_path())?;
    require_binary(opts, "hook binary", opts.gpu_guard_path())?;
    let drop_host = drop_in_path(opts);
    let eff = read_effective(opts, &drop_host)?;
    let drop_path = opts.fs_path(&drop_host);
    let drop_before = edit::read_optional(&drop_path)?;
    // Installing without --set-default never takes the default away.
    let set_default = opts.set_default || drop_before.as_deref().is_some_and(default_is_ours);
    let text = drop_in_rooted(
        &eff,
        &opts.runtime_path().to_string_lossy(),
        &opts.root,
        set_default,
    );
    let mut state = merge_state(old, &drop_host);
    state.set_default = set_default;
    state.binary = Some(opts.runtime_path());
    if drop_before.is_none() {
        note_created(opts, &mut state, &drop_host);
    }
    let mut changes = vec![change(drop_path, drop_before, Some(text))];
    let mut warnings = vec![];

    // The prestart hook, in a directory CRI-O reads. The package ships it
    // inactive (hooks::PACKAGED_DIR): install writes it into CRI-O's first
    // hooks_dir (or the one that already holds it) and uninstall removes it.
    let existing = eff.hooks_dirs.iter().find(|d| {
        opts.fs_path(&Path::new(d).join(hooks::PRESTART_FILE))
            .exists()
    });
    match existing.or(eff.hooks_dirs.first()) {
        None => warnings.push(
            "CRI-O's hooks_dir is empty, so it runs no hooks: the prestart check is not installed (the runtime handler still is)"
                .to_string(),
        ),
        Some(dir) => {
            let hook_host = Path::new(dir).join(hooks::PRESTART_FILE);
            if let Some(c) = hooks::activate(opts, &mut state, &hook_host, HookStage::Prestart)? {
                changes.push(c);
            }
        }
    }
    for dir in &eff.hooks_dirs {
        if opts
            .fs_path(&Path::new(dir).join(hooks::PRECREATE_FILE))
            .exists()
        {
            warnings.push(format!(
                "{dir}/{} is a podman precreate hook in a directory CRI-O reads; CRI-O refuses it: run `gpu-guard uninstall podman` and install it elsewhere",
                hooks::PRECREATE_FILE
            ));
        }
    }
    Ok(Plan {
        changes,
        state: Some(state),
        warnings,
        remove_dirs: vec![],
        not_effective: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_files_win_and_default_hooks_dir_applies() {
        let e = effective(["", "[crio.runtime]\ndefault_runtime = \"runc\"\n"]).unwrap();
        assert_eq!(e.hooks_dirs, vec![DEFAULT_HOOKS_DIR.to_string()]);
        assert_eq!(e.default_runtime.as_deref(), Some("runc"));
        let e = effective([
            "[crio.runtime]\nhooks_dir = [\"/a\"]\n",
            "[crio.runtime]\nhooks_dir = [\"/b\", \"/c\"]\n",
        ])
        .unwrap();
        assert_eq!(e.hooks_dirs, vec!["/b".to_string(), "/c".to_string()]);
    }
}
