//! The `gpu-guard` binary: parse arguments, set up logging, dispatch, map the
//! outcome to an exit status. All logic lives in the library.
//!
//! The entry is a C `main` of its own: std's start-up costs every
//! container start more than it gives this binary (sys::process_start).

#![cfg_attr(not(test), no_main)]
// The unit tests' harness has its own entry: `run`, and what only it
// calls, are unused there.
#![cfg_attr(test, allow(dead_code))]

use clap::Parser;
use gpu_guard::commands::cli::{Cli, Command, HookStage};
use gpu_guard::commands::network;
use std::ffi::OsString;
use std::path::PathBuf;

#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    gpu_guard::commands::process_start::init();
    // std::process::exit flushes stdout, as returning from std's main does.
    std::process::exit(run())
}

fn run() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    // The runtime wrapper must see the engine's argv untouched: it is not
    // parsed by clap, whose flags could collide with runc's.
    if let Some((config, rest)) = runtime_invocation(&args) {
        if gpu_guard::commands::runtime::asks_for_help(&rest) {
            let shown = match args.len() - rest.len() {
                1 => "gpu-guard-runtime",
                _ => "gpu-guard runtime",
            };
            print!("{}", gpu_guard::commands::cli::runtime_help(shown));
            return exit(0);
        }
        return exit(gpu_guard::commands::runtime::main(config.as_deref(), rest));
    }
    if let Some((config, stage)) = hook_invocation(&args) {
        return exit(gpu_guard::commands::hook::main(config.as_deref(), stage));
    }
    let cli = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // clap uses 2 for usage errors, 0 for --help/--version.
            return e.exit_code();
        }
    };
    let config = cli.config.as_deref();
    let code = match &cli.command {
        // Registry and docker-daemon images, and the webhook, run in
        // gpu-guard-admission (commands/network.rs): this binary links no HTTP.
        Command::Check(a) if a.image.as_deref().is_some_and(network::is_remote) => {
            network::exec(&args[1..])
        }
        Command::Check(a) if a.attest || a.plain_http || a.registry_ca.is_some() => {
            eprintln!("gpu-guard: error: --attest, --plain-http and --registry-ca need --image docker://...");
            2
        }
        Command::Check(a) => gpu_guard::commands::check::main(config, a),
        Command::Admission(_) => network::exec(&args[1..]),
        Command::Hook(a) => gpu_guard::commands::hook::main(config, a.stage),
        Command::Runtime(a) => gpu_guard::commands::runtime::main(config, a.args.clone()),
        Command::Host(a) => gpu_guard::commands::host::main(config, a),
        Command::Scan(a) => gpu_guard::commands::scan::main(config, a),
        Command::Install(a) => gpu_guard::commands::install::command(config, a),
        Command::Uninstall(a) => gpu_guard::commands::install::uninstall(config, a),
        Command::Doctor(a) => gpu_guard::commands::doctor::main(config, a),
        Command::Probe(a) => gpu_guard::commands::host::probe_child(a),
        Command::Man => match gpu_guard::commands::cli::man_page() {
            Ok(page) => {
                use std::io::Write;
                let _ = std::io::stdout().write_all(&page);
                0
            }
            Err(e) => {
                eprintln!("gpu-guard: error: cannot render the man page: {e}");
                2
            }
        },
    };
    exit(code)
}

/// The name kubectl runs `kubectl gpu-guard ...` as: a plugin is an
/// executable `kubectl-NAME` on PATH, a `-` in the command spelled `_` in
/// the file name (kubernetes.io/docs/tasks/extend-kubectl/kubectl-plugins,
/// "Naming a plugin"). The packages ship it as a symlink to gpu-guard.
const KUBECTL_PLUGIN: &str = "kubectl-gpu_guard";

/// The command line; invoked as the kubectl plugin, gpu-guard behaves the
/// same and its help and errors say `kubectl gpu-guard`.
fn parse(args: &[OsString]) -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let argv0 = args.first().map(std::path::Path::new);
    if argv0.and_then(|p| p.file_name()) == Some(std::ffi::OsStr::new(KUBECTL_PLUGIN)) {
        let mut cmd = Cli::command().bin_name("kubectl gpu-guard");
        let matches = cmd.try_get_matches_from_mut(args)?;
        return Cli::from_arg_matches(&matches);
    }
    Cli::try_parse_from(args)
}

/// The exit status for `code`: 0 to 255, as the kernel keeps it.
fn exit(code: i32) -> i32 {
    code.clamp(0, 255)
}

/// `gpu-guard-runtime ARGS` or `gpu-guard [--config F] runtime ARGS`.
fn runtime_invocation(args: &[OsString]) -> Option<(Option<PathBuf>, Vec<OsString>)> {
    let argv0 = args.first()?;
    let name = std::path::Path::new(argv0).file_name()?;
    if name == "gpu-guard-runtime" {
        return Some((None, args[1..].to_vec()));
    }
    let (config, at) = leading_config(args)?;
    (args.get(at)? == "runtime").then(|| (config, args[at + 1..].to_vec()))
}

/// `gpu-guard [--config F] hook STAGE`, the form engines run the hook in
/// (packaging/hooks.d, `gpu-guard install`), read without clap: building
/// clap's command (every subcommand's arguments) costs a container start
/// more than deciding on a non-GPU container does. Any other form, and
/// any stage clap would not accept, goes through clap.
fn hook_invocation(args: &[OsString]) -> Option<(Option<PathBuf>, HookStage)> {
    use clap::ValueEnum;
    let (config, at) = leading_config(args)?;
    match &args[at..] {
        [hook, stage] if hook == "hook" => {
            Some((config, HookStage::from_str(stage.to_str()?, false).ok()?))
        }
        _ => None,
    }
}

/// The `--config FILE` or `--config=FILE` before the subcommand (at most
/// one, as clap allows), and the index of the subcommand.
fn leading_config(args: &[OsString]) -> Option<(Option<PathBuf>, usize)> {
    use std::os::unix::ffi::OsStrExt;
    let mut config = None;
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_bytes();
        let value = if a == b"--config" {
            i += 2;
            PathBuf::from(args.get(i - 1)?)
        } else if let Some(v) = a.strip_prefix(b"--config=") {
            i += 1;
            PathBuf::from(std::ffi::OsStr::from_bytes(v))
        } else {
            return Some((config, i));
        };
        if config.replace(value).is_some() {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_hook_forms_engines_run_skip_clap() {
        let stage = |a: &[&str]| hook_invocation(&argv(a));
        assert_eq!(
            stage(&["gpu-guard", "hook", "prestart"]),
            Some((None, HookStage::Prestart))
        );
        assert_eq!(
            stage(&["gpu-guard", "--config", "/c.toml", "hook", "createRuntime"]),
            Some((Some("/c.toml".into()), HookStage::CreateRuntime))
        );
        assert_eq!(
            stage(&["gpu-guard", "--config=/c.toml", "hook", "create-runtime"]),
            Some((Some("/c.toml".into()), HookStage::CreateRuntime))
        );
        // Everything else is clap's: its errors, help, and other orders.
        for other in [
            &["gpu-guard", "hook", "Prestart"][..],
            &["gpu-guard", "hook", "prestart", "--config", "/c.toml"],
            &["gpu-guard", "hook", "--help"],
            &["gpu-guard", "hook"],
            &[
                "gpu-guard",
                "--config",
                "/a",
                "--config",
                "/b",
                "hook",
                "prestart",
            ],
            &["gpu-guard", "--config"],
            &["gpu-guard", "check", "prestart"],
        ] {
            assert_eq!(stage(other), None, "{other:?}");
        }
    }

    #[test]
    fn the_runtime_forms() {
        let run = |a: &[&str]| runtime_invocation(&argv(a));
        assert_eq!(
            run(&["/usr/bin/gpu-guard-runtime", "create", "x"]),
            Some((None, argv(&["create", "x"])))
        );
        assert_eq!(
            run(&["gpu-guard", "--config=/c", "runtime", "--help"]),
            Some((Some("/c".into()), argv(&["--help"])))
        );
        assert_eq!(run(&["gpu-guard", "hook", "prestart"]), None);
    }
}
