//! hooks.d files (containers/common pkg/hooks, schema 1.0.0, oci-hooks(5)):
//! `version`, `hook {path, args, timeout}`, `when`, `stages`. The hook itself
//! skips non-GPU containers quickly, so `when: {always: true}`.

use std::path::Path;

/// The prestart hook the packages ship in /usr/share/containers/oci/hooks.d
/// (read by podman and CRI-O by default) and `install crio` puts in place.
pub const PRESTART_FILE: &str = "gpu-guard-prestart.json";
/// The precreate hook `install podman` adds. A different name from the
/// prestart file: hooks.d files of the same name in a higher-precedence
/// directory mask each other (oci-hooks(5), "Directories").
pub const PRECREATE_FILE: &str = "gpu-guard-precreate.json";

/// Seconds the engine lets the hook run. gpu-guard bounds its own work
/// (host probe deadline, scan time budget) well below this; the timeout is
/// the engine's guard against a hook stuck in the kernel.
const TIMEOUT_S: u32 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// OCI prestart: verifies (podman, CRI-O).
    Prestart,
    /// podman's precreate extension: edits the config (podman only; CRI-O
    /// rejects a hooks.d file naming it).
    Precreate,
}

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Stage::Prestart => "prestart",
            Stage::Precreate => "precreate",
        }
    }
}

/// The hooks.d JSON for `stage`, calling `gpu_guard` (the host path of the
/// gpu-guard binary).
pub fn hook_json(stage: Stage, gpu_guard: &Path) -> String {
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
