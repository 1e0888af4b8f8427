//! The wrapper's second step for `exec`: one policy for a process exec'd
//! into a container, as for the container at create (core::exec_policy has
//! the rules).
//!
//! `docker exec` builds a fresh process with docker's default capabilities
//! and its own noNewPrivileges (moby daemon/exec_linux.go) and runc applies
//! it as given, so without this an exec'd shell in a GPU container would
//! get back what the policy dropped. The argv stays byte-identical; a
//! process file is edited in place. Which container is entered, and
//! whether it is a GPU container, comes from the create-time marker (one
//! file read, oci::marker) or, without one, from the real runtime's
//! `state` and the bundle's config.json.

use crate::commands::runtime::outcome::{Act, Effects, Outcome};
use crate::commands::runtime::parse::Call;
use crate::core::container::Container;
use crate::core::decide::{config_error, unreadable_spec};
use crate::core::exec_policy::{self, ExecChange, Target};
use crate::core::policy::{ApplyTo, Mode};
use crate::oci::marker;
use crate::oci::spec_file::{self, LoadedProcess, LoadedSpec};
use crate::pipeline::{self, Policy};
use std::path::{Path, PathBuf};

/// Decides an exec: with a process file (runc ignores the other flags
/// then), or the flags on top of the bundle's process; a plain exec runs
/// the bundle's process as edited at create.
pub fn outcome(
    policy: &Policy,
    call: &Call,
    process: Option<&Path>,
    change: &ExecChange,
    real: &Path,
) -> Outcome {
    if policy.mode() == Mode::Off || (process.is_none() && !change.any()) {
        return Outcome::pass();
    }
    match process {
        Some(path) => process_file(policy, call, path, real),
        None => flags(policy, call, change, real),
    }
}

/// The container an exec enters: whether it is a GPU container, and its
/// spec when that is needed (a GPU container's, for its exception and
/// tuning; any container's when the security policy applies to all).
struct Entered {
    gpu: bool,
    spec: Option<LoadedSpec>,
}

impl Entered {
    fn target(&self, id: Option<String>) -> Target<'_> {
        let own = self.spec.as_ref().and_then(|s| s.view.process.as_ref());
        Target {
            id,
            container: self.spec.as_ref().map(|s| &s.container),
            own_labels: own.map(|p| (p.selinux_label.as_str(), p.apparmor_profile.as_str())),
            gpu: self.gpu,
        }
    }
}

/// The marker answers with one file read; without one (a container created
/// before gpu-guard, or by another path) the real runtime is asked
/// (`state`), and the bundle's config.json classified. `gpu_process`: the
/// exec'd process asks for GPUs itself, so the policy applies to it
/// whatever the container is.
fn entered(policy: &Policy, call: &Call, real: &Path, gpu_process: bool) -> Entered {
    // The container's CRI facts are believed as they were at its create:
    // by the runtime root the engine passes (core::cri_facts).
    let load = |b: &Path| {
        let mut s = spec_file::load(&b.join("config.json"), Some(b)).ok()?;
        s.container.cri_runtime = call.cri;
        Some(s)
    };
    let classify = |s: &LoadedSpec| {
        pipeline::classify(s.container.clone(), Some(real), policy.detect())
            .1
            .gpu
    };
    let all = policy
        .config()
        .is_ok_and(|c| c.security.apply_to == ApplyTo::All);
    let marked = call
        .id
        .as_deref()
        .and_then(|id| marker::read(call.root(), id));
    if let Some(m) = marked {
        // A CPU container keeps its exception profile for execs the policy
        // applies to: its spec is read for its annotations.
        if !m.gpu && !all && !gpu_process {
            return Entered {
                gpu: false,
                spec: None,
            };
        }
        let spec = load(&m.bundle);
        // The marker said GPU; a bundle that cannot be read is still one,
        // and so is one entered under a config that cannot be used: what
        // was decided at create stands until the config is fixed.
        let gpu =
            m.gpu && (policy.config().is_err() || spec.as_ref().map(classify).unwrap_or(true));
        return Entered { gpu, spec };
    }
    let spec = container_bundle(real, call).and_then(|b| load(&b));
    Entered {
        gpu: spec.as_ref().is_some_and(classify),
        spec,
    }
}

/// `exec` without a process file whose flags change privileges: held to
/// the container's profile.
fn flags(policy: &Policy, call: &Call, change: &ExecChange, real: &Path) -> Outcome {
    let entered = entered(policy, call, real, false);
    let cfg = match policy.config() {
        Ok(c) => c,
        Err(e) => return invalid_config(e, call, &Container::default(), entered.gpu),
    };
    match exec_policy::flags_decision(&entered.target(call.id.clone()), change, cfg) {
        Some(d) => Outcome::decided(d, Effects::default()),
        None => Outcome::pass(),
    }
}

/// `exec --process FILE`.
fn process_file(policy: &Policy, call: &Call, path: &Path, real: &Path) -> Outcome {
    let loaded = crate::sys::fsutil::read_limited(path, spec_file::MAX_SPEC_BYTES)
        .map_err(|e| e.to_string())
        .and_then(LoadedProcess::from_bytes);
    let process = match loaded {
        Ok(p) => p,
        Err(e) => return unreadable_process(policy, call, path, &e, real),
    };
    let mut c = Container::from_process(&process.view);
    c.id = call.id.clone();
    let (c, own) = pipeline::classify(c, Some(real), policy.detect());
    let entered = entered(policy, call, real, own.gpu);
    // Whether the container is a GPU container is in its bundle's
    // config.json (docker --gpus puts NVIDIA_VISIBLE_DEVICES in the OCI
    // spec, not in the env it gives exec'd processes); the process may ask
    // for GPUs itself.
    let mut target = entered.target(call.id.clone());
    target.gpu |= own.gpu;
    let cfg = match policy.config() {
        Ok(cfg) => cfg,
        Err(e) => return invalid_config(e, call, &c, target.gpu),
    };
    let Some(decision) = exec_policy::process_decision(&c, &target, cfg) else {
        return Outcome::pass();
    };
    let mut effects = Effects::default();
    if decision.verdict != crate::core::decision::Verdict::Refuse {
        match process.patched(&decision.edits) {
            Ok(Some(bytes)) => effects.write = Some((path.to_path_buf(), bytes)),
            Ok(None) => {}
            Err(e) if cfg.mode == Mode::Enforce => {
                return Outcome {
                    decision: Some(decision),
                    act: Act::EditFailed(e.to_string()),
                }
            }
            Err(e) => effects.aside = Some(format!("edits not applied: {e}")),
        }
    }
    Outcome::decided(decision, effects)
}

/// A process file that cannot be read. No file: runc fails on it too. A
/// file we cannot read is refused when it, or the container, is GPU.
fn unreadable_process(policy: &Policy, call: &Call, path: &Path, e: &str, real: &Path) -> Outcome {
    let exists = std::fs::metadata(path).is_ok_and(|m| m.is_file());
    let mention = exists
        && (spec_file::file_mentions_gpu(path).unwrap_or(false)
            || entered(policy, call, real, false).gpu);
    let why = format!("cannot read the exec process file {}: {e}", path.display());
    let decision = unreadable_spec(policy.mode(), call.id.clone(), &why, mention);
    Outcome::decided(
        decision,
        Effects {
            aside: Some(why),
            ..Effects::default()
        },
    )
}

/// An exec under a config that cannot be used: refused when it enters a
/// GPU container (or runs a GPU process), as create refuses one.
fn invalid_config(
    e: &crate::config::ConfigError,
    call: &Call,
    c: &Container,
    gpu: bool,
) -> Outcome {
    let mut d = config_error(&e.to_string(), &e.path, c, gpu);
    d.container_id = call.id.clone();
    Outcome::decided(d, Effects::default())
}

/// The bundle of a running container, from `<runtime> [--root R] state ID`
/// (runtime-spec "state": every runtime reports `bundle`).
fn container_bundle(real: &Path, call: &Call) -> Option<PathBuf> {
    let id = call.id.as_ref()?;
    let mut cmd = std::process::Command::new(real);
    if let Some(root) = &call.root {
        cmd.arg("--root").arg(root);
    }
    let out = cmd
        .arg("state")
        .arg(id)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v.get("bundle")?.as_str().map(PathBuf::from)
}
