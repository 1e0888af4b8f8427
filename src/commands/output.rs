//! What `check` prints and the exit status it returns (docs/interfaces.md,
//! "`gpu-guard check`"): 0 when the container would start (allow or skip),
//! 1 when it is refused, 2 for bad usage or unreadable input. Shared by the
//! one-container, image and fleet forms of `check`.

use crate::core::decision::{Decision, Verdict};
use crate::core::report;

pub const EXIT_ALLOW: i32 = 0;
pub const EXIT_REFUSE: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

/// Bad usage or unreadable input: one line on stderr, exit 2.
pub fn usage(msg: impl std::fmt::Display) -> i32 {
    eprintln!(
        "gpu-guard: error: {}",
        crate::core::sanitize::one_line(&msg.to_string())
    );
    EXIT_USAGE
}

/// Prints one decision (JSON or for people) and returns its exit status.
pub fn print_decision(decision: &Decision, json: bool) -> i32 {
    print_decision_strict(decision, json, false)
}

/// [`print_decision`]; `strict`: a container allowed where a finding
/// predicts it fails (`check --strict`) exits 1 too.
pub fn print_decision_strict(decision: &Decision, json: bool, strict: bool) -> i32 {
    if json {
        match serde_json::to_string_pretty(decision) {
            Ok(s) => println!("{s}"),
            Err(e) => return usage(format!("cannot print the decision: {e}")),
        }
    } else {
        print!("{}", report::human(decision));
    }
    match decision.verdict {
        Verdict::Refuse => EXIT_REFUSE,
        Verdict::Allow if strict && !crate::fleet::placement::runs(decision) => {
            if !json {
                println!("--strict: a finding predicts this container fails here: exit 1");
            }
            EXIT_REFUSE
        }
        Verdict::Allow | Verdict::Skip => EXIT_ALLOW,
    }
}
