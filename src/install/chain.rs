//! The gpu-guard config drop-in that chains the runtime wrapper, for one
//! engine, to the runtime that engine would have run: gpu-guard must exec
//! NVIDIA's runtime where that was the default (it sets NVIDIA's hooks and
//! CDI devices up), or AMD's (it adds the GPUs `AMD_VISIBLE_DEVICES`
//! names), and only for that engine: another engine's wrapper
//! invocation keeps its own chain (`[runtime.engines.ENGINE] path`, told
//! apart by the runtime root, core::runtime_engines). `install` writes the
//! drop-in and records it in the state; uninstall removes it while it is
//! unchanged.

use std::path::{Path, PathBuf};

use crate::core::detect::AMD_RUNTIME;

use super::state::{note_created, ChainState, EngineState};
use super::{
    change, config_file, containerd, crio, docker, edit, engine_name, Engine, InstallError,
    Options, Plan, DOCKER_CONFIG, RUNTIME_NAME,
};

/// gpu-guard's drop-in directory on the host (crate::config: `config.d`
/// beside `/etc/gpu-guard/config.toml`).
pub const GPU_GUARD_CONFIG_D: &str = "/etc/gpu-guard/config.d";

/// The drop-in that chains the wrapper for the engine. One per engine, so
/// uninstalling one engine leaves another's chain.
pub fn chain_file(opts: &Options) -> PathBuf {
    opts.config_d
        .join(format!("50-chain-{}.toml", engine_name(opts.engine)))
}

/// The name earlier versions gave the drop-in (a global `[runtime] path`,
/// read by every engine's wrapper): replaced by [`chain_file`] on reinstall.
fn legacy_chain_file(opts: &Options) -> PathBuf {
    opts.config_d
        .join(format!("50-chain-nvidia-{}.toml", engine_name(opts.engine)))
}

/// What the chain drop-in says.
pub fn chain_text(engine: Engine, runtime: &str) -> String {
    let name = engine_name(engine);
    let quoted = toml_edit::value(runtime).to_string();
    format!(
        "# Written by `gpu-guard install {name}`: the runtime gpu-guard-runtime execs after\n\
         # deciding, for containers {name} starts (it knows them by the runtime root).\n\
         # `gpu-guard uninstall {name}` removes this file unless it was edited.\n\
         [runtime.engines.{name}]\npath = {}\n",
        quoted.trim()
    )
}

/// The drop-in earlier versions wrote, to recognise it unchanged.
fn legacy_chain_text(engine: Engine, runtime: &str) -> String {
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

/// AMD's runtime, `amd-container-runtime`: a runc wrapper that adds the
/// GPUs `AMD_VISIBLE_DEVICES` names to the spec, then execs runc
/// (ROCm/container-toolkit internal/runtime/runtime.go). `amd-ctk runtime
/// configure` registers it with docker as `amd`, by its bare name
/// (cmd/amd-ctk/runtime/configure: `/usr/bin/amd-container-runtime`).
pub fn is_amd_runtime(path: &str) -> bool {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n == AMD_RUNTIME)
}

/// A vendor's runtime gpu-guard chains to where the engine ran it:
/// NVIDIA's or AMD's.
fn is_vendor_runtime(path: &str) -> bool {
    is_nvidia_runtime(path) || is_amd_runtime(path)
}

/// The runtimes an engine registers: its default's name and each
/// runtime's (name, binary).
#[derive(Debug, Clone, Default)]
pub(super) struct Registered {
    pub default: Option<String>,
    pub runtimes: Vec<(String, String)>,
}

impl Registered {
    fn binary(&self, name: &str) -> Option<&str> {
        self.runtimes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_str())
    }

    /// NVIDIA's runtimes, the one named `nvidia` first.
    fn nvidia(&self) -> Vec<&(String, String)> {
        let mut v: Vec<_> = self
            .runtimes
            .iter()
            .filter(|(n, b)| n != RUNTIME_NAME && is_nvidia_runtime(b))
            .collect();
        v.sort_by_key(|(n, _)| n != "nvidia");
        v
    }

    /// AMD's runtimes, the one named `amd` first.
    fn amd(&self) -> Vec<&(String, String)> {
        let mut v: Vec<_> = self
            .runtimes
            .iter()
            .filter(|(n, b)| n != RUNTIME_NAME && is_amd_runtime(b))
            .collect();
        v.sort_by_key(|(n, _)| n != "amd");
        v
    }
}

/// What the engine's configuration registers (gpu-guard's own drop-ins
/// left out where it has them). Podman runs NVIDIA through hooks, never
/// as its runtime: nothing.
fn registered(opts: &Options) -> Result<Registered, InstallError> {
    Ok(match opts.engine {
        Engine::Podman => Registered::default(),
        Engine::Docker => {
            let host = opts
                .config_path
                .clone()
                .unwrap_or_else(|| DOCKER_CONFIG.into());
            let text = edit::read_optional(&config_file(opts, &host)?)?;
            let (default, runtimes) = docker::registered_runtimes(text.as_deref());
            Registered {
                default: Some(default),
                runtimes,
            }
        }
        Engine::Crio => {
            let eff = crio::read_effective(opts, &crio::drop_in_path(opts))?;
            Registered {
                default: Some(eff.default_runtime.clone().unwrap_or_else(|| "runc".into())),
                runtimes: crio::registered_runtimes(&eff),
            }
        }
        Engine::Containerd => {
            let (default, runtimes) = containerd::registered_runtimes(opts)?;
            Registered {
                default: Some(default),
                runtimes,
            }
        }
    })
}

/// The runtime install chains the wrapper to, and whether the operator
/// chose it (`--chain-runtime`, or an earlier install's choice), plus what
/// install should warn about.
#[derive(Debug, Clone, Default)]
pub(super) struct Target {
    pub chain: Option<(String, bool)>,
    pub warnings: Vec<String>,
}

/// Decides the chain: `--chain-runtime` (`nvidia`, `amd`: that vendor's
/// runtime the engine registers; else a host path), then a choice an
/// earlier install recorded, then NVIDIA's or AMD's runtime where it is
/// the engine's default.
pub(super) fn target(opts: &Options, state: Option<&EngineState>) -> Result<Target, InstallError> {
    let reg = registered(opts)?;
    let replaced = state.and_then(|s| s.replaced_default.as_deref());
    let default = match reg.default.as_deref() {
        Some(RUNTIME_NAME) => replaced,
        d => d,
    };
    let default_bin = default.and_then(|d| reg.binary(d)).map(str::to_string);
    let mut out = Target::default();
    let chosen = match opts.chain_runtime.as_deref() {
        Some(choice) => Some(chosen_runtime(opts, &reg, choice)?),
        None => state
            .and_then(|s| s.chain.as_ref())
            .filter(|c| c.explicit)
            .map(|c| c.runtime.clone()),
    };
    out.chain = match chosen {
        Some(rt) => Some((rt, true)),
        None => default_bin
            .filter(|p| is_vendor_runtime(p))
            .map(|p| (resolve_on_host_path(opts, &p), false)),
    };
    if out.chain.is_none() {
        let e = engine_name(opts.engine);
        if let Some((name, bin)) = reg.nvidia().first() {
            out.warnings.push(format!(
                "{e} registers NVIDIA's runtime `{name}` ({bin}), but it is not {e}'s default and gpu-guard will chain to runc: containers started with it bypass gpu-guard, and gpu-guard's runtime loses NVIDIA's hooks and CDI devices; to keep them, run `gpu-guard install {e} --chain-runtime nvidia`"
            ));
        }
        if let Some((name, bin)) = reg.amd().first() {
            out.warnings.push(format!(
                "{e} registers AMD's runtime `{name}` ({bin}), but it is not {e}'s default and gpu-guard will chain to runc: containers started with it bypass gpu-guard, and gpu-guard's runtime does not add the GPUs AMD_VISIBLE_DEVICES names; to keep them, run `gpu-guard install {e} --chain-runtime amd`"
            ));
        }
    }
    Ok(out)
}

/// `--chain-runtime CHOICE` as a host path.
fn chosen_runtime(opts: &Options, reg: &Registered, choice: &str) -> Result<String, InstallError> {
    let e = engine_name(opts.engine);
    if opts.engine == Engine::Podman {
        return Err(InstallError::ChainRuntime(format!(
            "podman runs gpu-guard and NVIDIA's toolkit as hooks, not as runtimes: --chain-runtime does not apply to {e}"
        )));
    }
    let vendor = match choice {
        "nvidia" => Some((reg.nvidia(), "NVIDIA", "nvidia-container-runtime")),
        "amd" => Some((reg.amd(), "AMD", AMD_RUNTIME)),
        _ => None,
    };
    if let Some((registered, who, binary)) = vendor {
        if let Some((_, bin)) = registered.first() {
            return Ok(resolve_on_host_path(opts, bin));
        }
        let found = resolve_on_host_path(opts, binary);
        if found.contains('/') {
            return Ok(found);
        }
        return Err(InstallError::ChainRuntime(format!(
            "--chain-runtime {choice}: {e} registers no {who} runtime and {binary} is not on the host's PATH; pass its path"
        )));
    }
    if !choice.starts_with('/') {
        return Err(InstallError::ChainRuntime(format!(
            "--chain-runtime `{choice}`: give `nvidia`, `amd` or an absolute host path of an OCI runtime"
        )));
    }
    if !opts.fs_path(Path::new(choice)).is_file() {
        return Err(InstallError::ChainRuntime(format!(
            "--chain-runtime {choice}: no such file on the host"
        )));
    }
    Ok(choice.to_string())
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

/// The chain drop-in's part of an install: write it when there is a
/// runtime to chain (create, or rewrite our unchanged one), remove our
/// unchanged one when there no longer is; a file someone edited or wrote
/// is left alone with a warning. A drop-in of the earlier, global form is
/// replaced while unchanged.
pub(super) fn plan_chain(
    opts: &Options,
    target: Option<&(String, bool)>,
    plan: &mut Plan,
) -> Result<(), InstallError> {
    let Some(state) = plan.state.as_mut() else {
        return Ok(());
    };
    drop_legacy(opts, state, &mut plan.changes, &mut plan.warnings)?;
    let host = chain_file(opts);
    let path = opts.fs_path(&host);
    let before = edit::read_optional(&path)?;
    let ours_before = state
        .chain
        .as_ref()
        .filter(|c| c.file == host)
        .map(|c| chain_text(opts.engine, &c.runtime));
    let unchanged_ours = before.is_some() && before == ours_before;
    let Some((rt, explicit)) = target else {
        if unchanged_ours {
            plan.changes.push(change(path, before, None));
            state.chain = None;
        }
        return Ok(());
    };
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
            explicit: *explicit,
        });
        plan.changes.push(change(path, before, Some(text)));
    } else {
        plan.warnings.push(format!(
            "{} exists and is not the one gpu-guard wrote; left as it is (gpu-guard-runtime should chain to {rt} for {} through runtime.engines.{}.path)",
            host.display(),
            engine_name(opts.engine),
            engine_name(opts.engine)
        ));
    }
    Ok(())
}

/// Removes a recorded chain drop-in of the earlier global form while it is
/// unchanged (its `[runtime] path` would chain every engine's wrapper).
fn drop_legacy(
    opts: &Options,
    state: &mut EngineState,
    changes: &mut Vec<edit::FileChange>,
    warnings: &mut Vec<String>,
) -> Result<(), InstallError> {
    let legacy = legacy_chain_file(opts);
    let Some(rec) = state.chain.clone().filter(|c| c.file == legacy) else {
        return Ok(());
    };
    let path = opts.fs_path(&legacy);
    match edit::read_optional(&path)? {
        Some(t) if t == legacy_chain_text(opts.engine, &rec.runtime) => {
            changes.push(change(path, Some(t), None));
        }
        Some(_) => warnings.push(format!(
            "{} was edited since an earlier `gpu-guard install {}` wrote it; its [runtime] path chains every engine's containers: remove it by hand",
            legacy.display(),
            engine_name(opts.engine)
        )),
        None => {}
    }
    state.chain = None;
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
    let ours = if rec.file == legacy_chain_file(opts) {
        legacy_chain_text(opts.engine, &rec.runtime)
    } else {
        chain_text(opts.engine, &rec.runtime)
    };
    if before == ours {
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
