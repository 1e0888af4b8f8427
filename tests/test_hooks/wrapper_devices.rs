//! GPU containers are found by what they get, not by a path name: a GPU
//! node renamed (`--device /dev/nvidia0:/dev/g0`), a device cgroup rule
//! for NVIDIA's major with `CAP_MKNOD` (`--device-cgroup-rule 'c 195:*
//! rwm' --cap-add MKNOD`), and `nvidia-uvm` by the major this host's
//! `/proc/devices` gives it, all get the GPU policy (the capabilities
//! `apply_to = "gpu"` drops, no_new_privileges, the tuning env) and the
//! checks (a CUDA requirement the host cannot meet is refused); a
//! container with another device (`/dev/fuse`, 10:229) is left alone,
//! its config.json byte for byte. The wrapper runs in front of a
//! recording stand-in, then in front of real runc, where the container
//! shows what it got.

use crate::{code, shown};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_gpu-guard");

struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Tmp {
        let d = crate::support::tempdir(&format!("wdevices-{tag}"));
        std::fs::create_dir_all(d.join("bundle/rootfs/bin")).unwrap();
        Tmp(d)
    }

    fn bundle(&self) -> PathBuf {
        self.0.join("bundle")
    }

    /// A config on the A100 facts file (driver 535, CUDA 12.2) chaining
    /// `runtime`.
    fn config(&self, runtime: &Path) -> PathBuf {
        let p = self.0.join("config.toml");
        let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
        std::fs::write(
            &p,
            format!(
                "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[libraries]\nseverity = \"off\"\n[log]\nsyslog = false\n[runtime]\npath = \"{}\"\n",
                facts.display(),
                runtime.display()
            ),
        )
        .unwrap();
        p
    }

    /// A stand-in runtime that records its argv.
    fn recorder(&self) -> PathBuf {
        let p = self.0.join("recorder");
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\n",
                self.0.join("calls").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.0.join("calls")).unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.0.join("log.json")).unwrap_or_default()
    }

    fn write_spec(&self, spec: &Value) {
        std::fs::write(
            self.bundle().join("config.json"),
            serde_json::to_vec_pretty(spec).unwrap(),
        )
        .unwrap();
    }

    fn spec(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.bundle().join("config.json")).unwrap()).unwrap()
    }

    /// `gpu-guard-runtime --root R --log L COMMAND --bundle B ID`, as docker
    /// runs it; `proc_devices` stands in for /proc/devices.
    fn wrapper(&self, cfg: &Path, command: &str, id: &str, proc_devices: Option<&Path>) -> Output {
        let (out, err) = (self.0.join("stdout"), self.0.join("stderr"));
        let mut c = Command::new(BIN);
        c.arg("--config")
            .arg(cfg)
            .arg("runtime")
            .arg("--root")
            .arg(self.0.join("runc-root"))
            .arg("--log")
            .arg(self.0.join("log.json"))
            .args(["--log-format", "json", command, "--bundle"])
            .arg(self.bundle())
            .arg(id)
            .env("GPU_GUARD_MARKER_DIR", self.0.join("markers"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        if let Some(p) = proc_devices {
            c.env("GPU_GUARD_PROC_DEVICES", p);
        }
        let status = c.status().unwrap();
        Output {
            status,
            stdout: std::fs::read(&out).unwrap_or_default(),
            stderr: std::fs::read(&err).unwrap_or_default(),
        }
    }

    fn check(&self, cfg: &Path, proc_devices: Option<&Path>) -> Value {
        let mut c = Command::new(BIN);
        c.arg("--config")
            .arg(cfg)
            .args(["check", "--json", "--bundle"])
            .arg(self.bundle());
        if let Some(p) = proc_devices {
            c.env("GPU_GUARD_PROC_DEVICES", p);
        }
        let o = c.output().unwrap();
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", shown(&o)))
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the container prints: its effective capabilities, the tuning env,
/// and whether it may create GPU 9's node.
const SHOW: &str = "grep CapEff /proc/self/status; echo ORDER=$CUDA_DEVICE_ORDER; /bin/busybox mknod /dev/g9 c 195 9 && echo MKNOD=ok || echo MKNOD=refused";

/// A runc-style spec (`runc spec`, trimmed) running `SHOW` as root with
/// docker's default capabilities plus CAP_MKNOD, with `linux` parts.
fn spec(env: &[&str], linux_devices: Value, rules: Value) -> Value {
    let caps = json!([
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FOWNER",
        "CAP_KILL",
        "CAP_MKNOD",
        "CAP_NET_RAW",
        "CAP_SETGID",
        "CAP_SETUID"
    ]);
    let mut e = vec![json!("PATH=/bin")];
    e.extend(env.iter().map(|x| json!(x)));
    let mut deny_then: Vec<Value> = vec![json!({"allow": false, "access": "rwm"})];
    deny_then.extend(rules.as_array().cloned().unwrap_or_default());
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/busybox", "sh", "-c", SHOW],
            "env": e,
            "cwd": "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "noNewPrivileges": false
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "gg",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}
        ],
        "annotations": {"org.example.keep": "me"},
        "linux": {
            "devices": linux_devices,
            "resources": {"devices": deny_then},
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": ["/proc/kcore"],
            "readonlyPaths": ["/proc/sys"]
        }
    })
}

fn renamed_node() -> (Value, Value) {
    (
        json!([{"path": "/dev/g0", "type": "c", "major": 195, "minor": 0, "fileMode": 438, "uid": 0, "gid": 0}]),
        json!([{"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm"}]),
    )
}

fn mknod_rule() -> (Value, Value) {
    (
        json!([]),
        json!([{"allow": true, "type": "c", "major": 195, "access": "rwm"}]),
    )
}

fn fuse() -> (Value, Value) {
    (
        json!([{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438, "uid": 0, "gid": 0}]),
        json!([{"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rwm"}]),
    )
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn renamed_nodes_and_cgroup_rules_get_the_gpu_policy_and_the_checks() {
    let t = Tmp::new("policy");
    let cfg = t.config(&t.recorder());
    for (what, (nodes, rules)) in [
        ("renamed node", renamed_node()),
        ("cgroup rule with CAP_MKNOD", mknod_rule()),
    ] {
        t.write_spec(&spec(&[], nodes.clone(), rules.clone()));
        let d = t.check(&cfg, None);
        assert_eq!(d["gpu_container"], true, "{what}: {d}");
        let o = t.wrapper(&cfg, "create", "gpu1", None);
        assert_eq!(code(&o), 0, "{what}: {}", shown(&o));
        assert!(t.calls().ends_with("gpu1\n"), "{what}: {}", t.calls());
        let s = t.spec();
        let bounding = strings(&s["process"]["capabilities"]["bounding"]);
        assert!(
            !bounding.contains(&"CAP_MKNOD") && !bounding.contains(&"CAP_NET_RAW"),
            "{what}: {bounding:?}"
        );
        assert_eq!(s["process"]["noNewPrivileges"], true, "{what}");
        assert!(
            strings(&s["process"]["env"]).contains(&"CUDA_DEVICE_ORDER=PCI_BUS_ID"),
            "{what}: {}",
            s["process"]["env"]
        );
        assert_eq!(s["annotations"]["org.example.keep"], "me", "{what}");
        // The checks: CUDA 12.4 on a CUDA 12.2 host is refused.
        t.write_spec(&spec(&["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], nodes, rules));
        let before = t.calls();
        let o = t.wrapper(&cfg, "create", "gpu2", None);
        assert_eq!(code(&o), 1, "{what}: {}", shown(&o));
        assert_eq!(t.calls(), before, "{what}: the runtime ran");
        assert!(
            t.log().lines().last().unwrap_or("").contains("cuda>=12.4"),
            "{what}: {}",
            t.log()
        );
    }
    // nvidia-uvm alone, renamed, by the major this host registered for it.
    let devices = t.0.join("proc-devices");
    std::fs::write(
        &devices,
        "Character devices:\n  1 mem\n 10 misc\n195 nvidia\n508 nvidia-uvm\n\nBlock devices:\n  7 loop\n",
    )
    .unwrap();
    t.write_spec(&spec(
        &[],
        json!([{"path": "/dev/u", "type": "c", "major": 508, "minor": 0}]),
        json!([{"allow": true, "type": "c", "major": 508, "access": "rwm"}]),
    ));
    assert_eq!(t.check(&cfg, Some(&devices))["gpu_container"], true);
    let o = t.wrapper(&cfg, "create", "uvm1", Some(&devices));
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert_eq!(t.spec()["process"]["noNewPrivileges"], true);
    // Another device: not a GPU container, config.json byte for byte.
    let (nodes, rules) = fuse();
    t.write_spec(&spec(&["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], nodes, rules));
    let before = std::fs::read(t.bundle().join("config.json")).unwrap();
    let d = t.check(&cfg, Some(&devices));
    assert_eq!(d["verdict"], "skip", "{d}");
    let o = t.wrapper(&cfg, "create", "fuse1", Some(&devices));
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(t.calls().ends_with("fuse1\n"), "{}", t.calls());
    assert_eq!(
        std::fs::read(t.bundle().join("config.json")).unwrap(),
        before
    );
}

/// `runc run` of the bundle, directly or through the wrapper; the
/// container's output.
fn run(t: &Tmp, runc: &Path, cfg: Option<&Path>, id: &str) -> Output {
    let o = match cfg {
        Some(cfg) => t.wrapper(cfg, "run", id, None),
        None => {
            let (out, err) = (t.0.join("stdout"), t.0.join("stderr"));
            let status = Command::new(runc)
                .arg("--root")
                .arg(t.0.join("runc-root"))
                .args(["run", "--bundle"])
                .arg(t.bundle())
                .arg(id)
                .stdin(Stdio::null())
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
    };
    let _ = Command::new(runc)
        .arg("--root")
        .arg(t.0.join("runc-root"))
        .args(["delete", "--force", id])
        .output();
    o
}

/// Whether CAP_MKNOD (bit 27) is in the CapEff line the container printed.
fn has_mknod(out: &str) -> bool {
    let hex = out
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no CapEff in {out}"));
    u64::from_str_radix(hex, 16).unwrap() & (1 << 27) != 0
}

#[test]
fn under_real_runc_a_gpu_by_any_name_is_locked_down_and_fuse_is_left_alone() {
    if !crate::support::have_root("runc runs the test containers")
        || !crate::support::have_tool("runc")
    {
        return;
    }
    if !Path::new("/bin/busybox").is_file() {
        crate::support::skip_or_fail("/bin/busybox is missing (apt-get install busybox-static)");
        return;
    }
    let runc = PathBuf::from(
        String::from_utf8_lossy(
            &Command::new("sh")
                .args(["-c", "command -v runc"])
                .output()
                .unwrap()
                .stdout,
        )
        .trim(),
    );
    let t = Tmp::new("runc");
    std::fs::copy("/bin/busybox", t.bundle().join("rootfs/bin/busybox")).unwrap();
    let cfg = t.config(&runc);
    let id = |tag: &str| format!("gg-wdev-{tag}-{}", std::process::id());
    for (what, (nodes, rules)) in [
        ("renamed node", renamed_node()),
        ("cgroup rule with CAP_MKNOD", mknod_rule()),
    ] {
        // Plain runc: the container gets the GPU's node (it may make one).
        t.write_spec(&spec(&[], nodes.clone(), rules.clone()));
        let o = run(&t, &runc, None, &id("plain"));
        let out = shown(&o);
        assert_eq!(code(&o), 0, "{what}: {out}");
        assert!(has_mknod(&out) && out.contains("MKNOD=ok"), "{what}: {out}");
        // Through the wrapper: the GPU policy is in force inside it.
        let o = run(&t, &runc, Some(&cfg), &id("gpu"));
        let out = shown(&o);
        assert_eq!(code(&o), 0, "{what}: {out}");
        assert!(!has_mknod(&out), "{what}: {out}");
        assert!(out.contains("ORDER=PCI_BUS_ID"), "{what}: {out}");
        assert!(out.contains("MKNOD=refused"), "{what}: {out}");
        // And the checks: refused, never started.
        t.write_spec(&spec(&["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], nodes, rules));
        let o = run(&t, &runc, Some(&cfg), &id("refused"));
        let out = shown(&o);
        assert_eq!(code(&o), 1, "{what}: {out}");
        assert!(!out.contains("ORDER="), "{what}: the container ran: {out}");
        assert!(out.contains("cuda>=12.4"), "{what}: {out}");
    }
    // /dev/fuse: runs as runc would run it, config.json byte for byte.
    let (nodes, rules) = fuse();
    let mut s = spec(&[], nodes, rules);
    s["process"]["args"] = json!([
        "/bin/busybox",
        "sh",
        "-c",
        "ls -l /dev/fuse; grep CapEff /proc/self/status; echo ORDER=$CUDA_DEVICE_ORDER"
    ]);
    t.write_spec(&s);
    let before = std::fs::read(t.bundle().join("config.json")).unwrap();
    let o = run(&t, &runc, Some(&cfg), &id("fuse"));
    let out = shown(&o);
    assert_eq!(code(&o), 0, "{out}");
    assert!(out.contains("10,") && out.contains("229"), "{out}");
    assert!(has_mknod(&out) && out.contains("ORDER=\n"), "{out}");
    assert_eq!(
        std::fs::read(t.bundle().join("config.json")).unwrap(),
        before
    );
}
