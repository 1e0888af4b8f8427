//! The effective registration of an engine: whether the configuration the
//! engine really reads (merged, with every drop-in) still runs gpu-guard as
//! `gpu-guard install` registered it. Used by `install ENGINE --check` and
//! `gpu-guard host`; one function, so a `doctor` can reuse it.
//!
//! Drift is what an install did not leave: NVIDIA's GPU Operator rewriting
//! its containerd drop-in after ours, an admin's later file or edit, our
//! drop-in removed, or a copy of settings gpu-guard's drop-in carries that
//! no longer matches what it was copied from (install would write it
//! differently now).

use std::path::{Path, PathBuf};

use super::state::{self, EngineState};
use super::{
    containerd, crio, docker, edit, engine_name, hooks, podman, Engine, InstallError, Options,
};

/// Where one engine stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// No install recorded for the engine.
    NotInstalled,
    /// The engine's effective configuration runs gpu-guard as installed.
    Ok,
    Drift(Drift),
}

/// The engine no longer runs gpu-guard as installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub engine: Engine,
    /// The file responsible (host path), where one is.
    pub file: Option<PathBuf>,
    pub message: String,
    /// The command that repairs it.
    pub fix: String,
}

impl Drift {
    /// `ENGINE: MESSAGE (file: F)`: one line for a warning.
    pub fn line(&self) -> String {
        let file = self
            .file
            .as_ref()
            .map(|f| format!(" (file: {})", f.display()))
            .unwrap_or_default();
        format!("{}: {}{file}", engine_name(self.engine), self.message)
    }
}

/// The command that puts the registration back: install again, as
/// recorded (its default runtime, its config path, its chain).
pub fn fix_command(engine: Engine, st: &EngineState, default_config: bool) -> String {
    let mut cmd = format!("gpu-guard install {}", engine_name(engine));
    if st.set_default {
        cmd.push_str(" --set-default");
    }
    if let Some(c) = st.chain.as_ref().filter(|c| c.explicit) {
        cmd.push_str(&format!(" --chain-runtime {}", c.runtime));
    }
    if !default_config {
        cmd.push_str(&format!(" --config-path {}", st.config.display()));
    }
    match super::restart_hint_for(engine, Some(&st.config)) {
        Some(r) => format!("{cmd} && {r}"),
        None => cmd,
    }
}

/// The engine's effective registration on the host of `opts` (its host
/// root and state directory; the rest comes from the recorded state).
pub fn effective_registration(opts: &Options) -> Result<Registration, InstallError> {
    let Some(st) = state::load(opts)? else {
        return Ok(Registration::NotInstalled);
    };
    let o = recorded_options(opts, &st);
    let default_config = opts.config_path.is_none() && st.config == default_config(opts);
    let drift = |file: Option<PathBuf>, message: String| {
        Registration::Drift(Drift {
            engine: opts.engine,
            file,
            message,
            fix: fix_command(opts.engine, &st, default_config),
        })
    };
    if let Some((file, message)) = judge(&o, &st)? {
        return Ok(drift(file, message));
    }
    // What install would change now is drift too: an edited or removed
    // file of ours, or a copy of settings whose source changed.
    let plan = super::plan(&o)?;
    if let Some(c) = plan.changes.first() {
        let host = host_path(&o, &c.path);
        let what = match (&c.before, &c.after) {
            (None, _) => "a file gpu-guard's install wrote is missing",
            (_, None) => "a file gpu-guard's install no longer wants is there",
            _ => "a file gpu-guard's install wrote is out of date: it differs from what `gpu-guard install` writes now (it was edited, or a file it copies settings from changed)",
        };
        return Ok(drift(Some(host), what.to_string()));
    }
    Ok(Registration::Ok)
}

/// The engine's config install edits when none is named (for containerd,
/// k3s's or RKE2's template on their nodes).
pub fn default_config(opts: &Options) -> PathBuf {
    match opts.engine {
        Engine::Docker => super::DOCKER_CONFIG.into(),
        Engine::Containerd => containerd::default_config(opts),
        Engine::Crio => super::CRIO_DROP_IN.into(),
        Engine::Podman => podman::DEFAULT_HOOKS_DIR.into(),
    }
}

/// The options of the recorded install: its config path and binaries.
fn recorded_options(opts: &Options, st: &EngineState) -> Options {
    let mut o = opts.clone();
    o.uninstall = false;
    o.set_default = st.set_default;
    o.chain_runtime = None;
    o.config_path = Some(st.config.clone());
    if let Some(dir) = st.binary.as_deref().and_then(Path::parent) {
        o.bin_dir = dir.to_path_buf();
    }
    o
}

/// A path on this machine as the host path it stands for.
fn host_path(opts: &Options, path: &Path) -> PathBuf {
    match path.strip_prefix(&opts.host_root) {
        Ok(rel) if opts.host_root != Path::new("/") => Path::new("/").join(rel),
        _ => path.to_path_buf(),
    }
}

/// The engine's own judgement of its configuration files.
fn judge(o: &Options, st: &EngineState) -> Result<Option<(Option<PathBuf>, String)>, InstallError> {
    let binary = st
        .binary
        .clone()
        .unwrap_or_else(|| o.bin_dir.join(super::RUNTIME_BIN))
        .to_string_lossy()
        .into_owned();
    Ok(match o.engine {
        Engine::Docker => {
            let text = edit::read_optional(&o.fs_path(&st.config))?;
            docker::judge(text.as_deref(), &binary, st.set_default)
                .map(|m| (Some(st.config.clone()), m))
        }
        Engine::Containerd => containerd::check(o, st)?.map(|p| (p.file, p.message)),
        Engine::Crio => {
            let files = crio::read_files(o, &st.config, true)?;
            crio::judge(&files, &binary, &o.root, st.set_default)
                .map(|(f, m)| (f.map(|f| host_path(o, &f)), m))
        }
        Engine::Podman => {
            let file = st.config.join(hooks::PRECREATE_FILE);
            podman::judge(o, &file)?
        }
    })
}

/// Every engine install recorded on the host of `opts`, with its state.
pub fn installed(opts: &Options) -> Vec<Engine> {
    Engine::ALL
        .into_iter()
        .filter(|e| {
            let mut o = opts.clone();
            o.engine = *e;
            state::load(&o).ok().flatten().is_some()
        })
        .collect()
}

/// What install recorded for the engine of `opts` (its state file under
/// the state directory), or None: for `doctor`, which checks the files and
/// the chain that install recorded.
pub fn recorded(opts: &Options) -> Result<Option<EngineState>, InstallError> {
    state::load(opts)
}
