//! The binary's contract (docs/interfaces.md): `check` output and exit codes, the
//! hooks' handling of bad input. Every bad input gets a one-line error and
//! the contract's exit code, never a panic.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

use crate::support::TempDir as Tmp;

/// A config that never probes this host: host facts from a profile, caches
/// inside the temp dir.
fn config(dir: &Path, profile: &str) -> PathBuf {
    let p = dir.join("config.toml");
    std::fs::write(
        &p,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"{}\"\n[kernel_image]\ncache_dir = \"{}\"\n[log]\nsyslog = false\n",
            data(&format!("hosts/{profile}.json")).display(),
            dir.join("cache.json").display(),
            dir.join("scan").display()
        ),
    )
    .unwrap();
    p
}

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(*BIN)
        .args(args)
        .env_remove("GPU_GUARD_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut sin = child.stdin.take().unwrap();
        if let Some(b) = stdin {
            let _ = sin.write_all(b);
        }
    }
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// One line on stderr, and not a panic.
fn assert_one_line_error(o: &Output, code: i32, what: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{what}: {e}");
    assert!(!e.contains("panicked"), "{what}: {e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{what}: {e}");
}

/// The hook `docker run --gpus` puts in a GPU container's spec (moby
/// daemon/devices_nvidia_linux.go): what attaches the GPUs that
/// NVIDIA_VISIBLE_DEVICES asks for. Without it (or another attach signal)
/// an env request is not a GPU container (src/core/detect.rs).
const NVIDIA_HOOK: &str = r#"{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}"#;

/// `spec` with NVIDIA's prestart hook appended to its hooks.
fn with_nvidia_hook(spec: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(spec).unwrap();
    let hook: serde_json::Value = serde_json::from_str(NVIDIA_HOOK).unwrap();
    let hooks = v
        .as_object_mut()
        .unwrap()
        .entry("hooks")
        .or_insert_with(|| serde_json::json!({}));
    let pre = hooks
        .as_object_mut()
        .unwrap()
        .entry("prestart")
        .or_insert_with(|| serde_json::json!([]));
    pre.as_array_mut().unwrap().push(hook);
    v.to_string()
}

fn bundle(dir: &Path, spec: &str) -> PathBuf {
    let b = dir.join("bundle");
    std::fs::create_dir_all(b.join("rootfs")).unwrap();
    std::fs::write(b.join("config.json"), spec).unwrap();
    b
}

fn state(bundle: &Path) -> Vec<u8> {
    format!(
        r#"{{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":4242,"bundle":"{}"}}"#,
        bundle.display()
    )
    .into_bytes()
}

#[test]
fn check_exit_codes_and_json() {
    let t = Tmp::new("check");
    let cfg = config(&t.0, "a100");
    let cfg = cfg.to_str().unwrap();
    let host = data("hosts/a100.json");
    let host = host.to_str().unwrap();
    // refuse → 1, JSON with the fixed fields
    let o = run(
        &[
            "--config",
            cfg,
            "check",
            "--host",
            host,
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
            "--json",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "refuse");
    assert_eq!(v["gpu_container"], true);
    assert_eq!(v["findings"][0]["check"], "requirement");
    assert_eq!(v["findings"][0]["severity"], "error");
    assert!(v["findings"][0]["fix"].is_string());
    assert!(v["edits"]["env"].is_object());
    assert!(v["edits"]["capabilities_dropped"].is_array());
    assert!(v["edits"]["no_new_privileges"].is_boolean());
    // allow → 0
    let o = run(
        &[
            "--config",
            cfg,
            "check",
            "--host",
            host,
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--json",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "allow");
    assert_eq!(v["edits"]["env"]["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    // skip → 0
    let o = run(
        &[
            "--config",
            cfg,
            "check",
            "--host",
            host,
            "--env",
            "PATH=/bin",
            "--json",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "skip");
    // human output names the verdict and the cause
    let o = run(
        &[
            "--config",
            cfg,
            "check",
            "--host",
            host,
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        ],
        None,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("REFUSE"), "{out}");
    assert!(
        out.contains("cuda>=12.4: driver 535.104.05 provides CUDA 12.2"),
        "{out}"
    );
    // the config's facts file is used when --host is absent
    let o = run(
        &[
            "--config",
            cfg,
            "check",
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn check_combines_spec_and_env() {
    let t = Tmp::new("combine");
    let cfg = config(&t.0, "a100");
    let b = bundle(
        &t.0,
        &with_nvidia_hook(
            r#"{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all","NVIDIA_REQUIRE_CUDA=cuda>=12.4"]},"root":{"path":"rootfs"}}"#,
        ),
    );
    let host = data("hosts/a100.json");
    let base = [
        "--config",
        cfg.to_str().unwrap(),
        "check",
        "--host",
        host.to_str().unwrap(),
    ];
    let o = run(
        &[&base[..], &["--bundle", b.to_str().unwrap()]].concat(),
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    // --env overrides the spec's value
    let o = run(
        &[
            &base[..],
            &[
                "--bundle",
                b.to_str().unwrap(),
                "--env",
                "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
            ],
        ]
        .concat(),
        None,
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let spec = b.join("config.json");
    let o = run(
        &[
            &base[..],
            &[
                "--spec",
                spec.to_str().unwrap(),
                "--env",
                "NVIDIA_VISIBLE_DEVICES=void",
            ],
        ]
        .concat(),
        None,
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("SKIP"));
}

#[test]
fn check_bad_usage_is_exit_2() {
    let t = Tmp::new("usage");
    let cfg = config(&t.0, "a100");
    let cfg = cfg.to_str().unwrap();
    let bad_json = t.0.join("bad.json");
    std::fs::write(&bad_json, "{not json").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["check"], "no container"),
        (vec!["check", "--env", "NOEQUALS"], "env without ="),
        (vec!["check", "--env", "=x"], "env with empty key"),
        (
            vec!["check", "--bundle", "/nonexistent/bundle"],
            "missing bundle",
        ),
        (
            vec!["check", "--spec", "/nonexistent/config.json"],
            "missing spec",
        ),
        (
            vec!["check", "--spec", bad_json.to_str().unwrap()],
            "spec not JSON",
        ),
        (
            vec!["check", "--env", "A=1", "--host", "/nonexistent.json"],
            "missing host file",
        ),
        (
            vec![
                "check",
                "--env",
                "A=1",
                "--host",
                bad_json.to_str().unwrap(),
            ],
            "host file not JSON",
        ),
    ];
    for (args, what) in cases {
        let o = run(&[&["--config", cfg][..], &args[..]].concat(), None);
        assert_one_line_error(&o, 2, what);
    }
    // an explicit config that does not exist
    let o = run(
        &["--config", "/nonexistent/gg.toml", "check", "--env", "A=1"],
        None,
    );
    assert_one_line_error(&o, 2, "missing --config");
    // clap usage errors are 2 too
    let o = run(&["check", "--bogus"], None);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn invalid_config_refuses_gpu_naming_file_and_key() {
    let t = Tmp::new("badcfg");
    let p = t.0.join("config.toml");
    std::fs::write(&p, "mode = \"enforce\"\n[tuning]\nenabeld = true\n").unwrap();
    let host = data("hosts/a100.json");
    let o = run(
        &[
            "--config",
            p.to_str().unwrap(),
            "check",
            "--host",
            host.to_str().unwrap(),
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--json",
        ],
        None,
    );
    // Exit 2, as every subcommand exits for an invalid config;
    // the decision still shows the hook's refusal.
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "refuse");
    let msg = v["findings"][0]["message"].as_str().unwrap();
    assert_eq!(v["findings"][0]["check"], "config");
    assert!(
        msg.contains(p.to_str().unwrap()) && msg.contains("enabeld"),
        "{msg}"
    );
    let o = run(
        &[
            "--config",
            p.to_str().unwrap(),
            "check",
            "--host",
            host.to_str().unwrap(),
            "--env",
            "PATH=/bin",
            "--json",
        ],
        None,
    );
    // Non-GPU containers still start (the verdict), and the exit status
    // still says the config is invalid.
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "skip", "non-GPU containers still start");
}

#[test]
fn prestart_bad_input() {
    let t = Tmp::new("prestart");
    let cfg = config(&t.0, "a100");
    let cfg = cfg.to_str().unwrap();
    let hook = ["--config", cfg, "hook", "prestart"];
    assert_one_line_error(&run(&hook, Some(b"{not json")), 2, "malformed state");
    assert_one_line_error(&run(&hook, Some(b"")), 2, "empty state");
    assert_one_line_error(&run(&hook, Some(b"[1,2]")), 2, "state not an object");
    assert_one_line_error(
        &run(&hook, Some(br#"{"id":"x"}"#)),
        2,
        "state without bundle",
    );
    assert_one_line_error(
        &run(&hook, Some(&state(Path::new("/nonexistent/bundle")))),
        2,
        "missing bundle",
    );
    let b = t.0.join("nocfg");
    std::fs::create_dir_all(&b).unwrap();
    assert_one_line_error(&run(&hook, Some(&state(&b))), 2, "missing config.json");
    // A spec that cannot be read is refused only when it names a GPU
    // request; runc judges the rest itself.
    for (spec, code, what) in [
        ("[1,2,3]", 0, "config.json not an object"),
        (r#"{"process":{"env":"PATH=/bin"}}"#, 0, "env not a list"),
        ("{not json", 0, "not JSON"),
        (
            r#"{"process":{"env":"NVIDIA_VISIBLE_DEVICES=all"}}"#,
            1,
            "GPU env not a list",
        ),
        (
            r#"{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all"]"#,
            1,
            "truncated GPU spec",
        ),
    ] {
        let b = bundle(&t.0, spec);
        let o = run(&hook, Some(&state(&b)));
        assert_eq!(o.status.code(), Some(code), "{what}: {}", stderr(&o));
        if code == 1 {
            assert!(
                stderr(&o).contains("cannot read the container's spec"),
                "{what}: {}",
                stderr(&o)
            );
        }
    }
    // createRuntime is accepted as the same stage
    let b = bundle(&t.0, r#"{"process":{"env":["PATH=/bin"]}}"#);
    let o = run(
        &["--config", cfg, "hook", "createRuntime"],
        Some(&state(&b)),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn prestart_refuses_with_diagnosis_and_runs_the_rest() {
    let t = Tmp::new("prestart2");
    let cfg = config(&t.0, "a100");
    let cfg = cfg.to_str().unwrap();
    let b = bundle(
        &t.0,
        &with_nvidia_hook(
            r#"{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all","NVIDIA_REQUIRE_CUDA=cuda>=12.4"],"noNewPrivileges":true,"capabilities":{"bounding":["CAP_CHOWN"]}},"root":{"path":"rootfs"}}"#,
        ),
    );
    let o = run(&["--config", cfg, "hook", "prestart"], Some(&state(&b)));
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("gpu-guard refused to start container c1"), "{e}");
    assert!(
        e.contains("cuda>=12.4: driver 535.104.05 provides CUDA 12.2"),
        "{e}"
    );
    // non-UTF-8 bytes inside config.json strings are read as U+FFFD, as Go does
    let mut spec = br#"{"process":{"env":["X="#.to_vec();
    spec.extend_from_slice(&[0xff, 0xc3]);
    spec.extend_from_slice(br#"","PATH=/bin"]}}"#);
    std::fs::write(b.join("config.json"), &spec).unwrap();
    let o = run(&["--config", cfg, "hook", "prestart"], Some(&state(&b)));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn huge_inputs_are_decided_without_panic() {
    let t = Tmp::new("huge");
    let cfg = config(&t.0, "a100");
    let cfg = cfg.to_str().unwrap();
    // 10,000 env vars and a 1 MB value
    let mut env: Vec<String> = (0..10_000).map(|i| format!("VAR_{i}=value-{i}")).collect();
    env.push("NVIDIA_VISIBLE_DEVICES=all".into());
    env.push(format!("BIG={}", "x".repeat(1 << 20)));
    env.push(format!(
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0 {}",
        "brand=titan,driver>=1 ".repeat(50_000)
    ));
    let spec = serde_json::json!({"process": {"env": env, "noNewPrivileges": true}, "root": {"path": "rootfs"}});
    let b = bundle(&t.0, &with_nvidia_hook(&spec.to_string()));
    let o = run(&["--config", cfg, "hook", "prestart"], Some(&state(&b)));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(
        &[
            "--config",
            cfg,
            "check",
            "--bundle",
            b.to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // precreate echoes an unchanged non-GPU config byte for byte
    let plain = br#"{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"]},  "z":1}"#;
    let o = run(&["--config", cfg, "hook", "precreate"], Some(plain));
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(o.stdout, plain);
}

#[test]
fn precreate_edits_or_refuses() {
    let t = Tmp::new("precreate");
    let cfg = config(&t.0, "a100");
    let cfg = cfg.to_str().unwrap();
    let gpu = br#"{"ociVersion":"1.0.2","process":{"env":["NVIDIA_VISIBLE_DEVICES=all"],"capabilities":{"bounding":["CAP_CHOWN","CAP_NET_RAW"]}},"zzz":{"keep":true}}"#;
    let gpu = with_nvidia_hook(std::str::from_utf8(gpu).unwrap());
    let o = run(
        &["--config", cfg, "hook", "precreate"],
        Some(gpu.as_bytes()),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["process"]["noNewPrivileges"], true);
    assert_eq!(
        v["process"]["capabilities"]["bounding"],
        serde_json::json!(["CAP_CHOWN"])
    );
    assert!(v["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e == "CUDA_DEVICE_ORDER=PCI_BUS_ID"));
    assert_eq!(v["zzz"]["keep"], true);
    // refusal: non-zero, diagnosis on stderr, nothing on stdout
    let bad =
        br#"{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all","NVIDIA_REQUIRE_CUDA=cuda>=12.4"]}}"#;
    let bad = with_nvidia_hook(std::str::from_utf8(bad).unwrap());
    let o = run(
        &["--config", cfg, "hook", "precreate"],
        Some(bad.as_bytes()),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    assert!(stderr(&o).contains("cuda>=12.4: driver 535.104.05 provides CUDA 12.2"));
    // with gpu-guard's own prestart hook in the config (podman adds hooks.d
    // prestart hooks before precreate), the refusal is left to that hook,
    // whose stderr podman shows; the policy edits still go in.
    // (Only this binary counts: tests/decide/precreate_handoff.rs.)
    let deferred = format!(
        r#"{{"process":{{"env":["NVIDIA_VISIBLE_DEVICES=all","NVIDIA_REQUIRE_CUDA=cuda>=12.4"]}},"hooks":{{"prestart":[{{"path":"{}","args":["gpu-guard","hook","prestart"]}}]}}}}"#,
        *BIN
    );
    let deferred = with_nvidia_hook(&deferred);
    let o = run(
        &["--config", cfg, "hook", "precreate"],
        Some(deferred.as_bytes()),
    );
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["process"]["noNewPrivileges"], true);
    // unreadable configs: passed through unchanged, unless they name a GPU
    // request
    let o = run(&["--config", cfg, "hook", "precreate"], Some(b"nope"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(o.stdout, b"nope");
    let o = run(
        &["--config", cfg, "hook", "precreate"],
        Some(br#"{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all"]"#),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    assert!(
        stderr(&o).contains("unexpected end of JSON input"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn man_page_renders_from_the_cli_definition() {
    let o = run(&["man"], None);
    assert_eq!(o.status.code(), Some(0));
    let page = String::from_utf8_lossy(&o.stdout);
    assert!(
        page.contains(".TH gpu-guard 1"),
        "{}",
        &page[..200.min(page.len())]
    );
    assert!(page.contains("check") && page.contains("runtime") && page.contains("install"));
    // What a reader looks for in a command's page, beyond the options.
    for section in [
        ".SH EXAMPLES\n",
        ".SH FILES\n",
        ".SH ENVIRONMENT\n",
        ".SH \"SEE ALSO\"\n",
    ] {
        assert!(page.contains(section), "no {section:?} in gpu-guard(1)");
    }
    for needle in [
        "/etc/gpu\\-guard/config.d/*.toml",
        "GPU_GUARD_CONFIG",
        "gpu\\-guard doctor",
    ] {
        assert!(page.contains(needle), "{needle} not in gpu-guard(1)");
    }
}

#[test]
fn decisions_reach_syslog_as_one_escaped_line() {
    use std::os::unix::net::UnixDatagram;
    let t = Tmp::new("syslog");
    let sock = t.0.join("log.sock");
    let listener = UnixDatagram::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let cfg = t.0.join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = true\nsyslog_socket = \"{}\"\n",
            data("hosts/a100.json").display(),
            sock.display()
        ),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let recv = || {
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        while let Ok(n) = listener.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        got
    };
    // A refusal whose container strings try to forge a second log line.
    let spec = serde_json::json!({"process": {"env": [
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.4\n<11>Jan  1 00:00:00 sshd[1]: forged",
    ], "noNewPrivileges": true}, "root": {"path": "rootfs"}});
    let b = bundle(&t.0, &with_nvidia_hook(&spec.to_string()));
    let st = format!(
        r#"{{"ociVersion":"1.0.2","id":"evil\u001b[2J\nid","status":"creating","pid":1,"bundle":"{}"}}"#,
        b.display()
    );
    let o = run(&["--config", cfg, "hook", "prestart"], Some(st.as_bytes()));
    assert_eq!(o.status.code(), Some(1));
    let lines = recv();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    // facility daemon (3), severity err (3): <27>; ident gpu-guard
    assert!(l.starts_with("<27>"), "{l}");
    assert!(l.contains(" gpu-guard["), "{l}");
    assert!(
        l.contains("verdict=refuse") && l.contains("cuda>=12.4"),
        "{l}"
    );
    let body = l.trim_end_matches('\n');
    assert!(!body.contains('\n') && !body.contains('\u{1b}'), "{l:?}");
    // A warning-level decision (arch cannot be judged is not possible with
    // full facts; an unknown requirement key is a warning) logs at warning.
    let spec = serde_json::json!({"process": {"env": [
        "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_X=cudnn>=9"], "noNewPrivileges": true}, "root": {"path": "rootfs"}});
    let b = bundle(&t.0, &with_nvidia_hook(&spec.to_string()));
    let o = run(&["--config", cfg, "hook", "prestart"], Some(&state(&b)));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = recv();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("<28>"), "{}", lines[0]);
    // A plain skip is not logged.
    let b = bundle(&t.0, r#"{"process":{"env":["PATH=/bin"]}}"#);
    let o = run(&["--config", cfg, "hook", "prestart"], Some(&state(&b)));
    assert_eq!(o.status.code(), Some(0));
    assert!(recv().is_empty());
}

/// The parsed config kept between starts (src/config/cache.rs) follows
/// every edit of the files at the next start, never keeps a config that
/// fails, and is not used from a directory others can write.
#[test]
fn the_parsed_config_kept_between_starts_follows_every_edit() {
    use std::os::unix::fs::PermissionsExt;
    let t = Tmp::new("config-cache");
    let cfg = config(&t.0, "a100");
    let base = std::fs::read_to_string(&cfg).unwrap();
    let kept = t.0.join("kept");
    let b = bundle(
        &t.0,
        &with_nvidia_hook(
            r#"{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all","NVIDIA_REQUIRE_CUDA=cuda>=99.0"]},"root":{"path":"rootfs"}}"#,
        ),
    );
    let check = || {
        Command::new(*BIN)
            .args(["--config", cfg.to_str().unwrap(), "check", "--bundle"])
            .arg(&b)
            .env_remove("GPU_GUARD_CONFIG")
            .env("GPU_GUARD_CONFIG_CACHE", &kept)
            .output()
            .unwrap()
    };
    let entries = || std::fs::read_dir(&kept).map_or(0, |d| d.count());
    let with_mode = |mode: &str| std::fs::write(&cfg, format!("{mode}\n{base}")).unwrap();
    // Refused, the parse kept, and refused again from what was kept.
    assert_eq!(check().status.code(), Some(1), "{}", stderr(&check()));
    assert_eq!(entries(), 1);
    assert_eq!(check().status.code(), Some(1));
    // Each edit counts at the next start: the main file, then a drop-in.
    with_mode("mode = \"off\"");
    assert_eq!(check().status.code(), Some(0), "{}", stderr(&check()));
    let drop_ins = t.0.join("config.d");
    std::fs::create_dir_all(&drop_ins).unwrap();
    std::fs::write(drop_ins.join("90-enforce.toml"), "mode = \"enforce\"\n").unwrap();
    assert_eq!(check().status.code(), Some(1));
    std::fs::remove_file(drop_ins.join("90-enforce.toml")).unwrap();
    assert_eq!(check().status.code(), Some(0));
    // A config that fails is found again at every start, and never kept.
    with_mode("mode = \"bogus\"");
    for _ in 0..2 {
        let o = check();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("key `mode`: line 1"), "{}", stderr(&o));
    }
    assert_eq!(entries(), 1);
    // Nor one whose bytes are not UTF-8, though kept entries are found by
    // bytes before the text is checked.
    std::fs::write(&cfg, b"mode = \"off\"\n# \xff\n").unwrap();
    for _ in 0..2 {
        let o = check();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("not UTF-8"), "{}", stderr(&o));
    }
    assert_eq!(entries(), 1);
    // A directory others can write is not used: nothing is kept there.
    std::fs::remove_dir_all(&kept).unwrap();
    std::fs::create_dir(&kept).unwrap();
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o777)).unwrap();
    with_mode("");
    assert_eq!(check().status.code(), Some(1));
    assert_eq!(entries(), 0);
}
