//! `gpu-guard check`: describe one container, decide as the hook or wrapper
//! would, change nothing. Exit 0 when it would start, 1 when refused, 2 for
//! bad usage or unreadable input (docs/interfaces.md, "`gpu-guard check`").

use crate::commands::cli::CheckArgs;
use crate::commands::fleet_report;
use crate::commands::output::{print_decision_strict, usage, EXIT_USAGE};
use crate::config;
use crate::core::container::Container;
use crate::core::cri_facts::CriRuntime;
use crate::core::decision::{Check, Decision, Finding, Verdict};
use crate::core::runtime_engines::Engine;
use crate::core::security::SpecAccess;
use crate::oci::spec_file;
use crate::pipeline::{self, ContainerInput, HostChoice, Policy};
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
            "gpu-guard: error: {}",
            crate::core::sanitize::one_line(&e.to_string())
        );
    }
    let policy = Policy::loaded(
        config_flag,
        loaded
            .as_ref()
            .map(|l| l.config.clone())
            .map_err(Clone::clone),
    );
    let stage = args.stage.stage();
    let engine: Option<Engine> = args.engine;
    // The prestart hook believes no CRI fact, whatever engine runs it.
    let cri = engine
        .and_then(cri_runtime_of)
        .filter(|_| stage == SpecAccess::Edit);
    let cri_keys = cri.is_none() && has_cri_keys(&container);
    let case = ContainerInput::new(container, stage)
        .with_runtime(wrapper_runtime(stage, &policy, engine))
        .with_cri(cri);
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
    let mut decision = pipeline::decide_container(&policy, case, host);
    if let Ok(l) = &loaded {
        chained_runtime_note(&mut decision, l, stage, engine);
        if let Some(line) = config::drop_ins_line(l) {
            decision.findings.push(Finding::info(Check::Config, line));
        }
        if cri_keys && !l.config.security.exceptions.is_empty() {
            decision.findings.push(cri_note());
        }
    }
    let code = print_decision_strict(&decision, args.json, args.strict);
    // The decision shows what the hook and wrapper would do under this
    // config (refuse GPU containers, start the rest); the exit status is
    // the one every subcommand gives an invalid config (docs/host.md,
    // "Output and exit status").
    if loaded.is_err() {
        return EXIT_USAGE;
    }
    code
}

/// The CRI runtime `--engine` stands for: the evidence the wrapper gets
/// from that engine's runtime root (core::cri_facts).
fn cri_runtime_of(e: Engine) -> Option<CriRuntime> {
    match e {
        Engine::Containerd => Some(CriRuntime::Containerd),
        Engine::Crio => Some(CriRuntime::Crio),
        Engine::Docker | Engine::Podman => None,
    }
}

/// Whether the spec carries a CRI runtime's keys (believed only with
/// evidence of which runtime made it: `--engine containerd|crio`).
fn has_cri_keys(c: &Container) -> bool {
    use crate::core::cri_facts::{CONTAINERD_CONTAINER_TYPE, CRIO_CONTAINER_TYPE};
    c.annotations.contains_key(CONTAINERD_CONTAINER_TYPE)
        || c.annotations.contains_key(CRIO_CONTAINER_TYPE)
}

/// Why no exception matched a spec that names a CRI runtime.
fn cri_note() -> Finding {
    Finding::info(
        Check::Config,
        "the spec carries a CRI runtime's Kubernetes keys, but they select a security exception only when containerd or CRI-O runs the container (the runtime root it passes the wrapper), never by the spec alone",
    )
    .with_fix("pass --engine containerd (or crio) to decide as that engine's wrapper would")
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

/// The runtime the installed wrapper would exec for `engine` (None: the
/// global chain): `--stage runtime` decides as the wrapper, and NVIDIA's
/// runtime chained there makes a GPU request in the env count. The
/// prestart hook knows no runtime.
fn wrapper_runtime(stage: SpecAccess, policy: &Policy, engine: Option<Engine>) -> Option<PathBuf> {
    if stage != SpecAccess::Edit {
        return None;
    }
    pipeline::runtime::find_real_runtime(policy.chained_runtime(engine)).ok()
}

/// Which runtime the wrapper execs (an info finding), which engines chain
/// another one when no `--engine` was given, and, for the wrapper's
/// stage, a config error when that runtime cannot be run: the wrapper
/// then starts no container at all.
fn chained_runtime_note(
    decision: &mut Decision,
    l: &config::Loaded,
    stage: SpecAccess,
    engine: Option<Engine>,
) {
    let cfg = &l.config;
    let own = engine.filter(|e| cfg.runtime.engines.get(*e).path.is_some());
    let line = match own {
        Some(e) => Some(format!(
            "chained runtime for {}: {} (runtime.engines.{}.path)",
            e.name(),
            shown(cfg.chained_runtime(Some(e))),
            e.name()
        )),
        None => config::chained_runtime_line(l),
    };
    if engine.is_none() {
        if let Some(f) = per_engine_note(cfg) {
            decision.findings.push(f);
        }
    }
    let problem = pipeline::runtime::chained_runtime_problem(cfg, engine);
    let configured = !cfg.chained_runtime(engine).is_empty();
    match problem {
        Some(p) if stage == SpecAccess::Edit && configured => {
            decision
                .findings
                .push(Finding::error(Check::Config, p.message).with_fix(p.fix));
            decision.verdict = Verdict::Refuse;
        }
        Some(p) if stage == SpecAccess::Edit => decision
            .findings
            .push(Finding::warning(Check::Config, p.message).with_fix(p.fix)),
        _ => {
            if let Some(line) = line {
                decision.findings.push(Finding::info(Check::Config, line));
            }
        }
    }
}

/// `""` as the wrapper reads it: the PATH search.
fn shown(path: &str) -> &str {
    if path.is_empty() {
        "runc, then crun, on PATH"
    } else {
        path
    }
}

/// When engines chain runtimes other than the global one: which, and that
/// this decision used the global chain.
fn per_engine_note(cfg: &crate::core::policy::Config) -> Option<Finding> {
    let global = cfg.chained_runtime(None);
    let own: Vec<String> = Engine::ALL
        .into_iter()
        .filter(|e| cfg.chained_runtime(Some(*e)) != global)
        .map(|e| format!("{}: {}", e.name(), shown(cfg.chained_runtime(Some(e)))))
        .collect();
    if own.is_empty() {
        return None;
    }
    Some(
        Finding::info(
            Check::Config,
            format!(
                "the runtime wrapper chains per engine ({}); this decision used runtime.path ({})",
                own.join("; "),
                shown(global)
            ),
        )
        .with_fix("pass --engine docker|containerd|crio|podman to decide as that engine's wrapper"),
    )
}
