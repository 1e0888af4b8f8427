//! The agent's loop: a reconcile round and a labeller round every
//! interval, the status and metrics after each, until SIGTERM or SIGINT;
//! then, when the DaemonSet was deleted, the uninstall.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};

use crate::kube::{self, ApiSettings, Stopping};
use crate::labels::{Labelled, Labeller};
use crate::reconcile::{Reconciler, RestartMode};
use crate::report::{self, log, Metrics, Status};

pub struct Agent {
    pub reconciler: Reconciler,
    pub labeller: Option<Labeller>,
    /// `None`: no API server (outside a pod): SIGTERM keeps everything.
    pub api: Option<ApiSettings>,
    pub status_file: PathBuf,
    pub metrics: Metrics,
    pub interval: Duration,
    /// The last API warning logged (logged again only when it changes).
    pub api_warning: Option<String>,
}

/// Blocks SIGTERM and SIGINT in this thread (and the threads it starts)
/// and takes them with sigwait(2) on a thread of its own: the loop is told
/// through a channel, so no handler code runs in signal context.
fn signals() -> mpsc::Receiver<Signal> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    let _ = set.thread_block();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        if let Ok(sig) = set.wait() {
            if tx.send(sig).is_err() {
                return;
            }
        }
    });
    rx
}

impl Agent {
    /// Runs until a signal; the exit status.
    pub fn run(mut self) -> i32 {
        let rx = signals();
        let mut start_uid: Option<String> = None;
        log(&format!(
            "watching {} on the host at {} every {} ms (restart mode {})",
            self.reconciler.settings.engine.name(),
            self.reconciler.settings.host_root.display(),
            self.interval.as_millis(),
            match self.reconciler.settings.restart_mode {
                RestartMode::Systemd => "systemd",
                RestartMode::None => "none",
            }
        ));
        let mut first = true;
        loop {
            if start_uid.is_none() {
                start_uid = self.daemonset_uid();
            }
            self.round(first);
            first = false;
            match rx.recv_timeout(self.interval) {
                Ok(sig) => return self.stop(sig, start_uid.as_deref()),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return 1,
            }
        }
    }

    fn daemonset_uid(&mut self) -> Option<String> {
        match kube::daemonset(self.api.as_ref()?) {
            Ok(kube::DaemonSetState::Present { uid }) => {
                log(&format!("this pod's DaemonSet has uid {uid}"));
                Some(uid)
            }
            Ok(_) => None,
            Err(e) => {
                if self.api_warning.as_deref() != Some(e.as_str()) {
                    log(&format!(
                        "warning: cannot read this pod's DaemonSet yet (retried every round): {e}"
                    ));
                    self.api_warning = Some(e);
                }
                None
            }
        }
    }

    /// One reconcile and one labeller round, then the status and metrics.
    pub fn round(&mut self, force: bool) {
        let m = &mut self.metrics;
        let outcome = self.reconciler.tick(force, &mut |l| log(l));
        if let Some(o) = &outcome {
            match (o.error, o.changed.is_empty()) {
                (true, _) => m.reconcile_errors += 1,
                (false, true) => m.reconciles_unchanged += 1,
                (false, false) => m.reconciles_applied += 1,
            }
            m.files_changed += o.changed.len() as u64;
            m.restarts += u64::from(o.restarted);
            m.last_reconcile = report::now();
        }
        let current = &self.reconciler.current;
        m.effective = current.ready;
        m.restart_pending = !current.ready && current.reason.contains("has not been restarted");
        if let Some(l) = &mut self.labeller {
            match l.tick(force) {
                Some(Labelled::Written(n)) => {
                    m.label_writes += 1;
                    log(&format!(
                        "wrote {n} node labels to {}",
                        l.settings.file.display()
                    ));
                }
                Some(Labelled::Removed(why)) => {
                    m.label_writes += 1;
                    log(&format!(
                        "removed {}: no host facts ({why})",
                        l.settings.file.display()
                    ));
                }
                Some(Labelled::Failed(e)) => {
                    m.label_errors += 1;
                    log(&format!("error: labels: {e}"));
                }
                Some(Labelled::Unchanged) | None => {}
            }
        }
        let status = Status {
            ready: current.ready,
            reason: current.reason.clone(),
            time: report::now(),
        };
        if let Err(e) = report::write_status(&self.status_file, &status) {
            log(&format!(
                "error: cannot write {}: {e}",
                self.status_file.display()
            ));
        }
        if let Err(e) = self.metrics.write() {
            log(&format!("warning: cannot write the metrics textfile: {e}"));
        }
    }

    /// SIGTERM or SIGINT: uninstall when the DaemonSet was deleted, else
    /// leave everything registered.
    fn stop(&mut self, sig: Signal, start_uid: Option<&str>) -> i32 {
        let decision = match &self.api {
            Some(api) => kube::stopping_for(start_uid, kube::daemonset(api)),
            None => Stopping::Keep("no Kubernetes API configured".into()),
        };
        let _ = std::fs::remove_file(&self.status_file);
        match decision {
            Stopping::Keep(why) => {
                let engine = self.reconciler.settings.engine.name();
                log(&format!(
                    "{sig}: keeping gpu-guard registered: {}",
                    why.replace("ENGINE", engine)
                ));
                0
            }
            Stopping::Deleted(why) => {
                log(&format!(
                    "{sig}: {why}: uninstalling gpu-guard from this node"
                ));
                self.uninstall()
            }
        }
    }

    /// Unregisters gpu-guard from the engine (restarting it as allowed),
    /// and removes the node labels and the metrics file.
    pub fn uninstall(&mut self) -> i32 {
        let mut code = 0;
        let r = &self.reconciler;
        let name = r.settings.engine.name();
        match r.options(true).and_then(|o| {
            if let Some(m) = gpu_guard::install::recover(&o).map_err(|e| e.to_string())? {
                log(&format!("warning: {m}"));
            }
            let plan = gpu_guard::install::plan(&o).map_err(|e| e.to_string())?;
            gpu_guard::install::apply(&o, &plan).map_err(|e| e.to_string())?;
            Ok((o, plan))
        }) {
            Ok((o, plan)) => {
                for c in &plan.changes {
                    let h = crate::reconcile::host_path(&o, &c.path);
                    log(&format!("uninstall {name}: {}", h.display()));
                }
                let config_d =
                    o.fs_path(std::path::Path::new(gpu_guard::install::GPU_GUARD_CONFIG_D));
                let engine_changed = plan.changes.iter().any(|c| !c.path.starts_with(&config_d));
                let marker =
                    o.fs_path(&r.settings.state_dir.join(format!("restart-pending-{name}")));
                let _ = std::fs::remove_file(&marker);
                if engine_changed {
                    match r.settings.restart_mode {
                        RestartMode::Systemd => match crate::reconcile::restart(&r.settings) {
                            Ok(()) => log(&format!("restarted {}", r.settings.restart_unit)),
                            Err(e) => {
                                code = 1;
                                log(&format!(
                                    "error: cannot restart {}: {e}; restart it on this node",
                                    r.settings.restart_unit
                                ));
                            }
                        },
                        RestartMode::None => log(&format!(
                            "restart {} on this node to apply (restart mode none)",
                            r.settings.restart_unit
                        )),
                    }
                }
            }
            Err(e) => {
                code = 1;
                log(&format!(
                    "error: uninstall {name}: {e}; run `gpu-guard uninstall {name}` on this node"
                ));
            }
        }
        if let Some(l) = &self.labeller {
            match l.remove() {
                Ok(()) => log(&format!("removed {}", l.settings.file.display())),
                Err(e) => log(&format!("warning: cannot remove the node labels: {e}")),
            }
        }
        if let Some(f) = &self.metrics.file {
            let _ = std::fs::remove_file(f);
        }
        code
    }
}
