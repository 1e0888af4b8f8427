//! The wrapper's second step: what to do about the invocation, decided
//! through the pipeline under the one [`Policy`] (so create, restore and
//! exec treat an invalid config alike). It reads what it must (the spec,
//! the exec process file, the create-time marker) and writes nothing: the
//! [`Outcome`] says what the third step carries out.

use crate::commands::runtime::parse::{Call, What};
use crate::core::decide::unreadable_spec;
use crate::core::decision::{Decision, Verdict};
use crate::core::policy::Mode;
use crate::core::security::Stage;
use crate::oci::marker::Marker;
use crate::oci::spec_file;
use crate::pipeline::{self, Case, HostChoice, Policy};
use std::path::{Path, PathBuf};

/// What the third step does.
pub struct Outcome {
    /// The decision to log (None: nothing was decided).
    pub decision: Option<Decision>,
    pub act: Act,
}

pub enum Act {
    /// Refuse the invocation: the decision's diagnosis goes to the runtime
    /// log and stderr; the real runtime is not run.
    Refuse,
    /// The edits could not be made: the process must not start without the
    /// policy it was decided under.
    EditFailed(String),
    /// Run the real runtime with the argv unchanged, after these effects.
    Run(Effects),
}

/// What is written before the real runtime runs.
#[derive(Default)]
pub struct Effects {
    /// A file replaced by its patched bytes (the bundle's config.json, or
    /// the exec process file).
    pub write: Option<(PathBuf, Vec<u8>)>,
    /// Why the wrapper stands aside (logged; the runtime still runs).
    pub aside: Option<String>,
    pub marker: MarkerChange,
}

/// The create-time record of a container, for its execs.
#[derive(Default)]
pub enum MarkerChange {
    #[default]
    Keep,
    Write(Marker),
    Remove,
}

impl Outcome {
    /// The real runtime runs, nothing decided or changed.
    pub fn pass() -> Outcome {
        Outcome {
            decision: None,
            act: Act::Run(Effects::default()),
        }
    }

    /// A decision: refused, or run with these effects.
    pub fn decided(decision: Decision, effects: Effects) -> Outcome {
        let act = match decision.verdict {
            Verdict::Refuse => Act::Refuse,
            _ => Act::Run(effects),
        };
        Outcome {
            decision: Some(decision),
            act,
        }
    }

    /// The runtime runs, and the wrapper says why it stood aside.
    pub fn aside(why: String) -> Outcome {
        Outcome {
            decision: None,
            act: Act::Run(Effects {
                aside: Some(why),
                ..Effects::default()
            }),
        }
    }
}

/// Decides what to do about `call`; `real` is the runtime it will exec.
pub fn outcome(policy: &Policy, call: &Call, real: &Path) -> Outcome {
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
    let case = Case::new(std::mem::take(&mut spec.container), Stage::Edit)
        .with_runtime(Some(real.to_path_buf()));
    let decision = pipeline::decide(policy, case, HostChoice::FromConfig);
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
