//! The wrapper's second step: what to do about the invocation, decided
//! through the pipeline under the one [`Policy`] (so create, restore and
//! exec treat an invalid config alike). It reads what it must (the spec,
//! the exec process file, the create-time marker) and writes nothing: the
//! [`Outcome`] says what the third step carries out. Starts are decided
//! here, execs in `exec.rs`.

use crate::commands::runtime::outcome::{Act, Effects, MarkerChange, Outcome};
use crate::commands::runtime::parse::{Call, What};
use crate::core::decide::unreadable_spec;
use crate::core::decision::Verdict;
use crate::core::policy::Mode;
use crate::core::security::SpecAccess;
use crate::oci::marker::Marker;
use crate::oci::spec_file;
use crate::pipeline::{self, ContainerInput, HostChoice, Policy};
use std::path::Path;

/// Decides what to do about `call`; `real` is the runtime it will exec.
/// Under `mode = "audit"` every decision is made as enforce would make it,
/// and only logged ([`Outcome::audited`]): one place, for starts and execs.
pub fn outcome(policy: &Policy, call: &Call, real: &Path) -> Outcome {
    let o = decided(policy, call, real);
    if policy.mode() == Mode::Audit {
        o.audited()
    } else {
        o
    }
}

fn decided(policy: &Policy, call: &Call, real: &Path) -> Outcome {
    match &call.what {
        What::Start { bundle, spec } => start(policy, call, bundle, spec, real),
        What::StartUnknown(why) => Outcome::aside(why.clone()),
        What::Exec { process, change } => {
            crate::commands::runtime::exec::outcome(policy, call, process.as_deref(), change, real)
        }
        What::Delete => Outcome {
            decision: None,
            act: Act::Run(Effects {
                marker: MarkerChange::Remove,
                ..Effects::default()
            }),
        },
        What::PassThrough => Outcome::pass(),
    }
}

/// `create`, `run`, `restore`: decided before the container exists, the
/// only moment env, capabilities and noNewPrivileges can still change (runc
/// sends them to init before any hook runs, libcontainer/process_linux.go).
fn start(policy: &Policy, call: &Call, bundle: &Path, spec_path: &Path, real: &Path) -> Outcome {
    let mut spec = match spec_file::load(spec_path, Some(bundle)) {
        Ok(s) => s,
        Err(e) => {
            let mention = spec_file::file_mentions_gpu(spec_path).unwrap_or(false);
            let decision = unreadable_spec(policy.mode(), call.id.clone(), &e.to_string(), mention);
            // The real runtime reports its own, better error about the bundle.
            let effects = Effects {
                aside: Some(format!("{e}; the real runtime will report it")),
                ..Effects::default()
            };
            return Outcome::decided(decision, effects);
        }
    };
    spec.container.id = call.id.clone();
    let case = ContainerInput::new(std::mem::take(&mut spec.container), SpecAccess::Edit)
        .with_runtime(Some(real.to_path_buf()))
        .with_cri(call.cri);
    let decision = pipeline::decide_container(policy, case, HostChoice::FromConfig);
    if decision.verdict == Verdict::Refuse {
        return Outcome::decided(decision, Effects::default());
    }
    let mut effects = Effects::default();
    match spec.patched(&decision.edits) {
        Ok(Some(bytes)) => effects.write = Some((spec.path.clone(), bytes)),
        Ok(None) => {}
        Err(e) if policy.mode() == Mode::Enforce => {
            return Outcome {
                decision: Some(decision),
                act: Act::EditFailed(e.to_string()),
            }
        }
        Err(e) => effects.aside = Some(format!("edits not applied: {e}")),
    }
    if call.id.is_some() {
        effects.marker = MarkerChange::Write(Marker {
            gpu: decision.gpu_container,
            bundle: std::path::absolute(bundle).unwrap_or(bundle.to_path_buf()),
        });
    }
    Outcome::decided(decision, effects)
}
