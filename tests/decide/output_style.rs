//! One style for output, through the binary: errors on
//! stderr whatever the form, no library-internal wording, `host
//! --node-labels` without GPU facts exits non-zero, an invalid config is
//! exit 2 from every subcommand but the hooks and the wrapper (whose own
//! contract refuses GPU containers and starts the rest), `--version` with
//! the commit and the build date, the kubectl plugin name, and the
//! runtime wrapper's own `--help` beside runc's pass-through.

use crate::support::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

/// A config reading host facts from `tests/data/hosts/PROFILE.json`.
fn config(dir: &Path, profile: &str, extra: &str) -> PathBuf {
    let p = dir.join("config.toml");
    std::fs::write(
        &p,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n{extra}",
            data(&format!("hosts/{profile}.json")).display()
        ),
    )
    .unwrap();
    p
}

fn gg(config: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut child = Command::new(*BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("GPU_GUARD_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin.unwrap_or_default());
    drop(input);
    child.wait_with_output().unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn host_errors_go_to_stderr_in_both_forms() {
    let t = TempDir::new("style-host");
    let cfg = config(t.path(), "no-driver", "");
    for args in [&["host"][..], &["host", "--json"][..]] {
        let o = gg(&cfg, args, None);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", err(&o));
        assert!(!out(&o).contains("error"), "{args:?}: stdout: {}", out(&o));
        assert!(
            err(&o).contains("gpu-guard: error: no NVIDIA driver"),
            "{args:?}: {}",
            err(&o)
        );
    }
    // The table and the facts stay on stdout.
    let o = gg(&cfg, &["host"], None);
    assert!(out(&o).starts_with("Driver -, CUDA -"), "{}", out(&o));
    let o = gg(&cfg, &["host", "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["driver_version"].is_null());
    // A host with a driver: exit 0, nothing on stderr.
    let cfg = config(t.path(), "a100", "");
    let o = gg(&cfg, &["host"], None);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(err(&o), "");
}

#[test]
fn node_labels_without_gpu_facts_exit_non_zero() {
    let t = TempDir::new("style-labels");
    for (profile, code) in [("no-driver", 1), ("driver-no-gpu", 1), ("a100", 0)] {
        let cfg = config(t.path(), profile, "");
        let o = gg(&cfg, &["host", "--node-labels"], None);
        assert_eq!(o.status.code(), Some(code), "{profile}: {}", err(&o));
        if code != 0 {
            assert!(err(&o).contains("no GPU facts to label"), "{}", err(&o));
        }
        if profile == "no-driver" {
            // What is printed (and would be written) is the empty set:
            // stale labels must not outlive the driver.
            assert!(out(&o).lines().all(|l| l.starts_with('#')), "{}", out(&o));
        }
        let target = t.join(format!("{profile}.labels"));
        let o = gg(
            &cfg,
            &[
                "host",
                "--node-labels",
                "--write",
                "--output",
                target.to_str().unwrap(),
            ],
            None,
        );
        assert_eq!(o.status.code(), Some(code), "{profile}: {}", err(&o));
        assert!(target.exists());
    }
}

#[test]
fn nvml_errors_are_worded_for_people() {
    let t = TempDir::new("style-nvml");
    let cfg = t.join("config.toml");
    std::fs::write(
        &cfg,
        "[host]\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\ncache_file = \"\"\nprobe_timeout_ms = 10000\n[log]\nsyslog = false\n",
    )
    .unwrap();
    let o = gg(&cfg, &["host"], None);
    let e = err(&o);
    assert!(!e.contains("libloading"), "{e}");
    assert!(
        e.contains("cannot load /nonexistent/libnvidia-ml.so.1: ")
            && e.contains("cannot open shared object file"),
        "{e}"
    );
    // dlopen's message is not repeated after the library's name.
    assert!(!e.contains("libnvidia-ml.so.1: /nonexistent"), "{e}");
    assert!(!e.contains("File not found:"), "procfs's own wording: {e}");
}

/// Every subcommand that reads the config, with an invalid one.
#[test]
fn an_invalid_config_is_exit_2_from_every_subcommand() {
    let t = TempDir::new("style-badcfg");
    let cfg = config(t.path(), "a100", "[tuning]\nenabeld = true\n");
    let root = t.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let elf = std::env::current_exe().unwrap();
    let image = t.join("none.tar");
    std::fs::write(&image, b"").unwrap();
    let hosts = data("hosts");
    let root_s = root.to_str().unwrap();
    let state = t.join("state");
    let state_s = state.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["check", "--env", "NVIDIA_VISIBLE_DEVICES=all"],
        vec!["check", "--env", "PATH=/bin"],
        vec!["check", "--json", "--env", "NVIDIA_VISIBLE_DEVICES=all"],
        vec![
            "check",
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--hosts",
            hosts.to_str().unwrap(),
        ],
        vec!["check", "--image", image.to_str().unwrap()],
        vec!["host"],
        vec!["host", "--json"],
        vec!["host", "--node-labels"],
        vec!["scan", elf.to_str().unwrap()],
        vec!["scan", "--rootfs", root_s, "--host", "x.json"],
        vec![
            "install",
            "docker",
            "--dry-run",
            "--host-root",
            root_s,
            "--state-dir",
            state_s,
        ],
        vec![
            "uninstall",
            "docker",
            "--dry-run",
            "--host-root",
            root_s,
            "--state-dir",
            state_s,
        ],
    ];
    for args in &cases {
        let o = gg(&cfg, args, None);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}{}", out(&o), err(&o));
        assert!(
            err(&o).contains("enabeld"),
            "{args:?} names the key: {}",
            err(&o)
        );
        assert!(
            !err(&o).contains("nothing to change") && !out(&o).contains("nothing to change"),
            "{args:?}"
        );
    }
    // `check` still shows what the hook would do under that config.
    let o = gg(
        &cfg,
        &["check", "--json", "--env", "NVIDIA_VISIBLE_DEVICES=all"],
        None,
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "refuse");
    assert_eq!(v["findings"][0]["check"], "config");
    // The hooks keep their contract: a GPU container refused (1), any other
    // started unchanged (0).
    let gpu = br#"{"ociVersion":"1.0.2","process":{"env":["NVIDIA_VISIBLE_DEVICES=all"]},"hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook"}]}}"#;
    let o = gg(&cfg, &["hook", "precreate"], Some(gpu));
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let plain = br#"{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"]}}"#;
    let o = gg(&cfg, &["hook", "precreate"], Some(plain));
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(o.stdout, plain);
}

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TZ", "UTC")
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

#[test]
fn version_shows_the_commit_and_the_build_date() {
    let o = Command::new(*BIN).arg("--version").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let line = out(&o);
    let want_commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // build.rs: SOURCE_DATE_EPOCH (the same environment built this
    // binary), else the commit's date, else unknown.
    let want_date = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(e) => {
            let d = Command::new("date")
                .args(["-u", "-d", &format!("@{e}"), "+%Y-%m-%d"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&d.stdout).trim().to_string()
        }
        Err(_) => git(&[
            "log",
            "-1",
            "--date=format-local:%Y-%m-%d",
            "--format=%cd",
            "HEAD",
        ])
        .unwrap_or_else(|| "unknown".into()),
    };
    assert_eq!(
        line.trim_end(),
        format!(
            "gpu-guard {} (commit {want_commit}, built {want_date})",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn the_kubectl_plugin_name_runs_gpu_guard() {
    let t = TempDir::new("style-kubectl");
    let link = t.join("kubectl-gpu_guard");
    std::os::unix::fs::symlink(*BIN, &link).unwrap();
    let cfg = config(t.path(), "a100", "");
    let run = |args: &[&str]| {
        Command::new(&link)
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .env_remove("GPU_GUARD_CONFIG")
            .output()
            .unwrap()
    };
    // `kubectl gpu-guard check ...` answers as `gpu-guard check ...`.
    let a = run(&["check", "--json", "--env", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"]);
    let b = gg(
        &cfg,
        &["check", "--json", "--env", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"],
        None,
    );
    assert_eq!(a.status.code(), Some(1), "{}", err(&a));
    assert_eq!(a.stdout, b.stdout);
    let a = run(&["check", "--env", "NVIDIA_REQUIRE_CUDA=cuda>=12.0", "--host"]);
    assert_eq!(a.status.code(), Some(2));
    // Its help and usage errors say how kubectl runs it.
    let h = run(&["check", "--help"]);
    assert_eq!(h.status.code(), Some(0));
    assert!(
        out(&h).contains("Usage: kubectl gpu-guard check"),
        "{}",
        out(&h)
    );
    let e = run(&["--bogus"]);
    assert_eq!(e.status.code(), Some(2));
    assert!(err(&e).contains("Usage: kubectl gpu-guard"), "{}", err(&e));
    // The wrapper's name still wins over clap.
    let w = t.join("gpu-guard-runtime");
    std::os::unix::fs::symlink(*BIN, &w).unwrap();
    let o = Command::new(&w)
        .arg("--bogus-runc-flag")
        .env("GPU_GUARD_CONFIG", &cfg)
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "no runc on PATH: {}", err(&o));
}

/// `runtime --help` (or `-h`) as the first argument, and `gpu-guard-runtime
/// --help`, print the wrapper's own help and run nothing; every other
/// argument stays runc's: `--version` (dockerd asks the runtime for it),
/// `help`, and a `--help` after runc's global flags reach the real runtime
/// byte for byte.
#[test]
fn runtime_help_is_the_wrappers_and_the_rest_is_runcs() {
    let t = TempDir::new("style-runtime-help");
    let calls = t.join("calls");
    let fake = t.join("fake-runc");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> {}\necho \"fake runc: $*\"\n",
            calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = config(
        t.path(),
        "a100",
        &format!("[runtime]\npath = \"{}\"\n", fake.display()),
    );
    let link = t.join("gpu-guard-runtime");
    std::os::unix::fs::symlink(*BIN, &link).unwrap();
    let as_runtime = |args: &[&str]| {
        Command::new(&link)
            .args(args)
            .env("GPU_GUARD_CONFIG", &cfg)
            .output()
            .unwrap()
    };
    for (o, usage) in [
        (gg(&cfg, &["runtime", "--help"], None), "gpu-guard runtime"),
        (gg(&cfg, &["runtime", "-h"], None), "gpu-guard runtime"),
        (as_runtime(&["--help"]), "gpu-guard-runtime"),
        (as_runtime(&["-h"]), "gpu-guard-runtime"),
    ] {
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        let text = out(&o);
        for n in [
            &format!("Usage: {usage} [ARGS]..."),
            "OCI runtime wrapper",
            "gpu-guard runtime help",
            "--version",
        ] {
            assert!(text.contains(n), "{n:?} not in {text}");
        }
        assert!(!text.contains("fake runc"), "{text}");
    }
    assert!(!calls.exists(), "the real runtime ran for --help");

    for args in [
        vec!["--version"],
        vec!["help"],
        vec!["--root", "/run/x", "--help"],
        vec!["-v"],
    ] {
        let mut full = vec!["runtime"];
        full.extend(&args);
        let o = gg(&cfg, &full, None);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", err(&o));
        assert_eq!(out(&o), format!("fake runc: {}\n", args.join(" ")));
        let o = as_runtime(&args);
        assert_eq!(out(&o), format!("fake runc: {}\n", args.join(" ")));
    }
}
