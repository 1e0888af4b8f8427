//! `gpu-guard install|uninstall ENGINE`: the command line over
//! [`crate::install`].

use crate::commands::cli::{EnginePaths, InstallArgs, UninstallArgs};
use crate::install::registration::{effective_registration, installed, Registration};
use crate::install::{
    apply, edit, engine_name, plan, recover, restart_hint_for, InstallError, Options,
};
use std::path::{Path, PathBuf};

/// gpu-guard's own config for this run: the one in effect, or the host's
/// under `--host-root`. `--config` must name a gpu-guard config: nvidia-ctk
/// spells the engine's file `--config`, and taking daemon.json for
/// gpu-guard's config would register nothing and create a new
/// /etc/docker/daemon.json (docs/install.md).
fn gpu_guard_config(
    config: Option<&Path>,
    host_root: &Path,
) -> Result<(crate::core::policy::Config, PathBuf), InstallError> {
    let (path, explicit) = crate::config::config_path(config);
    if host_root != Path::new("/") && !explicit {
        let host = host_root.join(crate::config::DEFAULT_CONFIG_PATH.trim_start_matches('/'));
        let cfg = match host.exists() {
            true => crate::config::load(Some(&host)).map_err(|e| InstallError::GpuGuardConfig {
                message: e.to_string(),
            })?,
            false => crate::core::policy::Config::default(),
        };
        return Ok((cfg, PathBuf::from(crate::install::GPU_GUARD_CONFIG_D)));
    }
    let cfg = match crate::config::load(config) {
        Ok(cfg) => cfg,
        Err(e) if explicit => {
            return Err(InstallError::NotGpuGuardConfig {
                path,
                message: e.message,
            })
        }
        Err(e) => {
            return Err(InstallError::GpuGuardConfig {
                message: e.to_string(),
            })
        }
    };
    let config_d = if host_root == Path::new("/") {
        crate::config::drop_in_dir(&path)
    } else {
        PathBuf::from(crate::install::GPU_GUARD_CONFIG_D)
    };
    Ok((cfg, config_d))
}

/// Fills [`Options`] from the command line.
fn options(
    config: Option<&Path>,
    args: &EnginePaths,
    engine: crate::install::Engine,
    bin_dir: Option<&Path>,
) -> Result<Options, InstallError> {
    let bin_dir = match bin_dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_exe()
            .map_err(|source| InstallError::CurrentExe { source })?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/usr/bin")),
    };
    let (cfg, config_d) = gpu_guard_config(config, &args.host_root)?;
    let mut o = Options::new(engine, &args.host_root);
    o.config_path = args.config_path.clone();
    o.bin_dir = bin_dir;
    o.state_dir = args.state_dir.clone();
    // The chain drop-in goes beside the config the wrapper will read:
    // the one in effect here, or the host's default under --host-root
    // (where this process's config is the DaemonSet image's own).
    o.config_d = config_d;
    o.root = cfg.runtime.engines.root(engine).to_string();
    Ok(o)
}

/// `gpu-guard install ENGINE`. Exit status: 0 done (or nothing to
/// change), 1 the engine would still not run gpu-guard (or `--check`
/// found drift), 2 bad usage or an engine config it cannot read or edit
/// (which is left untouched).
pub fn command(config: Option<&Path>, args: &InstallArgs) -> i32 {
    let engine = args.engine;
    let name = engine_name(engine);
    let result = options(config, &args.paths, engine, args.bin_dir.as_deref()).and_then(|mut o| {
        o.set_default = args.set_default;
        o.chain_runtime = args.chain_runtime.clone();
        if args.check {
            return check(&o);
        }
        run(&o, args.dry_run)
    });
    finish("install", name, result)
}

/// `gpu-guard uninstall ENGINE`: exit 0 done (or nothing to change), 2 an
/// engine config it cannot read or edit.
pub fn uninstall(config: Option<&Path>, args: &UninstallArgs) -> i32 {
    let engine = args.engine;
    let name = engine_name(engine);
    let result = options(config, &args.paths, engine, None).and_then(|mut o| {
        o.uninstall = true;
        run(&o, args.dry_run)
    });
    finish("uninstall", name, result)
}

fn finish(verb: &str, name: &str, result: Result<i32, InstallError>) -> i32 {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpu-guard: error: {verb} {name}: {e}");
            2
        }
    }
}

/// Plans, prints, and (unless `dry_run`) carries out an install or uninstall.
fn run(opts: &Options, dry_run: bool) -> Result<i32, InstallError> {
    let name = engine_name(opts.engine);
    if !dry_run {
        // A run killed half way is rolled back (or finished) before this
        // one plans over its files.
        if let Some(m) = recover(opts)? {
            eprintln!("gpu-guard: warning: {m}");
        }
    }
    let plan = plan(opts)?;
    for w in &plan.warnings {
        eprintln!("gpu-guard: warning: {w}");
    }
    for w in &plan.not_effective {
        eprintln!(
            "gpu-guard: warning: after this install {name} would still not run gpu-guard: {w}"
        );
    }
    let code = if plan.not_effective.is_empty() { 0 } else { 1 };
    if plan.changes.is_empty() {
        if opts.uninstall {
            println!("gpu-guard is not registered with {name}: nothing to change");
        } else {
            println!("gpu-guard is already registered with {name}: nothing to change");
        }
        if !dry_run {
            // Still record (or drop) the state: a first install over a
            // config someone already edited by hand is install's too.
            apply(opts, &plan)?;
        }
        return Ok(code);
    }
    if dry_run {
        for c in &plan.changes {
            print!("{}", edit::unified_diff(c));
        }
        println!("(dry run: nothing was written)");
        return Ok(code);
    }
    apply(opts, &plan)?;
    for c in &plan.changes {
        let what = match (&c.before, &c.after) {
            (None, _) => "created",
            (_, None) => "removed",
            _ => "updated",
        };
        println!("{what} {}", c.path.display());
    }
    // The config install chose (k3s's template when it found one), for
    // the service that reads it.
    let config = opts
        .config_path
        .clone()
        .or_else(|| plan.state.as_ref().map(|s| s.config.clone()));
    match restart_hint_for(opts.engine, config.as_deref()) {
        Some(cmd) => println!("restart {name} to apply: {cmd}"),
        None => println!("podman reads hook files at each container start: no restart needed"),
    }
    Ok(code)
}

/// `install ENGINE --check`.
fn check(opts: &Options) -> Result<i32, InstallError> {
    let name = engine_name(opts.engine);
    match effective_registration(opts)? {
        Registration::Ok => {
            println!("{name} runs gpu-guard as installed");
            Ok(0)
        }
        Registration::NotInstalled => {
            println!(
                "gpu-guard is not installed for {name} (no record in {})",
                opts.state_dir.display()
            );
            Ok(1)
        }
        Registration::Drift(d) => {
            eprintln!("gpu-guard: warning: {} (fix: {})", d.line(), d.fix);
            Ok(1)
        }
    }
}

/// What `gpu-guard host` says about the engines install registered on this
/// host: each engine's chained runtime, and a warning for each engine whose
/// effective configuration no longer runs gpu-guard.
pub fn host_lines(cfg: &crate::core::policy::Config) -> (Vec<String>, Vec<String>) {
    let mut info = vec![];
    for e in crate::install::Engine::ALL {
        if let Some(p) = &cfg.runtime.engines.get(e).path {
            let shown = if p.is_empty() {
                "runc (PATH)"
            } else {
                p.as_str()
            };
            info.push(format!("chained runtime for {}: {shown}", e.name()));
        }
    }
    let mut warnings = vec![];
    let base = Options::new(crate::install::Engine::Docker, Path::new("/"));
    for e in installed(&base) {
        let mut o = Options::new(e, Path::new("/"));
        o.root = cfg.runtime.engines.root(e).to_string();
        match effective_registration(&o) {
            Ok(Registration::Drift(d)) => warnings.push(format!(
                "{} no longer runs gpu-guard: {} (fix: {})",
                e.name(),
                d.line().trim_start_matches(&format!("{}: ", e.name())),
                d.fix
            )),
            Ok(_) => {}
            Err(err) => warnings.push(format!("cannot check {}'s registration: {err}", e.name())),
        }
    }
    (info, warnings)
}
