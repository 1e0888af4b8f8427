//! containerd: `/etc/containerd/config.toml`, edited with toml_edit so the
//! admin's comments, order and quoting stay as they were.
//!
//! Where the runtime goes depends on the config `version`
//! (nvidia-container-toolkit pkg/config/engine/containerd/containerd.go,
//! `criRuntimePluginName`; containerd docs/PLUGINS.md for v2.0):
//! - no `version` key: version 1, plugins keyed by short ID: `plugins.cri`
//!   (containerd-config.toml(5): "If no version number is specified inside
//!   the config file then it is assumed to be a version 1 config");
//! - `version = 2` (containerd 1.x): `plugins."io.containerd.grpc.v1.cri"`;
//! - `version = 3` and later (containerd 2.x): `plugins."io.containerd.cri.v1.runtime"`.
//!
//! The runtime is `runtime_type = "io.containerd.runc.v2"` with
//! `options.BinaryName` naming the wrapper (containerd-config.toml(5),
//! "Multiple Runtimes"). Like `nvidia-ctk runtime configure`
//! (pkg/config/engine/containerd/config.go, `AddRuntime`), the new runtime
//! starts as a copy of the default/runc runtime so settings such as
//! `options.SystemdCgroup` (which must match the kubelet's cgroup driver)
//! carry over.

use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table, Value};

use super::RUNTIME_NAME;

mod annotations;
mod effective;
pub mod merge;
mod plan;
pub mod template;

use annotations::pass_through_annotations;
pub use annotations::{untrusted_pattern, CDI_ANNOTATIONS};
pub use effective::{judge, Expect, Problem};
pub(super) use plan::{check, default_config, plan_install, plan_uninstall, registered_runtimes};

pub const RUNC_V2: &str = "io.containerd.runc.v2";
/// The drop-in file name in a conf.d directory the config imports.
pub const DROP_IN_NAME: &str = DROP_IN_NAMES[0];
/// The names gpu-guard's drop-in may have, in order of preference: the
/// first that containerd loads after every other file of the directory
/// that has a CRI section (in containerd 1.x the last such file's section
/// is the whole CRI configuration: merge.rs).
pub const DROP_IN_NAMES: [&str; 2] = ["99-gpu-guard.toml", "zz-gpu-guard.toml"];
/// A new config file gets version 2: containerd 1.6/1.7 read it and 2.x
/// migrates it on start (nvidia-ctk uses the same default, containerd.go
/// `defaultConfigVersion`, "to ensure compatibility with older containerd").
const NEW_FILE_VERSION: i64 = 2;

#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    #[error("is not valid TOML ({}); fix it by hand, it was left untouched", super::toml_error_line(.text, .source))]
    Toml {
        text: String,
        #[source]
        source: Box<toml_edit::TomlError>,
    },
    #[error("has `version = {0}`, which gpu-guard does not know (1 to 4 are supported); it was left untouched")]
    Version(String),
    #[error("has `{0}` in a shape gpu-guard cannot edit safely (not a [table]); edit it by hand, it was left untouched")]
    Shape(String),
    /// k3s's base template writes `default_runtime_name` from its own
    /// `--default-runtime` option (k3s `pkg/agent/templates`), so a template
    /// cannot set it.
    #[error("is a k3s/RKE2 template, and k3s sets the default runtime itself: install without --set-default, then start k3s or RKE2 with --default-runtime gpu-guard (`default-runtime: gpu-guard` in /etc/rancher/k3s/config.yaml, RKE2: /etc/rancher/rke2/config.yaml); it was left untouched")]
    TemplateDefault,
}

/// The result of editing a containerd config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    pub text: String,
    /// The `default_runtime_name` that `--set-default` replaced.
    pub replaced_default: Option<String>,
    /// Nothing but (at most) `version` is left.
    pub empty: bool,
}

pub fn parse(text: Option<&str>) -> Result<DocumentMut, ContainerdError> {
    let text = text.unwrap_or("");
    text.parse::<DocumentMut>()
        .map_err(|source| ContainerdError::Toml {
            text: text.to_string(),
            source: Box::new(source),
        })
}

/// The config version, `None` for an empty document (a new file).
pub fn version(doc: &DocumentMut) -> Result<Option<i64>, ContainerdError> {
    if doc.as_table().is_empty() {
        return Ok(None);
    }
    match doc.get("version") {
        None => Ok(Some(1)),
        Some(item) => match item.as_integer() {
            Some(v @ 1..=4) => Ok(Some(v)),
            _ => Err(ContainerdError::Version(
                item.to_string().trim().to_string(),
            )),
        },
    }
}

/// The CRI runtime plugin's key under `plugins` for a config version.
pub fn cri_plugin(version: i64) -> &'static str {
    match version {
        1 => "cri",
        2 => "io.containerd.grpc.v1.cri",
        _ => "io.containerd.cri.v1.runtime",
    }
}

/// The conf.d directory the config imports, if any: the first `imports`
/// entry whose last component is `*.toml`. A relative entry is
/// relative to the main config's directory, as containerd resolves it
/// (services/server/config/config.go, `resolveImports`).
pub fn conf_d_dir(doc: &DocumentMut, config_host_path: &Path) -> Option<PathBuf> {
    let imports = doc.get("imports")?.as_array()?;
    imports.iter().filter_map(Value::as_str).find_map(|imp| {
        let p = Path::new(imp);
        let last = p.file_name()?.to_str()?;
        let dir = p.parent()?;
        if last != "*.toml" || dir.to_string_lossy().contains(['*', '?', '[']) {
            return None;
        }
        Some(if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            config_host_path
                .parent()
                .unwrap_or(Path::new("/"))
                .join(dir)
        })
    })
}

/// Walks `path` from `t`, creating missing tables (implicit, so they print
/// no header of their own) when `create`. A key on the way that is not a
/// [table] (an inline table, a value) is refused rather than rewritten.
fn descend<'a>(
    mut t: &'a mut Table,
    path: &[&str],
    create: bool,
) -> Result<Option<&'a mut Table>, ContainerdError> {
    for (i, key) in path.iter().enumerate() {
        if !t.contains_key(key) {
            if !create {
                return Ok(None);
            }
            let mut nt = Table::new();
            nt.set_implicit(true);
            t.insert(key, Item::Table(nt));
        }
        t = match t.get_mut(key) {
            Some(Item::Table(nt)) => nt,
            _ => return Err(ContainerdError::Shape(path[..=i].join("."))),
        };
    }
    Ok(Some(t))
}

fn lookup<'a>(t: &'a Table, path: &[&str]) -> Option<&'a Table> {
    path.iter()
        .try_fold(t, |t, key| t.get(key).and_then(Item::as_table))
}

/// Sets `t[key] = v`, keeping the old value's comments and spacing.
fn set_str(t: &mut Table, key: &str, v: &str) {
    match t.get_mut(key).and_then(Item::as_value_mut) {
        Some(old) if old.as_str() == Some(v) => {}
        Some(old) => {
            let decor = old.decor().clone();
            // Keep the file's quoting: containerd 2's `config default` writes
            // 'literal' strings, and a restored value should read as it did.
            let literal = old.to_string().trim_start().starts_with('\'');
            *old = match format!("'{v}'").parse::<Value>() {
                Ok(lit) if literal && !v.contains(['\'', '\n']) => lit,
                _ => Value::from(v),
            };
            *old.decor_mut() = decor;
        }
        None => {
            t.insert(key, toml_edit::value(v));
        }
    }
}

/// A copy of `item` without the comments and indentation it had in its
/// original place (keys re-inserted fresh, values' decor cleared).
fn fresh(item: &Item) -> Item {
    match item {
        Item::Value(v) => {
            let mut v = v.clone();
            v.decor_mut().clear();
            Item::Value(v)
        }
        Item::Table(t) => Item::Table(fresh_table(t)),
        other => other.clone(),
    }
}

fn fresh_table(t: &Table) -> Table {
    let mut out = Table::new();
    for (k, item) in t.iter() {
        out.insert(k, fresh(item));
    }
    out
}

/// A fresh runtime table for gpu-guard: a copy of the runtime the node uses
/// now (the default, then runc, then crun) when that is a runc.v2 runtime.
fn new_runtime_table(base: Option<&Table>) -> Table {
    base.map(fresh_table).unwrap_or_default()
}

/// The runtime gpu-guard's copies its settings from: the CRI section's
/// default (unless that is gpu-guard), then runc, then crun, when it is a
/// runc.v2 runtime.
fn base_runtime(section: &Table) -> Option<&Table> {
    let containerd = lookup(section, &["containerd"])?;
    let default = containerd
        .get("default_runtime_name")
        .and_then(Item::as_str)
        .filter(|d| *d != RUNTIME_NAME);
    let runtimes = containerd.get("runtimes").and_then(Item::as_table)?;
    default
        .into_iter()
        .chain(["runc", "crun"])
        .filter_map(|name| runtimes.get(name).and_then(Item::as_table))
        .find(|t| {
            t.get("runtime_type")
                .and_then(Item::as_str)
                .map_or(true, |ty| ty == RUNC_V2)
        })
}

/// What gpu-guard's runtime entry says: the wrapper (`options.BinaryName`)
/// and the runtime root that tells the wrapper containerd invoked it
/// (`options.Root`; containerd's runc shim appends the namespace:
/// containerd pkg/process/init.go, `NewRunc`).
#[derive(Debug, Clone, Copy)]
pub struct Ours<'a> {
    pub binary: &'a str,
    pub root: &'a str,
}

impl<'a> Ours<'a> {
    /// The wrapper at `binary` with the default root.
    pub fn at(binary: &'a str) -> Self {
        Ours {
            binary,
            root: crate::core::runtime_engines::CONTAINERD_ROOT,
        }
    }
}

/// Adds (or corrects) the gpu-guard runtime in `doc` under `plugin`, using
/// the runtimes of `source` (a CRI plugin section) as the base for a new one.
fn add_runtime(
    doc: &mut DocumentMut,
    source: Option<&Table>,
    plugin: &str,
    ours_rt: Ours,
    set_default: bool,
) -> Result<Option<String>, ContainerdError> {
    let root = doc.as_table_mut();
    let runtimes = descend(root, &["plugins", plugin, "containerd", "runtimes"], true)?
        .ok_or_else(|| ContainerdError::Shape("plugins".into()))?;
    if !runtimes.contains_key(RUNTIME_NAME) {
        let t = new_runtime_table(source.and_then(base_runtime));
        runtimes.insert(RUNTIME_NAME, Item::Table(t));
    }
    let ours = descend(runtimes, &[RUNTIME_NAME], false)?
        .ok_or_else(|| ContainerdError::Shape(format!("runtimes.{RUNTIME_NAME}")))?;
    set_str(ours, "runtime_type", RUNC_V2);
    let options = descend(ours, &["options"], true)?
        .ok_or_else(|| ContainerdError::Shape(format!("runtimes.{RUNTIME_NAME}.options")))?;
    options.set_implicit(false);
    set_str(options, "BinaryName", ours_rt.binary);
    if ours_rt.root.is_empty() {
        options.remove("Root");
    } else {
        set_str(options, "Root", ours_rt.root);
    }
    pass_through_annotations(ours);

    let mut replaced = None;
    if set_default {
        let containerd = descend(doc.as_table_mut(), &["plugins", plugin, "containerd"], true)?
            .ok_or_else(|| ContainerdError::Shape("containerd".into()))?;
        if let Some(prev) = containerd.get("default_runtime_name") {
            match prev.as_str() {
                Some(p) if p == RUNTIME_NAME => {}
                Some(p) => replaced = Some(p.to_string()),
                None => return Err(ContainerdError::Shape("default_runtime_name".into())),
            }
        }
        set_str(containerd, "default_runtime_name", RUNTIME_NAME);
    }
    Ok(replaced)
}

fn is_empty(doc: &DocumentMut) -> bool {
    doc.as_table()
        .iter()
        .all(|(k, item)| k == "version" || is_empty_item(item))
}

fn is_empty_item(item: &Item) -> bool {
    match item {
        Item::None => true,
        Item::Table(t) => t.iter().all(|(_, i)| is_empty_item(i)),
        _ => false,
    }
}

fn finish(before: Option<&str>, doc: &DocumentMut, replaced_default: Option<String>) -> Edited {
    let rendered = doc.to_string();
    let text = match before {
        // toml_edit re-renders byte for byte what it parsed; comparing the
        // text keeps a no-op a no-op.
        Some(b) if b == rendered => b.to_string(),
        _ => rendered,
    };
    Edited {
        text,
        replaced_default,
        empty: is_empty(doc),
    }
}

/// Registers the runtime in the main config (no conf.d import), with the
/// default root.
pub fn install(
    before: Option<&str>,
    runtime_path: &str,
    set_default: bool,
) -> Result<Edited, ContainerdError> {
    install_ours(before, Ours::at(runtime_path), set_default)
}

/// [`install`] with the runtime entry `ours`.
pub fn install_ours(
    before: Option<&str>,
    ours: Ours,
    set_default: bool,
) -> Result<Edited, ContainerdError> {
    let mut doc = parse(before)?;
    let version = match version(&doc)? {
        Some(v) => v,
        None => {
            doc.insert("version", toml_edit::value(NEW_FILE_VERSION));
            NEW_FILE_VERSION
        }
    };
    let plugin = cri_plugin(version);
    let source = lookup(doc.as_table(), &["plugins", plugin]).cloned();
    let replaced = add_runtime(&mut doc, source.as_ref(), plugin, ours, set_default)?;
    Ok(finish(before, &doc, replaced))
}

/// The drop-in for a config that imports a conf.d directory, built over
/// the main config's own CRI section (see [`drop_in_over`]).
pub fn drop_in(
    main: &str,
    runtime_path: &str,
    set_default: bool,
) -> Result<String, ContainerdError> {
    let main_doc = parse(Some(main))?;
    let version = version(&main_doc)?.unwrap_or(NEW_FILE_VERSION);
    let section = lookup(main_doc.as_table(), &["plugins", cri_plugin(version)]);
    drop_in_over(version, section, Ours::at(runtime_path), set_default)
}

/// The drop-in, of config `version` (the main config's: containerd refuses
/// an import with a higher one, containerd-config.toml(5), "imports").
/// containerd before 2.0 replaces a whole plugin section with an imported
/// one instead of merging it (see [`super::containerd_merge`]), so for
/// version 1/2 configs the drop-in starts from a copy of `section`, the CRI
/// section containerd would use without gpu-guard (the main config's, or
/// NVIDIA's drop-in's), as nvidia-ctk does (nvidia-container-toolkit
/// pkg/config/engine/containerd/containerd.go, `getBaseDropInConfigTree`).
/// containerd 2.x merges sections, so a version 3 drop-in holds only ours.
pub fn drop_in_over(
    version: i64,
    section: Option<&Table>,
    ours: Ours,
    set_default: bool,
) -> Result<String, ContainerdError> {
    let plugin = cri_plugin(version);
    let mut doc = DocumentMut::new();
    doc.decor_mut().set_prefix(DROP_IN_HEADER);
    doc.insert("version", toml_edit::value(version));
    if version < 3 {
        if let Some(cri) = section {
            let plugins = descend(doc.as_table_mut(), &["plugins"], true)?
                .ok_or_else(|| ContainerdError::Shape("plugins".into()))?;
            plugins.insert(plugin, Item::Table(cri.clone()));
        }
    }
    add_runtime(&mut doc, section, plugin, ours, set_default)?;
    Ok(doc.to_string())
}

/// The first line of every drop-in gpu-guard writes.
pub const DROP_IN_HEADER: &str =
    "# Written by `gpu-guard install containerd`; `gpu-guard uninstall containerd` removes it.\n";

/// Removes the gpu-guard runtime from a config and, when
/// `default_runtime_name` names it, restores `restore_default` (or removes
/// the key, leaving containerd's default, runc).
pub fn uninstall(
    before: Option<&str>,
    restore_default: Option<&str>,
) -> Result<Edited, ContainerdError> {
    let mut doc = parse(before)?;
    let Some(version) = version(&doc)? else {
        return Ok(finish(before, &doc, None));
    };
    let plugin = cri_plugin(version);
    if let Some(runtimes) = descend(
        doc.as_table_mut(),
        &["plugins", plugin, "containerd", "runtimes"],
        false,
    )? {
        runtimes.remove(RUNTIME_NAME);
    }
    if let Some(containerd) = descend(
        doc.as_table_mut(),
        &["plugins", plugin, "containerd"],
        false,
    )? {
        if containerd
            .get("default_runtime_name")
            .and_then(Item::as_str)
            == Some(RUNTIME_NAME)
        {
            match restore_default.filter(|p| *p != RUNTIME_NAME) {
                Some(prev) => set_str(containerd, "default_runtime_name", prev),
                None => {
                    containerd.remove("default_runtime_name");
                }
            }
        }
    }
    Ok(finish(before, &doc, None))
}

/// Whether `default_runtime_name` names gpu-guard (any version's table).
pub fn default_is_ours(text: &str) -> bool {
    let Ok(doc) = parse(Some(text)) else {
        return false;
    };
    (1..=3).any(|v| {
        lookup(doc.as_table(), &["plugins", cri_plugin(v), "containerd"])
            .and_then(|c| c.get("default_runtime_name"))
            .and_then(Item::as_str)
            == Some(RUNTIME_NAME)
    })
}

/// Whether the config still registers gpu-guard (any version's table).
pub fn mentions_gpu_guard(text: &str) -> bool {
    let Ok(doc) = parse(Some(text)) else {
        return false;
    };
    (1..=3).any(|v| {
        let plugin = cri_plugin(v);
        lookup(
            doc.as_table(),
            &["plugins", plugin, "containerd", "runtimes", RUNTIME_NAME],
        )
        .is_some()
            || lookup(doc.as_table(), &["plugins", plugin, "containerd"])
                .and_then(|c| c.get("default_runtime_name"))
                .and_then(Item::as_str)
                == Some(RUNTIME_NAME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(version(&parse(None).unwrap()).unwrap(), None);
        assert_eq!(
            version(&parse(Some("root = \"/x\"")).unwrap()).unwrap(),
            Some(1)
        );
        assert_eq!(
            version(&parse(Some("version = 3")).unwrap()).unwrap(),
            Some(3)
        );
        assert!(version(&parse(Some("version = 9")).unwrap()).is_err());
        assert!(version(&parse(Some("version = \"2\"")).unwrap()).is_err());
    }

    #[test]
    fn conf_d_is_resolved_like_containerd() {
        let doc = parse(Some(
            "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
        ))
        .unwrap();
        assert_eq!(
            conf_d_dir(&doc, Path::new("/etc/containerd/config.toml")),
            Some(PathBuf::from("/etc/containerd/conf.d"))
        );
        let rel = parse(Some("imports = [\"extra.toml\", \"conf.d/*.toml\"]\n")).unwrap();
        assert_eq!(
            conf_d_dir(&rel, Path::new("/etc/containerd/config.toml")),
            Some(PathBuf::from("/etc/containerd/conf.d"))
        );
        let none = parse(Some("imports = [\"/etc/containerd/runtime_*.toml\"]\n")).unwrap();
        assert_eq!(
            conf_d_dir(&none, Path::new("/etc/containerd/config.toml")),
            None
        );
    }
}
