//! Fleet inputs and fleet answers through the binary:
//! - duplicate node names and GPU counts no labeller writes
//!   are input errors (exit 2, one line); every result carries a Decision;
//! - `--nodes -` reads standard input, and `kubectl get nodes
//!   -o yaml` is read like `-o json`;
//! - a requirement checked alone is judged as run with GPUs
//!   attached, and a skip is never counted as runnable;
//! - `scan --rootfs` of a rootfs without libraries says so.

use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn tmpdir(name: &str) -> PathBuf {
    let d = crate::support::tempdir(&format!("inputs-{name}"));
    std::fs::write(
        d.join("config.toml"),
        "[host]\ncache_file = \"\"\n[log]\nsyslog = false\n",
    )
    .unwrap();
    d
}

fn gg(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut c = Command::new(*BIN);
    c.env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(dir.join("config.toml"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.unwrap_or_default()).unwrap();
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn gpu_node(name: &str, count: &str) -> Value {
    json!({"kind": "Node", "metadata": {"name": name, "labels": {
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "54",
        "nvidia.com/cuda.driver-version.revision": "15",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": count,
    }}})
}

fn list(items: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({"kind": "List", "apiVersion": "v1", "items": items})).unwrap()
}

/// One line on stderr, exit 2, nothing on stdout.
fn assert_input_error(o: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(needle), "{err}");
    assert!(o.stdout.is_empty());
}

const REQ: &str = "NVIDIA_REQUIRE_CUDA=cuda>=12.4";

#[test]
fn duplicate_node_names_are_an_input_error() {
    let d = tmpdir("dup");
    // An allowed and a refused `dup`: no answer can place both.
    let mut refused = gpu_node("dup", "1");
    refused["metadata"]["labels"]["nvidia.com/cuda.runtime-version.minor"] = json!("2");
    let nodes = list(vec![gpu_node("dup", "1"), gpu_node("other", "1"), refused]);
    for extra in [&[][..], &["--affinity"][..], &["--json"][..]] {
        let mut args = vec!["check", "--env", REQ, "--nodes", "-"];
        args.extend_from_slice(extra);
        assert_input_error(&gg(&d, &args, Some(&nodes)), "node dup is listed twice");
    }
}

#[test]
fn gpu_counts_no_labeller_writes_are_input_errors() {
    let d = tmpdir("count");
    for bad in ["-1", "4294967296", "99999999999999999999", "0", "eight"] {
        let nodes = list(vec![gpu_node("a", "2"), gpu_node("b", bad)]);
        let o = gg(
            &d,
            &["check", "--env", REQ, "--nodes", "-", "--json"],
            Some(&nodes),
        );
        assert_input_error(&o, "node b: label nvidia.com/gpu.count=");
    }
    // The largest u32 is a count (capped when the GPUs are built).
    let nodes = list(vec![gpu_node("a", "4294967295")]);
    let o = gg(
        &d,
        &["check", "--env", REQ, "--nodes", "-", "--json"],
        Some(&nodes),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn nodes_from_stdin_and_yaml_read_like_the_json_file() {
    let d = tmpdir("yaml");
    let file = data("nodes/fleet.json");
    fn args(src: &str) -> Vec<&str> {
        vec!["check", "--env", REQ, "--nodes", src, "--json"]
    }
    let from_file = gg(&d, &args(file.to_str().unwrap()), None);
    assert_eq!(from_file.status.code(), Some(1));
    let json_text = std::fs::read(&file).unwrap();
    let from_stdin = gg(&d, &args("-"), Some(&json_text));
    assert_eq!(from_stdin.stdout, from_file.stdout);
    // The same list as `kubectl get nodes -o yaml` writes it.
    let v: Value = serde_json::from_slice(&json_text).unwrap();
    let yaml = to_yaml(&v, 0);
    assert!(
        yaml.contains("\nitems:\n  - ") && !yaml.trim_start().starts_with('{'),
        "{yaml}"
    );
    let yaml_path = d.join("nodes.yaml");
    std::fs::write(&yaml_path, &yaml).unwrap();
    let from_yaml = gg(&d, &args(yaml_path.to_str().unwrap()), None);
    assert_eq!(
        from_yaml.stdout,
        from_file.stdout,
        "{}",
        String::from_utf8_lossy(&from_yaml.stderr)
    );
    let from_yaml_stdin = gg(&d, &args("-"), Some(yaml.as_bytes()));
    assert_eq!(from_yaml_stdin.stdout, from_file.stdout);
    // Not a node list: one line, exit 2.
    assert_input_error(
        &gg(&d, &args("-"), Some(b"- a\n- b\n")),
        "is not `kubectl get nodes -o json` or `-o yaml` output",
    );
}

/// A YAML writer for the test, in kubectl's block style (strings quoted).
fn to_yaml(v: &Value, indent: usize) -> String {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, x)| match x {
                Value::Object(_) | Value::Array(_) if !is_empty(x) => {
                    format!("{pad}{k}:\n{}", to_yaml(x, indent + 2))
                }
                _ => format!("{pad}{k}: {}\n", scalar(x)),
            })
            .collect(),
        Value::Array(a) => a
            .iter()
            .map(|x| {
                let inner = to_yaml(x, indent + 2);
                format!("{pad}- {}", inner.trim_start())
            })
            .collect(),
        x => format!("{pad}{}\n", scalar(x)),
    }
}

fn is_empty(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.is_empty()) || v.as_array().is_some_and(|a| a.is_empty())
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        Value::String(s) => serde_json::to_string(s).unwrap(),
        x => x.to_string(),
    }
}

/// A requirement alone never gives `runs on 12 of 12 hosts` with a
/// no-driver host among them: a host judged `skip` is not counted as runs.
#[test]
fn a_requirement_alone_is_judged_as_run_with_gpus() {
    let d = tmpdir("alone");
    let hosts = data("hosts");
    let n = std::fs::read_dir(&hosts).unwrap().count();
    let o = gg(
        &d,
        &[
            "check",
            "--hosts",
            hosts.to_str().unwrap(),
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.6",
        ],
        None,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let last = out.lines().last().unwrap();
    assert!(!last.starts_with(&format!("runs on {n} of {n}")), "{out}");
    let no_driver = out
        .lines()
        .find(|l| l.starts_with("no-driver.json"))
        .unwrap();
    assert!(no_driver.contains("refuse"), "{no_driver}");
    assert!(!out.contains(" skip "), "{out}");
    // The JSON: no host judged as a non-GPU container.
    let j = gg(
        &d,
        &[
            "check",
            "--hosts",
            hosts.to_str().unwrap(),
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.6",
            "--json",
        ],
        None,
    );
    let v: Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["summary"]["skipped"], 0);
    assert!(v["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["decision"]["gpu_container"] == true));
    // One host, and nodes: the same rule.
    let one = gg(
        &d,
        &[
            "check",
            "--host",
            hosts.join("no-driver.json").to_str().unwrap(),
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.6",
        ],
        None,
    );
    assert_eq!(
        one.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&one.stdout)
    );
    let nodes = gg(
        &d,
        &[
            "check",
            "--nodes",
            data("nodes/fleet.json").to_str().unwrap(),
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.6",
            "--json",
        ],
        None,
    );
    let v: Value = serde_json::from_slice(&nodes.stdout).unwrap();
    assert_eq!(v["summary"]["skipped"], 0, "{v}");
}

#[test]
fn a_skip_is_never_counted_as_runnable() {
    let d = tmpdir("skip");
    let hosts = data("hosts");
    let o = gg(
        &d,
        &[
            "check",
            "--hosts",
            hosts.to_str().unwrap(),
            "--env",
            "NVIDIA_VISIBLE_DEVICES=void",
            "--env",
            REQ,
        ],
        None,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let last = out.lines().last().unwrap();
    assert!(last.starts_with("runs on 0 of "), "{out}");
    assert!(last.contains("not judged as a GPU container"), "{out}");
    assert_eq!(o.status.code(), Some(1), "{out}");
    let any = gg(
        &d,
        &[
            "check",
            "--hosts",
            hosts.to_str().unwrap(),
            "--env",
            "NVIDIA_VISIBLE_DEVICES=void",
            "--any",
        ],
        None,
    );
    assert_eq!(any.status.code(), Some(1));
}

#[test]
fn scan_of_a_rootfs_without_libraries_says_none_were_scanned() {
    let d = tmpdir("scan");
    let root = d.join("rootfs");
    std::fs::create_dir_all(root.join("usr/lib")).unwrap();
    std::fs::write(root.join("usr/lib/README"), "no libraries here").unwrap();
    let o = gg(
        &d,
        &[
            "scan",
            "--rootfs",
            "--host",
            data("hosts/a100.json").to_str().unwrap(),
            root.to_str().unwrap(),
        ],
        None,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(!out.contains("runs on every GPU"), "{out}");
    assert!(out.contains("no GPU libraries found (0 scanned)"), "{out}");
    let j = gg(
        &d,
        &[
            "scan",
            "--rootfs",
            "--json",
            "--host",
            data("hosts/a100.json").to_str().unwrap(),
            root.to_str().unwrap(),
        ],
        None,
    );
    let v: Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["rootfs"][0]["libraries_scanned"], 0, "{v}");
}

/// Unknown facts refuse as the core's errors do; a fleet is judged for
/// placement, so under `mode = "warn"` too: the error stands, and the node
/// is not one the container runs on.
#[test]
fn unknown_facts_refuse_placement_in_every_mode() {
    let d = tmpdir("mode");
    let req = "NVIDIA_REQUIRE_CUDA=cuda>=13.0 brand=tesla,driver>=550,driver<551";
    let nodes = data("nodes/fleet.json");
    let verdict = |dir: &Path| {
        let o = gg(
            dir,
            &[
                "check",
                "--env",
                req,
                "--nodes",
                nodes.to_str().unwrap(),
                "--json",
            ],
            None,
        );
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let a100 = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["host"] == "gpu-a100-550")
            .unwrap()
            .clone();
        a100["decision"].clone()
    };
    let enforce = verdict(&d);
    assert_eq!(enforce["verdict"], "refuse", "{enforce}");
    std::fs::write(
        d.join("config.toml"),
        "mode = \"warn\"\n[host]\ncache_file = \"\"\n[log]\nsyslog = false\n",
    )
    .unwrap();
    let warn = verdict(&d);
    assert_eq!(warn["verdict"], "refuse", "{warn}");
    let findings = warn["findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|f| f["severity"] == "error"
            && f["message"].as_str().unwrap().contains("not shown to hold")),
        "{warn}"
    );
    assert!(
        findings.iter().any(|f| f["message"]
            .as_str()
            .unwrap()
            .starts_with("not placed here: ")),
        "{warn}"
    );
}

/// A YAML alias bomb and deep nesting are one-line input errors, at once.
#[test]
fn hostile_yaml_is_a_quick_input_error() {
    let d = tmpdir("bomb");
    let mut bomb =
        String::from("a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n");
    let mut prev = 'a';
    for n in 'b'..='j' {
        let refs = vec![format!("*{prev}"); 10].join(",");
        bomb.push_str(&format!("{n}: &{n} [{refs}]\n"));
        prev = n;
    }
    bomb.push_str("kind: List\nitems:\n- metadata:\n    name: n\n    labels: *j\n");
    let deep = "[".repeat(100_000);
    for doc in [bomb, deep] {
        let t = std::time::Instant::now();
        let o = gg(
            &d,
            &["check", "--env", REQ, "--nodes", "-"],
            Some(doc.as_bytes()),
        );
        assert_input_error(&o, "is not `kubectl get nodes -o json` or `-o yaml` output");
        assert!(t.elapsed() < std::time::Duration::from_secs(20));
    }
}
