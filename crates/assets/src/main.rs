//! `gpu-guard-assets OUT_DIR`: what the packages ship besides the binary,
//! generated from gpu-guard's own command-line definition
//! (`gpu_guard::commands::cli::Cli`), so they never drift from it:
//!
//! - `OUT_DIR/man/gpu-guard.1` (with EXAMPLES, FILES, ENVIRONMENT and SEE
//!   ALSO) and one page per subcommand, `gpu-guard-check.1`,
//!   `gpu-guard-host.1`, ..., each ending with its SEE ALSO (clap_mangen;
//!   hidden subcommands have none);
//! - `OUT_DIR/completions/gpu-guard.bash`, `_gpu-guard` (zsh) and
//!   `gpu-guard.fish` (clap_complete).
//!
//! packaging/build-packages.sh runs it and gzips the pages; the .deb and
//! .rpm install them where bash-completion, zsh and fish look (docs/install.md,
//! "Packages").

use clap::CommandFactory;
use clap_complete::Shell;
use std::ffi::OsString;
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
    // gpu-guard(1) with its EXAMPLES, FILES, ENVIRONMENT and SEE ALSO, and
    // each subcommand's page with its SEE ALSO (gpu_guard::commands::man_page).
    std::fs::write(
        man.join("gpu-guard.1"),
        gpu_guard::commands::man_page::render(cmd.clone())?,
    )?;
    for sub in cmd.get_subcommands() {
        let page = man.join(format!("gpu-guard-{}.1", sub.get_name()));
        let mut f = std::fs::OpenOptions::new().append(true).open(&page)?;
        std::io::Write::write_all(
            &mut f,
            &gpu_guard::commands::man_page::see_also_for(sub.get_name()),
        )?;
    }
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

/// What `gpu-guard-assets` says when it is not given exactly one argument.
const USAGE: &str = "usage: gpu-guard-assets OUT_DIR";

/// The output directory: the one and only argument.
fn out_dir(mut args: impl Iterator<Item = OsString>) -> Option<OsString> {
    match (args.next(), args.next()) {
        (Some(out), None) => Some(out),
        _ => None,
    }
}

fn main() -> std::process::ExitCode {
    let Some(out) = out_dir(std::env::args_os().skip(1)) else {
        eprintln!("{USAGE}");
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

#[cfg(test)]
#[path = "../../../tests/support/mod.rs"]
mod support;

/// The pages and completions the packages ship (integration/package-test.sh
/// checks the same files as installed): a man page for gpu-guard and one
/// per visible subcommand, bash, zsh and fish completions that know the
/// subcommands and their flags, nothing for the hidden ones.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_per_subcommand_and_completions_from_the_command_line() {
        let out = support::TempDir::new("assets");
        let written = generate(&out).unwrap();
        let read = |rel: &str| {
            std::fs::read_to_string(out.join(rel))
                .unwrap_or_else(|e| panic!("{rel}: {e}: {written:?}"))
        };
        assert!(
            written.contains(&out.join("man/gpu-guard.1")),
            "{written:?}"
        );
        let top = read("man/gpu-guard.1");
        assert!(top.contains(".TH gpu-guard"));
        // The sections a reader of a command's page looks for (man-pages(7)),
        // in that order, with real content.
        let at = |h: &str| {
            top.find(&format!(".SH {h}\n"))
                .unwrap_or_else(|| panic!("no {h} section in gpu-guard.1"))
        };
        let order = [
            "NAME",
            "SYNOPSIS",
            "OPTIONS",
            "EXAMPLES",
            "FILES",
            "ENVIRONMENT",
            "\"SEE ALSO\"",
            "VERSION",
        ];
        assert!(order.windows(2).all(|w| at(w[0]) < at(w[1])), "{top}");
        for needle in [
            "/etc/gpu\\-guard/config.toml",
            "/etc/gpu\\-guard/config.d/*.toml",
            "/var/lib/gpu\\-guard",
            "/run/gpu\\-guard/host\\-facts.json",
            "GPU_GUARD_CONFIG",
            "REGISTRY_AUTH_FILE",
            "DOCKER_HOST",
            "gpu\\-guard check \\-\\-image docker://",
            "gpu\\-guard host \\-\\-host\\-root",
            "gpu\\-guard doctor",
            "gpu\\-guard install docker \\-\\-dry\\-run",
            "gpu\\-guard\\-check(1)",
            "runc(8)",
        ] {
            assert!(top.contains(needle), "{needle} not in gpu-guard.1");
        }
        assert!(!top.contains("gpu\\-guard\\-help(1)"), "{top}");
        for sub in [
            "check",
            "hook",
            "runtime",
            "host",
            "scan",
            "install",
            "uninstall",
            "doctor",
            "admission",
        ] {
            let page = read(&format!("man/gpu-guard-{sub}.1"));
            assert!(page.contains(&format!(".TH gpu-guard-{sub}")), "{sub}");
            assert!(
                page.contains(".SH \"SEE ALSO\"\ngpu\\-guard(1)"),
                "{sub}: {page}"
            );
        }
        let pages: Vec<String> = std::fs::read_dir(out.join("man"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !pages
                .iter()
                .any(|p| p.contains("probe") || p == "gpu-guard-man.1"),
            "hidden subcommands have no page: {pages:?}"
        );
        let bash = read("completions/gpu-guard.bash");
        for word in ["doctor", "--chain-runtime", "--host-root", "--nodes"] {
            assert!(bash.contains(word), "bash completion lacks {word}");
        }
        assert!(
            !bash.contains("__probe"),
            "bash completes a hidden subcommand"
        );
        assert!(read("completions/_gpu-guard").starts_with("#compdef gpu-guard"));
        assert!(read("completions/gpu-guard.fish").contains("complete -c gpu-guard"));
    }

    #[test]
    fn exactly_one_output_directory() {
        let args = |a: &[&str]| out_dir(a.iter().map(OsString::from));
        assert_eq!(args(&["out"]), Some(OsString::from("out")));
        assert_eq!(args(&[]), None);
        assert_eq!(args(&["out", "more"]), None);
        assert!(USAGE.contains("OUT_DIR"));
    }
}
