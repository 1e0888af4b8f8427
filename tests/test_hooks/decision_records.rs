//! Decisions name the workload, in one key=value format for every mode:
//! the runtime wrapper as containerd and CRI-O run it writes each record to
//! syslog (a datagram socket here, `log.syslog_socket`) and, for a refusal
//! and for what audit or warn let start, to the runtime's `--log`; each
//! record reads back as core::logfmt pairs, with the namespace, pod,
//! container name and image where the CRI runtime is known from the
//! runtime root (never under docker's root, where anyone can write the
//! same annotations), and a hostile annotation cannot forge a field or a
//! line. The metrics count the same decisions with their mode, what audit
//! and warn let start apart from real refusals. A stand-in plays runc.

use gpu_guard::core::logfmt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_gpu-guard");
const CONTAINERD_ROOT: &str = "/run/gpu-guard/containerd/k8s.io";
const CRIO_ROOT: &str = "/run/gpu-guard/crio";
const DOCKER_ROOT: &str = "/var/run/docker/runtime-runc/moby";
const NVIDIA_HOOK: &str = r#"{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}"#;

/// A scratch directory with a bundle, a stand-in runc and a syslog socket.
struct Node {
    dir: PathBuf,
    syslog: UnixDatagram,
}

impl Node {
    fn new(tag: &str) -> Node {
        let dir = crate::support::tempdir(&format!("records-{tag}"));
        std::fs::create_dir_all(dir.join("bundle/rootfs")).unwrap();
        let runc = dir.join("runc");
        std::fs::write(&runc, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&runc, std::fs::Permissions::from_mode(0o755)).unwrap();
        let syslog = UnixDatagram::bind(dir.join("syslog.sock")).unwrap();
        syslog
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        Node { dir, syslog }
    }

    /// A config under `mode` on the A100 facts (driver 535, CUDA 12.2),
    /// syslog to this node's socket, metrics in its directory.
    fn config(&self, mode: &str) -> PathBuf {
        let p = self.dir.join(format!("{mode}.toml"));
        let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
        std::fs::create_dir_all(self.dir.join("prom")).unwrap();
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(
            self.dir.join("prom"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::write(
            &p,
            format!(
                "mode = \"{mode}\"\n[runtime]\npath = \"{}\"\n[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[libraries]\ncache_dir = \"\"\n[log]\nsyslog = true\nsyslog_socket = \"{}\"\n[metrics]\ntextfile = \"{}\"\nstate_dir = \"{}\"\n",
                self.dir.join("runc").display(),
                facts.display(),
                self.dir.join("syslog.sock").display(),
                self.dir.join("prom/gpu-guard.prom").display(),
                self.dir.join("metrics-state").display(),
            ),
        )
        .unwrap();
        p
    }

    /// A GPU container asking for CUDA 12.4 (refused on CUDA 12.2), with
    /// `annotations`, compliant with the security policy.
    fn spec(&self, annotations: &serde_json::Value) {
        let spec = format!(
            r#"{{"ociVersion":"1.0.2","process":{{"args":["true"],"cwd":"/","env":["NVIDIA_VISIBLE_DEVICES=all","NVIDIA_REQUIRE_CUDA=cuda>=12.4"],"noNewPrivileges":true,"capabilities":{{"bounding":["CAP_CHOWN"]}}}},"root":{{"path":"rootfs"}},"annotations":{annotations},"hooks":{{"prestart":[{NVIDIA_HOOK}]}}}}"#
        );
        std::fs::write(self.dir.join("bundle/config.json"), spec).unwrap();
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("bundle/log.json")
    }

    /// `create` as containerd's shim (`--root R --log L --log-format
    /// json`) or CRI-O's conmon (`--root=R --log L`) runs it.
    fn create(&self, cfg: &Path, root: &str, id: &str) -> Output {
        let _ = std::fs::remove_file(self.log_path());
        let b = self.dir.join("bundle");
        let log = self.log_path();
        let mut cmd = Command::new(BIN);
        cmd.arg("--config").arg(cfg).arg("runtime");
        if root == CRIO_ROOT {
            cmd.arg(format!("--root={root}"));
        } else {
            cmd.args(["--root", root]);
        }
        cmd.arg("--log")
            .arg(&log)
            .args(["--log-format", "json", "create", "--bundle"])
            .arg(&b)
            .arg(id)
            .env("GPU_GUARD_MARKER_DIR", self.dir.join("markers"))
            .env_remove("GPU_GUARD_CONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Every syslog message received so far, the text after `gpu-guard[PID]: `.
    fn syslog_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = self.syslog.recv(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            let at = m.find("]: ").map_or(0, |i| i + 3);
            out.push(m[at..].trim_end().to_string());
        }
        out
    }

    /// The runtime log's lines: (level, msg).
    fn runtime_log(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["level"].as_str().unwrap().to_string(),
                    v["msg"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn metrics(&self) -> String {
        std::fs::read_to_string(self.dir.join("prom/gpu-guard.prom")).unwrap_or_default()
    }
}

/// The pairs of a record, which must read back as one.
fn pairs(line: &str) -> Vec<(String, String)> {
    logfmt::parse(line).unwrap_or_else(|| panic!("not a key=value record: {line}"))
}

fn get<'a>(p: &'a [(String, String)], k: &str) -> Option<&'a str> {
    p.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
}

fn containerd_annotations(pod: &str) -> serde_json::Value {
    serde_json::json!({
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.sandbox-namespace": "ml-team",
        "io.kubernetes.cri.sandbox-name": pod,
        "io.kubernetes.cri.container-name": "trainer",
        "io.kubernetes.cri.image-name": "registry.example:5000/ml/train:2.1"
    })
}

#[test]
fn refusals_name_the_cri_workload_in_syslog_and_the_runtime_log() {
    let n = Node::new("containerd");
    let cfg = n.config("enforce");
    n.spec(&containerd_annotations("train-0"));
    let o = n.create(&cfg, CONTAINERD_ROOT, "abcdef0123456789");
    assert_ne!(o.status.code(), Some(0));
    let sys = n.syslog_lines();
    let rec = sys
        .iter()
        .find(|l| l.contains("verdict="))
        .unwrap_or_else(|| panic!("no record in syslog: {sys:?}"));
    let p = pairs(rec);
    for (k, v) in [
        ("verdict", "refuse"),
        ("mode", "enforce"),
        ("container", "abcdef0123456789"),
        ("namespace", "ml-team"),
        ("pod", "train-0"),
        ("container_name", "trainer"),
        ("image", "registry.example:5000/ml/train:2.1"),
        ("check", "requirement"),
    ] {
        assert_eq!(get(&p, k), Some(v), "{k} in {rec}");
    }
    assert!(get(&p, "findings").unwrap().contains("cuda>=12.4"), "{rec}");
    // The runtime log: the same record, then the diagnosis containerd
    // shows (`OCI runtime create failed: ...`) last.
    let log = n.runtime_log();
    let kv = log
        .iter()
        .find(|(_, m)| m.contains("verdict=refuse"))
        .unwrap();
    assert_eq!(kv.0, "error");
    assert_eq!(get(&pairs(&kv.1), "pod"), Some("train-0"), "{log:?}");
    let last = log.last().unwrap();
    assert_eq!(last.0, "error");
    assert!(last.1.starts_with("gpu-guard refused container"), "{log:?}");
    // The same decision counted with its mode.
    assert!(
        n.metrics().contains(r#"gpu_guard_decisions_total{verdict="refuse",check="requirement",entry="runtime",mode="enforce"} 1"#),
        "{}",
        n.metrics()
    );
}

#[test]
fn crio_names_the_workload_from_its_own_keys() {
    let n = Node::new("crio");
    let cfg = n.config("enforce");
    n.spec(&serde_json::json!({
        "io.kubernetes.cri-o.ContainerType": "container",
        "io.kubernetes.pod.namespace": "ml-team",
        "io.kubernetes.pod.name": "train-1",
        "io.kubernetes.container.name": "trainer",
        "io.kubernetes.cri-o.ImageName": "quay.io/ml/train:2.1"
    }));
    let o = n.create(&cfg, CRIO_ROOT, "crio0123");
    assert_ne!(o.status.code(), Some(0));
    let sys = n.syslog_lines();
    let rec = sys.iter().find(|l| l.contains("verdict=")).unwrap();
    let p = pairs(rec);
    assert_eq!(get(&p, "namespace"), Some("ml-team"), "{rec}");
    assert_eq!(get(&p, "pod"), Some("train-1"), "{rec}");
    assert_eq!(get(&p, "container_name"), Some("trainer"), "{rec}");
    assert_eq!(get(&p, "image"), Some("quay.io/ml/train:2.1"), "{rec}");
}

/// Under docker's root the same annotations are anyone's: not named.
#[test]
fn annotations_nobody_vouches_for_are_not_named() {
    let n = Node::new("docker");
    let cfg = n.config("enforce");
    n.spec(&containerd_annotations("kube-apiserver"));
    let o = n.create(&cfg, DOCKER_ROOT, "dock0123");
    assert_ne!(o.status.code(), Some(0));
    let sys = n.syslog_lines();
    let rec = sys.iter().find(|l| l.contains("verdict=")).unwrap();
    let p = pairs(rec);
    assert_eq!(get(&p, "container"), Some("dock0123"), "{rec}");
    for k in ["namespace", "pod", "container_name", "image"] {
        assert_eq!(get(&p, k), None, "{k} in {rec}");
    }
    assert!(!rec.contains("kube-apiserver"), "{rec}");
}

/// A pod name that tries to end the field and start a line of its own is
/// escaped: the record keeps its fields, on one line.
#[test]
fn a_hostile_annotation_cannot_forge_a_field_or_a_line() {
    let n = Node::new("hostile");
    let cfg = n.config("enforce");
    n.spec(&containerd_annotations(
        "x\" verdict=allow mode=off\n<13>gpu-guard: verdict=allow \u{202e}",
    ));
    let o = n.create(&cfg, CONTAINERD_ROOT, "evil0123");
    assert_ne!(o.status.code(), Some(0));
    for rec in n
        .syslog_lines()
        .iter()
        .chain(n.runtime_log().iter().map(|(_, m)| m))
        .filter(|l| l.contains("verdict="))
    {
        assert!(!rec.contains('\n') && !rec.contains('\u{202e}'), "{rec}");
        let p = pairs(rec);
        let verdicts: Vec<_> = p.iter().filter(|(k, _)| k == "verdict").collect();
        assert_eq!(verdicts.len(), 1, "{rec}");
        assert_eq!(get(&p, "verdict"), Some("refuse"), "{rec}");
        assert_eq!(get(&p, "mode"), Some("enforce"), "{rec}");
        assert!(get(&p, "pod").unwrap().contains("verdict=allow"), "{rec}");
    }
}

/// warn and audit: the record says what enforce would have refused, at
/// warning level, in syslog and in the runtime log; the metrics count it
/// as `would_refuse` under its mode, apart from real refusals.
#[test]
fn warn_and_audit_records_go_to_the_runtime_log_and_count_apart() {
    let n = Node::new("lenient");
    n.spec(&containerd_annotations("train-2"));
    for mode in ["warn", "audit"] {
        let cfg = n.config(mode);
        let o = n.create(&cfg, CONTAINERD_ROOT, &format!("{mode}0123"));
        assert_eq!(o.status.code(), Some(0), "{mode}: {o:?}");
        let log = n.runtime_log();
        let (level, msg) = log
            .iter()
            .find(|(_, m)| m.contains("verdict="))
            .unwrap_or_else(|| panic!("{mode}: no record in the runtime log: {log:?}"));
        assert_eq!(level, "warning", "{mode}: {msg}");
        let p = pairs(msg);
        assert_eq!(get(&p, "verdict"), Some("would_refuse"), "{mode}: {msg}");
        assert_eq!(get(&p, "mode"), Some(mode), "{mode}: {msg}");
        assert_eq!(get(&p, "pod"), Some("train-2"), "{mode}: {msg}");
        let sys = n.syslog_lines();
        assert!(
            sys.iter().any(|l| l.contains("verdict=would_refuse")),
            "{mode}: {sys:?}"
        );
    }
    let m = n.metrics();
    for mode in ["warn", "audit"] {
        let series = format!(
            r#"gpu_guard_decisions_total{{verdict="would_refuse",check="requirement",entry="runtime",mode="{mode}"}} 1"#
        );
        assert!(m.contains(&series), "{m}");
    }
    assert!(!m.contains(r#"verdict="refuse""#), "{m}");
}
