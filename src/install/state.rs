//! What install recorded for each engine: `/var/lib/gpu-guard/engines/ENGINE.json`
//! under the state directory, so uninstall can put back what install changed
//! and the package's prerm knows which engines to unregister.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{edit, InstallError, Options};
use crate::sys::fsutil;

/// What install recorded for one engine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineState {
    /// The engine config install edited or wrote (host path).
    pub config: PathBuf,
    /// Files that did not exist before install (host paths): uninstall
    /// removes them (a main config only when nothing else is left in it).
    #[serde(default)]
    pub created: BTreeSet<PathBuf>,
    /// The default runtime `--set-default` replaced.
    #[serde(default)]
    pub replaced_default: Option<String>,
    /// Directories install created for those files (host paths): uninstall
    /// removes them again when they are empty.
    #[serde(default)]
    pub created_dirs: BTreeSet<PathBuf>,
    /// The gpu-guard config drop-in install wrote to chain the wrapper to
    /// NVIDIA's runtime; uninstall removes it while it is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainState>,
    /// Install made gpu-guard the engine's default runtime (`--set-default`,
    /// kept by later installs): the drift check expects it to stay so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub set_default: bool,
    /// What install registered (host path), for the drift check: the
    /// runtime wrapper, or for podman the hook binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<PathBuf>,
}

/// A chain drop-in install wrote: its host path and the runtime it names
/// (its content is [`chain_text`] of them, so a changed file is seen).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainState {
    pub file: PathBuf,
    pub runtime: String,
    /// Chosen with `--chain-runtime` (kept by later installs without it),
    /// rather than followed from the engine's default runtime.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub explicit: bool,
}

pub(super) fn load(opts: &Options) -> Result<Option<EngineState>, InstallError> {
    let path = opts.state_file();
    match edit::read_optional(&path)? {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| InstallError::State { path, source }),
    }
}

pub(super) fn merge_state(old: Option<EngineState>, config: &Path) -> EngineState {
    match old {
        Some(s) if s.config == config => s,
        Some(s) => EngineState {
            config: config.to_path_buf(),
            // Files created for another config path stay recorded so
            // uninstall still removes them.
            created: s.created,
            created_dirs: s.created_dirs,
            replaced_default: None,
            chain: s.chain,
            set_default: false,
            binary: s.binary,
        },
        None => EngineState {
            config: config.to_path_buf(),
            ..EngineState::default()
        },
    }
}

/// Records a file install is about to create, and the directories above it
/// that do not exist yet (so uninstall can remove them again).
pub(super) fn note_created(opts: &Options, state: &mut EngineState, host_file: &Path) {
    state.created.insert(host_file.to_path_buf());
    for dir in host_file.ancestors().skip(1) {
        if dir.parent().is_none() || opts.fs_path(dir).exists() {
            break;
        }
        state.created_dirs.insert(dir.to_path_buf());
    }
}

/// The state file's text for `state`.
pub(super) fn render(state: &EngineState) -> String {
    let mut text = serde_json::to_string_pretty(state).unwrap_or_default();
    text.push('\n');
    text
}

/// Creates the directory of `path` (0700) and refuses it unless private:
/// the state names files uninstall will rewrite as root, and a directory
/// others can write would let them choose.
pub(super) fn private_dir(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::os::unix::fs::DirBuilderExt::mode(fs::DirBuilder::new().recursive(true), 0o700)
            .create(dir)?;
        fsutil::check_private_dir(dir)?;
    }
    Ok(())
}

/// Records a rendered state ([`render`]) in the engine's state file
/// (private directory, atomic write), or removes the file when `None`
/// (after an uninstall).
pub(super) fn save_text(opts: &Options, text: Option<&str>) -> Result<(), InstallError> {
    let path = opts.state_file();
    match text {
        Some(text) => {
            if edit::read_optional(&path)?.as_deref() == Some(text) {
                return Ok(());
            }
            let write = || -> io::Result<()> {
                private_dir(&path)?;
                fsutil::atomic_write(&path, text.as_bytes(), 0o600)
            };
            write().map_err(|source| InstallError::StateWrite { path, source })
        }
        None => match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(InstallError::StateWrite { path, source: e })
            }
            _ => Ok(()),
        },
    }
}
