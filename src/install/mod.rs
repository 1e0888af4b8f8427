//! `gpu-guard install ENGINE` / `gpu-guard uninstall ENGINE`: registers
//! gpu-guard with docker, containerd, CRI-O or podman, the way
//! `nvidia-ctk runtime configure` does for NVIDIA's runtime.
//!
//! Every run plans first (one file per engine: docker.rs, containerd.rs,
//! crio.rs, podman.rs, each with its pure edits and its plan; chain.rs for
//! the gpu-guard drop-in that chains the wrapper to NVIDIA's runtime),
//! then prints the plan as a unified diff (`--dry-run`) or carries it out
//! as one transaction (transaction.rs: every file staged, an intent
//! journal, then renamed; all or none, a file changed meanwhile refused).
//! A second install finds nothing to change. What install changed is
//! recorded in a state file (`/var/lib/gpu-guard/engines/ENGINE.json`: the
//! config it edited, the files it created, the default runtime it
//! replaced), so uninstall can put back the previous behaviour and the
//! package's prerm knows which engines to unregister (state.rs). Backups:
//! `/var/lib/gpu-guard/backup/<absolute path>`, the content before
//! gpu-guard's first change to that file (kept while an install is
//! recorded).
//!
//! `--host-root DIR` runs all of this against a host filesystem mounted at
//! DIR (a Kubernetes DaemonSet): files are read and written under DIR, while
//! the paths written into engine configs (`--bin-dir`) are host paths.

mod chain;
pub mod containerd;
pub mod crio;
pub mod docker;
pub mod edit;
pub mod hooks;
pub mod podman;
pub mod registration;
mod state;
mod transaction;

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use edit::{EditError, FileChange};

pub use chain::{chain_file, chain_text, is_amd_runtime, is_nvidia_runtime, GPU_GUARD_CONFIG_D};
pub use state::{ChainState, EngineState};

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
pub(super) const CRIO_BINARIES: [&str; 2] = ["/usr/bin/crio", "/usr/local/bin/crio"];

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
    #[error("containerd's configuration: {0}")]
    ContainerdConfig(#[from] containerd::merge::MergeError),
    #[error("{what} {} does not exist; pass --bin-dir with the host directory that holds gpu-guard and gpu-guard-runtime", path.display())]
    MissingBinary { what: &'static str, path: PathBuf },
    #[error("{0}")]
    ChainRuntime(String),
    #[error("--config {} is not a gpu-guard config ({message}); --config names gpu-guard's own config: to name the engine's config file, use --config-path {}", path.display(), path.display())]
    NotGpuGuardConfig { path: PathBuf, message: String },
    #[error("{message}; fix gpu-guard's config first (a wrapper registered with it would refuse GPU containers)")]
    GpuGuardConfig { message: String },
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
    #[error("{} changed while install was planning its edit (another program wrote it at the same time); nothing of this run was left in place: run the command again", path.display())]
    Changed { path: PathBuf },
    #[error("{first}; and the files already changed {rollback}")]
    RollBack { first: String, rollback: String },
    #[error("{0}")]
    Recover(String),
    #[error("cannot write state file {}: {source}", path.display())]
    StateWrite {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The engines gpu-guard registers with (the runtime wrapper tells them
/// apart by the runtime root install registers: `core::runtime_engines`).
pub use crate::core::runtime_engines::Engine;

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
    /// The runtime root the engine passes the wrapper (containerd's
    /// `options.Root`, CRI-O's `runtime_root`): `runtime.engines.ENGINE.root`
    /// of the gpu-guard config; unused for docker and podman.
    pub root: String,
    /// `--chain-runtime`: `nvidia` (the NVIDIA runtime the engine
    /// registers), `amd` (AMD's `amd-container-runtime`) or a host path;
    /// `None`: chain to NVIDIA's or AMD's runtime only when it is the
    /// engine's default (or as an earlier install chose).
    pub chain_runtime: Option<String>,
}

impl Options {
    /// The defaults for `engine` on the host mounted at `host_root`: the
    /// engine's own config path, binaries in /usr/bin, state in
    /// [`DEFAULT_STATE_DIR`], the chain drop-in in [`GPU_GUARD_CONFIG_D`].
    pub fn new(engine: Engine, host_root: &Path) -> Options {
        Options {
            engine,
            uninstall: false,
            set_default: false,
            config_path: None,
            host_root: host_root.to_path_buf(),
            bin_dir: PathBuf::from("/usr/bin"),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            config_d: PathBuf::from(GPU_GUARD_CONFIG_D),
            root: crate::core::runtime_engines::default_root(engine).to_string(),
            chain_runtime: None,
        }
    }
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
    /// Why the engine would still not run gpu-guard after this plan (its
    /// merged configuration, checked before anything is written): each
    /// names the file responsible.
    pub not_effective: Vec<String>,
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

    pub(super) fn state_file(&self) -> PathBuf {
        self.fs_path(
            &self
                .state_dir
                .join("engines")
                .join(format!("{}.json", engine_name(self.engine))),
        )
    }

    pub(super) fn backup_dir(&self) -> PathBuf {
        self.fs_path(&self.state_dir.join("backup"))
    }

    pub(super) fn runtime_path(&self) -> PathBuf {
        self.bin_dir.join(RUNTIME_BIN)
    }

    pub(super) fn gpu_guard_path(&self) -> PathBuf {
        self.bin_dir.join("gpu-guard")
    }
}

pub fn engine_name(engine: Engine) -> &'static str {
    engine.name()
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

/// [`restart_hint`] for the engine config at `config` (host path): k3s and
/// RKE2 render a containerd template at their own start.
pub fn restart_hint_for(engine: Engine, config: Option<&Path>) -> Option<&'static str> {
    match config {
        Some(c) if engine == Engine::Containerd && containerd::template::is_template(c) => {
            containerd::template::restart_hint(c)
        }
        _ => restart_hint(engine),
    }
}

pub(super) fn change(path: PathBuf, before: Option<String>, after: Option<String>) -> FileChange {
    FileChange {
        path,
        before,
        after,
        mode: 0o644,
    }
}

/// The config file to edit, following a symlink to the file it names (so
/// the link an admin or a config manager set up stays a link).
pub(super) fn config_file(opts: &Options, host: &Path) -> Result<PathBuf, InstallError> {
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

pub(super) fn require_binary(
    opts: &Options,
    what: &'static str,
    host: PathBuf,
) -> Result<(), InstallError> {
    if opts.fs_path(&host).exists() {
        Ok(())
    } else {
        Err(InstallError::MissingBinary { what, path: host })
    }
}

/// Plans an install or uninstall; reads, never writes.
pub fn plan(opts: &Options) -> Result<Plan, InstallError> {
    let state = state::load(opts)?;
    let created_dirs = state
        .as_ref()
        .map(|s| s.created_dirs.clone())
        .unwrap_or_default();
    let old_chain = state.as_ref().and_then(|s| s.chain.clone());
    let target = if opts.uninstall {
        chain::Target::default()
    } else {
        chain::target(opts, state.as_ref())?
    };
    let mut plan = match (opts.engine, opts.uninstall) {
        (Engine::Docker, false) => docker::plan_install(opts, state)?,
        (Engine::Docker, true) => docker::plan_uninstall(opts, state)?,
        (Engine::Containerd, false) => containerd::plan_install(opts, state)?,
        (Engine::Containerd, true) => containerd::plan_uninstall(opts, state)?,
        (Engine::Crio, false) => crio::plan_install(opts, state)?,
        (Engine::Crio, true) => plan_owned_uninstall(opts, state, crio::drop_in_path(opts))?,
        (Engine::Podman, false) => podman::plan_install(opts, state)?,
        (Engine::Podman, true) => plan_owned_uninstall(opts, state, podman::hook_file(opts))?,
    };
    if opts.uninstall {
        chain::unchain(opts, old_chain.as_ref(), &mut plan)?;
    } else if opts.engine != Engine::Podman {
        chain::plan_chain(opts, target.chain.as_ref(), &mut plan)?;
    }
    plan.warnings.extend(target.warnings);
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

/// Carries out a plan as one transaction (transaction.rs): every file or
/// none, a file changed since the plan read it refused, the first backup
/// of each file kept, the intent recorded before the first file is
/// replaced; then the state.
pub fn apply(opts: &Options, plan: &Plan) -> Result<(), InstallError> {
    let _lock = transaction::lock(opts)?;
    if let Some(m) = transaction::recover(opts)? {
        // The plan was made over the interrupted run's files.
        return Err(InstallError::Recover(format!(
            "{m}; nothing of this run was written: run the command again"
        )));
    }
    transaction::commit(opts, plan)?;
    for d in &plan.remove_dirs {
        // Only an empty directory goes; one that holds anything else
        // (someone else's hooks) stays, and that is not an error.
        let _ = fs::remove_dir(d);
    }
    Ok(())
}

/// Finishes or rolls back a run that was interrupted half way (a journal
/// left in the state directory), before anything is planned: returns what
/// was done, for a warning.
pub fn recover(opts: &Options) -> Result<Option<String>, InstallError> {
    if !transaction::pending(opts) {
        // Nothing to do, and nothing written (not even the lock file).
        return Ok(None);
    }
    let _lock = transaction::lock(opts)?;
    transaction::recover(opts)
}

/// The plan of an uninstall: `changes` plus the removal of every file in
/// `remove` that is still there.
pub(super) fn removal_plan(
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
        not_effective: vec![],
    })
}

/// Uninstall for engines whose every file is gpu-guard's own (CRI-O's
/// drop-in, podman's hook file): remove them, and whatever else install
/// created. The package's prestart hook is the package's to remove.
pub(super) fn plan_owned_uninstall(
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
        Options::new(Engine::Docker, Path::new(root))
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
