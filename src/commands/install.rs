//! `gpu-guard install|uninstall ENGINE`: the command line over
//! [`crate::install`].

use crate::commands::cli::InstallArgs;
use crate::install::{apply, edit, engine_name, plan, restart_hint, InstallError, Options};
use std::path::{Path, PathBuf};

/// Fills [`Options`] from the command line.
pub fn options(
    config: Option<&Path>,
    args: &InstallArgs,
    uninstall: bool,
) -> Result<Options, InstallError> {
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()
            .map_err(|source| InstallError::CurrentExe { source })?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/usr/bin")),
    };
    Ok(Options {
        engine: args.engine.into(),
        uninstall,
        set_default: args.set_default,
        config_path: args.config_path.clone(),
        host_root: args.host_root.clone(),
        bin_dir,
        state_dir: args.state_dir.clone(),
        // The chain drop-in goes beside the config the wrapper will read:
        // the one in effect here, or the host's default under --host-root
        // (where this process's config is the DaemonSet image's own).
        config_d: if args.host_root == Path::new("/") {
            crate::config::drop_in_dir(&crate::config::config_path(config).0)
        } else {
            PathBuf::from(crate::install::GPU_GUARD_CONFIG_D)
        },
    })
}

/// `gpu-guard install|uninstall ENGINE`. Exit status: 0 done (or nothing to
/// change), 2 bad usage or an engine config it cannot read or edit (which
/// is left untouched).
pub fn command(config: Option<&Path>, args: &InstallArgs, uninstall: bool) -> i32 {
    let verb = if uninstall { "uninstall" } else { "install" };
    let name = engine_name(args.engine.into());
    let result = options(config, args, uninstall).and_then(|opts| {
        let plan = plan(&opts)?;
        for w in &plan.warnings {
            eprintln!("gpu-guard: warning: {w}");
        }
        if plan.changes.is_empty() {
            if uninstall {
                println!("gpu-guard is not registered with {name}: nothing to change");
            } else {
                println!("gpu-guard is already registered with {name}: nothing to change");
            }
            if !args.dry_run {
                // Still record (or drop) the state: a first install over a
                // config someone already edited by hand is install's too.
                apply(&opts, &plan)?;
            }
            return Ok(());
        }
        if args.dry_run {
            for c in &plan.changes {
                print!("{}", edit::unified_diff(c));
            }
            println!("(dry run: nothing was written)");
            return Ok(());
        }
        apply(&opts, &plan)?;
        for c in &plan.changes {
            let what = match (&c.before, &c.after) {
                (None, _) => "created",
                (_, None) => "removed",
                _ => "updated",
            };
            println!("{what} {}", c.path.display());
        }
        match restart_hint(args.engine.into()) {
            Some(cmd) => println!("restart {name} to apply: {cmd}"),
            None => println!("podman reads hook files at each container start: no restart needed"),
        }
        Ok(())
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gpu-guard: {verb} {name}: {e}");
            2
        }
    }
}
