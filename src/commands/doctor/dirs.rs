//! doctor's checks of directories: the hooks.d directories podman and
//! CRI-O read (a gpu-guard hook file there calls a binary that must
//! exist), the CDI spec directories, and gpu-guard's cache and state
//! directories (the private-directory rule).

use super::{engines, Check, Node};
use crate::install::podman;
use std::path::{Path, PathBuf};

pub fn all(node: &Node) -> Vec<Check> {
    let mut out = vec![active_hooks(node), cdi(node)];
    out.extend(private_dirs(node));
    out
}

/// Every `gpu-guard*.json` in the hooks directories podman and CRI-O read
/// by default: each one is in force for every container they start, and
/// one naming a missing binary fails them all.
fn active_hooks(node: &Node) -> Check {
    let dirs: Vec<&str> = podman::BUILTIN_HOOKS_DIRS
        .iter()
        .copied()
        .chain([podman::DEFAULT_HOOKS_DIR])
        .collect();
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for d in &dirs {
        let Ok(rd) = std::fs::read_dir(node.fs(Path::new(d))) else {
            continue;
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("gpu-guard") && n.ends_with(".json"))
            .collect();
        names.sort();
        for n in names {
            let host = Path::new(d).join(&n);
            if let Err(why) = engines::hook_file(&|p: &Path| node.fs(p), &host) {
                problems.push(format!("{}: {why}", host.display()));
            }
            found.push(host.display().to_string());
        }
    }
    if !problems.is_empty() {
        return Check::error(
            "hooks",
            format!("{}; podman and CRI-O fail every container while such a file is in force", problems.join("; ")),
            "gpu-guard install podman (or crio) rewrites the files it installed; remove a stray gpu-guard hook file",
        );
    }
    match found.is_empty() {
        true => Check::ok(
            "hooks",
            format!("no gpu-guard hook file in {}", dirs.join(", ")),
        ),
        false => Check::ok(
            "hooks",
            format!(
                "gpu-guard hook files in force, each calling an existing gpu-guard: {}",
                found.join(", ")
            ),
        ),
    }
}

/// The CDI spec directories (the CDI specification's defaults): a
/// directory that exists must be readable, since NVIDIA's runtime and the
/// engines read the specs in it to set GPU devices up. Whether a spec is
/// stale is judged at container start for containers that ask for CDI
/// devices (README, "Host health and tuning").
fn cdi(node: &Node) -> Check {
    let mut seen = Vec::new();
    for d in ["/etc/cdi", "/var/run/cdi"] {
        let fs = node.fs(Path::new(d));
        if std::fs::symlink_metadata(&fs).is_err() {
            continue;
        }
        match std::fs::read_dir(&fs) {
            Ok(rd) => {
                let specs = rd
                    .filter_map(|e| e.ok())
                    .filter(|e| {
                        let n = e.file_name();
                        let n = n.to_string_lossy();
                        n.ends_with(".yaml") || n.ends_with(".json")
                    })
                    .count();
                seen.push(format!("{d} ({specs} spec{})", if specs == 1 { "" } else { "s" }));
            }
            Err(e) => {
                return Check::warning(
                    "cdi",
                    format!("cannot read the CDI spec directory {d}: {e}; CDI devices from it cannot be set up"),
                    format!("make {d} a readable directory (`nvidia-ctk cdi generate --output={d}/nvidia.yaml` writes NVIDIA's spec)"),
                )
            }
        }
    }
    match seen.is_empty() {
        true => Check::ok(
            "cdi",
            "no CDI spec directory (/etc/cdi, /var/run/cdi): CDI devices are not in use",
        ),
        false => Check::ok(
            "cdi",
            format!("CDI spec directories readable: {}", seen.join(", ")),
        ),
    }
}

/// The directories gpu-guard keeps private files in: the host facts cache,
/// the scan cache, install's state and backups. One others can write is
/// refused by gpu-guard (no cache: every start pays for NVML; no state:
/// install and uninstall refuse to run).
fn private_dirs(node: &Node) -> Vec<Check> {
    let cfg = &node.config;
    let parent = |f: &str| {
        (!f.is_empty())
            .then(|| Path::new(f).parent().map(Path::to_path_buf))
            .flatten()
    };
    let dirs: Vec<(&str, Option<PathBuf>)> = vec![
        ("dirs.host-cache", parent(&cfg.host.cache_file)),
        (
            "dirs.scan-cache",
            (!cfg.kernel_image.cache_dir.is_empty())
                .then(|| PathBuf::from(&cfg.kernel_image.cache_dir)),
        ),
        ("dirs.state", Some(node.state_dir.clone())),
    ];
    let mut out = Vec::new();
    for (name, dir) in dirs {
        let Some(dir) = dir else {
            out.push(Check::ok(name, "off in the config"));
            continue;
        };
        let fs = node.fs(&dir);
        if std::fs::symlink_metadata(&fs).is_err() {
            out.push(Check::ok(
                name,
                format!(
                    "{} does not exist yet (created private when first needed)",
                    dir.display()
                ),
            ));
            continue;
        }
        let mut bad = None;
        for d in [fs.clone(), fs.join("engines"), fs.join("backup")] {
            if d != fs && std::fs::symlink_metadata(&d).is_err() {
                continue;
            }
            if let Err(e) = crate::sys::fsutil::check_private_dir(&d) {
                bad = Some(e);
                break;
            }
            if name != "dirs.state" {
                break;
            }
        }
        out.push(match bad {
            None => Check::ok(
                name,
                format!(
                    "{} is private (root's, not writable by group or others)",
                    dir.display()
                ),
            ),
            Some(e) => Check::warning(
                name,
                format!("{e}; gpu-guard will not use it"),
                format!(
                    "make it private: chown root {0} && chmod 0700 {0}",
                    fs.display()
                ),
            ),
        });
    }
    out
}
