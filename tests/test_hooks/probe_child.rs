//! NVML runs in a child process (src/host/child.rs), never in the process
//! that serves the container start: a GPU that hangs the driver in an
//! uninterruptible ioctl cannot hold the hook's exit or the runtime
//! wrapper's execve past `host.probe_timeout_ms`.
//!
//! The fake NVML stands in for the hung driver with FAKE_NVML_FAIL=hang
//! (nvmlInit ignores SIGTERM and never returns) and names the process that
//! loaded it in FAKE_NVML_LOAD_LOG. Needs the `test-hooks` feature (the
//! binary is pointed at a fake host through the test-only variables).

use crate::probe_common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT_MS: u64 = 500;
/// What the serving process may take beyond the probe deadline.
const SLACK: Duration = Duration::from_millis(1500);

/// A GPU container bundle already within the security policy, so that only
/// the probe decides. NVIDIA's prestart hook attaches the GPUs, as
/// `docker run --gpus` adds it (gpu-guard counts env requests only then).
fn bundle(host: &FakeHost) -> PathBuf {
    let b = host.dir.join("bundle");
    std::fs::create_dir_all(b.join("rootfs")).unwrap();
    std::fs::write(
        b.join("config.json"),
        r#"{"ociVersion":"1.0.2","process":{"args":["/bin/true"],"cwd":"/",
 "env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=all","NVIDIA_REQUIRE_CUDA=cuda>=12.0"],
 "noNewPrivileges":true,"capabilities":{"bounding":["CAP_CHOWN"],"effective":["CAP_CHOWN"],"permitted":["CAP_CHOWN"]}},
 "hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}]},
 "root":{"path":"rootfs"}}"#,
    )
    .unwrap();
    b
}

/// A config: top-level `mode`, then [host] with the fake library, the
/// cache in the host's dir, and the short deadline; `runtime` the stand-in.
fn config(host: &FakeHost, mode: &str, runtime: Option<&Path>) -> PathBuf {
    let p = host.dir.join(format!("config-{mode}.toml"));
    let rt = runtime
        .map(|r| format!("[runtime]\npath = \"{}\"\n", r.display()))
        .unwrap_or_default();
    std::fs::write(
        &p,
        format!(
            "mode = \"{mode}\"\n[host]\nnvml_library = \"{}\"\ncache_file = \"{}\"\nprobe_timeout_ms = {TIMEOUT_MS}\n{rt}[log]\nsyslog = false\n",
            fake_lib().display(),
            cache(host).display()
        ),
    )
    .unwrap();
    p
}

fn cache(host: &FakeHost) -> PathBuf {
    host.dir.join("run/host-facts.json")
}

fn load_log(host: &FakeHost) -> PathBuf {
    host.dir.join("nvml-load.log")
}

/// (event, pid, ppid) per FAKE_NVML_LOAD_LOG line.
fn loads(host: &FakeHost) -> Vec<(String, u32, u32)> {
    let text = std::fs::read_to_string(load_log(host)).unwrap_or_default();
    text.lines()
        .map(|l| {
            let mut it = l.split(' ');
            let what = it.next().unwrap().to_string();
            let num = |s: Option<&str>, k: &str| -> u32 {
                s.and_then(|s| s.strip_prefix(k))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("bad load log line {l:?}"))
            };
            let pid = num(it.next(), "pid=");
            let ppid = num(it.next(), "ppid=");
            (what, pid, ppid)
        })
        .collect()
}

/// Asserts that NVML was loaded (and initialised) only in children of
/// `server`, never in `server` itself; returns the children's pids.
fn loaded_only_in_children(host: &FakeHost, server: u32) -> Vec<u32> {
    let l = loads(host);
    assert!(
        l.iter().any(|(w, _, _)| w == "load") && l.iter().any(|(w, _, _)| w == "init"),
        "NVML was never loaded: {l:?}"
    );
    for (what, pid, ppid) in &l {
        assert_ne!(
            *pid, server,
            "{what} in the serving process {server}: {l:?}"
        );
        assert_eq!(*ppid, server, "{what} not in a child of {server}: {l:?}");
    }
    l.iter().map(|(_, p, _)| *p).collect()
}

/// The command with the fake host, the fake's knobs and the load log.
fn command(host: &FakeHost, config: &Path, fail: Option<&str>) -> Command {
    let mut c = host.command("a100", config);
    c.env("FAKE_NVML_LOAD_LOG", load_log(host));
    if let Some(f) = fail {
        c.env("FAKE_NVML_FAIL", f);
    }
    c
}

/// Spawns `c` with `stdin` and returns (pid, output, elapsed); fails the
/// test past 30 s.
fn run_with_stdin(c: &mut Command, stdin: &[u8]) -> (u32, std::process::Output, Duration) {
    use std::io::Write;
    let start = Instant::now();
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    loop {
        match child.try_wait().expect("try_wait") {
            Some(_) => break,
            None if start.elapsed() > Duration::from_secs(30) => {
                let _ = child.kill();
                panic!("{c:?} ran past 30 s");
            }
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    let took = start.elapsed();
    (pid, child.wait_with_output().expect("output"), took)
}

fn state(bundle: &Path) -> Vec<u8> {
    format!(
        r#"{{"ociVersion":"1.0.2","id":"probe-child","status":"creating","pid":1,"bundle":"{}"}}"#,
        bundle.display()
    )
    .into_bytes()
}

/// The hung probe child was sent SIGKILL: it is gone or a zombie soon
/// after (SIGTERM alone would leave FAKE_NVML_FAIL=hang sleeping).
fn assert_killed(pid: u32) {
    let start = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // "pid (comm) S ...": the state follows the last ')'.
        let st = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next());
        if matches!(st, None | Some('Z') | Some('X')) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "probe child {pid} still alive: {stat}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn diagnosis() -> String {
    format!("NVML did not answer within {TIMEOUT_MS} ms")
}

#[test]
fn hook_returns_at_the_deadline_when_nvml_hangs() {
    require_test_hooks();
    let host = FakeHost::new("a100", true);
    let b = bundle(&host);
    let cfg = config(&host, "enforce", None);
    let (pid, out, took) = run_with_stdin(
        command(&host, &cfg, Some("hang")).args(["hook", "prestart"]),
        &state(&b),
    );
    let err = stderr(&out);
    assert!(!out.status.success(), "a hung NVML must refuse: {err}");
    assert!(err.contains(&diagnosis()), "{err}");
    assert!(
        took < Duration::from_millis(TIMEOUT_MS) + SLACK,
        "the hook took {took:?}"
    );
    assert!(took >= Duration::from_millis(TIMEOUT_MS), "{took:?}");
    for child in loaded_only_in_children(&host, pid) {
        assert_killed(child);
    }
    assert!(
        !cache(&host).exists(),
        "a timed-out probe must not be cached"
    );
}

#[test]
fn hook_loads_nvml_only_in_a_child_and_warm_cache_spawns_none() {
    require_test_hooks();
    let host = FakeHost::new("a100", true);
    let b = bundle(&host);
    let cfg = config(&host, "enforce", None);
    let (pid, out, _) = run_with_stdin(
        command(&host, &cfg, None).args(["hook", "prestart"]),
        &state(&b),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    loaded_only_in_children(&host, pid);
    assert!(cache(&host).is_file(), "the child's clean answer is cached");
    // Warm cache: no probe child, so nothing loads NVML.
    std::fs::remove_file(load_log(&host)).unwrap();
    let (_, out, _) = run_with_stdin(
        command(&host, &cfg, Some("hang")).args(["hook", "prestart"]),
        &state(&b),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(loads(&host).is_empty(), "{:?}", loads(&host));
}

#[test]
fn host_command_loads_nvml_only_in_a_child() {
    require_test_hooks();
    let host = FakeHost::new("a100", true);
    let cfg = config(&host, "enforce", None);
    let (pid, out, _) = run_with_stdin(command(&host, &cfg, None).args(["host", "--json"]), b"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout_json(&out), probed_json("a100"));
    loaded_only_in_children(&host, pid);
}

/// A stand-in real runtime that records its pid (the wrapper's, when it
/// was exec'd) and its argv.
fn stand_in(host: &FakeHost) -> (PathBuf, PathBuf) {
    let record = host.dir.join("runtime-ran");
    let script = host.dir.join("fake-runc");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$$ $*\" > '{}'\nexit 0\n",
            record.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, record)
}

fn wrapper(host: &FakeHost, cfg: &Path, b: &Path, log: &Path) -> Command {
    let mut c = command(host, cfg, Some("hang"));
    c.arg("runtime")
        .arg("--log")
        .arg(log)
        .args(["create", "--bundle"])
        .arg(b)
        .arg("probe-child");
    c
}

#[test]
fn wrapper_refuses_at_the_deadline_when_nvml_hangs() {
    require_test_hooks();
    let host = FakeHost::new("a100", true);
    let b = bundle(&host);
    let (rt, record) = stand_in(&host);
    let cfg = config(&host, "enforce", Some(&rt));
    let log = host.dir.join("runtime.log");
    let (pid, out, took) = run_with_stdin(&mut wrapper(&host, &cfg, &b, &log), b"");
    assert!(!out.status.success());
    let text = std::fs::read_to_string(&log).unwrap_or_default() + &stderr(&out);
    assert!(text.contains(&diagnosis()), "{text}");
    assert!(
        took < Duration::from_millis(TIMEOUT_MS) + SLACK,
        "the wrapper took {took:?}"
    );
    assert!(
        !record.exists(),
        "a refused container must not reach the runtime"
    );
    for child in loaded_only_in_children(&host, pid) {
        assert_killed(child);
    }
}

#[test]
fn wrapper_in_warn_mode_execs_the_runtime_promptly_when_nvml_hangs() {
    require_test_hooks();
    let host = FakeHost::new("a100", true);
    let b = bundle(&host);
    let (rt, record) = stand_in(&host);
    let cfg = config(&host, "warn", Some(&rt));
    let log = host.dir.join("runtime.log");
    let (pid, out, took) = run_with_stdin(&mut wrapper(&host, &cfg, &b, &log), b"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        took < Duration::from_millis(TIMEOUT_MS) + SLACK,
        "the wrapper took {took:?} to exec the runtime"
    );
    let ran = std::fs::read_to_string(&record).expect("the stand-in runtime ran");
    // Exec'd, not spawned: the runtime has the wrapper's pid and argv.
    assert!(
        ran.starts_with(&format!("{pid} --log ")),
        "{ran:?} (wrapper pid {pid})"
    );
    assert!(ran.contains("create --bundle"), "{ran}");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged.contains(&diagnosis()), "{logged}");
    for child in loaded_only_in_children(&host, pid) {
        assert_killed(child);
    }
}
