//! Keeps the node's engine running gpu-guard: re-applies `gpu-guard
//! install` whenever its plan is not empty, and restarts the engine as the
//! admin allows.
//!
//! Why re-planning is the whole rule: install plans over the engine's
//! configuration as the engine merges it (gpu-guard's own drop-ins left
//! out) and writes its drop-in from the current result, so an empty plan
//! means both "the effective configuration runs gpu-guard" and "gpu-guard's
//! drop-in carries the current copy of NVIDIA's runtimes". The GPU
//! Operator writing `99-nvidia.toml` after gpu-guard's `99-gpu-guard.toml`
//! (which then loses under containerd 1.x's whole-section replacement),
//! an Operator upgrade adding a runtime to NVIDIA's file, or NVIDIA's file
//! removed with the Operator: each makes the plan non-empty, and applying
//! it puts gpu-guard's drop-in last again over NVIDIA's current section,
//! or without NVIDIA's runtimes (and without the chain to them) once
//! NVIDIA's file is gone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gpu_guard::install::registration::{effective_registration, Registration};
use gpu_guard::install::{self, Engine, Options};

use crate::watch::{fingerprint, Fingerprint};

/// How the engine is restarted after its configuration changed
/// (NVIDIA's toolkit container has the same choice, its
/// `RUNTIME_RESTART_MODE`: nvidia-container-toolkit
/// cmd/nvidia-ctk-installer/container/runtime/runtime.go, `Flags`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartMode {
    /// `systemctl restart UNIT` in the host's namespaces (the pod has
    /// hostPID; running containers survive a containerd or CRI-O restart,
    /// their shims or conmon keep them).
    Systemd,
    /// Never: the agent reports the restart as pending (not Ready) until
    /// the admin restarts the engine.
    None,
}

/// Everything the reconciler needs (paths are host paths; `host_root`
/// maps them here).
#[derive(Debug, Clone)]
pub struct Settings {
    pub engine: Engine,
    pub host_root: PathBuf,
    pub bin_dir: PathBuf,
    pub state_dir: PathBuf,
    pub config_path: Option<PathBuf>,
    pub set_default: bool,
    pub chain_runtime: Option<String>,
    pub restart_mode: RestartMode,
    /// The command that restarts the engine, before the unit's name.
    pub restart_command: Vec<String>,
    pub restart_unit: String,
    /// A full re-plan at least this often, whatever the fingerprint says.
    pub resync: Duration,
}

/// What one reconcile did and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Files install changed (host paths).
    pub changed: Vec<PathBuf>,
    pub restarted: bool,
    /// The engine runs gpu-guard now: its effective configuration does,
    /// and no restart is owed since it changed.
    pub ready: bool,
    /// Why not ready (one line), or what holds.
    pub reason: String,
    pub error: bool,
}

pub struct Reconciler {
    pub settings: Settings,
    last: Option<Fingerprint>,
    last_full: Option<Instant>,
    last_restart_try: Option<Instant>,
    /// The last outcome, reported again while nothing changes.
    pub current: Outcome,
}

impl Reconciler {
    pub fn new(settings: Settings) -> Reconciler {
        Reconciler {
            settings,
            last: None,
            last_full: None,
            last_restart_try: None,
            current: Outcome::default(),
        }
    }

    /// install's options for this node: the host's gpu-guard config gives
    /// the engine's runtime root, as `gpu-guard install --host-root` takes it.
    pub fn options(&self, uninstall: bool) -> Result<Options, String> {
        let s = &self.settings;
        let host_cfg = s.host_root.join("etc/gpu-guard/config.toml");
        let cfg = match host_cfg.exists() {
            true => gpu_guard::config::load(Some(&host_cfg)).map_err(|e| {
                format!(
                    "the host's gpu-guard config is invalid, nothing registered or changed: {e}"
                )
            })?,
            false => Default::default(),
        };
        let mut o = Options::new(s.engine, &s.host_root);
        o.uninstall = uninstall;
        o.set_default = s.set_default;
        o.chain_runtime = s.chain_runtime.clone();
        o.config_path = s.config_path.clone();
        o.bin_dir = s.bin_dir.clone();
        o.state_dir = s.state_dir.clone();
        o.config_d = PathBuf::from(install::GPU_GUARD_CONFIG_D);
        o.root = cfg.runtime.engines.root(s.engine).to_string();
        Ok(o)
    }

    /// The directories and files whose change may change the plan (paths
    /// here): the engine's config directory and what it imports, CRI-O's
    /// drop-ins, gpu-guard's config and drop-ins, and the state.
    pub fn watched(&self, o: &Options) -> Vec<PathBuf> {
        let config = o
            .config_path
            .clone()
            .unwrap_or_else(|| install::registration::default_config(o));
        let mut hosts: Vec<PathBuf> = vec![config.clone()];
        if let Some(dir) = config.parent() {
            hosts.push(dir.to_path_buf());
        }
        match o.engine {
            Engine::Containerd => {
                hosts.push("/etc/containerd/conf.d".into());
                let text = std::fs::read_to_string(o.fs_path(&config)).unwrap_or_default();
                if let Ok(doc) = install::containerd::parse(Some(&text)) {
                    hosts.extend(install::containerd::conf_d_dir(&doc, &config));
                }
            }
            Engine::Crio => hosts.extend(["/etc/crio".into(), "/etc/crio/crio.conf.d".into()]),
            Engine::Docker | Engine::Podman => {}
        }
        hosts.extend([
            PathBuf::from("/etc/gpu-guard"),
            PathBuf::from(install::GPU_GUARD_CONFIG_D),
            o.state_dir.join("engines"),
        ]);
        hosts.iter().map(|h| o.fs_path(h)).collect()
    }

    fn pending_marker(&self, o: &Options) -> PathBuf {
        // The marker node-install.sh keeps too: a restart owed by either.
        o.fs_path(
            &self
                .settings
                .state_dir
                .join(format!("restart-pending-{}", self.settings.engine.name())),
        )
    }

    /// One round: re-plans when a watched file changed (or `force`, or the
    /// resync period passed) and applies a non-empty plan; retries an owed
    /// restart. `None` when nothing was looked at.
    pub fn tick(&mut self, force: bool, log: &mut dyn FnMut(&str)) -> Option<Outcome> {
        let o = match self.options(false) {
            Ok(o) => o,
            Err(e) => return Some(self.fail(e, log)),
        };
        let fp = fingerprint(&self.watched(&o));
        let due = self
            .last_full
            .is_none_or(|t| t.elapsed() >= self.settings.resync);
        let owed = self.pending_marker(&o).exists();
        if !force && !due && Some(&fp) == self.last.as_ref() && !owed {
            return None;
        }
        self.last_full = Some(Instant::now());
        let mut out = Outcome::default();
        match self.apply(&o, &mut out, log) {
            Ok(()) => {}
            Err(e) => {
                // Looked at again next round, whatever the fingerprint.
                self.last = None;
                return Some(self.fail(e, log));
            }
        }
        self.restart_if_owed(&o, &mut out, log);
        self.judge(&o, &mut out);
        self.last = Some(fingerprint(&self.watched(&o)));
        if out != self.current || !out.changed.is_empty() {
            log(&format!(
                "{}: {}",
                if out.ready { "ready" } else { "not ready" },
                out.reason
            ));
        }
        self.current = out.clone();
        Some(out)
    }

    fn fail(&mut self, e: String, log: &mut dyn FnMut(&str)) -> Outcome {
        if self.current.reason != e {
            log(&format!("error: {e}"));
        }
        let out = Outcome {
            error: true,
            reason: e,
            ..Outcome::default()
        };
        self.current = out.clone();
        out
    }

    /// Recovers an interrupted run, then plans and applies.
    fn apply(
        &mut self,
        o: &Options,
        out: &mut Outcome,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), String> {
        let name = o.engine.name();
        if let Some(m) = install::recover(o).map_err(|e| e.to_string())? {
            log(&format!("warning: {m}"));
        }
        let plan = install::plan(o).map_err(|e| format!("install {name}: {e}"))?;
        for w in &plan.warnings {
            log(&format!("warning: {w}"));
        }
        if plan.changes.is_empty() {
            return Ok(());
        }
        install::apply(o, &plan).map_err(|e| format!("install {name}: {e}"))?;
        let config_d = o.fs_path(Path::new(install::GPU_GUARD_CONFIG_D));
        let mut engine_changed = false;
        for c in &plan.changes {
            let host = host_path(o, &c.path);
            let what = match (&c.before, &c.after) {
                (None, _) => "created",
                (_, None) => "removed",
                _ => "updated",
            };
            log(&format!(
                "re-applied install {name}: {what} {}",
                host.display()
            ));
            // gpu-guard's own drop-ins are read at every container start;
            // anything else is the engine's, read when it starts.
            engine_changed |= !c.path.starts_with(&config_d);
            out.changed.push(host);
        }
        if engine_changed {
            let marker = self.pending_marker(o);
            if let Some(dir) = marker.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            std::fs::write(&marker, b"").map_err(|e| {
                format!(
                    "cannot record the owed restart in {}: {e}",
                    marker.display()
                )
            })?;
            self.last_restart_try = None;
        }
        Ok(())
    }

    /// Restarts the engine when a restart is owed and the mode allows it
    /// (at most every 30 s while restarts fail).
    fn restart_if_owed(&mut self, o: &Options, out: &mut Outcome, log: &mut dyn FnMut(&str)) {
        let marker = self.pending_marker(o);
        if !marker.exists() || self.settings.restart_mode == RestartMode::None {
            return;
        }
        if self
            .last_restart_try
            .is_some_and(|t| t.elapsed() < Duration::from_secs(30))
        {
            return;
        }
        self.last_restart_try = Some(Instant::now());
        match restart(&self.settings) {
            Ok(()) => {
                let _ = std::fs::remove_file(&marker);
                out.restarted = true;
                log(&format!("restarted {}", self.settings.restart_unit));
            }
            Err(e) => log(&format!(
                "error: cannot restart {}: {e}",
                self.settings.restart_unit
            )),
        }
    }

    /// Whether the engine runs gpu-guard now.
    fn judge(&self, o: &Options, out: &mut Outcome) {
        let name = o.engine.name();
        let (ready, reason) = match effective_registration(o) {
            Ok(Registration::Ok) if self.pending_marker(o).exists() => (
                false,
                format!(
                    "{name}'s configuration runs gpu-guard, but {} has not been restarted since it changed ({})",
                    self.settings.restart_unit,
                    match self.settings.restart_mode {
                        RestartMode::None => "restart mode none: restart it on this node",
                        RestartMode::Systemd => "the restart failed; retrying",
                    }
                ),
            ),
            Ok(Registration::Ok) => (true, format!("{name} runs gpu-guard")),
            Ok(Registration::NotInstalled) => {
                (false, format!("gpu-guard is not installed for {name}"))
            }
            Ok(Registration::Drift(d)) => (false, d.line()),
            Err(e) => (false, format!("cannot check {name}: {e}")),
        };
        out.ready = ready;
        out.reason = reason;
    }
}

/// Runs the restart command with the unit.
pub fn restart(s: &Settings) -> Result<(), String> {
    let Some((prog, args)) = s.restart_command.split_first() else {
        return Err("no restart command".into());
    };
    let o = Command::new(prog)
        .args(args)
        .arg(&s.restart_unit)
        .output()
        .map_err(|e| format!("{prog}: {e}"))?;
    if o.status.success() {
        return Ok(());
    }
    Err(format!(
        "{} ({})",
        String::from_utf8_lossy(&o.stderr).trim(),
        o.status
    ))
}

/// A path on this machine as the host path it stands for.
pub fn host_path(o: &Options, path: &Path) -> PathBuf {
    match path.strip_prefix(&o.host_root) {
        Ok(rel) if o.host_root != Path::new("/") => Path::new("/").join(rel),
        _ => path.to_path_buf(),
    }
}
