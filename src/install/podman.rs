//! podman: the `precreate` hook file, which lets gpu-guard edit the config
//! (env, capabilities, no_new_privileges) before podman hands it to the
//! runtime. Nothing else in podman's configuration changes.
//!
//! Where it goes: CRI-O reads /usr/share/containers/oci/hooks.d by default
//! (see crio.rs) and refuses a hooks.d file with a stage it does not know,
//! such as `precreate` (podman passes `precreate` as an extension stage to
//! containers/common pkg/hooks; CRI-O passes none). So the precreate file
//! goes in /etc/containers/oci/hooks.d, which CRI-O does not read unless its
//! `hooks_dir` names it; `install podman` refuses when it does.
//!
//! podman reads only the directories of containers.conf `[engine] hooks_dir`,
//! whose built-in default is /usr/share/containers/oci/hooks.d alone
//! (containers/common pkg/config default.go; seen with podman 4.3.1 on
//! Debian 12: a hook file in /etc/containers/oci/hooks.d does not run). So
//! `install podman` also writes a containers.conf drop-in that keeps the
//! directories podman reads now and adds ours. CRI-O does not read
//! containers.conf.

use toml_edit::{DocumentMut, Item};

use std::fs;
use std::path::{Path, PathBuf};

use super::edit::FileChange;
use super::hooks::{self, HookStage};
use super::state::{merge_state, note_created, EngineState};
use super::{
    change, crio, edit, require_binary, InstallError, Options, Plan, CRIO_BINARIES, CRIO_DROP_IN,
};

pub const DEFAULT_HOOKS_DIR: &str = "/etc/containers/oci/hooks.d";
/// containers.conf(5): the distribution's file, then the admin's; each is
/// followed by its `.d` directory of drop-ins, read in lexical order.
pub const CONTAINERS_CONF: [&str; 2] = [
    "/usr/share/containers/containers.conf",
    "/etc/containers/containers.conf",
];
/// The drop-in `install podman` writes; last in lexical order, so it wins.
pub const CONF_DROP_IN: &str = "/etc/containers/containers.conf.d/99-gpu-guard.conf";
/// `[engine] hooks_dir` when no containers.conf sets it.
pub const BUILTIN_HOOKS_DIRS: [&str; 1] = ["/usr/share/containers/oci/hooks.d"];

/// The drop-in's text: podman's hook directories as they are, plus `ours`.
pub fn drop_in_text(current: &[String], ours: &str) -> String {
    let mut dirs: Vec<String> = current.to_vec();
    if !dirs.iter().any(|d| d == ours) {
        dirs.push(ours.to_string());
    }
    let list = dirs
        .iter()
        .map(|d| format!("  {},", toml_edit::Value::from(d.as_str())))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        "# Written by `gpu-guard install podman`; removed by `gpu-guard uninstall podman`.\n\
         # podman reads hooks only from these directories; gpu-guard's precreate hook is\n\
         # in {ours}, where CRI-O (which refuses precreate hooks) does not look.\n\
         [engine]\nhooks_dir = [\n{list}\n]\n"
    )
}

/// `[engine] hooks_dir` as containers.conf files (in reading order) set it;
/// `None` when none does (podman then reads its two default directories).
/// A file that is not valid TOML is skipped: podman's own problem to report.
pub fn configured_hooks_dirs<'a>(files: impl IntoIterator<Item = &'a str>) -> Option<Vec<String>> {
    let mut out = None;
    for text in files {
        let Ok(doc) = text.parse::<DocumentMut>() else {
            continue;
        };
        if let Some(dirs) = doc
            .get("engine")
            .and_then(|e| e.get("hooks_dir"))
            .and_then(Item::as_array)
        {
            out = Some(
                dirs.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
            );
        }
    }
    out
}

// Planning: what install changes on the host (uninstall removes the
// hook file and what install created: `super::plan_owned_uninstall`).

pub(super) fn hook_file(opts: &Options) -> PathBuf {
    opts.config_path
        .clone()
        .unwrap_or_else(|| DEFAULT_HOOKS_DIR.into())
        .join(hooks::PRECREATE_FILE)
}

fn same_dir(a: &str, b: &Path) -> bool {
    Path::new(a).components().eq(b.components())
}

pub(super) fn plan_install(opts: &Options, old: Option<EngineState>) -> Result<Plan, InstallError> {
    require_binary(opts, "hook binary", opts.gpu_guard_path())?;
    let file_host = hook_file(opts);
    let dir_host = file_host.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut warnings = vec![];
    check_crio_ignores_podman_hooks(opts, &dir_host, &mut warnings)?;
    let (mut changes, created) = podman_hooks_dir_drop_in(opts, &dir_host, &mut warnings)?;

    let path = opts.fs_path(&file_host);
    let before = edit::read_optional(&path)?;
    let mut state = merge_state(old, &dir_host);
    if before.is_none() {
        note_created(opts, &mut state, &file_host);
    }
    for c in &created {
        note_created(opts, &mut state, c);
    }
    let ours = hooks::hook_json(HookStage::Precreate, &opts.gpu_guard_path());
    changes.push(change(path, before, Some(ours)));
    // The prestart hook beside it: the package ships it inactive, and
    // podman shows a prestart hook's refusal (it discards a precreate
    // hook's stderr: commands/hook.rs), so install activates it here.
    let pre_host = dir_host.join(hooks::PRESTART_FILE);
    if let Some(c) = hooks::activate(opts, &mut state, &pre_host, HookStage::Prestart)? {
        changes.push(c);
    }
    state.binary = Some(opts.gpu_guard_path());
    Ok(Plan {
        changes,
        state: Some(state),
        warnings,
        remove_dirs: vec![],
        not_effective: vec![],
    })
}

/// Refuses a podman hook directory that CRI-O reads (CRI-O refuses
/// precreate hooks), and warns to keep it that way when CRI-O is installed.
/// Its own step because it is about the other engine, not podman's config.
fn check_crio_ignores_podman_hooks(
    opts: &Options,
    dir_host: &Path,
    warnings: &mut Vec<String>,
) -> Result<(), InstallError> {
    let crio_present = CRIO_BINARIES
        .iter()
        .chain(["/etc/crio"].iter())
        .any(|p| opts.fs_path(Path::new(p)).exists());
    if !crio_present {
        return Ok(());
    }
    let eff = crio::read_effective(opts, Path::new(CRIO_DROP_IN))?;
    if eff.hooks_dirs.iter().any(|d| same_dir(d, dir_host)) {
        return Err(InstallError::CrioReadsPodmanHooks {
            dir: dir_host.to_string_lossy().into_owned(),
        });
    }
    warnings.push(format!(
        "CRI-O is installed on this host; it does not read {} now, keep that directory out of its hooks_dir (CRI-O refuses precreate hooks)",
        dir_host.display()
    ));
    Ok(())
}

/// podman's hook directories as it reads them now: containers.conf files
/// and their `.d` drop-ins in order (our own drop-in left out unless
/// `with_ours`: install rewrites it from the others); podman's built-in
/// list when none sets hooks_dir. Also the last file that set it.
fn current_hooks_dirs(
    opts: &Options,
    with_ours: bool,
) -> Result<(Vec<String>, Option<PathBuf>), InstallError> {
    let mut confs: Vec<(PathBuf, String)> = vec![];
    for c in CONTAINERS_CONF {
        if let Some(t) = edit::read_optional(&opts.fs_path(Path::new(c)))? {
            confs.push((PathBuf::from(c), t));
        }
        let dir = format!("{c}.d");
        let mut drop_ins: Vec<String> = fs::read_dir(opts.fs_path(Path::new(&dir)))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".conf"))
                    .collect()
            })
            .unwrap_or_default();
        drop_ins.sort();
        for n in drop_ins {
            let host = Path::new(&dir).join(n);
            if !with_ours && host == Path::new(CONF_DROP_IN) {
                continue;
            }
            if let Some(t) = edit::read_optional(&opts.fs_path(&host))? {
                confs.push((host, t));
            }
        }
    }
    let from = confs
        .iter()
        .rev()
        .find(|(_, t)| configured_hooks_dirs([t.as_str()]).is_some())
        .map(|(p, _)| p.clone());
    let dirs = configured_hooks_dirs(confs.iter().map(|(_, t)| t.as_str()))
        .unwrap_or_else(|| BUILTIN_HOOKS_DIRS.iter().map(|d| d.to_string()).collect());
    Ok((dirs, from))
}

/// Whether podman runs gpu-guard's precreate hook `file` (host path): the
/// file is there and its directory is one podman reads.
pub(super) fn judge(
    opts: &Options,
    file: &Path,
) -> Result<Option<(Option<PathBuf>, String)>, InstallError> {
    if edit::read_optional(&opts.fs_path(file))?.is_none() {
        return Ok(Some((
            Some(file.to_path_buf()),
            format!("gpu-guard's precreate hook {} is missing", file.display()),
        )));
    }
    let dir = file.parent().unwrap_or(Path::new("/"));
    let (dirs, from) = current_hooks_dirs(opts, true)?;
    if dirs.iter().any(|d| same_dir(d, dir)) {
        return Ok(None);
    }
    Ok(Some((
        from,
        format!(
            "podman reads hooks from {dirs:?}, not {}: it never runs gpu-guard's precreate hook",
            dir.display()
        ),
    )))
}

/// Makes podman read `dir_host`: nothing when it already does, a warning
/// when the admin chose the directory (their containers.conf to manage),
/// else our containers.conf drop-in. Returns the changes and the files it
/// creates. Split from [`plan_podman_install`] as the containers.conf step,
/// apart from writing the hook file itself.
fn podman_hooks_dir_drop_in(
    opts: &Options,
    dir_host: &Path,
    warnings: &mut Vec<String>,
) -> Result<(Vec<FileChange>, Vec<PathBuf>), InstallError> {
    let (current, _) = current_hooks_dirs(opts, false)?;
    let mut changes = vec![];
    let mut created = vec![];
    if current.iter().any(|d| same_dir(d, dir_host)) {
        return Ok((changes, created));
    }
    if opts.config_path.is_some() {
        // A hooks directory the admin chose: their containers.conf to manage.
        warnings.push(format!(
            "podman reads hooks from {current:?}, not {}: add it to hooks_dir in containers.conf, or podman will not run the precreate hook",
            dir_host.display()
        ));
    } else {
        let drop_host = PathBuf::from(CONF_DROP_IN);
        let drop_path = opts.fs_path(&drop_host);
        let before = edit::read_optional(&drop_path)?;
        if before.is_none() {
            created.push(drop_host);
        }
        let text = drop_in_text(&current, &dir_host.to_string_lossy());
        changes.push(change(drop_path, before, Some(text)));
    }
    Ok((changes, created))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_in_keeps_the_current_dirs_and_adds_ours() {
        let t = drop_in_text(
            &["/usr/share/containers/oci/hooks.d".into()],
            DEFAULT_HOOKS_DIR,
        );
        assert_eq!(
            configured_hooks_dirs([t.as_str()]),
            Some(vec![
                "/usr/share/containers/oci/hooks.d".to_string(),
                DEFAULT_HOOKS_DIR.to_string()
            ])
        );
        let t2 = drop_in_text(&[DEFAULT_HOOKS_DIR.into()], DEFAULT_HOOKS_DIR);
        assert_eq!(configured_hooks_dirs([t2.as_str()]).unwrap().len(), 1);
    }

    #[test]
    fn hooks_dir_is_read_from_the_engine_table() {
        assert_eq!(configured_hooks_dirs(["#hooks_dir = [\"/x\"]\n"]), None);
        assert_eq!(
            configured_hooks_dirs(["[engine]\nhooks_dir = [\"/x\"]\n", "[engine]\n"]),
            Some(vec!["/x".to_string()])
        );
    }
}
