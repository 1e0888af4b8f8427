//! `gpu-guard install ENGINE` / `gpu-guard uninstall ENGINE`: registers
//! gpu-guard with docker, containerd, CRI-O or podman, the way
//! `nvidia-ctk runtime configure` does for NVIDIA's runtime.
//!
//! Every run plans first (pure edits in docker.rs, containerd.rs, crio.rs,
//! podman.rs), then prints the plan as a unified diff (`--dry-run`) or
//! carries it out (edit.rs: backup, atomic write). A second install finds
//! nothing to change. What install changed is recorded in a state file
//! (`/var/lib/gpu-guard/engines/ENGINE.json`: the config it edited, the
//! files it created, the default runtime it replaced), so uninstall can put
//! back the previous behaviour and the package's prerm knows which engines
//! to unregister. Backups: `/var/lib/gpu-guard/backup/<absolute path>`, the
//! content before gpu-guard's latest change to that file.
//!
//! `--host-root DIR` runs all of this against a host filesystem mounted at
//! DIR (a Kubernetes DaemonSet): files are read and written under DIR, while
//! the paths written into engine configs (`--bin-dir`) are host paths.

pub mod containerd;
pub mod crio;
pub mod docker;
pub mod edit;
pub mod hooks;
pub mod podman;

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sys::fsutil;
use edit::{EditError, FileChange};
use hooks::Stage;

/// The runtime name engines know gpu-guard by (docker `--runtime`,
/// containerd/CRI-O runtime handler, Kubernetes RuntimeClass handler).
pub const RUNTIME_NAME: &str = "gpu-guard";
/// The OCI runtime wrapper's file name, beside the gpu-guard binary.
pub const RUNTIME_BIN: &str = "gpu-guard-runtime";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/gpu-guard";
pub const DOCKER_CONFIG: &str = "/etc/docker/daemon.json";
pub const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
pub const CRIO_DROP_IN: &str = "/etc/crio/crio.conf.d/99-gpu-guard.toml";
/// Where a `crio` binary means CRI-O is installed.
const CRIO_BINARIES: [&str; 2] = ["/usr/bin/crio", "/usr/local/bin/crio"];

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{} {source}", path.display())]
    Docker {
        path: PathBuf,
        #[source]
        source: docker::DockerError,
    },
    #[error("{} {source}", path.display())]
    Containerd {
        path: PathBuf,
        #[source]
        source: containerd::ContainerdError,
    },
    #[error("CRI-O config {} {source}", path.display())]
    Crio {
        path: PathBuf,
        #[source]
        source: crio::CrioError,
    },
    #[error(transparent)]
    Edit(#[from] EditError),
    #[error("{what} {} does not exist; pass --bin-dir with the host directory that holds gpu-guard and gpu-guard-runtime", path.display())]
    MissingBinary { what: &'static str, path: PathBuf },
    #[error("cannot tell where this gpu-guard binary is ({source}); pass --bin-dir")]
    CurrentExe {
        #[source]
        source: io::Error,
    },
    #[error("{} is a symlink under --host-root; pass --config-path with the file it points to", path.display())]
    Symlink { path: PathBuf },
    #[error("CRI-O reads hooks from {dir} (its hooks_dir) and refuses precreate hook files, which would stop its containers; pass --config-path with a hooks directory only podman reads (and add it to hooks_dir in containers.conf)")]
    CrioReadsPodmanHooks { dir: String },
    #[error("cannot list {}: {source}", path.display())]
    ListDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("state file {} is not valid ({source}); remove it and run again", path.display())]
    State {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write state file {}: {source}", path.display())]
    StateWrite {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The engines gpu-guard registers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Docker,
    Containerd,
    Crio,
    Podman,
}

/// Everything one run needs. Paths are host paths; `host_root` maps them
/// to this machine's filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub engine: Engine,
    pub uninstall: bool,
    pub set_default: bool,
    /// The engine config (docker, containerd), drop-in (crio) or hooks
    /// directory (podman); `None`: the engine's default, or for uninstall
    /// the one install recorded.
    pub config_path: Option<PathBuf>,
    pub host_root: PathBuf,
    /// Host directory with `gpu-guard` and `gpu-guard-runtime`.
    pub bin_dir: PathBuf,
    pub state_dir: PathBuf,
    /// gpu-guard's drop-in directory (host path) for the chain drop-in:
    /// `config.d` beside the config in effect, [`GPU_GUARD_CONFIG_D`]
    /// under `--host-root`.
    pub config_d: PathBuf,
}

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
}

/// A chain drop-in install wrote: its host path and the runtime it names
/// (its content is [`chain_text`] of them, so a changed file is seen).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainState {
    pub file: PathBuf,
    pub runtime: String,
}

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

/// A planned run: file changes (no-ops left out), the state to record
/// (`None`: remove it), and messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub changes: Vec<FileChange>,
    pub state: Option<EngineState>,
    pub warnings: Vec<String>,
    /// Directories to remove, deepest first, when empty (uninstall).
    pub remove_dirs: Vec<PathBuf>,
}

impl Options {
    /// The file on this machine for a host path. Lexical: `..` never climbs
    /// above the host root, whatever a config file says.
    pub fn fs_path(&self, host: &Path) -> PathBuf {
        let mut parts = Vec::new();
        for c in host.components() {
            match c {
                Component::Normal(p) => parts.push(p),
                Component::ParentDir => {
                    parts.pop();
                }
                _ => {}
            }
        }
        if host.is_relative() && self.host_root == Path::new("/") {
            // A relative --config-path without --host-root: as given.
            return host.to_path_buf();
        }
        let mut out = self.host_root.clone();
        out.extend(parts);
        out
    }

    fn state_file(&self) -> PathBuf {
        self.fs_path(
            &self
                .state_dir
                .join("engines")
                .join(format!("{}.json", engine_name(self.engine))),
        )
    }

    fn backup_dir(&self) -> PathBuf {
        self.fs_path(&self.state_dir.join("backup"))
    }

    fn runtime_path(&self) -> PathBuf {
        self.bin_dir.join(RUNTIME_BIN)
    }

    fn gpu_guard_path(&self) -> PathBuf {
        self.bin_dir.join("gpu-guard")
    }
}

pub fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Docker => "docker",
        Engine::Containerd => "containerd",
        Engine::Crio => "crio",
        Engine::Podman => "podman",
    }
}

/// The command that makes the engine read its new config; `None` for
/// podman, which reads hook files at each container start.
pub fn restart_hint(engine: Engine) -> Option<&'static str> {
    match engine {
        Engine::Docker => Some("systemctl restart docker"),
        Engine::Containerd => Some("systemctl restart containerd"),
        Engine::Crio => Some("systemctl restart crio"),
        Engine::Podman => None,
    }
}

fn load_state(opts: &Options) -> Result<Option<EngineState>, InstallError> {
    let path = opts.state_file();
    match edit::read_optional(&path)? {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| InstallError::State { path, source }),
    }
}

fn change(path: PathBuf, before: Option<String>, after: Option<String>) -> FileChange {
    FileChange {
        path,
        before,
        after,
        mode: 0o644,
    }
}

/// The config file to edit, following a symlink to the file it names (so
/// the link an admin or a config manager set up stays a link).
fn config_file(opts: &Options, host: &Path) -> Result<PathBuf, InstallError> {
    let path = opts.fs_path(host);
    match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            if opts.host_root != Path::new("/") {
                return Err(InstallError::Symlink { path });
            }
            fs::canonicalize(&path).map_err(|source| {
                InstallError::Edit(EditError::Read {
                    path: path.clone(),
                    source,
                })
            })
        }
        _ => Ok(path),
    }
}

fn require_binary(opts: &Options, what: &'static str, host: PathBuf) -> Result<(), InstallError> {
    if opts.fs_path(&host).exists() {
        Ok(())
    } else {
        Err(InstallError::MissingBinary { what, path: host })
    }
}

/// Plans an install or uninstall; reads, never writes.
pub fn plan(opts: &Options) -> Result<Plan, InstallError> {
    let state = load_state(opts)?;
    let created_dirs = state
        .as_ref()
        .map(|s| s.created_dirs.clone())
        .unwrap_or_default();
    let old_chain = state.as_ref().and_then(|s| s.chain.clone());
    let nvidia = if opts.uninstall {
        None
    } else {
        nvidia_default_runtime(opts, state.as_ref())?
    };
    let mut plan = match (opts.engine, opts.uninstall) {
        (Engine::Docker, false) => plan_docker_install(opts, state)?,
        (Engine::Docker, true) => plan_docker_uninstall(opts, state)?,
        (Engine::Containerd, false) => plan_containerd_install(opts, state)?,
        (Engine::Containerd, true) => plan_containerd_uninstall(opts, state)?,
        (Engine::Crio, false) => plan_crio_install(opts, state)?,
        (Engine::Crio, true) => plan_owned_uninstall(opts, state, crio_drop_in(opts))?,
        (Engine::Podman, false) => plan_podman_install(opts, state)?,
        (Engine::Podman, true) => plan_owned_uninstall(opts, state, podman_hook_file(opts))?,
    };
    if opts.uninstall {
        unchain(opts, old_chain.as_ref(), &mut plan)?;
    } else if opts.engine != Engine::Podman {
        plan_chain(opts, nvidia.as_deref(), &mut plan)?;
    }
    plan.changes.retain(|c| !c.is_noop());
    if opts.uninstall {
        // BTreeSet order puts a parent before its children: reversed, the
        // deepest directory goes first.
        plan.remove_dirs = created_dirs.iter().rev().map(|d| opts.fs_path(d)).collect();
    } else if let Some(state) = &mut plan.state {
        // Keep what an earlier install recorded.
        state.created_dirs.extend(created_dirs);
    }
    Ok(plan)
}

/// NVIDIA's runtime when it is the engine's default runtime (the host path
/// of its binary), else `None`. Podman runs NVIDIA through hooks, never
/// as its runtime: always `None`.
fn nvidia_default_runtime(
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
        Engine::Crio => crio::default_runtime_path(&crio_effective(opts, &crio_drop_in(opts))?),
        Engine::Containerd => {
            let host = opts
                .config_path
                .clone()
                .unwrap_or_else(|| CONTAINERD_CONFIG.into());
            let path = config_file(opts, &host)?;
            let mut texts: Vec<String> = Vec::new();
            if let Some(main) = edit::read_optional(&path)? {
                if let Ok(doc) = containerd::parse(Some(&main)) {
                    if let Some(dir) = containerd::conf_d_dir(&doc, &host) {
                        texts.push(main);
                        let dir = opts.fs_path(&dir);
                        let mut files: Vec<PathBuf> = fs::read_dir(&dir)
                            .map(|rd| {
                                rd.filter_map(|e| e.ok())
                                    .map(|e| e.path())
                                    .filter(|p| {
                                        p.extension().is_some_and(|x| x == "toml")
                                            && p.file_name()
                                                != Some(containerd::DROP_IN_NAME.as_ref())
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        files.sort();
                        for f in files {
                            if let Some(t) = edit::read_optional(&f)? {
                                texts.push(t);
                            }
                        }
                    } else {
                        texts.push(main);
                    }
                }
            }
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            containerd::default_runtime_binary(&refs, replaced)
        }
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
fn plan_chain(opts: &Options, nvidia: Option<&str>, plan: &mut Plan) -> Result<(), InstallError> {
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
fn unchain(opts: &Options, rec: Option<&ChainState>, plan: &mut Plan) -> Result<(), InstallError> {
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

/// Carries out a plan: each file change (backup, atomic write), then the state.
pub fn apply(opts: &Options, plan: &Plan) -> Result<(), InstallError> {
    let backup_dir = opts.backup_dir();
    for c in &plan.changes {
        // Backups mirror the host path, whatever --host-root is.
        let abs = std::path::absolute(&c.path).unwrap_or_else(|_| c.path.clone());
        let host = Path::new("/").join(abs.strip_prefix(&opts.host_root).unwrap_or(&abs));
        edit::apply(c, &edit::backup_path(&backup_dir, &host))?;
    }
    for d in &plan.remove_dirs {
        // Only an empty directory goes; one that holds anything else
        // (someone else's hooks) stays, and that is not an error.
        let _ = fs::remove_dir(d);
    }
    let path = opts.state_file();
    match &plan.state {
        Some(state) => {
            let mut text = serde_json::to_string_pretty(state).unwrap_or_default();
            text.push('\n');
            if edit::read_optional(&path)?.as_deref() == Some(text.as_str()) {
                return Ok(());
            }
            let write = || -> io::Result<()> {
                if let Some(dir) = path.parent() {
                    // The state names files uninstall will rewrite as root:
                    // a directory others can write would let them choose.
                    std::os::unix::fs::DirBuilderExt::mode(
                        fs::DirBuilder::new().recursive(true),
                        0o700,
                    )
                    .create(dir)?;
                    fsutil::check_private_dir(dir)?;
                }
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

fn merge_state(old: Option<EngineState>, config: &Path) -> EngineState {
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
        },
        None => EngineState {
            config: config.to_path_buf(),
            ..EngineState::default()
        },
    }
}

/// Records a file install is about to create, and the directories above it
/// that do not exist yet (so uninstall can remove them again).
fn note_created(opts: &Options, state: &mut EngineState, host_file: &Path) {
    state.created.insert(host_file.to_path_buf());
    for dir in host_file.ancestors().skip(1) {
        if dir.parent().is_none() || opts.fs_path(dir).exists() {
            break;
        }
        state.created_dirs.insert(dir.to_path_buf());
    }
}

fn plan_docker_install(opts: &Options, old: Option<EngineState>) -> Result<Plan, InstallError> {
    require_binary(opts, "runtime wrapper", opts.runtime_path())?;
    let host = opts
        .config_path
        .clone()
        .unwrap_or_else(|| DOCKER_CONFIG.into());
    let path = config_file(opts, &host)?;
    let before = edit::read_optional(&path)?;
    let edited = docker::install(
        before.as_deref(),
        &opts.runtime_path().to_string_lossy(),
        opts.set_default,
    )
    .map_err(|source| InstallError::Docker {
        path: path.clone(),
        source,
    })?;
    let mut state = merge_state(old, &host);
    if before.is_none() {
        note_created(opts, &mut state, &host);
    }
    if state.replaced_default.is_none() {
        state.replaced_default = edited.replaced_default;
    }
    Ok(Plan {
        changes: vec![change(path, before, Some(edited.text))],
        state: Some(state),
        warnings: vec![],
        remove_dirs: vec![],
    })
}

fn plan_docker_uninstall(opts: &Options, old: Option<EngineState>) -> Result<Plan, InstallError> {
    let host = opts
        .config_path
        .clone()
        .or_else(|| old.as_ref().map(|s| s.config.clone()))
        .unwrap_or_else(|| DOCKER_CONFIG.into());
    let path = config_file(opts, &host)?;
    let before = edit::read_optional(&path)?;
    let mut changes = vec![];
    if before.is_some() {
        let restore = old.as_ref().and_then(|s| s.replaced_default.as_deref());
        let edited = docker::uninstall(before.as_deref(), restore).map_err(|source| {
            InstallError::Docker {
                path: path.clone(),
                source,
            }
        })?;
        let created = old.as_ref().is_some_and(|s| s.created.contains(&host));
        let after = (!(edited.empty && created)).then_some(edited.text);
        changes.push(change(path, before, after));
    }
    Ok(Plan {
        changes,
        state: None,
        warnings: vec![],
        remove_dirs: vec![],
    })
}

fn plan_containerd_install(opts: &Options, old: Option<EngineState>) -> Result<Plan, InstallError> {
    require_binary(opts, "runtime wrapper", opts.runtime_path())?;
    let host = opts
        .config_path
        .clone()
        .unwrap_or_else(|| CONTAINERD_CONFIG.into());
    let path = config_file(opts, &host)?;
    let before = edit::read_optional(&path)?;
    let err = |source| InstallError::Containerd {
        path: path.clone(),
        source,
    };
    let doc = containerd::parse(before.as_deref()).map_err(err)?;
    let runtime = opts.runtime_path().to_string_lossy().into_owned();
    let mut state = merge_state(old, &host);
    let changes = match containerd::conf_d_dir(&doc, &host) {
        Some(dir) => {
            // The main file stays as it is; the runtime goes in a drop-in.
            let drop_host = dir.join(containerd::DROP_IN_NAME);
            let drop_path = opts.fs_path(&drop_host);
            let drop_before = edit::read_optional(&drop_path)?;
            // Installing without --set-default never takes the default away.
            let set_default = opts.set_default
                || drop_before
                    .as_deref()
                    .is_some_and(containerd::default_is_ours);
            let text = containerd::drop_in(before.as_deref().unwrap_or(""), &runtime, set_default)
                .map_err(err)?;
            if drop_before.is_none() {
                note_created(opts, &mut state, &drop_host);
            }
            vec![change(drop_path, drop_before, Some(text))]
        }
        None => {
            let edited =
                containerd::install(before.as_deref(), &runtime, opts.set_default).map_err(err)?;
            if before.is_none() {
                note_created(opts, &mut state, &host);
            }
            if state.replaced_default.is_none() {
                state.replaced_default = edited.replaced_default;
            }
            vec![change(path.clone(), before, Some(edited.text))]
        }
    };
    Ok(Plan {
        changes,
        state: Some(state),
        warnings: vec![],
        remove_dirs: vec![],
    })
}

fn plan_containerd_uninstall(
    opts: &Options,
    old: Option<EngineState>,
) -> Result<Plan, InstallError> {
    let host = opts
        .config_path
        .clone()
        .or_else(|| old.as_ref().map(|s| s.config.clone()))
        .unwrap_or_else(|| CONTAINERD_CONFIG.into());
    let path = config_file(opts, &host)?;
    let before = edit::read_optional(&path)?;
    let err = |source| InstallError::Containerd {
        path: path.clone(),
        source,
    };
    let mut changes = vec![];
    let mut remove: BTreeSet<PathBuf> = BTreeSet::new();
    if let Some(text) = &before {
        let doc = containerd::parse(Some(text)).map_err(err)?;
        if let Some(dir) = containerd::conf_d_dir(&doc, &host) {
            remove.insert(dir.join(containerd::DROP_IN_NAME));
        }
        let restore = old.as_ref().and_then(|s| s.replaced_default.as_deref());
        let edited = containerd::uninstall(Some(text), restore).map_err(err)?;
        let created = old.as_ref().is_some_and(|s| s.created.contains(&host));
        let after = (!(edited.empty && created)).then_some(edited.text);
        changes.push(change(path.clone(), before.clone(), after));
    }
    if let Some(s) = &old {
        remove.extend(s.created.iter().filter(|p| **p != host).cloned());
    }
    removal_plan(opts, remove, changes)
}

/// The plan of an uninstall: `changes` plus the removal of every file in
/// `remove` that is still there.
fn removal_plan(
    opts: &Options,
    remove: impl IntoIterator<Item = PathBuf>,
    mut changes: Vec<FileChange>,
) -> Result<Plan, InstallError> {
    for host_file in remove {
        let p = opts.fs_path(&host_file);
        if let Some(b) = edit::read_optional(&p)? {
            changes.push(change(p, Some(b), None));
        }
    }
    Ok(Plan {
        changes,
        state: None,
        warnings: vec![],
        remove_dirs: vec![],
    })
}

fn crio_drop_in(opts: &Options) -> PathBuf {
    opts.config_path
        .clone()
        .unwrap_or_else(|| CRIO_DROP_IN.into())
}

fn podman_hook_file(opts: &Options) -> PathBuf {
    opts.config_path
        .clone()
        .unwrap_or_else(|| podman::DEFAULT_HOOKS_DIR.into())
        .join(hooks::PRECREATE_FILE)
}

/// CRI-O's configuration as it reads it: crio.conf (beside the drop-in
/// directory), then every other file of the drop-in directory in lexical
/// order (crio.conf.d(5)).
fn crio_effective(opts: &Options, drop_in_host: &Path) -> Result<crio::Effective, InstallError> {
    let dir_host = drop_in_host.parent().unwrap_or(Path::new("/"));
    let main_host = dir_host
        .parent()
        .unwrap_or(Path::new("/"))
        .join("crio.conf");
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    let main = opts.fs_path(&main_host);
    if let Some(t) = edit::read_optional(&main)? {
        files.push((main, t));
    }
    let dir = opts.fs_path(dir_host);
    match fs::read_dir(&dir) {
        Ok(entries) => {
            let mut names: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.path())
                .filter(|p| p.file_name() != drop_in_host.file_name())
                .collect();
            names.sort();
            for p in names {
                if let Some(t) = edit::read_optional(&p)? {
                    files.push((p, t));
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(InstallError::ListDir { path: dir, source }),
    }
    // Parse one by one so an error names the file at fault.
    for (p, t) in &files {
        crio::effective([t.as_str()]).map_err(|source| InstallError::Crio {
            path: p.clone(),
            source,
        })?;
    }
    crio::effective(files.iter().map(|(_, t)| t.as_str()))
        .map_err(|source| InstallError::Crio { path: dir, source })
}

fn same_dir(a: &str, b: &Path) -> bool {
    Path::new(a).components().eq(b.components())
}

fn plan_crio_install(opts: &Options, old: Option<EngineState>) -> Result<Plan, InstallError> {
    require_binary(opts, "runtime wrapper", opts.runtime_path())?;
    require_binary(opts, "hook binary", opts.gpu_guard_path())?;
    let drop_host = crio_drop_in(opts);
    let eff = crio_effective(opts, &drop_host)?;
    let drop_path = opts.fs_path(&drop_host);
    let drop_before = edit::read_optional(&drop_path)?;
    // Installing without --set-default never takes the default away.
    let set_default = opts.set_default || drop_before.as_deref().is_some_and(crio::default_is_ours);
    let text = crio::drop_in(&eff, &opts.runtime_path().to_string_lossy(), set_default);
    let mut state = merge_state(old, &drop_host);
    if drop_before.is_none() {
        note_created(opts, &mut state, &drop_host);
    }
    let mut changes = vec![change(drop_path, drop_before, Some(text))];
    let mut warnings = vec![];

    // The prestart hook, in a directory CRI-O reads. The package ships it
    // in the default one; a copy installed elsewhere (DaemonSet, custom
    // hooks_dir) is written here and removed by uninstall.
    let existing = eff.hooks_dirs.iter().find(|d| {
        opts.fs_path(&Path::new(d).join(hooks::PRESTART_FILE))
            .exists()
    });
    match existing.or(eff.hooks_dirs.first()) {
        None => warnings.push(
            "CRI-O's hooks_dir is empty, so it runs no hooks: the prestart check is not installed (the runtime handler still is)"
                .to_string(),
        ),
        Some(dir) => {
            let hook_host = Path::new(dir).join(hooks::PRESTART_FILE);
            let hook_path = opts.fs_path(&hook_host);
            let before = edit::read_optional(&hook_path)?;
            let ours = hooks::hook_json(Stage::Prestart, &opts.gpu_guard_path());
            if before.is_none() {
                note_created(opts, &mut state, &hook_host);
                changes.push(change(hook_path, None, Some(ours)));
            } else if state.created.contains(&hook_host) {
                changes.push(change(hook_path, before, Some(ours)));
            }
        }
    }
    for dir in &eff.hooks_dirs {
        if opts
            .fs_path(&Path::new(dir).join(hooks::PRECREATE_FILE))
            .exists()
        {
            warnings.push(format!(
                "{dir}/{} is a podman precreate hook in a directory CRI-O reads; CRI-O refuses it: run `gpu-guard uninstall podman` and install it elsewhere",
                hooks::PRECREATE_FILE
            ));
        }
    }
    Ok(Plan {
        changes,
        state: Some(state),
        warnings,
        remove_dirs: vec![],
    })
}

fn plan_podman_install(opts: &Options, old: Option<EngineState>) -> Result<Plan, InstallError> {
    require_binary(opts, "hook binary", opts.gpu_guard_path())?;
    let file_host = podman_hook_file(opts);
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
    let ours = hooks::hook_json(Stage::Precreate, &opts.gpu_guard_path());
    changes.push(change(path, before, Some(ours)));
    Ok(Plan {
        changes,
        state: Some(state),
        warnings,
        remove_dirs: vec![],
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
    let eff = crio_effective(opts, Path::new(CRIO_DROP_IN))?;
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
/// and their `.d` drop-ins in order, ignoring our own drop-in (which is
/// rewritten from them); podman's built-in list when none sets hooks_dir.
fn podman_current_hooks_dirs(opts: &Options) -> Result<Vec<String>, InstallError> {
    let mut confs = vec![];
    for c in podman::CONTAINERS_CONF {
        if let Some(t) = edit::read_optional(&opts.fs_path(Path::new(c)))? {
            confs.push(t);
        }
        let dir = opts.fs_path(Path::new(&format!("{c}.d")));
        let mut drop_ins: Vec<PathBuf> = fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                    .filter(|p| *p != opts.fs_path(Path::new(podman::CONF_DROP_IN)))
                    .collect()
            })
            .unwrap_or_default();
        drop_ins.sort();
        for p in drop_ins {
            if let Some(t) = edit::read_optional(&p)? {
                confs.push(t);
            }
        }
    }
    Ok(
        podman::configured_hooks_dirs(confs.iter().map(String::as_str)).unwrap_or_else(|| {
            podman::BUILTIN_HOOKS_DIRS
                .iter()
                .map(|d| d.to_string())
                .collect()
        }),
    )
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
    let current = podman_current_hooks_dirs(opts)?;
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
        let drop_host = PathBuf::from(podman::CONF_DROP_IN);
        let drop_path = opts.fs_path(&drop_host);
        let before = edit::read_optional(&drop_path)?;
        if before.is_none() {
            created.push(drop_host);
        }
        let text = podman::drop_in_text(&current, &dir_host.to_string_lossy());
        changes.push(change(drop_path, before, Some(text)));
    }
    Ok((changes, created))
}

/// Uninstall for engines whose every file is gpu-guard's own (CRI-O's
/// drop-in, podman's hook file): remove them, and whatever else install
/// created. The package's prestart hook is the package's to remove.
fn plan_owned_uninstall(
    opts: &Options,
    old: Option<EngineState>,
    default_file: PathBuf,
) -> Result<Plan, InstallError> {
    let mut remove: BTreeSet<PathBuf> = BTreeSet::new();
    remove.insert(default_file);
    if let Some(s) = old {
        remove.extend(s.created);
    }
    removal_plan(opts, remove, vec![])
}

/// A TOML parse error on one line: `line L, column C: message` (toml_edit's
/// own rendering spans several lines with a source excerpt).
pub(crate) fn toml_error_line(text: &str, e: &toml_edit::TomlError) -> String {
    let message = e.message().lines().next().unwrap_or("").trim();
    match e.span() {
        Some(span) => {
            let upto = text.get(..span.start).unwrap_or(text);
            let line = upto.matches('\n').count() + 1;
            let column = upto.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(root: &str) -> Options {
        Options {
            engine: Engine::Docker,
            uninstall: false,
            set_default: false,
            config_path: None,
            host_root: PathBuf::from(root),
            bin_dir: PathBuf::from("/usr/bin"),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            config_d: PathBuf::from(GPU_GUARD_CONFIG_D),
        }
    }

    #[test]
    fn host_paths_stay_under_the_host_root() {
        let o = opts("/host");
        assert_eq!(
            o.fs_path(Path::new("/etc/containerd/config.toml")),
            PathBuf::from("/host/etc/containerd/config.toml")
        );
        assert_eq!(
            o.fs_path(Path::new("/etc/../../../tmp/x")),
            PathBuf::from("/host/tmp/x")
        );
        assert_eq!(
            opts("/").fs_path(Path::new("/etc/docker/daemon.json")),
            PathBuf::from("/etc/docker/daemon.json")
        );
    }
}
