//! `gpu-guard-assets OUT_DIR`: what the packages ship besides the binary,
//! generated from gpu-guard's own command-line definition
//! (`gpu_guard::commands::cli::Cli`), so they never drift from it:
//!
//! - `OUT_DIR/man/gpu-guard.1` and one page per subcommand,
//!   `gpu-guard-check.1`, `gpu-guard-host.1`, ... (clap_mangen; hidden
//!   subcommands have none);
//! - `OUT_DIR/completions/gpu-guard.bash`, `_gpu-guard` (zsh) and
//!   `gpu-guard.fish` (clap_complete).
//!
//! packaging/build-packages.sh runs it and gzips the pages; the .deb and
//! .rpm install them where bash-completion, zsh and fish look (README,
//! "Packages").

use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};

/// gpu-guard's command line without its hidden subcommands (`man`,
/// `__probe`): clap_complete would offer them otherwise. A command has no
/// way to drop a subcommand, so the visible ones go into a fresh one with
/// the same name, texts and global options.
fn documented() -> clap::Command {
    let full = gpu_guard::commands::cli::Cli::command();
    // clap takes a 'static version string; this process runs once.
    let version: &'static str = Box::leak(full.get_version().unwrap_or_default().into());
    let mut c = clap::Command::new("gpu-guard")
        .version(version)
        .subcommand_required(true)
        .arg_required_else_help(true);
    if let Some(a) = full.get_about() {
        c = c.about(a.clone());
    }
    if let Some(a) = full.get_long_about() {
        c = c.long_about(a.clone());
    }
    for a in full.get_arguments() {
        c = c.arg(a.clone());
    }
    c.subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}

fn generate(out: &Path) -> std::io::Result<Vec<PathBuf>> {
    let man = out.join("man");
    let completions = out.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    let cmd = documented();
    clap_mangen::generate_to(cmd.clone(), &man)?;
    let mut written = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut c = cmd.clone();
        written.push(clap_complete::generate_to(
            shell,
            &mut c,
            "gpu-guard",
            &completions,
        )?);
    }
    for e in std::fs::read_dir(&man)? {
        written.push(e?.path());
    }
    written.sort();
    Ok(written)
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(out), None) = (args.next(), args.next()) else {
        eprintln!("usage: gpu-guard-assets OUT_DIR");
        return std::process::ExitCode::from(2);
    };
    match generate(Path::new(&out)) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "gpu-guard-assets: cannot write {}: {e}",
                Path::new(&out).display()
            );
            std::process::ExitCode::from(1)
        }
    }
}
