//! doctor's checks of directories: the hooks.d directories podman and
//! CRI-O read (a gpu-guard hook file there calls a binary that must
//! exist), the CDI specs (core::cdi's judgement), and gpu-guard's cache and state
//! directories (the private-directory rule).

use super::{engines, Check, Node};
use crate::core::cdi::{audit, CdiSpecs, HostPaths, PathState, SpecState};
use crate::install::podman;
use std::path::{Path, PathBuf};

pub fn all(node: &Node, driver: Option<&str>) -> Vec<Check> {
    let mut out = vec![active_hooks(node), cdi(node, driver)];
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

/// A host mounted at `--host-root`, as the CDI judgement asks about it:
/// each host path looked up below the root.
struct MountedPaths<'a>(&'a Node);

impl HostPaths for MountedPaths<'_> {
    fn char_numbers(&self, path: &str) -> Option<(u64, u64)> {
        let here = self.0.fs(Path::new(path));
        crate::host::cdi::RealPaths.char_numbers(&here.to_string_lossy())
    }

    fn state(&self, path: &str, nofollow: bool) -> PathState {
        let here = self.0.fs(Path::new(path));
        crate::host::cdi::RealPaths.state(&here.to_string_lossy(), nofollow)
    }
}

/// The CDI specs of `host.cdi_spec_dirs`, read and judged as `gpu-guard
/// host` judges them (`host::cdi::load`, `core::cdi::audit`; the judgement
/// the hooks make for a container that asks for CDI devices is the same).
/// A spec of an NVIDIA kind that lacks something on this host (a stale
/// driver version, a missing mount or device node), that others could
/// have written, or that a bound kept from being read (too large, nested
/// too deep, too many devices, a directory listed only in part) is an
/// error: GPU containers that use its devices fail or are refused. A
/// directory or file that cannot be read is a warning.
fn cdi(node: &Node, driver: Option<&str>) -> Check {
    let dirs = &node.config.host.cdi_spec_dirs;
    if dirs.is_empty() {
        return Check::ok("cdi", "off in the config (host.cdi_spec_dirs is empty)");
    }
    let root = node
        .host_root
        .to_string_lossy()
        .trim_end_matches('/')
        .to_string();
    let host_path = |s: &str| match root.is_empty() {
        true => s.to_string(),
        false => s.replace(&format!("{root}/"), "/"),
    };
    let here: Vec<String> = dirs
        .iter()
        .map(|d| node.fs(Path::new(d)).to_string_lossy().into_owned())
        .collect();
    let specs = crate::host::cdi::load(&here);
    let kinds = crate::core::detect::nvidia_cdi_kinds(&node.config.detect);
    let mounted = MountedPaths(node);
    let paths: &dyn HostPaths = match root.is_empty() {
        true => &crate::host::cdi::RealPaths,
        false => &mounted,
    };
    // One entry at a time, so each finding is known by the spec it is about.
    let mut errors = Vec::new();
    let mut warnings: Vec<String> = specs.problems.iter().map(|p| host_path(p)).collect();
    for e in &specs.entries {
        let one = CdiSpecs {
            entries: vec![e.clone()],
            problems: vec![],
            ..specs.clone()
        };
        let lines = audit(&one, &kinds, driver, paths).into_iter().map(|f| {
            let fix = f.fix.filter(|x| !x.is_empty());
            host_path(&fix.map_or(f.message.clone(), |x| format!("{} (fix: {x})", f.message)))
        });
        // Refused at start too: a spec of unknown authorship, or one a
        // bound kept from being read (core::cdi::judge).
        match (e.untrusted.is_some(), &e.state) {
            (true, _) | (false, SpecState::Read(_)) => errors.extend(lines),
            (false, s) if s.refuses_when_unread() => errors.extend(lines),
            _ => warnings.extend(lines),
        }
    }
    // A listing a bound cut short is in `problems` (a warning above) and
    // refuses a container whose CDI device it may hide: an error.
    if !specs.cuts.is_empty() {
        warnings.retain(|w| !specs.cuts.iter().any(|c| host_path(&c.message) == *w));
        errors.extend(specs.cuts.iter().map(|c| host_path(&c.message)));
    }
    let fix = "regenerate or fix each spec as its message says (`nvidia-ctk cdi generate` writes NVIDIA's), then `gpu-guard doctor` again";
    match (errors.is_empty(), warnings.is_empty()) {
        (false, _) => Check::error("cdi", [errors, warnings].concat().join("; "), fix),
        (true, false) => Check::warning("cdi", warnings.join("; "), fix),
        (true, true) => Check::ok("cdi", cdi_summary(node, dirs, &specs)),
    }
}

/// What the spec directories hold, when nothing is wrong with them.
fn cdi_summary(node: &Node, dirs: &[String], specs: &CdiSpecs) -> String {
    let present: Vec<&String> = dirs
        .iter()
        .filter(|d| std::fs::symlink_metadata(node.fs(Path::new(d))).is_ok())
        .collect();
    if present.is_empty() {
        return format!(
            "no CDI spec directory ({}): CDI devices are not in use",
            dirs.join(", ")
        );
    }
    let each: Vec<String> = present
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let i = dirs.iter().position(|x| x == *d).unwrap_or(i);
            let n = specs.entries.iter().filter(|e| e.priority == i).count();
            format!("{d} ({n} spec{})", if n == 1 { "" } else { "s" })
        })
        .collect();
    format!(
        "CDI specs readable, trusted, and NVIDIA's match this host: {}",
        each.join(", ")
    )
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
