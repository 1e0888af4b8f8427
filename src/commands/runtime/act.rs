//! The wrapper's third step: carry out the [`Outcome`]: log the decision,
//! refuse with the diagnosis where the engine shows it, write the patched
//! file and the marker, then exec the real runtime with the argv unchanged.
//!
//! A refusal is written as one logrus-style JSON line to the `--log` file:
//! containerd's shim reports the last `"level":"error"` line as `OCI
//! runtime create failed: <msg>` (containerd pkg/process/utils.go
//! getLastRuntimeError), which is what `docker run` prints. Other
//! lines go to syslog, else the runtime log, never stderr when the runtime
//! will run: during `create` the runtime's stderr is the container's own
//! stderr stream ([`crate::sys::logging`]).

use crate::commands::runtime::outcome::{Act, Effects, MarkerChange, Outcome};
use crate::commands::runtime::parse::Call;
use crate::core::decision::{Decision, Severity};
use crate::core::policy::{MetricsConfig, Mode, Syslog};
use crate::core::report;
use crate::oci::{marker, spec_file};
use crate::pipeline::runtime::RuntimeProblem;
use crate::sys::logging;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;

/// Carries out `outcome` for `call` (decided under `mode`), then execs
/// `real` with `args`; the exit status when it does not exec. A decision
/// is logged and counted in the metrics (`[metrics]`; None or no textfile:
/// off) first.
pub fn carry_out(
    (syslog, mode): (&Syslog, Mode),
    metrics: Option<&MetricsConfig>,
    call: &Call,
    outcome: Outcome,
    real: &Path,
    args: &[OsString],
) -> i32 {
    if let Some(d) = &outcome.decision {
        logged(syslog, mode, call, d, matches!(outcome.act, Act::Refuse));
        crate::sys::metrics::count(
            metrics,
            d,
            (crate::sys::metrics::Entry::Runtime, mode),
            syslog,
            logging::Fallback::RuntimeLog(call.log.clone()),
        );
    }
    match outcome.act {
        Act::Refuse => match &outcome.decision {
            Some(d) => refuse(call, d),
            None => 1,
        },
        Act::EditFailed(e) => edit_failed(call, &e),
        Act::Run(effects) | Act::Audit(effects) => {
            if let Err(code) = apply(syslog, call, effects) {
                return code;
            }
            exec_real(call, real, args)
        }
    }
}

/// Logs a decision's record (core::report `log_line`): to syslog, and to
/// the runtime's `--log` too when it is a refusal, or what `mode =
/// "audit"` or `"warn"` let start and enforce would refuse (or audit would
/// edit): the engine keeps that file with the container, beside its own
/// runtime messages. Never on stderr, which is the container's own during
/// create. Anything else goes to the `--log` only without syslog.
fn logged(syslog: &Syslog, mode: Mode, call: &Call, d: &Decision, refused: bool) {
    let level = report::log_level(d, mode);
    let lenient = match mode {
        Mode::Warn => d.outcome(mode) == "would_refuse",
        Mode::Audit => level >= Severity::Warning,
        _ => false,
    };
    let both = refused || lenient;
    if let (true, Some(log)) = (both, &call.log) {
        let line = report::log_line(d, mode);
        let _ = logging::append_runtime_log(log, logging::runtime_level(level), &line);
    }
    // A record already in the --log is not dropped in there again.
    let fallback = match both {
        true => logging::Fallback::RuntimeLog(None),
        false => logging::Fallback::RuntimeLog(call.log.clone()),
    };
    logging::record(d, mode, syslog, fallback);
}

/// Writes what must be written before the runtime runs. Err: the exit
/// status when it could not be, and the process must not start.
fn apply(syslog: &Syslog, call: &Call, effects: Effects) -> Result<(), i32> {
    if let Some((path, bytes)) = &effects.write {
        if let Err(e) = spec_file::write(path, bytes) {
            return Err(edit_failed(call, &e));
        }
    }
    if let Some(why) = &effects.aside {
        stood_aside(syslog, call, why);
    }
    let Some(id) = &call.id else {
        return Ok(());
    };
    match &effects.marker {
        MarkerChange::Keep => {}
        MarkerChange::Remove => marker::remove(call.root(), id),
        MarkerChange::Write(m) => {
            if let Err(e) = marker::write(call.root(), id, m) {
                let why = format!("cannot record the container for exec: {e}");
                stood_aside(syslog, call, &why);
            }
        }
    }
    Ok(())
}

/// Reports a refusal: JSON line in --log (what containerd shows), and stderr.
fn refuse(call: &Call, decision: &Decision) -> i32 {
    let line = report::refusal_line(decision);
    if let Some(log) = &call.log {
        if let Err(e) = logging::append_runtime_log(log, "error", &line) {
            eprintln!("gpu-guard-runtime: cannot write {}: {e}", log.display());
        }
    }
    eprint!("{}", report::refusal(decision));
    1
}

/// Reports that edits could not be written; the process must not start
/// without the policy it was decided under.
fn edit_failed(call: &Call, e: &dyn std::fmt::Display) -> i32 {
    let msg = format!("gpu-guard could not apply its edits: {e}");
    if let Some(log) = &call.log {
        let _ = logging::append_runtime_log(log, "error", &msg);
    }
    eprintln!("gpu-guard-runtime: {msg}");
    1
}

/// Logs why the wrapper stands aside for this invocation.
fn stood_aside(syslog: &Syslog, call: &Call, why: &str) {
    let id = call
        .id
        .as_deref()
        .map(crate::core::sanitize::esc)
        .unwrap_or_else(|| "-".into());
    logging::stood_aside(
        &format!("standing aside for container {id}: {why}"),
        syslog,
        // The runtime log, else stderr only when the real runtime will
        // fail anyway (no --log): stderr must not leak into a running
        // container's output.
        match &call.log {
            Some(l) => logging::Fallback::RuntimeLog(Some(l.clone())),
            None => logging::Fallback::Stderr,
        },
    );
}

/// Replaces this process with the real runtime, argv unchanged.
fn exec_real(call: &Call, real: &Path, args: &[OsString]) -> i32 {
    let err = std::process::Command::new(real).args(args).exec();
    let msg = format!(
        "gpu-guard-runtime cannot exec the real runtime {}: {err}",
        real.display()
    );
    no_runtime_line(call, &msg)
}

/// No real runtime to exec (missing, not executable, gpu-guard itself):
/// nothing can start, GPU or not. Says so, with the fix, where the engine
/// shows it: an error line in the `--log` file (containerd's shim reports
/// the last one as `OCI runtime create failed: ...`) and stderr.
pub fn no_runtime(call: &Call, p: &RuntimeProblem) -> i32 {
    no_runtime_line(call, &format!("{} (fix: {})", p.message, p.fix))
}

fn no_runtime_line(call: &Call, msg: &str) -> i32 {
    let msg = crate::core::sanitize::one_line(msg);
    if let Some(log) = &call.log {
        let _ = logging::append_runtime_log(log, "error", &format!("gpu-guard: {msg}"));
    }
    eprintln!("gpu-guard-runtime: {msg}");
    // 127: the convention for "command could not be run".
    127
}
