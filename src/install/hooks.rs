//! hooks.d files (containers/common pkg/hooks, schema 1.0.0, oci-hooks(5)):
//! `version`, `hook {path, args, timeout}`, `when`, `stages`. The hook itself
//! skips non-GPU containers quickly, so `when: {always: true}`.

use std::path::Path;

use super::edit::{self, FileChange};
use super::state::{note_created, EngineState};
use super::{change, InstallError, Options};

/// The prestart hook. The packages ship it inactive, in [`PACKAGED_DIR`]:
/// podman and CRI-O read /usr/share/containers/oci/hooks.d at once, and
/// installing a package must not start enforcing; `install crio` and
/// `install podman` put it where that engine reads it.
pub const PRESTART_FILE: &str = "gpu-guard-prestart.json";
/// Where the packages ship the hook files, read by no engine.
pub const PACKAGED_DIR: &str = "/usr/share/gpu-guard/hooks.d";
/// The precreate hook `install podman` adds. A different name from the
/// prestart file: hooks.d files of the same name in a higher-precedence
/// directory mask each other (oci-hooks(5), "Directories").
pub const PRECREATE_FILE: &str = "gpu-guard-precreate.json";

/// Seconds the engine lets the hook run. gpu-guard bounds its own work
/// (host probe deadline, scan time budget) well below this; the timeout is
/// the engine's guard against a hook stuck in the kernel.
const TIMEOUT_S: u32 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookStage {
    /// OCI prestart: verifies (podman, CRI-O).
    Prestart,
    /// podman's precreate extension: edits the config (podman only; CRI-O
    /// rejects a hooks.d file naming it).
    Precreate,
}

impl HookStage {
    fn name(self) -> &'static str {
        match self {
            HookStage::Prestart => "prestart",
            HookStage::Precreate => "precreate",
        }
    }
}

/// The hooks.d JSON for `stage`, calling `gpu_guard` (the host path of the
/// gpu-guard binary).
pub fn hook_json(stage: HookStage, gpu_guard: &Path) -> String {
    let v = serde_json::json!({
        "version": "1.0.0",
        "hook": {
            "path": gpu_guard.to_string_lossy(),
            "args": ["gpu-guard", "hook", stage.name()],
            "timeout": TIMEOUT_S
        },
        "when": { "always": true },
        "stages": [stage.name()]
    });
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    s
}

/// Puts the hook file of `stage` at `host` (host path): written when absent
/// (and recorded, so uninstall removes it), rewritten when install created
/// it, left alone when someone else's file is there (`None`).
pub(super) fn activate(
    opts: &Options,
    state: &mut EngineState,
    host: &Path,
    stage: HookStage,
) -> Result<Option<FileChange>, InstallError> {
    let path = opts.fs_path(host);
    let before = edit::read_optional(&path)?;
    let ours = hook_json(stage, &opts.gpu_guard_path());
    if before.is_none() {
        note_created(opts, state, host);
        return Ok(Some(change(path, None, Some(ours))));
    }
    if state.created.contains(host) {
        return Ok(Some(change(path, before, Some(ours))));
    }
    Ok(None)
}
