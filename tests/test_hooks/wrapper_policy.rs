//! One policy for create, run, exec and restore, and `check` deciding as
//! the installed wrapper would. The wrapper runs in
//! front of a recording stand-in for the real runtime;
//! integration/test-spec-parity.sh runs the same spellings under a real
//! runc.

use crate::{code, shown};
use gpu_guard::core::container::Container;
use gpu_guard::oci::spec_file::LoadedProcess;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_gpu-guard");

const HOOK: &str = r#""hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}]}"#;

/// containerd's CRI annotations for a container in namespace `ops`.
const CRI_OPS: &str = r#""annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-namespace":"ops"}"#;

/// containerd's runtime root for gpu-guard's runtime (`gpu-guard install
/// containerd`), as the shim passes it.
const ROOT: &str = "/run/gpu-guard/containerd/k8s.io";

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let p = crate::support::tempdir(&format!("wpolicy-{name}"));
        std::fs::create_dir_all(p.join("bundle")).unwrap();
        Tmp(p)
    }

    fn bundle(&self) -> PathBuf {
        self.0.join("bundle")
    }

    /// A stand-in for the real runtime, named `name`: it appends its argv
    /// to `calls` and answers `state` with the bundle.
    fn runtime(&self, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.0.join(name);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"$*\" >> {calls}\ncase \" $* \" in *\" state \"*) echo '{{\"bundle\":\"{b}\"}}';; esac\nexit 0\n",
                calls = self.0.join("calls").display(),
                b = self.bundle().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// A config on the A100 facts file (driver 535, CUDA 12.2) chaining
    /// `runtime`, with `extra` TOML appended.
    fn config(&self, runtime: &Path, extra: &str) -> PathBuf {
        let p = self.0.join("config.toml");
        let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
        std::fs::write(
            &p,
            format!(
                "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n[runtime]\npath = \"{}\"\n{extra}",
                facts.display(),
                runtime.display()
            ),
        )
        .unwrap();
        p
    }

    fn spec(&self, text: &str) {
        std::fs::write(self.bundle().join("config.json"), text).unwrap();
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.0.join("calls")).unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.0.join("log.json")).unwrap_or_default()
    }

    /// `gpu-guard --config CFG runtime --root ROOT --log LOG ARGS`.
    fn wrapper(&self, cfg: &Path, args: &[&str]) -> Output {
        let log = self.0.join("log.json");
        Command::new(BIN)
            .arg("--config")
            .arg(cfg)
            .arg("runtime")
            .args(["--root", ROOT, "--log"])
            .arg(&log)
            .args(args)
            .env("GPU_GUARD_MARKER_DIR", self.0.join("markers"))
            // Under an invalid config the wrapper chains runc from PATH:
            // the stand-in, when there is one here.
            .env("PATH", self.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn path(&self) -> std::ffi::OsString {
        let mut dirs = vec![self.0.clone()];
        dirs.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        std::env::join_paths(dirs).unwrap()
    }

    fn check(&self, cfg: &Path, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--config")
            .arg(cfg)
            .arg("check")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn create(&self, cfg: &Path, id: &str) -> Output {
        let b = self.bundle();
        self.wrapper(cfg, &["create", "--bundle", b.to_str().unwrap(), id])
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A spec whose process has docker's capabilities and runs as `uid`.
fn spec(env: &[&str], uid: u32, extra: &str) -> String {
    let env: Vec<String> = env.iter().map(|e| format!("\"{e}\"")).collect();
    format!(
        r#"{{"ociVersion":"1.0.2","process":{{"args":["sh"],"cwd":"/","user":{{"uid":{uid},"gid":{uid}}},"env":["PATH=/bin",{}],"noNewPrivileges":false,"capabilities":{{"bounding":["CAP_CHOWN","CAP_NET_RAW","CAP_SYS_ADMIN"],"effective":["CAP_CHOWN"],"permitted":["CAP_CHOWN"]}}}},"root":{{"path":"rootfs"}}{extra}}}"#,
        env.join(",")
    )
}

fn process_file(t: &Tmp, caps: &[&str]) -> PathBuf {
    let p = t.0.join("process.json");
    let caps: Vec<String> = caps.iter().map(|c| format!("\"{c}\"")).collect();
    std::fs::write(
        &p,
        format!(
            r#"{{"args":["sh"],"cwd":"/","user":{{"uid":1000,"gid":1000}},"env":["PATH=/bin"],"capabilities":{{"bounding":[{0}],"effective":[{0}],"permitted":[{0}]}}}}"#,
            caps.join(",")
        ),
    )
    .unwrap();
    p
}

fn bounding(p: &Path) -> Vec<String> {
    let view = LoadedProcess::from_bytes(std::fs::read(p).unwrap())
        .unwrap()
        .view;
    Container::from_process(&view)
        .capabilities
        .bounding
        .unwrap_or_default()
}

#[test]
fn check_decides_with_the_runtime_the_wrapper_chains() {
    let t = Tmp::new("chain");
    // A GPU request in the env and nothing else: only NVIDIA's runtime
    // behind the wrapper attaches GPUs. CUDA 12.4 fails on CUDA 12.2.
    t.spec(&spec(
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        ],
        1000,
        "",
    ));
    let spec_path = t.bundle().join("config.json");
    let spec_s = spec_path.to_str().unwrap();
    let nvidia = t.config(&t.runtime("nvidia-container-runtime"), "");
    let o = t.check(&nvidia, &["--json", "--spec", spec_s]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "refuse", "{}", shown(&o));
    assert_eq!(code(&o), 1, "{}", shown(&o));
    let o = t.create(&nvidia, "gpu1");
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(!t.calls().contains("create"), "{}", t.calls());
    // The same through runc: nothing attaches the GPUs, both say skip.
    let runc = t.config(&t.runtime("runc"), "");
    let o = t.check(&runc, &["--json", "--spec", spec_s]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "skip", "{}", shown(&o));
    assert_eq!(code(&t.create(&runc, "cpu1")), 0);
    assert!(t.calls().contains("create"), "{}", t.calls());
    // The chain written by `gpu-guard install` as a drop-in counts alike.
    let nvidia_rt = t.0.join("nvidia-container-runtime");
    std::fs::create_dir_all(t.0.join("config.d")).unwrap();
    std::fs::write(
        t.0.join("config.d/50-chain-nvidia-containerd.toml"),
        format!("[runtime]\npath = \"{}\"\n", nvidia_rt.display()),
    )
    .unwrap();
    let o = t.check(&runc, &["--spec", spec_s]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    std::fs::remove_dir_all(t.0.join("config.d")).unwrap();
    // The prestart hook knows no runtime: it judges the spec it is given.
    let o = t.check(
        &nvidia,
        &["--json", "--stage", "prestart", "--spec", spec_s],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "skip", "{}", shown(&o));
}

#[test]
fn an_empty_process_file_is_the_bundles_process_with_the_flags() {
    let t = Tmp::new("empty");
    let cfg = t.config(&t.runtime("runc"), "");
    t.spec(&spec(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        1000,
        &format!(",{HOOK}"),
    ));
    assert_eq!(code(&t.create(&cfg, "gpu1")), 0);
    let pf = process_file(&t, &["CAP_CHOWN"]);
    let pf = pf.to_str().unwrap();
    // runc exec.go getProcess: `--process ""` is no process file, so runc
    // runs the bundle's process with --cap and --no-new-privs on top.
    for (argv, what) in [
        (
            &["--process=", "--cap", "CAP_SYS_ADMIN"][..],
            "--cap CAP_SYS_ADMIN",
        ),
        (&["-p", "", "--cap", "CAP_SYS_ADMIN"], "--cap CAP_SYS_ADMIN"),
        (
            &["--process", pf, "--process=", "--cap=CAP_NET_RAW"],
            "--cap CAP_NET_RAW",
        ),
        (
            &["--process=", "--no-new-privs=false"],
            "--no-new-privs=false",
        ),
    ] {
        let mut args = vec!["exec"];
        args.extend_from_slice(argv);
        args.extend_from_slice(&["gpu1", "sh"]);
        let before = t.calls();
        let o = t.wrapper(&cfg, &args);
        assert_eq!(code(&o), 1, "{argv:?}: {}", shown(&o));
        assert!(
            t.log().lines().last().unwrap().contains(what),
            "{argv:?}: {}",
            t.log()
        );
        assert_eq!(t.calls(), before, "{argv:?}: the runtime ran");
    }
    // A process file that is not empty: its own capabilities, edited.
    let o = t.wrapper(
        &cfg,
        &["exec", "-p", "", "-p", pf, "--cap", "CAP_SYS_ADMIN", "gpu1"],
    );
    assert_eq!(code(&o), 0, "{}", shown(&o));
}

#[test]
fn exec_under_an_invalid_config_is_refused_as_create_is() {
    let t = Tmp::new("invalid");
    let runc = t.runtime("runc");
    let cfg = t.config(&runc, "");
    t.spec(&spec(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        1000,
        &format!(",{HOOK}"),
    ));
    assert_eq!(code(&t.create(&cfg, "gpu1")), 0);
    t.spec(&spec(&["A=1"], 1000, ""));
    assert_eq!(code(&t.create(&cfg, "cpu1")), 0);
    // A typo in the config: create refuses a GPU container, so exec does.
    let bad = t.config(&runc, "[tuning]\nenabeld = true\n");
    t.spec(&spec(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        1000,
        &format!(",{HOOK}"),
    ));
    let o = t.create(&bad, "gpu2");
    assert_eq!(code(&o), 1, "{}", shown(&o));
    let pf = process_file(&t, &["CAP_CHOWN", "CAP_SYS_ADMIN"]);
    let pf = pf.to_str().unwrap();
    for args in [
        &["exec", "--process", pf, "gpu1"][..],
        &["exec", "--cap", "CAP_SYS_ADMIN", "gpu1", "sh"],
    ] {
        let before = t.calls();
        let o = t.wrapper(&bad, args);
        assert_eq!(code(&o), 1, "{args:?}: {}", shown(&o));
        assert!(
            t.log().lines().last().unwrap().contains("enabeld"),
            "{}",
            t.log()
        );
        assert_eq!(t.calls(), before, "{args:?}: the runtime ran");
    }
    // Not a GPU container: none of gpu-guard's business, as at create.
    let o = t.wrapper(&bad, &["exec", "--process", pf, "cpu1"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    // A plain exec runs the bundle's process, edited at create.
    let o = t.wrapper(&bad, &["exec", "gpu1", "sh"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
}

#[test]
fn exec_is_held_to_the_containers_exception_profile() {
    let t = Tmp::new("profile");
    // Every container is held to `restricted`, except the `ops` namespace,
    // whose exception grants docker's default set (with CAP_NET_RAW).
    let cfg = t.config(
        &t.runtime("runc"),
        "[security]\napply_to = \"all\"\nprofile = \"restricted\"\n[[security.exceptions]]\nnamespace = \"ops\"\nprofile = \"docker-default\"\n",
    );
    let pf = process_file(&t, &["CAP_CHOWN", "CAP_NET_RAW"]);
    let pf_s = pf.to_str().unwrap();
    for (id, env) in [("cpu1", "A=1"), ("gpu1", "NVIDIA_VISIBLE_DEVICES=all")] {
        t.spec(&spec(&[env], 1000, &format!(",{HOOK},{CRI_OPS}")));
        let o = t.create(&cfg, id);
        assert_eq!(code(&o), 0, "{id}: {}", shown(&o));
        // Flags: held to docker-default, not to restricted.
        let o = t.wrapper(&cfg, &["exec", "--cap", "CAP_NET_RAW", id, "sh"]);
        assert_eq!(code(&o), 0, "{id}: {}", shown(&o));
        let o = t.wrapper(&cfg, &["exec", "--cap", "CAP_SYS_ADMIN", id, "sh"]);
        assert_eq!(code(&o), 1, "{id}: {}", shown(&o));
        assert!(t.log().contains("docker-default"), "{id}: {}", t.log());
        // A process file keeps what docker-default keeps.
        process_file(&t, &["CAP_CHOWN", "CAP_NET_RAW", "CAP_SYS_ADMIN"]);
        let o = t.wrapper(&cfg, &["exec", "--process", pf_s, id]);
        assert_eq!(code(&o), 0, "{id}: {}", shown(&o));
        assert_eq!(bounding(&pf), ["CAP_CHOWN", "CAP_NET_RAW"], "{id}");
    }
}

#[test]
fn exec_as_root_is_held_to_refuse_root() {
    let t = Tmp::new("root");
    let cfg = t.config(&t.runtime("runc"), "[security]\nprofile = \"restricted\"\n");
    t.spec(&spec(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        1000,
        &format!(",{HOOK}"),
    ));
    let o = t.create(&cfg, "gpu1");
    assert_eq!(code(&o), 0, "{}", shown(&o));
    // runc reads `-u` with strconv.Atoi and converts with uint32(): each
    // of these is uid 0.
    for user in ["0", "0:0", "+0", "00", "4294967296"] {
        let before = t.calls();
        let o = t.wrapper(&cfg, &["exec", "-u", user, "gpu1", "sh"]);
        assert_eq!(code(&o), 1, "-u {user}: {}", shown(&o));
        assert!(
            t.log().lines().last().unwrap().contains("uid 0"),
            "{}",
            t.log()
        );
        assert_eq!(t.calls(), before, "-u {user}: the runtime ran");
    }
    let o = t.wrapper(&cfg, &["exec", "--user=1000:1000", "gpu1", "sh"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    // restricted_refuse_root = false lets root exec again.
    let cfg = t.config(
        &t.runtime("runc"),
        "[security]\nprofile = \"restricted\"\nrestricted_refuse_root = false\n",
    );
    let o = t.wrapper(&cfg, &["exec", "-u", "0", "gpu1", "sh"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
}

#[test]
fn restore_is_judged_as_create_is() {
    let t = Tmp::new("restore");
    let cfg = t.config(&t.runtime("runc"), "");
    let b = t.bundle();
    let b_s = b.to_str().unwrap();
    let restore = |id: &str| {
        t.wrapper(
            &cfg,
            &[
                "restore",
                "--image-path",
                "/ckpt",
                "--bundle",
                b_s,
                "--detach",
                id,
            ],
        )
    };
    // Checkpointed on a CUDA 12.4 host, restored on a CUDA 12.2 one.
    t.spec(&spec(
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        ],
        1000,
        &format!(",{HOOK}"),
    ));
    let o = restore("gpu1");
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(t.log().contains("cuda>=12.4"), "{}", t.log());
    assert!(!t.calls().contains("restore"), "{}", t.calls());
    // One that fits is restored under the policy's edits.
    t.spec(&spec(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        1000,
        &format!(",{HOOK}"),
    ));
    let o = restore("gpu2");
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(t.calls().contains("restore"), "{}", t.calls());
    let after = std::fs::read_to_string(b.join("config.json")).unwrap();
    let c = Container::from_spec(&serde_json::from_str(&after).unwrap(), None).unwrap();
    assert!(c.no_new_privileges, "{after}");
    assert_eq!(c.capabilities.bounding, Some(vec!["CAP_CHOWN".to_string()]));
}

#[test]
fn a_gpu_exec_into_a_cpu_container_keeps_the_containers_exception() {
    let t = Tmp::new("gpuexec");
    // Behind NVIDIA's runtime an exec'd process that asks for GPUs gets
    // them, so the policy applies to it though the container is CPU-only;
    // the container's exception (docker-default, with CAP_NET_RAW) too.
    let cfg = t.config(
        &t.runtime("nvidia-container-runtime"),
        "[[security.exceptions]]\nnamespace = \"ops\"\nprofile = \"docker-default\"\n",
    );
    t.spec(&spec(&["A=1"], 1000, &format!(",{CRI_OPS}")));
    let o = t.create(&cfg, "cpu1");
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let pf = t.0.join("gpu-process.json");
    std::fs::write(
        &pf,
        r#"{"args":["sh"],"cwd":"/","user":{"uid":1000,"gid":1000},"env":["NVIDIA_VISIBLE_DEVICES=all"],"capabilities":{"bounding":["CAP_CHOWN","CAP_NET_RAW","CAP_SYS_ADMIN"]}}"#,
    )
    .unwrap();
    let o = t.wrapper(&cfg, &["exec", "--process", pf.to_str().unwrap(), "cpu1"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert_eq!(bounding(&pf), ["CAP_CHOWN", "CAP_NET_RAW"]);
}
