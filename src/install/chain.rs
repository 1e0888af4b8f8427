//! The gpu-guard config drop-in that chains the runtime wrapper to NVIDIA's
//! runtime when that is the engine's default: gpu-guard must exec what the
//! engine would have run (NVIDIA's runtime sets its hooks up), so `install`
//! writes it and records it in the state; uninstall removes it while it is
//! unchanged.

use std::path::{Path, PathBuf};

use super::state::{note_created, ChainState, EngineState};
use super::{
    change, config_file, containerd, crio, docker, edit, engine_name, Engine, InstallError,
    Options, Plan, DOCKER_CONFIG,
};

/// gpu-guard's drop-in directory on the host (crate::config: `config.d`
/// beside `/etc/gpu-guard/config.toml`).
pub const GPU_GUARD_CONFIG_D: &str = "/etc/gpu-guard/config.d";

/// The drop-in that chains the wrapper to NVIDIA's runtime for the
/// engine. One per engine, so uninstalling one engine leaves another's chain.
pub fn chain_file(opts: &Options) -> PathBuf {
    opts.config_d
        .join(format!("50-chain-nvidia-{}.toml", engine_name(opts.engine)))
}

/// What the chain drop-in says.
pub fn chain_text(engine: Engine, runtime: &str) -> String {
    let name = engine_name(engine);
    let quoted = toml_edit::value(runtime).to_string();
    format!(
        "# Written by `gpu-guard install {name}`: {name}'s default runtime is NVIDIA's,\n\
         # so gpu-guard-runtime execs it after deciding (it sets NVIDIA's hooks up).\n\
         # `gpu-guard uninstall {name}` removes this file unless it was edited.\n\
         [runtime]\npath = {}\n",
        quoted.trim()
    )
}

/// NVIDIA's runtime: `nvidia-container-runtime`, and its
/// `nvidia-container-runtime.cdi` / `.legacy` modes.
pub fn is_nvidia_runtime(path: &str) -> bool {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("nvidia-container-runtime"))
}

/// NVIDIA's runtime when it is the engine's default runtime (the host path
/// of its binary), else `None`. Podman runs NVIDIA through hooks, never
/// as its runtime: always `None`.
pub(super) fn nvidia_default_runtime(
    opts: &Options,
    state: Option<&EngineState>,
) -> Result<Option<String>, InstallError> {
    let replaced = state.and_then(|s| s.replaced_default.as_deref());
    let found = match opts.engine {
        Engine::Podman => None,
        Engine::Docker => {
            let host = opts
                .config_path
                .clone()
                .unwrap_or_else(|| DOCKER_CONFIG.into());
            let text = edit::read_optional(&config_file(opts, &host)?)?;
            docker::default_runtime_path(text.as_deref(), replaced)
        }
        Engine::Crio => {
            crio::default_runtime_path(&crio::read_effective(opts, &crio::drop_in_path(opts))?)
        }
        Engine::Containerd => containerd::read_default_runtime_binary(opts, replaced)?,
    };
    Ok(found
        .filter(|p| is_nvidia_runtime(p))
        .map(|p| resolve_on_host_path(opts, &p)))
}

/// A bare binary name (docker allows one) as the host path the engine
/// would find on PATH; kept bare when it is on none of them.
fn resolve_on_host_path(opts: &Options, name: &str) -> String {
    if name.contains('/') {
        return name.to_string();
    }
    [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    .iter()
    .map(|d| Path::new(d).join(name))
    .find(|p| opts.fs_path(p).is_file())
    .map(|p| p.to_string_lossy().into_owned())
    .unwrap_or_else(|| name.to_string())
}

/// The chain drop-in's part of an install: write it when NVIDIA's runtime
/// is the default (create, or rewrite our unchanged one), remove our
/// unchanged one when it no longer is; a file someone edited or wrote
/// is left alone with a warning.
pub(super) fn plan_chain(
    opts: &Options,
    nvidia: Option<&str>,
    plan: &mut Plan,
) -> Result<(), InstallError> {
    let Some(state) = plan.state.as_mut() else {
        return Ok(());
    };
    let host = chain_file(opts);
    let path = opts.fs_path(&host);
    let before = edit::read_optional(&path)?;
    let ours_before = state
        .chain
        .as_ref()
        .filter(|c| c.file == host)
        .map(|c| chain_text(opts.engine, &c.runtime));
    let unchanged_ours = before.is_some() && before == ours_before;
    match nvidia {
        Some(rt) => {
            let text = chain_text(opts.engine, rt);
            if before.is_none() || before.as_deref() == Some(text.as_str()) || unchanged_ours {
                if before.is_none() {
                    note_created(opts, state, &host);
                    // The file is the chain record's to remove, not `created`'s
                    // (which uninstall removes whatever it holds).
                    state.created.remove(&host);
                }
                state.chain = Some(ChainState {
                    file: host,
                    runtime: rt.to_string(),
                });
                plan.changes.push(change(path, before, Some(text)));
            } else {
                plan.warnings.push(format!(
                    "{} exists and is not the one gpu-guard wrote; left as it is (NVIDIA's runtime {rt} is {}'s default: gpu-guard-runtime should chain to it through runtime.path)",
                    host.display(),
                    engine_name(opts.engine)
                ));
            }
        }
        None => {
            if unchanged_ours {
                plan.changes.push(change(path, before, None));
                state.chain = None;
            }
        }
    }
    Ok(())
}

/// The chain drop-in's part of an uninstall: removed when unchanged since
/// install wrote it, else kept with a warning.
pub(super) fn unchain(
    opts: &Options,
    rec: Option<&ChainState>,
    plan: &mut Plan,
) -> Result<(), InstallError> {
    let Some(rec) = rec else { return Ok(()) };
    let path = opts.fs_path(&rec.file);
    let Some(before) = edit::read_optional(&path)? else {
        return Ok(());
    };
    if before == chain_text(opts.engine, &rec.runtime) {
        plan.changes.push(change(path, Some(before), None));
    } else {
        plan.warnings.push(format!(
            "{} was edited since `gpu-guard install {}` wrote it; left in place (remove it by hand if it is no longer wanted)",
            rec.file.display(),
            engine_name(opts.engine)
        ));
    }
    Ok(())
}
