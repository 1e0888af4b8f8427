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
    /// `mode = "audit"`: log what enforce would do (refuse, edit) at
    /// warning level, then run the real runtime with nothing changed; the
    /// effects hold no write.
    Audit(Effects),
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

    /// The outcome under `mode = "audit"`: a decision is logged as what
    /// enforce would do, and nothing is refused or written; the create-time
    /// marker (gpu-guard's own record, not the container's) is kept, so
    /// execs are audited against the container too.
    pub fn audited(self) -> Outcome {
        if self.decision.is_none() {
            return self;
        }
        let effects = match self.act {
            Act::Run(e) | Act::Audit(e) => Effects {
                write: None,
                aside: e.aside,
                marker: e.marker,
            },
            Act::Refuse | Act::EditFailed(_) => Effects::default(),
        };
        Outcome {
            decision: self.decision,
            act: Act::Audit(effects),
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
