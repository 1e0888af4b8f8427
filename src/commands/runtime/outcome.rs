//! What the wrapper's second step hands to the third: the decision to log
//! and what to do about the invocation.

use crate::core::decision::{Decision, Verdict};
use crate::oci::marker::Marker;
use std::path::PathBuf;

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
