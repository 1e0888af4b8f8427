//! The wrapper knows which engine invoked it from the runtime root the
//! engine passes, and acts on it: each
//! engine's command line, exactly as that engine runs the wrapper, execs
//! that engine's chain; CRI facts select exceptions only under containerd's
//! or CRI-O's root; a chain that names nothing says so in the runtime log;
//! `mode = "audit"` changes nothing. Recording stand-ins play the real
//! runtimes; integration/test-docker.sh, test-cri.sh and test-runc.sh run
//! the same through the real engines and runc.

use crate::{code, shown};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_gpu-guard");

/// docker.io 20.10's root for every runtime of daemon.json (moby
/// daemon/runtime_unix.go), containerd's runc shim's root for gpu-guard's
/// runtime (`options.Root` + the CRI namespace), CRI-O's `runtime_root`.
const DOCKER_ROOT: &str = "/var/run/docker/runtime-runc/moby";
const CONTAINERD_ROOT: &str = "/run/gpu-guard/containerd/k8s.io";
const CRIO_ROOT: &str = "/run/gpu-guard/crio";

const NVIDIA_HOOK: &str = r#"{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}"#;

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let p = crate::support::tempdir(&format!("wengines-{name}"));
        std::fs::create_dir_all(p.join("bundle")).unwrap();
        Tmp(p)
    }

    fn bundle(&self) -> PathBuf {
        self.0.join("bundle")
    }

    /// A stand-in runtime named `name` that appends `name: ARGV` to
    /// `calls` (and answers `state` with the bundle).
    fn runtime(&self, name: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"{name}: $*\" >> {calls}\ncase \" $* \" in *\" state \"*) echo '{{\"bundle\":\"{b}\"}}';; esac\nexit 0\n",
                calls = self.0.join("calls").display(),
                b = self.bundle().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// A config on the A100 facts file (driver 535, CUDA 12.2), `extra`
    /// TOML appended.
    fn config(&self, extra: &str) -> PathBuf {
        let p = self.0.join("config.toml");
        let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
        std::fs::write(
            &p,
            format!(
                "{extra}\n[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n",
                facts.display()
            ),
        )
        .unwrap();
        p
    }

    fn spec(&self, text: &str) {
        std::fs::write(self.bundle().join("config.json"), text).unwrap();
    }

    fn spec_bytes(&self) -> Vec<u8> {
        std::fs::read(self.bundle().join("config.json")).unwrap()
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.0.join("calls")).unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.bundle().join("log.json")).unwrap_or_default()
    }

    fn last_log(&self) -> serde_json::Value {
        let log = self.log();
        let last = log.lines().last().unwrap_or("null");
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {log}"))
    }

    /// `gpu-guard-runtime ARGS` under `cfg`, PATH led by this directory.
    fn run(&self, cfg: &Path, args: &[String]) -> Output {
        let mut dirs = vec![self.0.clone()];
        dirs.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        Command::new(BIN)
            .arg("--config")
            .arg(cfg)
            .arg("runtime")
            .args(args)
            .env("GPU_GUARD_MARKER_DIR", self.0.join("markers"))
            .env("PATH", std::env::join_paths(dirs).unwrap())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `create` as `engine` runs it: the argv seen from each engine
    /// (docs in integration/test-docker.sh, test-cri.sh; CRI-O's conmon
    /// passes `--root=R` and no `--log`).
    fn create(&self, cfg: &Path, engine: &str, id: &str) -> Output {
        let b = self.bundle().display().to_string();
        let log = format!("{b}/log.json");
        let pid = format!("{b}/init.pid");
        let crio_root = format!("--root={CRIO_ROOT}");
        let argv: Vec<String> = match engine {
            "docker" => vec!["--root", DOCKER_ROOT, "--log", &log, "--log-format", "json"],
            "containerd" => vec![
                "--root",
                CONTAINERD_ROOT,
                "--log",
                &log,
                "--log-format",
                "json",
            ],
            "ctr" => vec![
                "--root",
                "/run/gpu-guard/containerd/default",
                "--log",
                &log,
                "--log-format",
                "json",
            ],
            "crio" => vec![crio_root.as_str(), "--log", &log],
            _ => vec!["--root", "/run/runc", "--log", &log],
        }
        .into_iter()
        .map(String::from)
        .chain(["create", "--bundle", &b, "--pid-file", &pid, id].map(String::from))
        .collect();
        self.run(cfg, &argv)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A spec with `env`, docker's capabilities, `extra` JSON members.
fn spec(env: &[&str], caps: &[&str], extra: &str) -> String {
    let q = |v: &[&str]| {
        v.iter()
            .map(|e| format!("\"{e}\""))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        r#"{{"ociVersion":"1.0.2","process":{{"args":["sh"],"cwd":"/","user":{{"uid":0,"gid":0}},"env":["PATH=/bin",{}],"noNewPrivileges":false,"capabilities":{{"bounding":[{c}],"effective":[{c}],"permitted":[{c}]}}}},"root":{{"path":"rootfs"}}{extra}}}"#,
        q(env),
        c = q(caps)
    )
}

const DOCKER_CAPS: [&str; 3] = ["CAP_CHOWN", "CAP_NET_RAW", "CAP_SETUID"];

#[test]
fn each_engines_create_execs_its_own_chain() {
    let t = Tmp::new("chains");
    let (global, docker, containerd, crio) = (
        t.runtime("runc"),
        t.runtime("nvidia-container-runtime"),
        t.runtime("runc-containerd"),
        t.runtime("crun-crio"),
    );
    let cfg = t.config(&format!(
        "[runtime]\npath = \"{}\"\n[runtime.engines.docker]\npath = \"{}\"\n[runtime.engines.containerd]\npath = \"{}\"\n[runtime.engines.crio]\npath = \"{}\"\n",
        global.display(),
        docker.display(),
        containerd.display(),
        crio.display()
    ));
    t.spec(&spec(&["A=1"], &DOCKER_CAPS, ""));
    for (engine, want) in [
        ("docker", "nvidia-container-runtime"),
        ("containerd", "runc-containerd"),
        ("crio", "crun-crio"),
        ("unknown", "runc"),
    ] {
        let id = format!("c-{engine}");
        let before = t.calls().lines().count();
        let o = t.create(&cfg, engine, &id);
        assert_eq!(code(&o), 0, "{engine}: {}", shown(&o));
        let calls = t.calls();
        let new: Vec<&str> = calls.lines().skip(before).collect();
        assert_eq!(new.len(), 1, "{engine}: {calls}");
        assert!(
            new[0].starts_with(&format!("{want}: ")),
            "{engine}: {calls}"
        );
        // The argv goes on unchanged.
        assert!(
            new[0].ends_with(&format!(
                "create --bundle {b} --pid-file {b}/init.pid {id}",
                b = t.bundle().display()
            )),
            "{engine}: {calls}"
        );
    }
    // Every other subcommand of an engine goes to that engine's chain too.
    let o = t.run(
        &cfg,
        &[
            "--root".into(),
            DOCKER_ROOT.into(),
            "state".into(),
            "x".into(),
        ],
    );
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(
        t.calls()
            .lines()
            .last()
            .unwrap()
            .starts_with("nvidia-container-runtime: --root"),
        "{}",
        t.calls()
    );
    // An engine with no chain of its own gets the global one.
    let cfg = t.config(&format!(
        "[runtime]\npath = \"{}\"\n[runtime.engines.docker]\npath = \"{}\"\n",
        global.display(),
        docker.display()
    ));
    let o = t.create(&cfg, "containerd", "c-fallback");
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(
        t.calls().lines().last().unwrap().starts_with("runc: "),
        "{}",
        t.calls()
    );
}

#[test]
fn the_chain_decides_for_its_engine_and_check_engine_agrees() {
    // docker chains NVIDIA's runtime, containerd plain runc:
    // an env GPU request counts under docker only.
    let t = Tmp::new("decide");
    let nvidia = t.runtime("nvidia-container-runtime");
    let runc = t.runtime("runc");
    let cfg = t.config(&format!(
        "[runtime.engines.docker]\npath = \"{}\"\n[runtime.engines.containerd]\npath = \"{}\"\n",
        nvidia.display(),
        runc.display()
    ));
    t.spec(&spec(
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        ],
        &DOCKER_CAPS,
        "",
    ));
    let o = t.create(&cfg, "docker", "gpu-docker");
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(
        t.last_log()["msg"].as_str().unwrap().contains("cuda>=12.4"),
        "{}",
        t.log()
    );
    let o = t.create(&cfg, "containerd", "gpu-containerd");
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(t.calls().contains("runc: "), "{}", t.calls());
    let spec_path = t.bundle().join("config.json");
    let check = |extra: &[&str]| {
        let o = Command::new(BIN)
            .args([
                "--config",
                cfg.to_str().unwrap(),
                "check",
                "--json",
                "--spec",
            ])
            .arg(&spec_path)
            .args(extra)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (code(&o), v)
    };
    let (c, v) = check(&["--engine", "docker"]);
    assert_eq!((c, v["verdict"].as_str()), (1, Some("refuse")), "{v}");
    let (c, v) = check(&["--engine", "containerd"]);
    assert_eq!((c, v["verdict"].as_str()), (0, Some("skip")), "{v}");
    // No --engine: the global chain (PATH's runc), and a note naming the
    // engines that chain something else.
    let (c, v) = check(&[]);
    assert_eq!(c, 0, "{v}");
    let note = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["message"].as_str().unwrap().contains("chains per engine"))
        .unwrap_or_else(|| panic!("no per-engine note: {v}"));
    let msg = note["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("docker: {}", nvidia.display())),
        "{msg}"
    );
    assert!(msg.contains("this decision used runtime.path"), "{msg}");
    assert!(note["fix"].as_str().unwrap().contains("--engine"), "{note}");
}

/// A privileged GPU container whose own annotations claim the exempt
/// namespace: `docker run --annotation ... --privileged --gpus all`.
fn forged(t: &Tmp, keys: &str) {
    let all: Vec<String> = gpu_guard::core::capability::all_names();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    t.spec(&spec(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        &all,
        &format!(r#","hooks":{{"prestart":[{NVIDIA_HOOK}]}},"annotations":{{{keys}}}"#),
    ));
}

const EXEMPT: &str = "[[security.exceptions]]\nnamespace = \"gpu-operator\"\nprofile = \"docker-default\"\nallow_privileged = true\n";
const CONTAINERD_KEYS: &str = r#""io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-namespace":"gpu-operator""#;

#[test]
fn cri_facts_select_exceptions_only_under_a_cri_runtimes_root() {
    let t = Tmp::new("forged");
    t.runtime("runc");
    let cfg = t.config(EXEMPT);
    forged(&t, CONTAINERD_KEYS);
    // containerd's CRI root vouches for its keys: exempt.
    let o = t.create(&cfg, "containerd", "cri");
    assert_eq!(code(&o), 0, "{}", shown(&o));
    // docker's root, containerd's other namespaces (ctr, nerdctl), CRI-O's
    // root (these are not its keys), an unknown root: the same annotations
    // vouch for nothing, and the privileged container is refused.
    for engine in ["docker", "ctr", "crio", "unknown"] {
        let o = t.create(&cfg, engine, &format!("forged-{engine}"));
        assert_eq!(code(&o), 1, "{engine}: {}", shown(&o));
        let msg = t.last_log()["msg"].as_str().unwrap().to_string();
        assert!(
            msg.contains("the container is privileged"),
            "{engine}: {msg}"
        );
    }
    // Both runtimes' keys, disagreeing: refused under containerd's root too.
    forged(
        &t,
        &format!(r#"{CONTAINERD_KEYS},"io.kubernetes.pod.namespace":"kube-system""#),
    );
    let o = t.create(&cfg, "containerd", "conflict");
    assert_eq!(code(&o), 1, "{}", shown(&o));
    let msg = t.last_log()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.contains("both containerd's and CRI-O's Kubernetes keys"),
        "{msg}"
    );
    assert!(
        msg.contains("io.kubernetes.pod.namespace=kube-system"),
        "{msg}"
    );
    // CRI-O's own keys under CRI-O's root: exempt.
    forged(
        &t,
        r#""io.kubernetes.cri-o.ContainerType":"container","io.kubernetes.pod.namespace":"gpu-operator""#,
    );
    let o = t.create(&cfg, "crio", "crio");
    assert_eq!(code(&o), 0, "{}", shown(&o));
}

#[test]
fn exec_flags_into_an_allow_privileged_container_are_allowed_with_a_warning() {
    let t = Tmp::new("privexec");
    t.runtime("runc");
    let cfg = t.config(EXEMPT);
    // The exempt container, created unprivileged under containerd's root.
    t.spec(&spec(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        &DOCKER_CAPS,
        &format!(r#","hooks":{{"prestart":[{NVIDIA_HOOK}]}},"annotations":{{{CONTAINERD_KEYS}}}"#),
    ));
    assert_eq!(code(&t.create(&cfg, "containerd", "op")), 0);
    let log = t.bundle().join("log.json").display().to_string();
    let exec = |root: &str| {
        let argv: Vec<String> = [
            "--root",
            root,
            "--log",
            &log,
            "exec",
            "--cap",
            "CAP_SYS_ADMIN",
            "--no-new-privs=false",
            "op",
            "sh",
        ]
        .map(String::from)
        .to_vec();
        t.run(&cfg, &argv)
    };
    let before = t.calls().lines().count();
    let o = exec(CONTAINERD_ROOT);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert_eq!(t.calls().lines().count(), before + 1, "{}", t.calls());
    let msg = t.last_log()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.contains("security.exceptions[0]") && msg.contains("--cap CAP_SYS_ADMIN"),
        "{msg}"
    );
    // The same exec as docker's (no CRI facts believed): held to the
    // default profile and refused.
    let o = exec(DOCKER_ROOT);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    // `docker exec --privileged` / `kubectl exec` of a privileged process
    // file: allowed into the exempt container, its capabilities kept (it
    // gets the main process's tuning variables, as a privileged GPU
    // container does at create).
    let all = gpu_guard::core::capability::all_names();
    let caps = all
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(",");
    let pf = t.0.join("privileged-process.json");
    let process = format!(
        r#"{{"args":["sh"],"cwd":"/","user":{{"uid":0,"gid":0}},"env":["PATH=/bin"],"capabilities":{{"bounding":[{caps}],"effective":[{caps}],"permitted":[{caps}]}}}}"#
    );
    std::fs::write(&pf, &process).unwrap();
    let by_process = |root: &str| {
        let argv: Vec<String> = [
            "--root",
            root,
            "--log",
            &log,
            "exec",
            "--process",
            pf.to_str().unwrap(),
            "op",
        ]
        .map(String::from)
        .to_vec();
        t.run(&cfg, &argv)
    };
    let o = by_process(CONTAINERD_ROOT);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let after: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pf).unwrap()).unwrap();
    assert_eq!(
        after["capabilities"]["bounding"].as_array().unwrap().len(),
        all.len(),
        "{after}"
    );
    std::fs::write(&pf, &process).unwrap();
    let o = by_process(DOCKER_ROOT);
    assert_eq!(code(&o), 1, "{}", shown(&o));
}

#[test]
fn a_missing_chained_runtime_is_named_in_the_runtime_log_host_and_check() {
    let t = Tmp::new("missing");
    let missing = t.0.join("no-such/nvidia-container-runtime");
    let cfg = t.config(&format!(
        "[runtime.engines.containerd]\npath = \"{}\"\n",
        missing.display()
    ));
    // Not a GPU container: it fails all the same, and says why.
    t.spec(&spec(&["A=1"], &DOCKER_CAPS, ""));
    let o = t.create(&cfg, "containerd", "cpu");
    assert_eq!(code(&o), 127, "{}", shown(&o));
    let line = t.last_log();
    assert_eq!(line["level"], "error", "{}", t.log());
    let msg = line["msg"].as_str().unwrap();
    assert!(
        msg.contains(&missing.display().to_string()) && msg.contains("does not exist"),
        "{msg}"
    );
    assert!(msg.contains("runtime.engines.containerd.path"), "{msg}");
    assert!(
        msg.contains("fix: ") && msg.contains("gpu-guard install containerd"),
        "{msg}"
    );
    assert!(shown(&o).contains("does not exist"), "{}", shown(&o));
    // `host` shows it as a problem and exits 1 (a host that cannot run containers).
    let o = Command::new(BIN)
        .args(["--config", cfg.to_str().unwrap(), "host"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(
        shown(&o).contains("error: the configured runtime"),
        "{}",
        shown(&o)
    );
    // `check --engine containerd` refuses, naming it; the global chain is fine.
    let spec_path = t.bundle().join("config.json");
    let check = |extra: &[&str]| {
        let o = Command::new(BIN)
            .args(["--config", cfg.to_str().unwrap(), "check", "--spec"])
            .arg(&spec_path)
            .args(extra)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .unwrap();
        (code(&o), shown(&o))
    };
    let (c, out) = check(&["--engine", "containerd"]);
    assert_eq!(c, 1, "{out}");
    assert!(out.contains("[config]") || out.contains("config"), "{out}");
    assert!(out.contains("does not exist"), "{out}");
    let (c, out) = check(&["--engine", "docker"]);
    assert_eq!(c, 0, "{out}");
}

#[test]
fn audit_refuses_nothing_and_changes_nothing_and_logs_what_enforce_would() {
    let t = Tmp::new("audit");
    let runc = t.runtime("runc");
    let cfg = t.config(&format!(
        "mode = \"audit\"\n[runtime]\npath = \"{}\"\n",
        runc.display()
    ));
    // One enforce refuses (CUDA 12.4 on 12.2), one it edits: one
    // key=value record each (core::logfmt), as in every mode.
    for (id, env, would) in [
        (
            "refused",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
            "verdict=would_refuse",
        ),
        ("edited", "NVIDIA_REQUIRE_CUDA=cuda>=12.0", "would_edit="),
    ] {
        t.spec(&spec(
            &["NVIDIA_VISIBLE_DEVICES=all", env],
            &DOCKER_CAPS,
            &format!(r#","hooks":{{"prestart":[{NVIDIA_HOOK}]}}"#),
        ));
        let before = t.spec_bytes();
        let o = t.create(&cfg, "containerd", id);
        assert_eq!(code(&o), 0, "{id}: {}", shown(&o));
        assert_eq!(
            t.spec_bytes(),
            before,
            "{id}: config.json changed under audit"
        );
        assert!(
            t.calls().contains(&format!(" {id}\n")),
            "{id}: {}",
            t.calls()
        );
        let line = t.last_log();
        assert_eq!(line["level"], "warning", "{id}: {}", t.log());
        let msg = line["msg"].as_str().unwrap();
        let pairs = gpu_guard::core::logfmt::parse(msg).unwrap_or_else(|| panic!("{msg}"));
        let get = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|p| p.1.as_str());
        assert_eq!(get("mode"), Some("audit"), "{id}: {msg}");
        assert_eq!(get("container"), Some(id), "{id}: {msg}");
        assert!(msg.contains(would), "{id}: {msg}");
        assert!(
            !shown(&o).contains("gpu-guard"),
            "{id}: stderr is the container's: {}",
            shown(&o)
        );
    }
    assert!(
        t.log().contains("env+=CUDA_DEVICE_ORDER=PCI_BUS_ID"),
        "{}",
        t.log()
    );
    assert!(t.log().contains("caps-=CAP_NET_RAW"), "{}", t.log());
    // An exec enforce would refuse runs; a process file stays as it was.
    let log = t.bundle().join("log.json").display().to_string();
    let argv: Vec<String> = [
        "--root",
        CONTAINERD_ROOT,
        "--log",
        &log,
        "exec",
        "--cap",
        "CAP_SYS_ADMIN",
        "edited",
        "sh",
    ]
    .map(String::from)
    .to_vec();
    let o = t.run(&cfg, &argv);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(
        t.last_log()["msg"]
            .as_str()
            .unwrap()
            .contains("verdict=would_refuse"),
        "{}",
        t.log()
    );
    let pf = t.0.join("process.json");
    let process = r#"{"args":["sh"],"cwd":"/","user":{"uid":1000,"gid":1000},"env":["PATH=/bin"],"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_ADMIN"]}}"#;
    std::fs::write(&pf, process).unwrap();
    let argv: Vec<String> = [
        "--root",
        CONTAINERD_ROOT,
        "--log",
        &log,
        "exec",
        "--process",
        pf.to_str().unwrap(),
        "edited",
    ]
    .map(String::from)
    .to_vec();
    let o = t.run(&cfg, &argv);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert_eq!(std::fs::read_to_string(&pf).unwrap(), process);
    // check says what enforce would do, and that it is audit.
    let o = Command::new(BIN)
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "check",
            "--json",
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (code(&o), v["verdict"].as_str()),
        (1, Some("refuse")),
        "{v}"
    );
    assert!(
        v.to_string()
            .contains("mode = \\\"audit\\\": this is what enforce would do"),
        "{v}"
    );
}
