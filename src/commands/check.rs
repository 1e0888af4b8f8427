//! `gpu-guard check`: describe one container, decide as the hook or wrapper
//! would, change nothing. Exit 0 when it would start, 1 when refused, 2 for
//! bad usage or unreadable input (docs/interfaces.md, "`gpu-guard check`").

use crate::commands::cli::{CheckArgs, CheckStage};
use crate::commands::fleet_report;
use crate::commands::pipeline::{self, HostChoice};
use crate::config;
use crate::core::container::Container;
use crate::core::decision::{Decision, Verdict};
use crate::core::report;
use crate::core::security::Stage;
use crate::oci::spec_file;
use std::path::Path;

pub const EXIT_ALLOW: i32 = 0;
pub const EXIT_REFUSE: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

fn usage(msg: impl std::fmt::Display) -> i32 {
    eprintln!(
        "gpu-guard check: {}",
        crate::core::sanitize::one_line(&msg.to_string())
    );
    EXIT_USAGE
}

pub fn main(config_flag: Option<&Path>, args: &CheckArgs) -> i32 {
    if args.image.is_some() {
        return crate::commands::image_check::main(config_flag, args);
    }
    if args.bundle.is_none() && args.spec.is_none() && args.env.is_empty() {
        return usage("describe a container with --bundle DIR, --spec FILE or --env KEY=VALUE");
    }
    let mut container = match (&args.spec, &args.bundle) {
        (Some(spec), bundle) => match spec_file::load(spec, bundle.as_deref().or(spec.parent())) {
            Ok(s) => s.container,
            Err(e) => return usage(e),
        },
        (None, Some(bundle)) => match spec_file::load(&bundle.join("config.json"), Some(bundle)) {
            Ok(s) => s.container,
            Err(e) => return usage(e),
        },
        // No spec: the container is its environment alone, judged as run
        // with GPUs attached (as `docker run --gpus` would attach them).
        (None, None) => Container::from_env(Default::default()),
    };
    for raw in &args.env {
        let entry = raw.to_string_lossy();
        match entry.split_once('=') {
            Some((k, v)) if !k.is_empty() => container.env.set(k, v),
            _ => {
                return usage(format!(
                    "--env wants KEY=VALUE, got `{}`",
                    crate::core::sanitize::esc(&entry)
                ))
            }
        }
    }
    if args.spec.is_none() && args.bundle.is_none() {
        crate::fleet::attached::env_alone_as_run_with_gpus(&mut container);
    }
    if let (Some(host), false) = (args.host.first(), fleet_report::wanted(args)) {
        // Unreadable input is a usage error here, not a refusal.
        if let Err(e) = crate::host::facts_file::read_facts_file(host) {
            return usage(e);
        }
    }
    let loaded = config::load_detailed(config_flag);
    let cfg = loaded
        .as_ref()
        .map(|l| l.config.clone())
        .map_err(|e| e.clone());
    if let Err(e) = &cfg {
        if e.unreadable {
            return usage(e);
        }
        eprintln!(
            "gpu-guard check: {}",
            crate::core::sanitize::one_line(&e.to_string())
        );
    }
    let stage = match args.stage {
        CheckStage::Runtime => Stage::Edit,
        CheckStage::Prestart => Stage::Verify,
    };
    if fleet_report::wanted(args) {
        return match &cfg {
            Ok(c) => fleet_report::main(c, &container, stage, args),
            Err(e) => usage(e),
        };
    }
    let host = match args.host.first() {
        Some(p) => HostChoice::File(p),
        None => HostChoice::FromConfig,
    };
    let mut decision = pipeline::assess(&cfg, &container, stage, host);
    if let Ok(l) = &loaded {
        chained_runtime_note(&mut decision, l);
        if let Some(line) = config::drop_ins_line(l) {
            let f =
                crate::core::decision::Finding::info(crate::core::decision::Check::Config, line);
            decision.findings.push(f);
        }
    }
    print_decision(&decision, args.json)
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

/// Prints one decision (JSON or for people) and returns its exit status.
pub fn print_decision(decision: &Decision, json: bool) -> i32 {
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
        Verdict::Allow | Verdict::Skip => EXIT_ALLOW,
    }
}
