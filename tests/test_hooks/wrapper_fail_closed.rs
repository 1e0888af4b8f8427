//! A broken config never changes what a container gets: under a config
//! that cannot be used (an unknown key a newer gpu-guard wrote, a config
//! or drop-in that does not parse), the wrapper still execs the engine's
//! chain from `config.d/50-chain-containerd.toml` (NVIDIA's runtime, here
//! a stand-in that records its argv), never the first `runc` on PATH; a
//! container whose only GPU request is `NVIDIA_VISIBLE_DEVICES=all` (the
//! device plugin's envvar strategy, which only NVIDIA's runtime acts on)
//! is classified as the valid config would and refused with the config's
//! error in the `--log` file and syslog; `check --bundle --engine
//! containerd` says the same; execs into it stay judged; other containers
//! run through the chain unchanged. The last test does it under real runc.

use crate::{code, shown};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_gpu-guard");

struct Node {
    dir: PathBuf,
    syslog: UnixDatagram,
}

impl Node {
    /// A node as `gpu-guard install containerd` leaves it on a GPU
    /// Operator host: the chain drop-in names NVIDIA's runtime (a stand-in
    /// that records its argv, then execs `then` when given); PATH leads
    /// with a `runc` that only records.
    fn new(tag: &str, then: Option<&Path>) -> Node {
        let dir = crate::support::tempdir(&format!("failclosed-{tag}"));
        for d in ["etc/config.d", "bin", "bundle", "markers"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
            std::fs::set_permissions(dir.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let exec = then.map_or(String::new(), |r| format!("exec {} \"$@\"\n", r.display()));
        let calls = dir.join("calls");
        for (name, tail) in [("nvidia-container-runtime", exec.as_str()), ("runc", "")] {
            let p = dir.join("bin").join(name);
            std::fs::write(
                &p,
                format!(
                    "#!/bin/sh\necho \"{name}: $*\" >> {}\n{tail}",
                    calls.display()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(
            dir.join("etc/config.d/50-chain-containerd.toml"),
            format!(
                "[runtime.engines.containerd]\npath = \"{}\"\n",
                dir.join("bin/nvidia-container-runtime").display()
            ),
        )
        .unwrap();
        let syslog = UnixDatagram::bind(dir.join("log.sock")).unwrap();
        syslog.set_nonblocking(true).unwrap();
        let n = Node { dir, syslog };
        n.write_config("");
        n
    }

    fn config(&self) -> PathBuf {
        self.dir.join("etc/config.toml")
    }

    /// config.toml on the A100 facts file, with `extra` TOML first.
    fn write_config(&self, extra: &str) {
        let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
        std::fs::write(
            self.config(),
            format!(
                "{extra}\n[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[libraries]\nseverity = \"off\"\n[log]\nsyslog_socket = \"{}\"\n[runtime.engines.containerd]\nroot = \"{}\"\n",
                facts.display(),
                self.dir.join("log.sock").display(),
                self.containerd_root().display()
            ),
        )
        .unwrap();
    }

    /// containerd's runtime root for gpu-guard's runtime, private to the
    /// test (`[runtime.engines.containerd] root`).
    fn containerd_root(&self) -> PathBuf {
        self.dir.join("run-containerd")
    }

    fn bundle(&self) -> PathBuf {
        self.dir.join("bundle")
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.join("calls")).unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.bundle().join("log.json")).unwrap_or_default()
    }

    fn syslog_lines(&self) -> Vec<String> {
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        while let Ok(n) = self.syslog.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        got
    }

    fn gpu_guard(&self) -> Command {
        let mut c = Command::new(BIN);
        let mut path = vec![self.dir.join("bin")];
        path.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        c.arg("--config")
            .arg(self.config())
            .env("PATH", std::env::join_paths(path).unwrap())
            .env("GPU_GUARD_MARKER_DIR", self.dir.join("markers"))
            .stdin(Stdio::null());
        c
    }

    /// The wrapper as containerd's runc shim runs it for the CRI plugin
    /// (namespace `k8s.io`), else as docker runs it.
    fn wrapper(&self, containerd: bool, args: &[&str]) -> Output {
        let root = if containerd {
            self.containerd_root().join("k8s.io")
        } else {
            PathBuf::from("/var/run/docker/runtime-runc/moby")
        };
        let log = self.bundle().join("log.json");
        // The container's stdio is the runtime's (runc create without a
        // terminal hands it to init, which holds it until it exits): files,
        // not pipes, so waiting for the wrapper never waits for the container.
        let (out, err) = (self.dir.join("stdout"), self.dir.join("stderr"));
        let status = self
            .gpu_guard()
            .arg("runtime")
            .arg("--root")
            .arg(root)
            .arg("--log")
            .arg(log)
            .args(["--log-format", "json"])
            .args(args)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .status()
            .unwrap();
        Output {
            status,
            stdout: std::fs::read(&out).unwrap_or_default(),
            stderr: std::fs::read(&err).unwrap_or_default(),
        }
    }

    fn create(&self, containerd: bool, id: &str) -> Output {
        let b = self.bundle().display().to_string();
        let pid = format!("{b}/init.pid");
        self.wrapper(
            containerd,
            &["create", "--bundle", &b, "--pid-file", &pid, id],
        )
    }

    fn spec(&self, env: &[&str]) {
        let env: Vec<String> = env.iter().map(|e| format!("\"{e}\"")).collect();
        std::fs::write(
            self.bundle().join("config.json"),
            format!(
                r#"{{"ociVersion":"1.0.2","process":{{"args":["sh"],"cwd":"/","user":{{"uid":1000,"gid":1000}},"env":["PATH=/bin"{}{}],"capabilities":{{"bounding":["CAP_CHOWN","CAP_NET_RAW"],"effective":["CAP_CHOWN"],"permitted":["CAP_CHOWN"]}}}},"root":{{"path":"rootfs"}}}}"#,
                if env.is_empty() { "" } else { "," },
                env.join(",")
            ),
        )
        .unwrap();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A drop-in: its file name and text.
type DropIn<'a> = Option<(&'a str, &'a str)>;

/// The ways a config stops being usable: (what, config.toml extra, a
/// drop-in, what the error names).
const BROKEN: &[(&str, &str, DropIn, &str)] = &[
    (
        "an unknown key (a newer gpu-guard's, or a rollback)",
        "[tuning]\nnew_future_key = 1\n",
        None,
        "new_future_key",
    ),
    (
        "an unknown key in a drop-in",
        "",
        Some(("60-local.toml", "[libraries]\nfuture_budget = 5\n")),
        "future_budget",
    ),
    (
        "a config.toml that does not parse",
        "[tuning]\nshm_size = = \"1g\"\n",
        None,
        "line 2",
    ),
    (
        "a drop-in that does not parse",
        "",
        Some(("60-local.toml", "[metrics]\ntextfile = [\n")),
        "60-local.toml",
    ),
];

#[test]
fn an_invalid_config_keeps_the_chain_and_refuses_env_only_gpu_requests() {
    for (what, extra, drop_in, names) in BROKEN {
        let n = Node::new("chain", None);
        n.write_config(extra);
        let mut bad_file = n.config();
        if let Some((name, text)) = drop_in {
            bad_file = n.dir.join("etc/config.d").join(name);
            std::fs::write(&bad_file, text).unwrap();
        }
        // The device plugin's envvar strategy: the env is the only request.
        n.spec(&["NVIDIA_VISIBLE_DEVICES=all"]);
        let o = n.create(true, "gpu1");
        assert_eq!(code(&o), 1, "{what}: {}", shown(&o));
        assert_eq!(n.calls(), "", "{what}: a runtime ran");
        let last = n.log().lines().last().unwrap_or("").to_string();
        let v: serde_json::Value = serde_json::from_str(&last).unwrap_or_default();
        assert_eq!(v["level"], "error", "{what}: {}", n.log());
        let msg = v["msg"].as_str().unwrap_or("");
        assert!(
            msg.contains(&bad_file.display().to_string()) && msg.contains(names),
            "{what}: {msg}"
        );
        let syslog = n.syslog_lines();
        assert!(
            syslog
                .iter()
                .any(|l| l.contains(&bad_file.display().to_string()) && l.contains(names)),
            "{what}: {syslog:?}"
        );
        // check decides as the wrapper: refused, not `SKIP`.
        let o = n
            .gpu_guard()
            .arg("check")
            .arg("--bundle")
            .arg(n.bundle())
            .args(["--engine", "containerd"])
            .output()
            .unwrap();
        let out = shown(&o);
        assert_eq!(code(&o), 2, "{what}: {out}");
        assert!(
            out.contains("REFUSE") && out.contains("GPU container") && out.contains(names),
            "{what}: {out}"
        );
        // A container without GPUs runs through the engine's chain, its
        // argv and config.json unchanged.
        n.spec(&["A=1"]);
        let before = std::fs::read(n.bundle().join("config.json")).unwrap();
        let o = n.create(true, "cpu1");
        assert_eq!(code(&o), 0, "{what}: {}", shown(&o));
        let b = n.bundle().display().to_string();
        assert_eq!(
            n.calls(),
            format!(
                "nvidia-container-runtime: --root {}/k8s.io --log {b}/log.json --log-format json create --bundle {b} --pid-file {b}/init.pid cpu1\n",
                n.containerd_root().display()
            ),
            "{what}"
        );
        assert_eq!(
            std::fs::read(n.bundle().join("config.json")).unwrap(),
            before,
            "{what}"
        );
        // Another engine keeps its own chain (the global one: runc on PATH).
        let o = n.create(false, "cpu2");
        assert_eq!(code(&o), 0, "{what}: {}", shown(&o));
        assert!(n.calls().ends_with("cpu2\n"), "{what}: {}", n.calls());
        assert!(
            n.calls().lines().last().unwrap().starts_with("runc: "),
            "{what}: {}",
            n.calls()
        );
    }
}

#[test]
fn what_cannot_be_read_fails_closed() {
    // The chain drop-in itself others could have written: its chain is
    // not used, and since it cannot be known whether NVIDIA's runtime
    // would have attached the GPUs, an env request counts, and the
    // container is refused, naming the file, instead of run without them.
    let n = Node::new("untrusted", None);
    let chain = n.dir.join("etc/config.d/50-chain-containerd.toml");
    std::fs::set_permissions(&chain, std::fs::Permissions::from_mode(0o666)).unwrap();
    n.spec(&["NVIDIA_VISIBLE_DEVICES=all"]);
    let o = n.create(true, "gpu1");
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert_eq!(n.calls(), "");
    assert!(n.log().contains("50-chain-containerd.toml"), "{}", n.log());
    // Without a GPU request the container runs (on runc: the chain is not
    // trusted).
    n.spec(&["A=1"]);
    let o = n.create(true, "cpu1");
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(n.calls().starts_with("runc: "), "{}", n.calls());
    // A [detect] table that does not parse: its rules are unknown.
    let n = Node::new("detect", None);
    n.write_config("[detect]\nenv_requests = \n");
    std::fs::remove_file(n.dir.join("etc/config.d/50-chain-containerd.toml")).unwrap();
    n.spec(&["NVIDIA_VISIBLE_DEVICES=all"]);
    let o = n
        .gpu_guard()
        .arg("check")
        .arg("--bundle")
        .arg(n.bundle())
        .output()
        .unwrap();
    let out = shown(&o);
    assert!(out.contains("REFUSE"), "{out}");
    assert!(
        out.contains("a GPU request in the environment counts as one"),
        "{out}"
    );
}

#[test]
fn execs_into_a_gpu_container_stay_judged_under_an_invalid_config() {
    let n = Node::new("exec", None);
    n.spec(&["NVIDIA_VISIBLE_DEVICES=all"]);
    // Created under a valid config through NVIDIA's runtime: a GPU
    // container, allowed with the GPU policy.
    let o = n.create(true, "gpu1");
    assert_eq!(code(&o), 0, "{}", shown(&o));
    n.spec(&["A=1"]);
    assert_eq!(code(&n.create(true, "cpu1")), 0);
    let pf = n.dir.join("process.json");
    std::fs::write(
        &pf,
        r#"{"args":["sh"],"cwd":"/","user":{"uid":0,"gid":0},"env":["PATH=/bin"],"capabilities":{"bounding":["CAP_SYS_ADMIN"],"effective":["CAP_SYS_ADMIN"],"permitted":["CAP_SYS_ADMIN"]}}"#,
    )
    .unwrap();
    let pf = pf.to_str().unwrap();
    // Then the config breaks.
    n.write_config("[tuning]\nnew_future_key = 1\n");
    let before = n.calls();
    let o = n.wrapper(true, &["exec", "--process", pf, "gpu1"]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert_eq!(n.calls(), before, "the runtime ran");
    assert!(
        n.log().lines().last().unwrap().contains("new_future_key"),
        "{}",
        n.log()
    );
    // Not a GPU container: the exec runs through the chain.
    let o = n.wrapper(true, &["exec", "--process", pf, "cpu1"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(
        n.calls()
            .lines()
            .last()
            .unwrap()
            .starts_with("nvidia-container-runtime: "),
        "{}",
        n.calls()
    );
}

/// The real runc, or None after the skip rule (needs root and busybox).
fn real_runc() -> Option<PathBuf> {
    if !crate::support::have_root("runc runs the test containers")
        || !crate::support::have_tool("runc")
    {
        return None;
    }
    if !Path::new("/bin/busybox").is_file() {
        crate::support::skip_or_fail("/bin/busybox is missing (apt-get install busybox-static)");
        return None;
    }
    let out = Command::new("sh")
        .args(["-c", "command -v runc"])
        .output()
        .ok()?;
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

#[test]
fn under_real_runc_the_chain_runs_what_the_config_lets_run() {
    let Some(runc) = real_runc() else {
        return;
    };
    let n = Node::new("runc", Some(&runc));
    n.write_config("[tuning]\nnew_future_key = 1\n");
    let rootfs = n.bundle().join("rootfs/bin");
    std::fs::create_dir_all(&rootfs).unwrap();
    std::fs::copy("/bin/busybox", rootfs.join("busybox")).unwrap();
    let o = Command::new(&runc)
        .args(["spec", "--bundle"])
        .arg(n.bundle())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", shown(&o));
    let text = std::fs::read_to_string(n.bundle().join("config.json")).unwrap();
    let base: serde_json::Value = serde_json::from_str(&text).unwrap();
    let write = |env: &[&str]| {
        let mut s = base.clone();
        s["process"]["terminal"] = serde_json::json!(false);
        s["process"]["args"] = serde_json::json!(["/bin/busybox", "true"]);
        let mut e = vec![serde_json::json!("PATH=/bin")];
        e.extend(env.iter().map(|x| serde_json::json!(x)));
        s["process"]["env"] = serde_json::json!(e);
        std::fs::write(
            n.bundle().join("config.json"),
            serde_json::to_vec_pretty(&s).unwrap(),
        )
        .unwrap();
    };
    let root = n.containerd_root().join("k8s.io");
    let state = |id: &str| {
        Command::new(&runc)
            .arg("--root")
            .arg(&root)
            .args(["state", id])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let delete = |id: &str| {
        let _ = Command::new(&runc)
            .arg("--root")
            .arg(&root)
            .args(["delete", "--force", id])
            .output();
    };
    let id = |tag: &str| format!("gg-failclosed-{tag}-{}", std::process::id());
    write(&["NVIDIA_VISIBLE_DEVICES=all"]);
    let gpu = id("gpu");
    let o = n.create(true, &gpu);
    delete(&gpu);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert_eq!(n.calls(), "", "a runtime ran for the refused container");
    assert!(n.log().contains("new_future_key"), "{}", n.log());
    write(&["A=1"]);
    let cpu = id("cpu");
    let o = n.create(true, &cpu);
    let st = state(&cpu);
    delete(&cpu);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(st.contains("\"created\""), "{st}: {}", n.log());
    assert!(
        n.calls().starts_with("nvidia-container-runtime: "),
        "{}",
        n.calls()
    );
}
