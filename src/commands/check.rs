//! `gpu-guard check`: describe one container, decide as the hook or wrapper
//! would, change nothing. Exit 0 when it would start, 1 when refused, 2 for
//! bad usage or unreadable input (docs/interfaces.md, "`gpu-guard check`").

use crate::commands::cli::CheckArgs;
use crate::commands::fleet_report;
use crate::commands::output::{print_decision, usage, EXIT_USAGE};
use crate::config;
use crate::core::container::Container;
use crate::core::decision::{Decision, Verdict};
use crate::core::security::Stage;
use crate::oci::spec_file;
use crate::pipeline::{self, Case, HostChoice, Policy};
use std::path::{Path, PathBuf};

pub fn main(config_flag: Option<&Path>, args: &CheckArgs) -> i32 {
    if args.image.is_some() {
        return crate::commands::image_check::main(config_flag, args);
    }
    if args.bundle.is_none() && args.spec.is_none() && args.env.is_empty() {
        return usage("describe a container with --bundle DIR, --spec FILE or --env KEY=VALUE");
    }
    let container = match described(args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let (Some(host), false) = (args.host.first(), fleet_report::wanted(args)) {
        // Unreadable input is a usage error here, not a refusal.
        if let Err(e) = crate::host::facts_file::read_facts_file(host) {
            return usage(e);
        }
    }
    let loaded = config::load_detailed(config_flag);
    if let Err(e) = &loaded {
        if e.unreadable {
            return usage(e);
        }
        eprintln!(
            "gpu-guard check: {}",
            crate::core::sanitize::one_line(&e.to_string())
        );
    }
    let policy = Policy::from(
        loaded
            .as_ref()
            .map(|l| l.config.clone())
            .map_err(Clone::clone),
    );
    let stage = args.stage.stage();
    let case = Case::new(container, stage).with_runtime(wrapper_runtime(stage, &policy));
    if fleet_report::wanted(args) {
        return match policy.config() {
            Ok(c) => fleet_report::main(c, case, args),
            Err(e) => usage(e),
        };
    }
    let host = match args.host.first() {
        Some(p) => HostChoice::File(p),
        None => HostChoice::FromConfig,
    };
    let mut decision = pipeline::decide(&policy, case, host);
    if let Ok(l) = &loaded {
        chained_runtime_note(&mut decision, l);
        if let Some(line) = config::drop_ins_line(l) {
            let f =
                crate::core::decision::Finding::info(crate::core::decision::Check::Config, line);
            decision.findings.push(f);
        }
    }
    let code = print_decision(&decision, args.json);
    // The decision shows what the hook and wrapper would do under this
    // config (refuse GPU containers, start the rest); the exit status is
    // the one every subcommand gives an invalid config (README, "Output
    // and exit status").
    if loaded.is_err() {
        return EXIT_USAGE;
    }
    code
}

/// The container `--spec`, `--bundle` and `--env` describe; Err is the exit
/// status of a usage error already reported.
fn described(args: &CheckArgs) -> Result<Container, i32> {
    let mut container = match (&args.spec, &args.bundle) {
        (Some(spec), bundle) => spec_file::load(spec, bundle.as_deref().or(spec.parent()))
            .map(|s| s.container)
            .map_err(usage)?,
        (None, Some(bundle)) => spec_file::load(&bundle.join("config.json"), Some(bundle))
            .map(|s| s.container)
            .map_err(usage)?,
        // No spec: the container is its environment alone, judged as run
        // with GPUs attached (as `docker run --gpus` would attach them).
        (None, None) => Container::from_env(Default::default()),
    };
    for raw in &args.env {
        let entry = raw.to_string_lossy();
        match entry.split_once('=') {
            Some((k, v)) if !k.is_empty() => container.env.set(k, v),
            _ => {
                return Err(usage(format!(
                    "--env wants KEY=VALUE, got `{}`",
                    crate::core::sanitize::esc(&entry)
                )))
            }
        }
    }
    if args.spec.is_none() && args.bundle.is_none() {
        crate::fleet::attached::env_alone_as_run_with_gpus(&mut container);
    }
    Ok(container)
}

/// The runtime the installed wrapper would exec: `--stage runtime` decides
/// as the wrapper, and NVIDIA's runtime chained there makes a GPU request
/// in the env count. The prestart hook knows no runtime.
fn wrapper_runtime(stage: Stage, policy: &Policy) -> Option<PathBuf> {
    if stage != Stage::Edit {
        return None;
    }
    pipeline::runtime::find_real_runtime(policy.runtime_path()).ok()
}

/// Which runtime the wrapper execs, when the config chains one (an info
/// finding), and the config error when that runtime is gpu-guard itself.
fn chained_runtime_note(decision: &mut Decision, l: &config::Loaded) {
    use crate::core::decision::{Check, Finding};
    let Some(line) = config::chained_runtime_line(l) else {
        return;
    };
    if config::runtime_is_self(&l.config.runtime.path) {
        decision.findings.push(
            Finding::error(
                Check::Config,
                format!("{line}: that is gpu-guard itself, so the runtime wrapper fails every container"),
            )
            .with_fix("set runtime.path to the real runtime (runc, crun, nvidia-container-runtime), or leave it empty"),
        );
        decision.verdict = Verdict::Refuse;
    } else {
        decision.findings.push(Finding::info(Check::Config, line));
    }
}
