//! `gpu-guard runtime ARGS...` / `gpu-guard-runtime ARGS...`: an OCI runtime
//! wrapper for docker, containerd and CRI-O.
//!
//! On `create` and `run` it decides before the container exists — the only
//! moment env, capabilities and noNewPrivileges can still change (runc sends
//! them to init before any hook runs, libcontainer/process_linux.go) — then
//! execs the real runtime with the argv unchanged. Every other subcommand is
//! exec'd byte for byte. A refusal is written as one logrus-style JSON line to
//! the `--log` file: containerd's shim reports the last `"level":"error"` line
//! as `OCI runtime create failed: <msg>` (containerd pkg/process/utils.go
//! getLastRuntimeError), which is what `docker run` prints.

use crate::commands::pipeline::{self, HostChoice};
use crate::commands::runtime_exec::{container_bundle, exec_real};
use crate::config::{self, ConfigError};
use crate::core::decision::{Check, Decision, Finding, Verdict};
use crate::core::policy::{Config, Mode};
use crate::core::report;
use crate::core::security::Stage;
use crate::oci::marker;
use crate::oci::runtime_args::{parse, Invocation};
use crate::oci::spec_file;
use crate::sys::logging;
use std::ffi::OsString;
use std::path::Path;

pub use crate::commands::runtime_exec::{find_real_runtime, RuntimeError};

pub fn main(config_flag: Option<&Path>, args: Vec<OsString>) -> i32 {
    let cfg: Result<Config, ConfigError> = config::load(config_flag);
    let configured = cfg
        .as_ref()
        .map(|c| c.runtime.path.clone())
        .unwrap_or_default();
    let real = match find_real_runtime(&configured) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpu-guard-runtime: {e}");
            return 127;
        }
    };
    let inv = parse(&args);
    match inv.command.as_deref() {
        Some("create") | Some("run") => guard_create(&cfg, &inv, &real, &args),
        Some("exec") => guard_exec(&cfg, &inv, &real, &args),
        Some("delete") => {
            if let Some(id) = &inv.id {
                marker::remove(inv.root.as_deref(), id);
            }
            exec_real(&real, &args)
        }
        _ => exec_real(&real, &args),
    }
}

/// The log fallback for decisions: the runtime's --log file, never stderr.
fn log_fallback(inv: &Invocation) -> logging::Fallback {
    logging::Fallback::RuntimeLog(inv.log.clone())
}

/// Reports a refusal: JSON line in --log (what containerd shows), and stderr.
fn refuse(inv: &Invocation, decision: &Decision) -> i32 {
    let line = report::refusal_line(decision);
    if let Some(log) = &inv.log {
        if let Err(e) = logging::append_runtime_log(log, "error", &line) {
            eprintln!("gpu-guard-runtime: cannot write {}: {e}", log.display());
        }
    }
    eprint!("{}", report::refusal(decision));
    1
}

/// Reports that edits could not be written; the process must not start
/// without the policy it was decided under.
fn edit_failed(inv: &Invocation, e: &dyn std::fmt::Display) -> i32 {
    let msg = format!("gpu-guard could not apply its edits: {e}");
    if let Some(log) = &inv.log {
        let _ = logging::append_runtime_log(log, "error", &msg);
    }
    eprintln!("gpu-guard-runtime: {msg}");
    1
}

fn shown_id(inv: &Invocation) -> String {
    inv.id
        .as_deref()
        .map(crate::core::sanitize::esc)
        .unwrap_or_else(|| "-".into())
}

/// Logs why the wrapper stands aside for this invocation.
fn stood_aside(cfg: &Result<Config, ConfigError>, inv: &Invocation, why: &str) {
    logging::stood_aside(
        &format!("standing aside for container {}: {why}", shown_id(inv)),
        &pipeline::syslog_target(cfg),
        // The runtime log, else stderr only when the real runtime will
        // fail anyway (no --log): stderr must not leak into a running
        // container's output.
        match &inv.log {
            Some(l) => logging::Fallback::RuntimeLog(Some(l.clone())),
            None => logging::Fallback::Stderr,
        },
    );
}

fn mode_of(cfg: &Result<Config, ConfigError>) -> Mode {
    // An unusable config refuses GPU containers (decide.rs config_error).
    cfg.as_ref().map(|c| c.mode).unwrap_or(Mode::Enforce)
}

/// The decision for a spec gpu-guard cannot read (issue 10 B2): runc may
/// still run it, so it is decided from what is certain. A file that
/// mentions a GPU request ([`spec_file::mentions_gpu`]) is refused in
/// enforce mode, naming the error; in warn mode the refusal is logged and
/// the container starts. Any other file is none of gpu-guard's business:
/// the verdict is skip and the caller stands aside.
pub(crate) fn unreadable_spec(
    cfg: &Result<Config, ConfigError>,
    id: Option<String>,
    error: &str,
    mentions_gpu: bool,
) -> Decision {
    let mut d = Decision::skip();
    d.container_id = id;
    let mode = mode_of(cfg);
    if !mentions_gpu || mode == Mode::Off {
        return d;
    }
    d.gpu_container = true;
    d.findings.push(
        Finding::error(
            Check::Config,
            format!(
                "gpu-guard cannot read the container's spec ({}), and the spec names a GPU request or NVIDIA's tooling; a GPU container is not started unchecked",
                crate::core::sanitize::one_line(error)
            ),
        )
        .with_fix("write config.json as plain JSON (runc's own encoder output), or report the spec to gpu-guard's maintainers"),
    );
    if mode == Mode::Enforce {
        d.verdict = Verdict::Refuse;
    } else {
        d.verdict = Verdict::Allow;
        d.findings.push(Finding::info(
            Check::Config,
            "mode = \"warn\": gpu-guard would refuse this container; it starts anyway",
        ));
    }
    d
}

fn guard_create(
    cfg: &Result<Config, ConfigError>,
    inv: &Invocation,
    real: &Path,
    args: &[OsString],
) -> i32 {
    let bundle = match &inv.bundle {
        Some(b) => b.clone(),
        None => match std::env::current_dir() {
            Ok(d) => d,
            Err(e) => {
                stood_aside(
                    cfg,
                    inv,
                    &format!("no bundle: cannot read the working directory: {e}"),
                );
                return exec_real(real, args);
            }
        },
    };
    let spec_path = match &inv.config {
        Some(c) => bundle.join(c),
        None => bundle.join("config.json"),
    };
    let mut spec = match spec_file::load(&spec_path, Some(&bundle)) {
        Ok(s) => s,
        Err(e) => {
            let mention = spec_file::file_mentions_gpu(&spec_path).unwrap_or(false);
            let decision = unreadable_spec(cfg, inv.id.clone(), &e.to_string(), mention);
            logging::record(&decision, &pipeline::syslog_target(cfg), log_fallback(inv));
            if decision.verdict == Verdict::Refuse {
                return refuse(inv, &decision);
            }
            // The real runtime reports its own, better error about the bundle.
            stood_aside(cfg, inv, &format!("{e}; the real runtime will report it"));
            return exec_real(real, args);
        }
    };
    spec.container.id = inv.id.clone();
    // NVIDIA's runtime behind us acts on the env's GPU requests (detect.rs).
    spec.container.chained_runtime = Some(real.to_string_lossy().into_owned());
    let decision = pipeline::assess(cfg, &spec.container, Stage::Edit, HostChoice::FromConfig);
    logging::record(&decision, &pipeline::syslog_target(cfg), log_fallback(inv));
    if decision.verdict == Verdict::Refuse {
        return refuse(inv, &decision);
    }
    match spec.patched(&decision.edits) {
        Ok(Some(bytes)) => {
            if let Err(e) = spec_file::write(&spec.path, &bytes) {
                return edit_failed(inv, &e);
            }
        }
        Ok(None) => {}
        Err(e) if mode_of(cfg) == Mode::Enforce => return edit_failed(inv, &e),
        Err(e) => stood_aside(cfg, inv, &format!("edits not applied: {e}")),
    }
    if let Some(id) = &inv.id {
        let m = marker::Marker {
            gpu: decision.gpu_container,
            bundle: std::path::absolute(&bundle).unwrap_or(bundle.clone()),
        };
        if let Err(e) = marker::write(inv.root.as_deref(), id, &m) {
            stood_aside(
                cfg,
                inv,
                &format!("cannot record the container for exec: {e}"),
            );
        }
    }
    exec_real(real, args)
}

/// Is the container an exec enters a GPU container, and where is its
/// bundle? The create-time marker answers with one file read; without one
/// (a container created before gpu-guard, or by another path) the real
/// runtime is asked (`state`), and the bundle's config.json classified.
fn exec_target(
    cfg: &Config,
    inv: &Invocation,
    real: &Path,
) -> (bool, Option<spec_file::LoadedSpec>) {
    let load = |b: &Path| spec_file::load(&b.join("config.json"), Some(b)).ok();
    let classify = |s: &spec_file::LoadedSpec| {
        let mut main = s.container.clone();
        main.chained_runtime = Some(real.to_string_lossy().into_owned());
        crate::core::detect::classify_with(&main, &cfg.detect).gpu
    };
    if let Some(m) = inv
        .id
        .as_deref()
        .and_then(|id| marker::read(inv.root.as_deref(), id))
    {
        if !m.gpu {
            return (false, None);
        }
        let spec = load(&m.bundle);
        // The marker said GPU; a bundle that cannot be read is still one.
        let gpu = spec.as_ref().map(classify).unwrap_or(true);
        return (gpu, spec);
    }
    let spec = container_bundle(real, inv).and_then(|b| load(&b));
    (spec.as_ref().is_some_and(classify), spec)
}

/// `exec --process P.json ID`: `docker exec` builds a fresh process with
/// docker's default capabilities and its own noNewPrivileges (moby
/// daemon/exec_linux.go), and runc applies them as given, so without this an
/// exec'd shell in a GPU container would get back what the policy dropped.
/// The argv stays byte-identical; the process file is edited in place. The
/// container was already admitted, so no requirement is checked again: the
/// security policy applies, and the tuning variables the main process got.
///
/// containerd (CRI ExecSync, pkg/cri/server/container_execsync.go: the
/// container's stored `spec.Process` with new args) and docker (moby
/// daemon/exec.go: the container's Config.Env plus `exec -e`) build the
/// exec process from their own copy of the spec, not from the bundle this
/// wrapper edited at create, so the exec'd process would miss the tuning
/// variables. The bundle's config.json holds what the main process got:
/// each tuning variable set there and not set in the exec process is added
/// with the bundle's value. A variable the exec process sets keeps its value.
///
/// `exec ID CMD` without `--process`: runc runs the bundle's `process`
/// (edited at create) with the command line's flags on top (runc exec.go
/// getProcess: `--cap` adds to the sets, `--no-new-privs[=false]`,
/// `--process-label`, `--apparmor`); those are held to the policy by
/// [`exec_flags`].
fn guard_exec(
    cfg: &Result<Config, ConfigError>,
    inv: &Invocation,
    real: &Path,
    args: &[OsString],
) -> i32 {
    let cfg = match cfg {
        Ok(c) => c,
        Err(e) => {
            stood_aside(cfg, inv, &format!("exec not checked: {e}"));
            return exec_real(real, args);
        }
    };
    if cfg.mode == Mode::Off {
        return exec_real(real, args);
    }
    let Some(path) = &inv.process else {
        if !inv.exec.any() {
            // runc reads the bundle's process, as edited at create.
            return exec_real(real, args);
        }
        return exec_flags(cfg, inv, real, args);
    };
    let loaded = crate::sys::fsutil::read_limited(path, spec_file::MAX_SPEC_BYTES)
        .map_err(|e| e.to_string())
        .and_then(spec_file::LoadedProcess::from_bytes);
    let process = match loaded {
        Ok(p) => p,
        Err(e) => {
            // No file: runc fails on it too. A file we cannot read is
            // refused when it, or the container, is GPU.
            let exists = std::fs::metadata(path).is_ok_and(|m| m.is_file());
            let mention = exists
                && (spec_file::file_mentions_gpu(path).unwrap_or(false)
                    || exec_target(cfg, inv, real).0);
            let why = format!("cannot read the exec process file {}: {e}", path.display());
            let decision = unreadable_spec(&Ok(cfg.clone()), inv.id.clone(), &why, mention);
            logging::record(&decision, &cfg.log.target(), log_fallback(inv));
            if decision.verdict == Verdict::Refuse {
                return refuse(inv, &decision);
            }
            stood_aside(&Ok(cfg.clone()), inv, &why);
            return exec_real(real, args);
        }
    };
    let mut c = crate::core::container::Container::from_process(&process.view);
    c.id = inv.id.clone();
    c.chained_runtime = Some(real.to_string_lossy().into_owned());
    // Whether the container is a GPU container is in its bundle's config.json
    // (docker --gpus puts NVIDIA_VISIBLE_DEVICES in the OCI spec, not in the
    // env it gives exec'd processes).
    let (bundle_gpu, bundle) = exec_target(cfg, inv, real);
    if let Some(b) = &bundle {
        // The exec'd process belongs to that container: its security
        // exception (chosen by the CRI annotations of the container's own
        // spec; a process.json has none) applies to it too.
        c.annotations = b.container.annotations.clone();
    }
    let gpu = bundle_gpu || crate::core::detect::classify_with(&c, &cfg.detect).gpu;
    if !gpu && cfg.security.apply_to != crate::core::policy::ApplyTo::All {
        return exec_real(real, args);
    }
    let mut decision = crate::core::decide::security_only(&c, gpu, cfg, Stage::Edit);
    if gpu && decision.verdict != Verdict::Refuse {
        if let Some(b) = &bundle {
            decision.edits.env = tuning_from_bundle(&b.container.env, &c.env, cfg);
        }
    }
    logging::record(&decision, &cfg.log.target(), log_fallback(inv));
    if decision.verdict == Verdict::Refuse {
        return refuse(inv, &decision);
    }
    match process.patched(&decision.edits) {
        Ok(Some(bytes)) => {
            if let Err(e) = spec_file::write(path, &bytes) {
                return edit_failed(inv, &e);
            }
        }
        Ok(None) => {}
        Err(e) if cfg.mode == Mode::Enforce => return edit_failed(inv, &e),
        Err(e) => stood_aside(&Ok(cfg.clone()), inv, &format!("edits not applied: {e}")),
    }
    exec_real(real, args)
}

/// `exec` without `--process` whose flags change privileges: refused for a
/// GPU container (or any, with `security.apply_to = "all"`) when they
/// leave the policy: a `--cap` outside the allowlist, `--no-new-privs=false`
/// where the policy sets no_new_privileges, a `--process-label` or
/// `--apparmor` other than the container's own.
fn exec_flags(cfg: &Config, inv: &Invocation, real: &Path, args: &[OsString]) -> i32 {
    let (gpu, bundle) = exec_target(cfg, inv, real);
    if !gpu && cfg.security.apply_to != crate::core::policy::ApplyTo::All {
        return exec_real(real, args);
    }
    let mut findings = Vec::new();
    let allow = cfg.capability_allowlist();
    let outside: Vec<String> = inv
        .exec
        .caps
        .iter()
        .filter(|c| crate::core::capability::normalize(c).map_or(true, |n| !allow.contains(&n)))
        .map(|c| crate::core::sanitize::esc(c))
        .collect();
    if !outside.is_empty() {
        findings.push(
            Finding::error(
                Check::Security,
                format!(
                    "runc exec --cap {} adds capabilities outside security.capabilities",
                    outside.join(", --cap ")
                ),
            )
            .with_fix("exec without --cap, or add the capability to security.capabilities in the gpu-guard config"),
        );
    }
    if cfg.security.no_new_privileges && inv.exec.no_new_privs == Some(false) {
        findings.push(
            Finding::error(
                Check::Security,
                "runc exec --no-new-privs=false turns off no_new_privileges, which security.no_new_privileges requires",
            )
            .with_fix("exec without --no-new-privs=false"),
        );
    }
    let own = bundle.as_ref().and_then(|b| b.view.process.clone());
    let labels = [
        (
            "--process-label",
            &inv.exec.process_label,
            own.as_ref().map(|p| p.selinux_label.clone()),
        ),
        (
            "--apparmor",
            &inv.exec.apparmor,
            own.as_ref().map(|p| p.apparmor_profile.clone()),
        ),
    ];
    for (flag, given, own) in labels {
        let Some(given) = given else { continue };
        if own.as_deref() != Some(given.as_str()) {
            findings.push(
                Finding::error(
                    Check::Security,
                    format!(
                        "runc exec {flag} {} runs the process under a security label other than the container's own ({})",
                        crate::core::sanitize::esc(given),
                        own.as_deref().map(crate::core::sanitize::esc).unwrap_or_else(|| "unknown".into())
                    ),
                )
                .with_fix(format!("exec without {flag}")),
            );
        }
    }
    if findings.is_empty() {
        return exec_real(real, args);
    }
    let mut d = Decision::skip();
    d.container_id = inv.id.clone();
    d.gpu_container = gpu;
    d.findings = findings;
    if cfg.mode == Mode::Enforce {
        d.verdict = Verdict::Refuse;
    } else {
        d.verdict = Verdict::Allow;
        d.findings.push(Finding::info(
            Check::Config,
            "mode = \"warn\": gpu-guard would refuse this exec; it runs anyway",
        ));
    }
    logging::record(&d, &cfg.log.target(), log_fallback(inv));
    if d.verdict == Verdict::Refuse {
        return refuse(inv, &d);
    }
    exec_real(real, args)
}

/// The tuning variables of the main process (`bundle`, the container's
/// config.json as edited at create) that the exec process (`process`) lacks.
/// Only names of the policy's tuning rules are considered; a rule whose
/// `unless_env` the exec process sets is skipped, as it was at create.
fn tuning_from_bundle(
    bundle: &crate::core::container::Env,
    process: &crate::core::container::Env,
    cfg: &Config,
) -> serde_json::Map<String, serde_json::Value> {
    let mut add = serde_json::Map::new();
    if !cfg.tuning.enabled {
        return add;
    }
    for rule in &cfg.tuning.env {
        if process.contains(&rule.name) || rule.unless_env.iter().any(|u| process.contains(u)) {
            continue;
        }
        if let Some(v) = bundle.get(&rule.name) {
            add.insert(rule.name.clone(), serde_json::Value::String(v.to_string()));
        }
    }
    add
}

#[cfg(test)]
mod tests {
    use super::tuning_from_bundle;
    use crate::core::container::Env;
    use crate::core::policy::Config;

    #[test]
    fn exec_gets_the_main_process_tuning_but_keeps_its_own_values() {
        let cfg = Config::default();
        let bundle = Env::from_entries([
            "PATH=/bin",
            "CUDA_DEVICE_ORDER=PCI_BUS_ID",
            "CUDA_DEVICE_MAX_CONNECTIONS=8",
            "TF_GPU_ALLOCATOR=cuda_malloc_async",
            "NOT_A_TUNING_VAR=x",
        ]);
        let process = Env::from_entries(["PATH=/bin", "TF_GPU_ALLOCATOR=cuda_malloc"]);
        let add = tuning_from_bundle(&bundle, &process, &cfg);
        let got: Vec<(&str, &str)> = add
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
                ("CUDA_DEVICE_MAX_CONNECTIONS", "8"),
            ]
        );
    }

    #[test]
    fn exec_tuning_respects_unless_env_and_tuning_off() {
        let mut cfg = Config::default();
        let bundle = Env::from_entries(["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]);
        let process = Env::from_entries(["PYTORCH_ALLOC_CONF=x"]);
        assert!(tuning_from_bundle(&bundle, &process, &cfg).is_empty());
        cfg.tuning.enabled = false;
        assert!(tuning_from_bundle(&bundle, &Env::default(), &cfg).is_empty());
    }
}
