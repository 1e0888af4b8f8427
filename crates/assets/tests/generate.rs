//! The real `gpu-guard-assets` binary (issue 21 C4): a man page for
//! gpu-guard and one per visible subcommand, bash, zsh and fish
//! completions that know the subcommands and their flags, nothing for the
//! hidden ones, and a usage error without an output directory. The package
//! test (integration/package-test.sh) checks the same files as installed.

use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gpu-guard-assets");

fn out_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("gg-assets-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_page_per_subcommand_and_completions_from_the_command_line() {
    let out = out_dir();
    let o = Command::new(BIN).arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    let read = |rel: &str| {
        std::fs::read_to_string(out.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}: {listed}"))
    };
    assert!(read("man/gpu-guard.1").contains(".TH gpu-guard"));
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
    std::fs::remove_dir_all(&out).unwrap();
    let o = Command::new(BIN).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("usage: gpu-guard-assets OUT_DIR"));
}
