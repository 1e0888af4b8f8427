//! OCI hook entry points.
//!
//! - `prestart` / `createRuntime`: OCI State JSON on stdin (runtime-spec
//!   config.md "Hooks"); the bundle's config.json says what the container is.
//!   By now runc has handed env, capabilities and noNewPrivileges to the
//!   container's init (libcontainer/process_linux.go), so this stage only
//!   verifies. Exit 1 refuses (runc then fails with our stderr embedded:
//!   "error running prestart hook #N: ..., stderr: ..."), 2 means bad input.
//! - `precreate`: podman's extension stage (containers/common pkg/hooks): the
//!   config JSON on stdin, the edited config JSON on stdout.

use crate::commands::cli::HookStage;
use crate::core::container::Container;
use crate::core::decide::unreadable_spec;
use crate::core::decision::{Decision, Verdict};
use crate::core::policy::Mode;
use crate::core::report;
use crate::core::security::SpecAccess;
use crate::oci::spec::SpecView;
use crate::oci::spec_file::{self, LoadedSpec};
use crate::oci::state::{parse_state, MAX_STATE_BYTES};
use crate::pipeline::{self, ContainerInput, HostChoice, Policy};
use crate::sys::logging;
use crate::sys::metrics::{self, Entry};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

pub const EXIT_REFUSE: i32 = 1;
pub const EXIT_BAD_INPUT: i32 = 2;

fn bad_input(msg: impl std::fmt::Display) -> i32 {
    eprintln!(
        "gpu-guard hook: {}",
        crate::core::sanitize::one_line(&msg.to_string())
    );
    EXIT_BAD_INPUT
}

fn read_stdin(limit: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    std::io::stdin()
        .lock()
        .take(limit + 1)
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("more than {limit} bytes on stdin"),
        ));
    }
    Ok(buf)
}

pub fn main(config_flag: Option<&Path>, stage: HookStage) -> i32 {
    metrics::mark_start();
    match stage {
        HookStage::Prestart | HookStage::CreateRuntime => prestart(config_flag),
        HookStage::Precreate => precreate(config_flag),
    }
}

fn prestart(config_flag: Option<&Path>) -> i32 {
    let input = match read_stdin(MAX_STATE_BYTES) {
        Ok(b) => b,
        Err(e) => return bad_input(format!("cannot read OCI state from stdin: {e}")),
    };
    let state = match parse_state(&input) {
        Ok(s) => s,
        Err(e) => return bad_input(e),
    };
    let spec_path = state.bundle.join("config.json");
    let mut container = match spec_file::load(&spec_path, Some(&state.bundle)) {
        Ok(s) => s.container,
        // No file to read at all: the state names a bundle runc did not use.
        Err(e @ spec_file::SpecFileError::Read { .. })
            if !std::fs::metadata(&spec_path).is_ok_and(|m| m.is_file()) =>
        {
            return bad_input(e)
        }
        Err(e) => {
            return unreadable(
                config_flag,
                state.id,
                &e.to_string(),
                Entry::Prestart,
                || spec_file::file_mentions_gpu(&spec_path).unwrap_or(false),
            )
        }
    };
    container.id = state.id;
    let policy = Policy::load(config_flag);
    let decision = hook_decision(&policy, container, SpecAccess::Verify);
    if refuses(&policy, &decision) {
        eprint!("{}", report::refusal(&decision));
        return EXIT_REFUSE;
    }
    0
}

/// Whether the hook refuses: the verdict says so, and the mode acts on it
/// (under `mode = "audit"` the verdict is enforce's, logged, not acted on).
fn refuses(policy: &Policy, d: &Decision) -> bool {
    d.verdict == Verdict::Refuse && policy.mode() != Mode::Audit
}

/// A spec the hook cannot read: refused only when it names a
/// GPU request (enforce mode); any other container is let through, as runc
/// will judge the spec itself.
fn unreadable(
    config_flag: Option<&Path>,
    id: Option<String>,
    error: &str,
    entry: Entry,
    mentions_gpu: impl FnOnce() -> bool,
) -> i32 {
    let policy = Policy::load(config_flag);
    let decision = unreadable_spec(policy.mode(), id, error, mentions_gpu());
    logged(&policy, &decision, entry);
    if refuses(&policy, &decision) {
        eprint!("{}", report::refusal(&decision));
        return EXIT_REFUSE;
    }
    logging::stood_aside(
        &format!("standing aside: {error}"),
        &policy.syslog(),
        logging::Fallback::Stderr,
    );
    0
}

/// Decides through the pipeline and logs. No runtime is chained to a
/// hook, and a hook has no evidence of which engine runs the container
/// (podman writes CRI-O's keys itself): its CRI facts are never believed.
fn hook_decision(policy: &Policy, container: Container, stage: SpecAccess) -> Decision {
    let decision = pipeline::decide_container(
        policy,
        ContainerInput::new(container, stage),
        HostChoice::FromConfig,
    );
    let entry = match stage {
        SpecAccess::Verify => Entry::Prestart,
        SpecAccess::Edit => Entry::Precreate,
    };
    logged(policy, &decision, entry);
    decision
}

/// Logs a decision (under `mode = "audit"` or `"warn"` what enforce would
/// refuse, at warning level) and counts it in the metrics
/// (`metrics.textfile`).
fn logged(policy: &Policy, decision: &Decision, entry: Entry) {
    let fallback = logging::Fallback::Stderr;
    let mode = policy.mode();
    logging::record(decision, mode, &policy.syslog(), fallback.clone());
    metrics::count(
        policy.metrics(),
        decision,
        (entry, mode),
        &policy.syslog(),
        fallback,
    );
}

fn precreate(config_flag: Option<&Path>) -> i32 {
    let input = match read_stdin(spec_file::MAX_SPEC_BYTES) {
        Ok(b) => b,
        Err(e) => return bad_input(format!("cannot read the config from stdin: {e}")),
    };
    let spec = match LoadedSpec::parse(Path::new("<stdin>"), input, None) {
        Ok(s) => s,
        Err(e) => return precreate_unreadable(config_flag, e),
    };
    let policy = Policy::load(config_flag);
    let decision = hook_decision(&policy, spec.container.clone(), SpecAccess::Edit);
    if policy.mode() == Mode::Audit {
        // Decided and logged; the config goes back byte for byte.
        return write_stdout(&spec.bytes);
    }
    let edits = if decision.verdict == Verdict::Refuse {
        if !has_gpu_guard_prestart(&spec.view) {
            eprint!("{}", report::refusal(&decision));
            return EXIT_REFUSE;
        }
        // podman discards a precreate hook's stderr and reports only "exit
        // status 1" (containers/common pkg/hooks/exec RuntimeConfigFilter
        // runs the hook with no stderr), while runc embeds a prestart hook's
        // stderr in its error, which podman prints. podman adds the hooks.d
        // prestart hooks to the config before precreate runs, so when ours
        // is there we let it refuse: same decision, and the user sees why.
        // The policy edits still go in, so the prestart check reports only
        // what really blocks the container.
        &decision.withheld_edits
    } else {
        &decision.edits
    };
    // Unchanged configs go back byte for byte.
    let output = match spec.patched(edits) {
        Ok(Some(b)) => b,
        Ok(None) => spec.bytes.clone(),
        Err(e) => {
            if decision.gpu_container && policy.mode() == Mode::Enforce {
                eprintln!("gpu-guard hook: cannot apply the policy edits: {e}");
                return EXIT_REFUSE;
            }
            spec.bytes.clone()
        }
    };
    write_stdout(&output)
}

fn write_stdout(output: &[u8]) -> i32 {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(output).and_then(|_| out.flush()) {
        return bad_input(format!("cannot write the config to stdout: {e}"));
    }
    0
}

/// precreate on a config it cannot read: refused when it names a GPU
/// request (enforce mode), else passed through unchanged.
fn precreate_unreadable(config_flag: Option<&Path>, e: (spec_file::SpecFileError, Vec<u8>)) -> i32 {
    let (err, input) = e;
    let code = unreadable(
        config_flag,
        None,
        &err.to_string(),
        Entry::Precreate,
        || spec_file::mentions_gpu(&input),
    );
    if code != 0 {
        return code;
    }
    write_stdout(&input)
}

/// True when the config runs this very binary as `... hook
/// prestart|createRuntime`, so the refusal can be handed to it.
///
/// "This binary" is the file at /proc/self/exe, compared by device and inode
/// (std::fs::metadata follows links, so a symlink or a hard link to it
/// counts). A basename test ("starts with gpu-guard") would hand the refusal
/// to any program someone named gpu-guard-anything: that hook need not
/// refuse, and the container this decision refused would start.
fn has_gpu_guard_prestart(spec: &SpecView) -> bool {
    match std::fs::metadata("/proc/self/exe") {
        Ok(me) => has_prestart_of(spec, (me.dev(), me.ino())),
        // Without knowing ourselves, refuse here rather than trust a name.
        Err(_) => false,
    }
}

/// [`has_gpu_guard_prestart`] against the binary with this (device, inode).
fn has_prestart_of(spec: &SpecView, exe: (u64, u64)) -> bool {
    spec.hooks_by_stage().iter().any(|(stage, h)| {
        (*stage == "prestart" || *stage == "createRuntime")
            && h.args.iter().any(|a| a == "hook")
            && h.args
                .iter()
                .any(|a| a == "prestart" || a == "createRuntime")
            && is_binary(&h.path, exe)
    })
}

/// True when `path` (absolute, as the runtime-spec requires of hook paths)
/// names the file with this (device, inode).
fn is_binary(path: &str, exe: (u64, u64)) -> bool {
    if !path.starts_with('/') {
        return false;
    }
    std::fs::metadata(path)
        .map(|m| m.is_file() && (m.dev(), m.ino()) == exe)
        .unwrap_or(false)
}
