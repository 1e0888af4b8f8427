//! Carrying out a plan as one transaction: every file or none.
//!
//! 1. Under an exclusive lock (`engines/.lock` in the state directory, so
//!    two installs, or an install and the node agent, never interleave),
//!    a journal left by a run that died half way is rolled back first.
//! 2. Each file is checked to still hold what the plan read: a file changed
//!    under us (an admin's editor, a config manager, the GPU Operator) is
//!    refused, never overwritten with a plan made from its old content.
//! 3. Every new content is staged (temp file beside its target, fsynced):
//!    a failure here (a full disk, a directory we cannot write) leaves
//!    nothing changed.
//! 4. The journal, the intent record, is written before the first rename:
//!    each file's old content and the state the commit ends with. A run
//!    killed after this point is rolled back by the next install, uninstall
//!    or node agent (or completed, when the state was already written), so
//!    uninstall always knows what install changed.
//! 5. The files are renamed into place one by one, each checked once more
//!    just before; a failure rolls back those already renamed.
//! 6. The state is written, then the journal removed.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::edit::{self, EditError, FileChange};
use super::{state, InstallError, Options, Plan};
use crate::sys::fsutil;

/// What a commit in progress changes: enough to undo it.
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    /// The state file's text once the commit is complete (`None`: the
    /// state file removed). A state file that already says this means
    /// only the journal's removal was left to do.
    state: Option<String>,
    entries: Vec<Entry>,
    /// Staged temp files, removed if still there.
    #[serde(default)]
    staged: Vec<PathBuf>,
    /// Directories this commit created, removed again when empty.
    #[serde(default)]
    dirs: Vec<PathBuf>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    /// The file on this machine (under `--host-root`).
    path: PathBuf,
    /// Its content before (`None`: it did not exist).
    before: Option<String>,
    /// Its permission bits before.
    #[serde(default)]
    mode: Option<u32>,
    /// sha256 of its content after (`None`: removed).
    after: Option<String>,
}

fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn journal_path(opts: &Options) -> PathBuf {
    opts.state_file().with_extension("journal")
}

/// Whether a journal is left (a run interrupted half way).
pub(super) fn pending(opts: &Options) -> bool {
    fs::symlink_metadata(journal_path(opts)).is_ok()
}

/// The exclusive lock of the engine state directory, held until dropped.
pub(super) struct Lock(#[allow(dead_code)] nix::fcntl::Flock<fs::File>);

pub(super) fn lock(opts: &Options) -> Result<Lock, InstallError> {
    let path = opts.state_file().with_file_name(".lock");
    let open = || -> io::Result<fs::File> {
        state::private_dir(&path)?;
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
    };
    let file = open().map_err(|source| InstallError::StateWrite {
        path: path.clone(),
        source,
    })?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map(Lock)
        .map_err(|(_, e)| InstallError::StateWrite {
            path,
            source: io::Error::from(e),
        })
}

/// What the file at `path` holds now (`None`: absent).
fn current(path: &Path) -> Result<Option<String>, InstallError> {
    Ok(edit::read_optional(path)?)
}

/// Refuses a change whose file no longer holds what the plan read.
fn check_unchanged(c: &FileChange) -> Result<(), InstallError> {
    if current(&c.path)? == c.before {
        return Ok(());
    }
    Err(InstallError::Changed {
        path: c.path.clone(),
    })
}

/// Carries out `plan` (the caller holds [`lock`]): all files or none, then
/// the state.
pub(super) fn commit(opts: &Options, plan: &Plan) -> Result<(), InstallError> {
    for c in &plan.changes {
        check_unchanged(c)?;
    }
    let mut dirs = Vec::new();
    let staged = stage_all(&plan.changes, &mut dirs).inspect_err(|_| remove_dirs(&dirs))?;
    backups(opts, &plan.changes)?;
    let state_text = plan.state.as_ref().map(state::render);
    let journal = Journal {
        state: state_text.clone(),
        entries: plan.changes.iter().map(entry).collect(),
        staged: staged
            .iter()
            .flatten()
            .map(|s| s.tmp().to_path_buf())
            .collect(),
        dirs: dirs.clone(),
    };
    write_journal(opts, &journal).inspect_err(|_| remove_dirs(&dirs))?;
    let mut done = 0;
    let result = rename_all(&plan.changes, staged, &mut done)
        .and_then(|()| state::save_text(opts, state_text.as_deref()));
    if let Err(e) = result {
        let undone = roll_back(&journal.entries[..done]);
        remove_dirs(&dirs);
        let _ = fs::remove_file(journal_path(opts));
        return Err(match undone {
            Ok(()) => e,
            Err(rb) => InstallError::RollBack {
                first: e.to_string(),
                rollback: rb,
            },
        });
    }
    remove_journal(opts)
}

fn entry(c: &FileChange) -> Entry {
    let mode = fs::metadata(&c.path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777);
    Entry {
        path: c.path.clone(),
        before: c.before.clone(),
        mode,
        after: c.after.as_deref().map(sha256),
    }
}

/// Stages every new content (removals stage nothing), creating missing
/// directories (recorded in `dirs`, parents first).
fn stage_all(
    changes: &[FileChange],
    dirs: &mut Vec<PathBuf>,
) -> Result<Vec<Option<fsutil::Staged>>, InstallError> {
    let mut out = Vec::new();
    for c in changes {
        let Some(after) = &c.after else {
            out.push(None);
            continue;
        };
        let mut stage = || -> io::Result<fsutil::Staged> {
            if let Some(dir) = c.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                create_dirs(dir, dirs)?;
            }
            fsutil::stage_write(&c.path, after.as_bytes(), c.mode)
        };
        out.push(Some(stage().map_err(|source| {
            InstallError::Edit(EditError::Write {
                path: c.path.clone(),
                source,
            })
        })?));
    }
    Ok(out)
}

/// `mkdir -p` with 0755 whatever the umask (gpu-guard reads its own
/// config.d only when no one else can write it; engines' config
/// directories are root's 0755 too), noting each directory created.
fn create_dirs(dir: &Path, dirs: &mut Vec<PathBuf>) -> io::Result<()> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    for d in missing.into_iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {
                fs::set_permissions(d, fs::Permissions::from_mode(0o755))?;
                dirs.push(d.to_path_buf());
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Removes the directories a failed commit created, deepest first, when
/// empty.
fn remove_dirs(dirs: &[PathBuf]) {
    for d in dirs.iter().rev() {
        let _ = fs::remove_dir(d);
    }
}

/// Backs up each file's content before its first change by gpu-guard:
/// an existing backup is kept while an install is recorded for the engine
/// (later runs would otherwise replace the admin's original with
/// gpu-guard's own edits); without one, it is from an earlier install
/// and replaced.
fn backups(opts: &Options, changes: &[FileChange]) -> Result<(), InstallError> {
    let keep = state::load(opts)?.is_some();
    let backup_dir = opts.backup_dir();
    for c in changes {
        let Some(before) = &c.before else { continue };
        // Backups mirror the host path, whatever --host-root is.
        let abs = std::path::absolute(&c.path).unwrap_or_else(|_| c.path.clone());
        let host = Path::new("/").join(abs.strip_prefix(&opts.host_root).unwrap_or(&abs));
        let backup = edit::backup_path(&backup_dir, &host);
        if keep && backup.exists() {
            continue;
        }
        edit::write_backup(&c.path, &backup, before)?;
    }
    Ok(())
}

fn write_journal(opts: &Options, journal: &Journal) -> Result<(), InstallError> {
    let path = journal_path(opts);
    let text = serde_json::to_string(journal).unwrap_or_default();
    let write = || -> io::Result<()> {
        state::private_dir(&path)?;
        fsutil::write_with_mode(&path, text.as_bytes(), 0o600, true)
    };
    write().map_err(|source| InstallError::StateWrite { path, source })
}

fn remove_journal(opts: &Options) -> Result<(), InstallError> {
    let path = journal_path(opts);
    match fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(InstallError::StateWrite { path, source: e })
        }
        _ => Ok(()),
    }
}

/// Puts each staged file in place (or removes the file), in plan order,
/// each checked unchanged just before; `done` counts the files changed.
fn rename_all(
    changes: &[FileChange],
    staged: Vec<Option<fsutil::Staged>>,
    done: &mut usize,
) -> Result<(), InstallError> {
    for (i, (c, s)) in changes.iter().zip(staged).enumerate() {
        fault::before_step(i)?;
        check_unchanged(c)?;
        let result = match s {
            Some(s) => s.commit().map_err(|source| EditError::Write {
                path: c.path.clone(),
                source,
            }),
            None => match fs::remove_file(&c.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(EditError::Remove {
                    path: c.path.clone(),
                    source: e,
                }),
                _ => Ok(()),
            },
        };
        result?;
        *done = i + 1;
    }
    fault::before_step(changes.len())
}

/// Puts back what `entries` held before, where a file still holds what
/// the commit wrote; one that holds anything else was changed by someone
/// after us and is left alone (named in the error).
fn roll_back(entries: &[Entry]) -> Result<(), String> {
    let mut left = Vec::new();
    for e in entries.iter().rev() {
        let now = edit::read_optional(&e.path).ok().flatten();
        if now == e.before {
            continue;
        }
        if now.as_deref().map(sha256) != e.after {
            left.push(e.path.display().to_string());
            continue;
        }
        let undo = match &e.before {
            Some(text) => fsutil::atomic_write(&e.path, text.as_bytes(), e.mode.unwrap_or(0o644)),
            None => fs::remove_file(&e.path),
        };
        if let Err(err) = undo {
            left.push(format!("{} ({err})", e.path.display()));
        }
    }
    match left.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "could not put back {} (changed since, or not writable): compare with the backups under the state directory",
            left.join(", ")
        )),
    }
}

/// Finishes what a run that died half way left (the caller holds
/// [`lock`]): a commit whose state was written is complete; any other is
/// rolled back. Returns what was done, for a warning.
pub(super) fn recover(opts: &Options) -> Result<Option<String>, InstallError> {
    let path = journal_path(opts);
    let Some(text) = edit::read_optional(&path)? else {
        return Ok(None);
    };
    let Ok(journal) = serde_json::from_str::<Journal>(&text) else {
        // Torn before it was in place (write_with_mode renames a complete
        // file): nothing was renamed yet.
        remove_journal(opts)?;
        return Ok(None);
    };
    for t in &journal.staged {
        let _ = fs::remove_file(t);
    }
    let complete = journal.entries.iter().all(|e| {
        let now = edit::read_optional(&e.path).ok().flatten();
        now.as_deref().map(sha256) == e.after
    });
    let message = if complete {
        // Every file was in place: only the state (or the journal's
        // removal) was left; the record is finished from the journal.
        state::save_text(opts, journal.state.as_deref())?;
        "an earlier install or uninstall was interrupted after it had written every file; its record was completed".to_string()
    } else {
        let files: Vec<String> = journal
            .entries
            .iter()
            .map(|e| e.path.display().to_string())
            .collect();
        roll_back(&journal.entries).map_err(|rb| {
            InstallError::Recover(format!(
                "an earlier install or uninstall was interrupted half way, and {rb}"
            ))
        })?;
        remove_dirs(&journal.dirs);
        format!(
            "an earlier install or uninstall was interrupted half way; put back {}",
            files.join(", ")
        )
    };
    remove_journal(opts)?;
    Ok(Some(message))
}

/// Test-only fault injection (`test-hooks` builds): an I/O error or a
/// crash before a chosen commit step, and a command run there (a file
/// changed under the commit).
mod fault {
    use super::InstallError;

    #[cfg(feature = "test-hooks")]
    pub(super) fn before_step(step: usize) -> Result<(), InstallError> {
        let at = |var: &str| -> Option<String> {
            let v = std::env::var(var).ok()?;
            let (n, rest) = v.split_once(':')?;
            (n.parse::<usize>().ok()? == step).then(|| rest.to_string())
        };
        if let Some(cmd) = at("GPU_GUARD_TEST_INSTALL_HOOK") {
            let _ = std::process::Command::new("/bin/sh")
                .args(["-c", &cmd])
                .status();
        }
        match at("GPU_GUARD_TEST_INSTALL_FAULT").as_deref() {
            Some("abort") => std::process::abort(),
            Some(_) => Err(InstallError::Edit(super::EditError::Write {
                path: std::path::PathBuf::from(format!("(injected fault at step {step})")),
                source: std::io::Error::other("injected"),
            })),
            None => Ok(()),
        }
    }

    #[cfg(not(feature = "test-hooks"))]
    pub(super) fn before_step(_step: usize) -> Result<(), InstallError> {
        Ok(())
    }
}
