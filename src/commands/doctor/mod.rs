//! `gpu-guard doctor [--json]`: checks what this node needs for gpu-guard
//! to do its job, and prints each problem with its fix (docs/host.md, "Is
//! this node ready?"; docs/interfaces.md, "`gpu-guard doctor`").
//!
//! What it checks, in order, each by the code the entry points use:
//! - the config and its drop-ins: valid and trusted (`config::load_detailed`,
//!   the trust rules of `sys::policy_file`), and the mode ([`host_checks`]);
//! - host facts: NVML answers within `host.probe_timeout_ms`, the driver,
//!   the GPUs, the `/dev/nvidia*` nodes (`host::probe`) ([`host_checks`]);
//! - on a host with AMD GPUs or `/dev/kfd`: the amdgpu module, KFD's GPUs,
//!   `/dev/kfd` and the render nodes (`host::kfd`, `core::amd::nodes`)
//!   ([`amd`]);
//! - each engine install recorded or that is present: its effective
//!   registration (`install::registration::effective_registration`), the
//!   runtime its wrapper chains, its hook files ([`engines`]);
//! - the CDI specs of `host.cdi_spec_dirs`, read and judged as `host` judges
//!   them (`host::cdi::load`, `core::cdi::audit`), and gpu-guard's cache and
//!   state directories (the private-directory rule,
//!   `sys::fsutil::check_private_dir`) ([`dirs`]).
//!
//! Exit status: 0 nothing would break or bypass containers (warnings may be
//! printed); 1 a check is an error; 2 bad usage or an invalid config (the
//! status every subcommand gives one; the other checks still run, with the
//! built-in defaults).

mod amd;
mod dirs;
mod engines;
mod host_checks;

use crate::commands::cli::DoctorArgs;
use serde::Serialize;
use std::path::{Path, PathBuf};

pub const EXIT_OK: i32 = 0;
pub const EXIT_PROBLEM: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

/// How one check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Worth fixing; no container is broken or bypasses gpu-guard for it.
    Warning,
    /// A container would fail, or would start without gpu-guard.
    Error,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warning => "warning",
            Status::Error => "error",
        }
    }
}

/// One check: a stable name (`config`, `host.nvml`, `engine.docker`, ...),
/// its status, one line a person can act on, and the fix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub message: String,
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: impl Into<String>, message: impl Into<String>) -> Check {
        Check::new(name, Status::Ok, message, None)
    }

    pub fn warning(
        name: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check::new(name, Status::Warning, message, Some(fix.into()))
    }

    pub fn error(
        name: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check::new(name, Status::Error, message, Some(fix.into()))
    }

    fn new(
        name: impl Into<String>,
        status: Status,
        message: impl Into<String>,
        fix: Option<String>,
    ) -> Check {
        let one = |s: String| crate::core::sanitize::one_line(&s);
        Check {
            name: name.into(),
            status,
            message: one(message.into()),
            fix: fix.map(one),
        }
    }
}

/// The node doctor looks at: its root (`--host-root`), where install
/// records state, and the config in effect there.
pub struct Node {
    pub host_root: PathBuf,
    pub state_dir: PathBuf,
    pub config: crate::core::policy::Config,
    /// The gpu-guard config file that was read (host path), if any.
    pub config_path: PathBuf,
}

impl Node {
    /// The file on this machine for a host path (lexical, never above the
    /// root: `install::Options::fs_path`).
    pub fn fs(&self, host: &Path) -> PathBuf {
        crate::install::Options::new(crate::install::Engine::Docker, &self.host_root).fs_path(host)
    }
}

/// The JSON document of `--json` (docs/interfaces.md, "`gpu-guard doctor`").
#[derive(Serialize)]
struct Report<'a> {
    status: Status,
    checks: &'a [Check],
    summary: Summary,
}

#[derive(Serialize)]
struct Summary {
    ok: usize,
    warning: usize,
    error: usize,
}

/// `gpu-guard doctor`.
pub fn main(config: Option<&Path>, args: &DoctorArgs) -> i32 {
    let (mut checks, node, config_ok) = host_checks::config_checks(config, args);
    // The probe a container start makes; under --host-root, with the
    // host's sysfs (each GPU's NUMA node) there.
    let mut paths = crate::host::ProbePaths::from_env();
    if node.host_root != Path::new("/") {
        paths.sys = node.fs(Path::new("/sys"));
        paths.host_root = node.host_root.clone();
    }
    let report = crate::host::probe_for_with(&node.config, &paths);
    let amd = amd::AmdNode::read(&node, report.facts.as_ref());
    checks.extend(host_checks::host(&node, &report, amd.has_gpus()));
    checks.extend(amd.checks());
    checks.extend(engines::all(&node));
    let driver = report
        .facts
        .as_ref()
        .and_then(|f| f.driver_version.as_deref());
    checks.extend(dirs::all(&node, driver));
    let worst = checks.iter().map(|c| c.status).max().unwrap_or(Status::Ok);
    if args.json {
        let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
        let report = Report {
            status: worst,
            checks: &checks,
            summary: Summary {
                ok: count(Status::Ok),
                warning: count(Status::Warning),
                error: count(Status::Error),
            },
        };
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("gpu-guard: error: doctor: cannot print the report: {e}");
                return EXIT_USAGE;
            }
        }
    } else {
        print!("{}", human(&checks));
    }
    match (config_ok, worst) {
        (false, _) => EXIT_USAGE,
        (true, Status::Error) => EXIT_PROBLEM,
        _ => EXIT_OK,
    }
}

/// The checks for people: one line each, the fix under it, then a count.
fn human(checks: &[Check]) -> String {
    use std::fmt::Write as _;
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        let _ = writeln!(
            out,
            "{:<7}  {:<width$}  {}",
            c.status.word(),
            c.name,
            c.message
        );
        if let Some(fix) = &c.fix {
            let _ = writeln!(out, "{:<7}  {:<width$}  fix: {fix}", "", "");
        }
    }
    let n = |s: Status| checks.iter().filter(|c| c.status == s).count();
    let plural = |k: usize, w: &str| format!("{k} {w}{}", if k == 1 { "" } else { "s" });
    let _ = writeln!(
        out,
        "{}, {}, {} ok{}",
        plural(n(Status::Error), "error"),
        plural(n(Status::Warning), "warning"),
        n(Status::Ok),
        if n(Status::Error) > 0 {
            ": containers would fail or bypass gpu-guard on this node"
        } else {
            ""
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_lists_each_check_and_its_fix() {
        let checks = vec![
            Check::ok("config", "fine"),
            Check::error("chain.docker", "missing\nline", "install it"),
        ];
        let t = human(&checks);
        assert!(t.contains("ok       config        fine"), "{t}");
        assert!(t.contains("error    chain.docker  missing | line"), "{t}");
        assert!(t.contains("fix: install it"), "{t}");
        assert!(t.ends_with("1 error, 0 warnings, 1 ok: containers would fail or bypass gpu-guard on this node\n"), "{t}");
        let j = serde_json::to_value(&checks[1]).unwrap();
        assert_eq!(j["status"], "error");
        assert_eq!(j["fix"], "install it");
        assert_eq!(
            serde_json::to_value(&checks[0]).unwrap()["fix"],
            serde_json::Value::Null
        );
    }
}
