//! The labeller: `gpu-guard host --node-labels`, run in the host's root
//! (chroot: the host's gpu-guard, its config, its loader and NVML, the
//! GPU Operator's driver root included, exactly as the runtime wrapper
//! sees the host), written to node-feature-discovery's local feature file
//! (`features.d/gpu-guard`: NFD's local source reads `key=value` lines
//! from every file there and labels the node with them; node-feature-
//! discovery docs, "Local feature source"), and written again whenever the
//! driver or the GPUs change.
//!
//! A host whose facts cannot be established (the probe failed: exit
//! status 2) has its file removed, so NFD drops gpu-guard's labels and
//! the affinity the webhook writes no longer admits the node; stale
//! labels would place pods on a node that cannot run them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// What the labeller needs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub host_root: PathBuf,
    /// The host's gpu-guard (host path).
    pub binary: PathBuf,
    /// The feature file (host path).
    pub file: PathBuf,
    /// Refreshed at least this often, whatever the fingerprint says.
    pub interval: Duration,
}

pub struct Labeller {
    pub settings: Settings,
    last: Option<String>,
    last_run: Option<Instant>,
}

/// What one refresh did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Labelled {
    Unchanged,
    Written(usize),
    Removed(String),
    Failed(String),
}

impl Labeller {
    pub fn new(settings: Settings) -> Labeller {
        Labeller {
            settings,
            last: None,
            last_run: None,
        }
    }

    /// What says the driver or the GPUs changed: the driver's version file
    /// and the GPU device nodes, the host's gpu-guard config (its facts
    /// file, when it names one) and the binary.
    fn signature(&self) -> String {
        let root = &self.settings.host_root;
        let mut sig = String::new();
        let driver = root.join("proc/driver/nvidia/version");
        sig.push_str(&std::fs::read_to_string(driver).unwrap_or_default());
        let mut devs: Vec<String> = std::fs::read_dir(root.join("dev"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("nvidia") || n == "kfd")
            .collect();
        devs.sort();
        sig.push_str(&devs.join(","));
        let cfg = root.join("etc/gpu-guard/config.toml");
        let mut files = vec![cfg.clone(), host(root, &self.settings.binary)];
        if let Ok(c) = gpu_guard::config::load(Some(&cfg)) {
            if !c.host.facts_file.is_empty() {
                files.push(host(root, Path::new(&c.host.facts_file)));
            }
        }
        for f in files {
            if let Ok(m) = std::fs::metadata(&f) {
                use std::os::unix::fs::MetadataExt;
                sig.push_str(&format!("|{}:{}:{}", m.ino(), m.size(), m.mtime_nsec()));
                sig.push_str(&m.mtime().to_string());
            }
        }
        sig
    }

    /// Refreshes the feature file when the signature changed or the
    /// interval passed; `None` when nothing was looked at.
    pub fn tick(&mut self, force: bool) -> Option<Labelled> {
        let sig = self.signature();
        let due = self
            .last_run
            .is_none_or(|t| t.elapsed() >= self.settings.interval);
        if !force && !due && self.last.as_deref() == Some(sig.as_str()) {
            return None;
        }
        self.last_run = Some(Instant::now());
        let result = self.refresh();
        if !matches!(result, Labelled::Failed(_)) {
            self.last = Some(sig);
        }
        Some(result)
    }

    fn refresh(&self) -> Labelled {
        let s = &self.settings;
        let file = host(&s.host_root, &s.file);
        let out = match Command::new("chroot")
            .arg(&s.host_root)
            .arg(&s.binary)
            .args(["host", "--node-labels"])
            .output()
        {
            Ok(o) => o,
            Err(e) => return Labelled::Failed(format!("cannot run chroot: {e}")),
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = stderr.lines().last().unwrap_or("").trim().to_string();
        match out.status.code() {
            // 1: labels of a host without a driver or with a lost GPU are
            // still the truth about it (gpu.failed, no driver labels).
            Some(0) | Some(1) if !text.trim().is_empty() => {}
            Some(2) | Some(0) | Some(1) => {
                return match std::fs::remove_file(&file) {
                    Ok(()) => Labelled::Removed(why),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Labelled::Unchanged,
                    Err(e) => Labelled::Failed(format!("cannot remove {}: {e}", file.display())),
                };
            }
            _ => {
                return Labelled::Failed(format!(
                    "{} host --node-labels did not run in the host's root ({}): {why}",
                    s.binary.display(),
                    out.status
                ))
            }
        }
        if std::fs::read_to_string(&file).ok().as_deref() == Some(text.as_str()) {
            return Labelled::Unchanged;
        }
        let write = || -> std::io::Result<()> {
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            gpu_guard::sys::fsutil::atomic_write(&file, text.as_bytes(), 0o644)
        };
        match write() {
            Ok(()) => Labelled::Written(text.lines().filter(|l| l.contains('=')).count()),
            Err(e) => Labelled::Failed(format!("cannot write {}: {e}", file.display())),
        }
    }

    /// Removes the feature file (the DaemonSet is being deleted).
    pub fn remove(&self) -> std::io::Result<()> {
        match std::fs::remove_file(host(&self.settings.host_root, &self.settings.file)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// A host path under the host root.
fn host(root: &Path, p: &Path) -> PathBuf {
    root.join(p.strip_prefix("/").unwrap_or(p))
}
