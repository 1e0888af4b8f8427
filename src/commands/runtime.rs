//! `gpu-guard runtime ARGS...` / `gpu-guard-runtime ARGS...`: an OCI runtime
//! wrapper for docker, containerd and CRI-O.
//!
//! On `create` and `run` it decides before the container exists — the only
//! moment env, capabilities and noNewPrivileges can still change (runc sends
//! them to init before any hook runs, libcontainer/process_linux.go) — then
//! execs the real runtime with the argv unchanged. Every other subcommand is
//! exec'd byte for byte. A refusal is written as one logrus-style JSON line to
//! the `--log` file: containerd's shim reports the last `"level":"error"` line
//! as `OCI runtime create failed: <msg>` (shared/research/oci-integration.md),
//! which is what `docker run` prints.

use crate::commands::pipeline::{self, HostChoice};
use crate::commands::runtime_exec::{container_bundle, exec_real};
use crate::config::{self, ConfigError};
use crate::core::decision::{Decision, Verdict};
use crate::core::policy::Config;
use crate::core::report;
use crate::core::security::Stage;
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
            Err(_) => return exec_real(real, args),
        },
    };
    let spec_path = bundle.join("config.json");
    let mut spec = match spec_file::load(&spec_path, Some(&bundle)) {
        Ok(s) => s,
        Err(e) => {
            // The real runtime reports its own, better error about the bundle.
            logging::stood_aside(
                &format!(
                    "standing aside for container {}: {e}; the real runtime will report it",
                    inv.id
                        .as_deref()
                        .map(crate::core::sanitize::esc)
                        .unwrap_or_else(|| "-".into())
                ),
                &pipeline::syslog_target(cfg),
                // The real runtime fails on this bundle anyway, so stderr
                // cannot leak into a running container's output.
                match &inv.log {
                    Some(l) => logging::Fallback::RuntimeLog(Some(l.clone())),
                    None => logging::Fallback::Stderr,
                },
            );
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
    if spec_file::apply(&mut spec.json, &decision.edits) {
        if let Err(e) = spec_file::write(&spec.path, &spec.json) {
            return edit_failed(inv, &e);
        }
    }
    exec_real(real, args)
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
fn guard_exec(
    cfg: &Result<Config, ConfigError>,
    inv: &Invocation,
    real: &Path,
    args: &[OsString],
) -> i32 {
    let (Some(path), Ok(cfg)) = (&inv.process, cfg) else {
        return exec_real(real, args);
    };
    if cfg.mode == crate::core::policy::Mode::Off {
        return exec_real(real, args);
    }
    let bytes = match crate::sys::fsutil::read_limited(path, spec_file::MAX_SPEC_BYTES) {
        Ok(b) => b,
        Err(_) => return exec_real(real, args),
    };
    let Ok(process) = crate::oci::spec::parse_spec_bytes(&bytes) else {
        return exec_real(real, args);
    };
    let mut wrapped = serde_json::json!({ "process": process });
    let Ok(mut c) = crate::core::container::Container::from_spec(&wrapped, None) else {
        return exec_real(real, args);
    };
    c.id = inv.id.clone();
    c.chained_runtime = Some(real.to_string_lossy().into_owned());
    // Whether the container is a GPU container is in its bundle's config.json
    // (docker --gpus puts NVIDIA_VISIBLE_DEVICES in the OCI spec, not in the
    // env it gives exec'd processes).
    let bundle = container_bundle(real, inv)
        .and_then(|b| spec_file::load(&b.join("config.json"), Some(&b)).ok());
    if let Some(b) = &bundle {
        // The exec'd process belongs to that container: its security
        // exception (chosen by the CRI annotations of the container's own
        // spec; a process.json has none) applies to it too.
        c.annotations = b.container.annotations.clone();
    }
    let gpu = bundle
        .as_ref()
        .map(|s| {
            let mut main = s.container.clone();
            main.chained_runtime = c.chained_runtime.clone();
            crate::core::detect::classify_with(&main, &cfg.detect).gpu
        })
        .unwrap_or(false)
        || crate::core::detect::classify_with(&c, &cfg.detect).gpu;
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
    if spec_file::apply(&mut wrapped, &decision.edits) {
        let process = wrapped.get("process").cloned().unwrap_or_default();
        if let Err(e) = spec_file::write(path, &process) {
            return edit_failed(inv, &e);
        }
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
