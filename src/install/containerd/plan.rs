//! containerd on the host: what install and uninstall change, planned over
//! the configuration as containerd merges it (merge.rs), and checked on
//! the merged result before anything is written (effective.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use super::effective::{judge, Expect, Problem};
use super::merge::{self, ConfigFs, Effective, MergeError, Rules, Source};
use super::{
    conf_d_dir, default_is_ours, drop_in_over, install_ours, parse, template, uninstall, version,
    ContainerdError, Ours, DROP_IN_HEADER, DROP_IN_NAMES, NEW_FILE_VERSION,
};
use crate::install::edit::{self, EditError};
use crate::install::state::{merge_state, note_created, EngineState};
use crate::install::{
    change, config_file, removal_plan, require_binary, InstallError, Options, Plan,
    CONTAINERD_CONFIG,
};

/// The host's files (host paths, read under `--host-root`), with planned
/// contents laid over them: `Some` a new text, `None` removed.
struct HostFs<'a> {
    opts: &'a Options,
    planned: BTreeMap<PathBuf, Option<String>>,
}

impl ConfigFs for HostFs<'_> {
    fn read(&self, path: &Path) -> Result<Option<String>, MergeError> {
        if let Some(p) = self.planned.get(path) {
            return Ok(p.clone());
        }
        edit::read_optional(&self.opts.fs_path(path)).map_err(|e| match e {
            EditError::Read { source, .. } => MergeError::Read {
                path: path.to_path_buf(),
                source,
            },
            other => MergeError::Read {
                path: path.to_path_buf(),
                source: io::Error::other(other.to_string()),
            },
        })
    }

    fn list(&self, dir: &Path) -> Vec<String> {
        let mut names: BTreeSet<String> = std::fs::read_dir(self.opts.fs_path(dir))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        for (p, text) in &self.planned {
            if p.parent() != Some(dir) {
                continue;
            }
            let Some(name) = p.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            match text {
                Some(_) => names.insert(name),
                None => names.remove(&name),
            };
        }
        names.into_iter().collect()
    }
}

/// containerd's configuration on the host.
struct HostConfig {
    /// The main config (host path) and its text.
    host: PathBuf,
    before: Option<String>,
    /// Its `version` (a new file gets [`NEW_FILE_VERSION`]).
    version: i64,
    /// The conf.d directory it imports, where gpu-guard's drop-in goes.
    conf_d: Option<PathBuf>,
    /// Every file containerd loads, in order, gpu-guard's drop-ins left out.
    others: Vec<Source>,
}

fn main_host(opts: &Options, old: Option<&EngineState>) -> PathBuf {
    opts.config_path
        .clone()
        .or_else(|| old.filter(|_| opts.uninstall).map(|s| s.config.clone()))
        .unwrap_or_else(|| default_config(opts))
}

/// containerd's config on the host when none is named: k3s's or RKE2's
/// template on their nodes (template.rs, `detect`), else
/// `/etc/containerd/config.toml`.
pub(in crate::install) fn default_config(opts: &Options) -> PathBuf {
    template::detect(&|p| opts.fs_path(p)).unwrap_or_else(|| CONTAINERD_CONFIG.into())
}

/// The file containerd's settings are read from: the config, or for a
/// k3s/RKE2 Go template the `config.toml` k3s rendered from it.
fn settings_host(opts: &Options, host: &Path) -> Result<PathBuf, InstallError> {
    if !template::is_template(host) {
        return Ok(host.to_path_buf());
    }
    let text = edit::read_optional(&config_file(opts, host)?)?;
    Ok(match template::needs_block(host, text.as_deref()) {
        true => template::rendered(host),
        false => host.to_path_buf(),
    })
}

/// Whether `path` is one of gpu-guard's drop-ins in `conf_d`.
fn is_ours(conf_d: Option<&Path>, path: &Path) -> bool {
    conf_d.is_some_and(|d| path.parent() == Some(d))
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| DROP_IN_NAMES.contains(&n))
}

fn load_host(opts: &Options, host: &Path) -> Result<HostConfig, InstallError> {
    let path = config_file(opts, host)?;
    let before = edit::read_optional(&path)?;
    let err = |source| InstallError::Containerd {
        path: path.clone(),
        source,
    };
    let doc = parse(before.as_deref()).map_err(err)?;
    let version = version(&doc).map_err(err)?.unwrap_or(NEW_FILE_VERSION);
    let conf_d = conf_d_dir(&doc, host);
    let fs = HostFs {
        opts,
        planned: BTreeMap::new(),
    };
    let others = merge::load(&fs, host, &|p| is_ours(conf_d.as_deref(), p))?;
    Ok(HostConfig {
        host: host.to_path_buf(),
        before,
        version,
        conf_d,
        others,
    })
}

/// The rules install builds the copied CRI section under: a version 3
/// config is read only by containerd 2.x; older ones by 1.x, whose
/// whole-section replacement is what the copy must carry.
fn copy_rules(version: i64) -> Rules {
    if version >= 3 {
        Rules::Deep
    } else {
        Rules::Replace
    }
}

/// What containerd runs without gpu-guard's drop-ins: the merged CRI section.
fn read_effective(opts: &Options) -> Result<Effective, InstallError> {
    let cfg = load_host(opts, &settings_host(opts, &main_host(opts, None))?)?;
    Ok(merge::effective(&cfg.others, copy_rules(cfg.version)))
}

/// The runtimes containerd registers (name, `options.BinaryName`) and its
/// default runtime's name, gpu-guard's drop-ins left out.
pub(in crate::install) fn registered_runtimes(
    opts: &Options,
) -> Result<(String, Vec<(String, String)>), InstallError> {
    let eff = read_effective(opts)?;
    let list = eff
        .runtime_names()
        .into_iter()
        .filter_map(|n| eff.option(&n, "BinaryName").map(|b| (n, b)))
        .collect();
    Ok((eff.default_runtime(), list))
}

/// The drop-in's name: the first of [`DROP_IN_NAMES`] containerd loads
/// after every other file of `dir` that has a CRI section.
fn drop_in_name(others: &[Source], dir: &Path) -> &'static str {
    let last = others
        .iter()
        .filter(|s| s.path.parent() == Some(dir) && has_cri_section(&s.doc))
        .filter_map(|s| s.path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .max();
    DROP_IN_NAMES
        .iter()
        .copied()
        .find(|n| last.as_deref().map_or(true, |l| *n > l))
        .unwrap_or(DROP_IN_NAMES[DROP_IN_NAMES.len() - 1])
}

fn has_cri_section(doc: &toml_edit::DocumentMut) -> bool {
    let Some(plugins) = doc.get("plugins").and_then(|p| p.as_table()) else {
        return false;
    };
    (1..=3).any(|v| plugins.contains_key(merge::cri_key(v)))
}

pub(in crate::install) fn plan_install(
    opts: &Options,
    old: Option<EngineState>,
) -> Result<Plan, InstallError> {
    require_binary(opts, "runtime wrapper", opts.runtime_path())?;
    let host = main_host(opts, None);
    if settings_host(opts, &host)? != host {
        return plan_template(opts, old, &host);
    }
    let cfg = load_host(opts, &host)?;
    let runtime = opts.runtime_path().to_string_lossy().into_owned();
    let ours = Ours {
        binary: &runtime,
        root: &opts.root,
    };
    let mut state = merge_state(old, &cfg.host);
    let changes = match &cfg.conf_d {
        Some(dir) => drop_in_changes(opts, &cfg, dir, ours, &mut state)?,
        None => main_changes(opts, &cfg, ours, &mut state)?,
    };
    state.binary = Some(opts.runtime_path());
    let not_effective = verify(opts, &cfg, &changes, &state)
        .map(|p| describe(&p))
        .into_iter()
        .collect();
    Ok(Plan {
        changes,
        state: Some(state),
        warnings: vec![],
        remove_dirs: vec![],
        not_effective,
    })
}

/// The runtime in the main config itself (it imports no conf.d).
fn main_changes(
    opts: &Options,
    cfg: &HostConfig,
    ours: Ours,
    state: &mut EngineState,
) -> Result<Vec<edit::FileChange>, InstallError> {
    let path = config_file(opts, &cfg.host)?;
    let edited = install_ours(cfg.before.as_deref(), ours, opts.set_default).map_err(|source| {
        InstallError::Containerd {
            path: path.clone(),
            source,
        }
    })?;
    if cfg.before.is_none() {
        note_created(opts, state, &cfg.host);
    }
    if state.replaced_default.is_none() {
        state.replaced_default = edited.replaced_default;
    }
    state.set_default |= opts.set_default || default_is_ours(&edited.text);
    Ok(vec![change(path, cfg.before.clone(), Some(edited.text))])
}

/// The runtime in a drop-in of `dir`, named to load after every other CRI
/// section there, over a copy of the section containerd uses now; a
/// drop-in of ours under another name goes.
fn drop_in_changes(
    opts: &Options,
    cfg: &HostConfig,
    dir: &Path,
    ours: Ours,
    state: &mut EngineState,
) -> Result<Vec<edit::FileChange>, InstallError> {
    let name = drop_in_name(&cfg.others, dir);
    let drop_host = dir.join(name);
    let mut changes = vec![];
    // Installing without --set-default never takes the default away.
    let mut set_default = opts.set_default || state.set_default;
    for other in DROP_IN_NAMES.iter().filter(|n| **n != name) {
        let host = dir.join(other);
        let path = opts.fs_path(&host);
        let Some(text) = edit::read_optional(&path)? else {
            continue;
        };
        if state.created.contains(&host) || text.starts_with(DROP_IN_HEADER) {
            set_default |= default_is_ours(&text);
            state.created.remove(&host);
            changes.push(change(path, Some(text), None));
        }
    }
    let drop_path = opts.fs_path(&drop_host);
    let drop_before = edit::read_optional(&drop_path)?;
    set_default |= drop_before.as_deref().is_some_and(default_is_ours);
    let base = merge::effective(&cfg.others, copy_rules(cfg.version));
    let section = (!base.section.is_empty()).then_some(&base.section);
    let text = drop_in_over(cfg.version, section, ours, set_default).map_err(|source| {
        InstallError::Containerd {
            path: drop_path.clone(),
            source,
        }
    })?;
    if drop_before.is_none() {
        note_created(opts, state, &drop_host);
    }
    state.set_default = set_default;
    changes.push(change(drop_path, drop_before, Some(text)));
    Ok(changes)
}

/// The host path of a planned change (changes hold paths on this machine).
fn host_path(opts: &Options, path: &Path) -> PathBuf {
    match path.strip_prefix(&opts.host_root) {
        Ok(rel) if opts.host_root != Path::new("/") => Path::new("/").join(rel),
        _ => path.to_path_buf(),
    }
}

/// containerd's merged configuration once `changes` are made, judged.
fn verify(
    opts: &Options,
    cfg: &HostConfig,
    changes: &[edit::FileChange],
    state: &EngineState,
) -> Option<Problem> {
    let planned = changes
        .iter()
        .map(|c| (host_path(opts, &c.path), c.after.clone()))
        .collect();
    let fs = HostFs { opts, planned };
    match merge::load(&fs, &cfg.host, &|_| false) {
        Ok(files) => judge(&files, &expect(opts, state)),
        Err(e) => Some(Problem {
            file: None,
            message: e.to_string(),
        }),
    }
}

fn expect(opts: &Options, state: &EngineState) -> Expect {
    Expect {
        binary: state
            .binary
            .clone()
            .unwrap_or_else(|| opts.runtime_path())
            .to_string_lossy()
            .into_owned(),
        root: opts.root.clone(),
        default: state.set_default,
    }
}

fn describe(p: &Problem) -> String {
    match &p.file {
        Some(f) => format!("{} (file: {})", p.message, f.display()),
        None => p.message.clone(),
    }
}

/// The drift check: whether containerd's merged configuration on the host
/// runs gpu-guard as `state` recorded it.
pub(in crate::install) fn check(
    opts: &Options,
    state: &EngineState,
) -> Result<Option<Problem>, InstallError> {
    if settings_host(opts, &state.config)? != state.config {
        return check_template(opts, state);
    }
    let fs = HostFs {
        opts,
        planned: BTreeMap::new(),
    };
    let files = merge::load(&fs, &state.config, &|_| false)?;
    Ok(judge(&files, &expect(opts, state)))
}

pub(in crate::install) fn plan_uninstall(
    opts: &Options,
    old: Option<EngineState>,
) -> Result<Plan, InstallError> {
    let host = main_host(opts, old.as_ref());
    let path = config_file(opts, &host)?;
    let before = edit::read_optional(&path)?;
    if template::needs_block(&host, before.as_deref()) {
        return uninstall_template(opts, old, &host, before);
    }
    let err = |source| InstallError::Containerd {
        path: path.clone(),
        source,
    };
    let mut changes = vec![];
    let mut remove: BTreeSet<PathBuf> = BTreeSet::new();
    if let Some(text) = &before {
        let doc = parse(Some(text)).map_err(err)?;
        if let Some(dir) = conf_d_dir(&doc, &host) {
            for name in DROP_IN_NAMES {
                let host = dir.join(name);
                let ours = old.as_ref().is_some_and(|s| s.created.contains(&host))
                    || edit::read_optional(&opts.fs_path(&host))?
                        .is_some_and(|t| t.starts_with(DROP_IN_HEADER));
                if ours || name == DROP_IN_NAMES[0] {
                    remove.insert(host);
                }
            }
        }
        let restore = old.as_ref().and_then(|s| s.replaced_default.as_deref());
        let edited = uninstall(Some(text), restore).map_err(err)?;
        let created = old.as_ref().is_some_and(|s| s.created.contains(&host));
        let after = (!(edited.empty && created)).then_some(edited.text);
        changes.push(change(path.clone(), before.clone(), after));
    }
    if let Some(s) = &old {
        remove.extend(s.created.iter().filter(|p| **p != host).cloned());
    }
    removal_plan(opts, remove, changes)
}

/// install over a k3s/RKE2 Go template (template.rs): gpu-guard's block,
/// over a copy of the rendered config's runtime settings; k3s renders it at
/// its next start, so nothing can be verified before (the drift check
/// reads the rendered file after).
fn plan_template(
    opts: &Options,
    old: Option<EngineState>,
    host: &Path,
) -> Result<Plan, InstallError> {
    let path = config_file(opts, host)?;
    let err = |source| InstallError::Containerd {
        path: path.clone(),
        source,
    };
    if opts.set_default {
        return Err(err(ContainerdError::TemplateDefault));
    }
    let before = edit::read_optional(&path)?;
    let rendered = edit::read_optional(&opts.fs_path(&template::rendered(host)))?;
    let runtime = opts.runtime_path().to_string_lossy().into_owned();
    let ours = Ours {
        binary: &runtime,
        root: &opts.root,
    };
    let version = template::version(host, rendered.as_deref());
    let block = template::block(version, ours, rendered.as_deref()).map_err(err)?;
    let text = template::install_text(before.as_deref(), &block).map_err(err)?;
    let mut state = merge_state(old, host);
    if before.is_none() {
        note_created(opts, &mut state, host);
    }
    state.binary = Some(opts.runtime_path());
    let restart = template::restart_hint(host).unwrap_or("restart k3s or RKE2");
    let changed = before.as_deref() != Some(text.as_str());
    Ok(Plan {
        changes: vec![change(path.clone(), before, Some(text))],
        state: Some(state),
        warnings: changed.then(|| format!(
            "{} is a template: k3s and RKE2 render {} from it at start ({restart}); `gpu-guard install containerd --check --config-path {}` then reads what they rendered",
            host.display(),
            template::rendered(host).display(),
            host.display()
        )).into_iter().collect(),
        remove_dirs: vec![],
        not_effective: vec![],
    })
}

/// The drift check of a template: the block is there, and the config k3s
/// rendered (once it has) runs gpu-guard.
fn check_template(opts: &Options, state: &EngineState) -> Result<Option<Problem>, InstallError> {
    let text = edit::read_optional(&config_file(opts, &state.config)?)?.unwrap_or_default();
    if !template::has_block(&text) {
        return Ok(Some(Problem {
            file: Some(state.config.clone()),
            message: "the template lost gpu-guard's block, so k3s (RKE2) renders a config without the gpu-guard runtime at its next start".into(),
        }));
    }
    let rendered = template::rendered(&state.config);
    if edit::read_optional(&opts.fs_path(&rendered))?.is_none() {
        return Ok(None);
    }
    let fs = HostFs {
        opts,
        planned: BTreeMap::new(),
    };
    let files = merge::load(&fs, &rendered, &|_| false)?;
    Ok(judge(&files, &expect(opts, state)).map(|p| Problem {
        file: Some(rendered.clone()),
        message: format!(
            "{} (k3s or RKE2 has not rendered the template since install: {})",
            p.message,
            template::restart_hint(&state.config).unwrap_or("restart it")
        ),
    }))
}

/// uninstall from a template: the block goes; a file install created that
/// holds only the base line goes too.
fn uninstall_template(
    opts: &Options,
    old: Option<EngineState>,
    host: &Path,
    before: Option<String>,
) -> Result<Plan, InstallError> {
    let path = config_file(opts, host)?;
    let mut changes = vec![];
    if let Some(text) = &before {
        let created = old.as_ref().is_some_and(|s| s.created.contains(host));
        let after = match template::uninstall_text(text) {
            None if created => None,
            None => Some(format!("{}\n", template::BASE)),
            Some(rest) => Some(rest),
        };
        changes.push(change(path, before.clone(), after));
    }
    let mut remove: BTreeSet<PathBuf> = BTreeSet::new();
    if let Some(s) = &old {
        remove.extend(s.created.iter().filter(|p| **p != host).cloned());
    }
    removal_plan(opts, remove, changes)
}
