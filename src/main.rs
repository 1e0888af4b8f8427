//! The `gpu-guard` binary: parse arguments, set up logging, dispatch, map the
//! outcome to an exit status. All logic lives in the library.

use clap::Parser;
use gpu_guard::commands::cli::{Cli, Command};
use gpu_guard::commands::network;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
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
    let cli = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // clap uses 2 for usage errors, 0 for --help/--version.
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
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

fn exit(code: i32) -> ExitCode {
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// `gpu-guard-runtime ARGS` or `gpu-guard [--config F] runtime ARGS`.
fn runtime_invocation(args: &[OsString]) -> Option<(Option<PathBuf>, Vec<OsString>)> {
    let argv0 = args.first()?;
    let name = std::path::Path::new(argv0).file_name()?;
    if name == "gpu-guard-runtime" {
        return Some((None, args[1..].to_vec()));
    }
    let mut config = None;
    let mut i = 1;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        if a == "--config" {
            config = Some(PathBuf::from(args.get(i + 1)?));
            i += 2;
        } else if let Some(v) = a.strip_prefix("--config=") {
            config = Some(PathBuf::from(v));
            i += 1;
        } else if a == "runtime" {
            return Some((config, args[i + 1..].to_vec()));
        } else {
            return None;
        }
    }
    None
}
