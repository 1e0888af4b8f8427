//! Host health and tuning through the gpu-guard binary (docs/interfaces.md,
//! "Host health and tuning"): `/dev/shm` and `RLIMIT_STACK` in the
//! decision and in podman's precreate output; stale CDI specs refused with
//! the fix and reported by `gpu-guard host`; hostile spec directories in
//! bounded time; decision metrics counted exactly by parallel hooks, and a
//! metrics failure that changes no decision.

use crate::support::TempDir;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);
/// The driver of tests/data/hosts/a100.json.
const DRIVER: &str = "535.104.05";

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

/// A config on the a100 facts file with `extra` TOML appended under its
/// own tables.
fn config(dir: &Path, name: &str, extra: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n{extra}\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n",
            data("hosts/a100.json").display(),
        ),
    )
    .unwrap();
    p
}

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(*BIN)
        .args(args)
        .env_remove("GPU_GUARD_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

/// A path as an argument.
fn a(p: impl AsRef<Path>) -> String {
    p.as_ref().to_string_lossy().into_owned()
}

fn check_json(cfg: &Path, spec: &Path) -> (i32, serde_json::Value) {
    let o = run(
        &["--config", &a(cfg), "check", "--json", "--spec", &a(spec)],
        b"",
    );
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap_or(-1), v)
}

/// A GPU container's spec (NVIDIA's hook attaches what the env asks for),
/// with these mounts and annotations.
fn gpu_spec(mounts: serde_json::Value, annotations: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12.0"],
                    "noNewPrivileges": true, "args": ["true"]},
        "root": {"path": "rootfs"},
        "mounts": mounts,
        "annotations": annotations,
        "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook",
                                "args": ["nvidia-container-runtime-hook", "prestart"]}]}
    })
}

/// runc's default /dev/shm (runc spec): its own 64 MiB tmpfs.
fn runc_shm() -> serde_json::Value {
    serde_json::json!([
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}
    ])
}

fn write_json(path: &Path, v: &serde_json::Value) -> PathBuf {
    std::fs::write(path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    path.to_path_buf()
}

const SHM: &str = "[tuning]\nshm_size = \"1g\"\nstack = \"67108864\"\n";

#[test]
fn shm_and_stack_are_in_the_decision() {
    let t = TempDir::new("shm-check");
    let cfg = config(t.path(), "c.toml", SHM);
    let spec = write_json(
        &t.join("gpu.json"),
        &gpu_spec(runc_shm(), serde_json::json!({})),
    );
    let (code, d) = check_json(&cfg, &spec);
    assert_eq!(code, 0, "{d}");
    assert_eq!(
        d["edits"]["mounts"],
        serde_json::json!({"/dev/shm": {"size": 1u64 << 30}}),
        "{d}"
    );
    assert_eq!(
        d["edits"]["rlimits"]["RLIMIT_STACK"]["soft"],
        64u64 << 20,
        "{d}"
    );
    // Off by default: no mount edit, no stack.
    let off = config(t.path(), "off.toml", "");
    let (_, d) = check_json(&off, &spec);
    assert!(
        d["edits"].get("mounts").is_none() && d["edits"].get("rlimits").is_none(),
        "{d}"
    );
    // For people.
    let o = run(&["--config", &a(&cfg), "check", "--spec", &a(&spec)], b"");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("edit: mount /dev/shm size=1073741824 (1 GiB)"),
        "{text}"
    );
    // A non-GPU container: nothing.
    let mut plain = gpu_spec(runc_shm(), serde_json::json!({}));
    plain["process"]["env"] = serde_json::json!(["PATH=/bin"]);
    plain["hooks"] = serde_json::json!({});
    let (code, d) = check_json(&cfg, &write_json(&t.join("plain.json"), &plain));
    assert_eq!((code, d["verdict"].as_str()), (0, Some("skip")), "{d}");
    assert!(d["edits"].get("mounts").is_none(), "{d}");
}

#[test]
fn a_bind_mounted_shm_gets_a_warning_and_no_edit() {
    let t = TempDir::new("shm-bind");
    // More than any host's /dev/shm: the host's own is smaller.
    let cfg = config(t.path(), "c.toml", "[tuning]\nshm_size = \"64t\"\n");
    let bind = serde_json::json!([{"destination": "/dev/shm", "type": "bind", "source": "/dev/shm",
                                   "options": ["rbind", "rprivate", "nosuid"]}]);
    let spec = write_json(&t.join("bind.json"), &gpu_spec(bind, serde_json::json!({})));
    let (code, d) = check_json(&cfg, &spec);
    assert_eq!(code, 0, "{d}");
    assert!(d["edits"].get("mounts").is_none(), "{d}");
    let f = d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "tuning")
        .unwrap_or_else(|| panic!("{d}"));
    assert_eq!(f["severity"], "warning");
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.contains("a bind mount of /dev/shm")
            && msg.contains("smaller than tuning.shm_size (64 TiB)"),
        "{msg}"
    );
    assert!(f["fix"].as_str().unwrap().contains("--shm-size=64t"), "{f}");
    // A source that cannot be measured: said so.
    let gone = serde_json::json!([{"destination": "/dev/shm", "type": "bind", "source": "/nonexistent/shm", "options": ["rbind"]}]);
    let (_, d) = check_json(
        &cfg,
        &write_json(&t.join("gone.json"), &gpu_spec(gone, serde_json::json!({}))),
    );
    let text = d["findings"].to_string();
    assert!(
        text.contains("cannot read the size of /dev/shm's source /nonexistent/shm"),
        "{d}"
    );
}

#[test]
fn precreate_writes_the_raised_shm_and_leaves_others_alone() {
    let t = TempDir::new("shm-precreate");
    let cfg = config(t.path(), "c.toml", SHM);
    let spec = serde_json::to_vec(&gpu_spec(runc_shm(), serde_json::json!({}))).unwrap();
    let o = run(&["--config", &a(&cfg), "hook", "precreate"], &spec);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        out["mounts"][1]["options"],
        serde_json::json!(["nosuid", "noexec", "nodev", "mode=1777", "size=1048576k"])
    );
    let stack: Vec<&serde_json::Value> = out["process"]["rlimits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["type"] == "RLIMIT_STACK")
        .collect();
    assert_eq!(stack.len(), 1, "{out}");
    assert_eq!(stack[0]["soft"], 64u64 << 20);
    // A non-GPU config comes back byte for byte.
    let plain = br#"{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"]},"mounts":[{"destination":"/dev/shm","type":"tmpfs","source":"shm","options":["size=65536k"]}]}"#;
    let o = run(&["--config", &a(&cfg), "hook", "precreate"], plain);
    assert_eq!(o.stdout, plain.to_vec());
}

/// A host tree with the driver files a spec names, for driver `v`.
fn driver_files(root: &Path, v: &str) {
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(root.join(format!("lib/firmware/nvidia/{v}"))).unwrap();
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    for f in [
        format!("usr/lib/x86_64-linux-gnu/libcuda.so.{v}"),
        format!("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{v}"),
        format!("usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.{v}"),
        "usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.13".into(),
        format!("lib/firmware/nvidia/{v}/gsp_ga10x.bin"),
        "usr/bin/nvidia-smi".into(),
        "usr/bin/nvidia-cdi-hook".into(),
    ] {
        std::fs::write(root.join(f), b"").unwrap();
    }
}

/// A spec as `nvidia-ctk cdi generate` writes it (YAML, cdiVersion 0.5.0,
/// the device nodes and mounts of the driver in `root`, its hooks), for
/// driver `v`. This host has no /dev/nvidia*: the nodes' hostPath is a
/// character device it has, as `nvidia-ctk cdi generate --dev-root` writes one.
fn nvidia_ctk_yaml(root: &Path, v: &str) -> String {
    let r = root.display();
    let mount = |p: &str| {
        format!("  - containerPath: {p}\n    hostPath: {r}{p}\n    options:\n    - ro\n    - nosuid\n    - nodev\n    - bind\n")
    };
    let mut s = String::from("---\ncdiVersion: 0.5.0\ncontainerEdits:\n  deviceNodes:\n");
    for n in ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] {
        s += &format!("  - path: {n}\n    hostPath: /dev/null\n");
    }
    s += "  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n  hooks:\n";
    s += &format!("  - args:\n    - nvidia-cdi-hook\n    - enable-cuda-compat\n    - --host-driver-version={v}\n    hookName: createContainer\n    path: {r}/usr/bin/nvidia-cdi-hook\n");
    s += &format!("  - args:\n    - nvidia-cdi-hook\n    - update-ldcache\n    - --folder\n    - /usr/lib/x86_64-linux-gnu\n    hookName: createContainer\n    path: {r}/usr/bin/nvidia-cdi-hook\n");
    s += "  mounts:\n";
    for p in [
        format!("/usr/lib/x86_64-linux-gnu/libcuda.so.{v}"),
        format!("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{v}"),
        format!("/usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.{v}"),
        "/usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.13".into(),
        format!("/lib/firmware/nvidia/{v}/gsp_ga10x.bin"),
        "/usr/bin/nvidia-smi".into(),
    ] {
        s += &mount(&p);
    }
    s += "devices:\n";
    for name in ["\"0\"", "GPU-5f0d1c6e-2b7a-4d64-9e0a-3c1f2a7b8d90", "all"] {
        s += &format!("- containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n      hostPath: /dev/null\n  name: {name}\n");
    }
    s += "kind: nvidia.com/gpu\n";
    s
}

/// A CDI setup: the host tree with the running driver's files, `/etc/cdi`
/// and `/var/run/cdi` stand-ins, a config pointing at them.
struct Cdi {
    t: TempDir,
    etc: PathBuf,
    run: PathBuf,
    cfg: PathBuf,
}

fn cdi_setup(tag: &str) -> Cdi {
    let t = TempDir::new(tag);
    driver_files(&t.join("host"), DRIVER);
    let (etc, run) = (t.join("etc-cdi"), t.join("run-cdi"));
    for d in [&etc, &run] {
        std::fs::create_dir(d).unwrap();
    }
    let cfg = config(
        t.path(),
        "c.toml",
        &format!(
            "cdi_spec_dirs = [\"{}\", \"{}\"]\n",
            etc.display(),
            run.display()
        ),
    );
    Cdi { t, etc, run, cfg }
}

impl Cdi {
    /// `check --json` of a container that asks for `devices` by annotation.
    fn check(&self, devices: &str) -> (i32, serde_json::Value, Duration) {
        let spec = gpu_spec(
            serde_json::json!([]),
            serde_json::json!({"cdi.k8s.io/gpu": devices}),
        );
        let path = write_json(&self.t.join("spec.json"), &spec);
        let t0 = Instant::now();
        let (code, d) = check_json(&self.cfg, &path);
        (code, d, t0.elapsed())
    }
}

fn host_errors(d: &serde_json::Value) -> Vec<serde_json::Value> {
    d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "host")
        .cloned()
        .collect()
}

#[test]
fn a_cdi_spec_for_the_running_driver_allows_one_for_the_previous_refuses() {
    let c = cdi_setup("cdi-stale");
    let host = c.t.join("host");
    let spec = c.etc.join("nvidia.yaml");
    std::fs::write(&spec, nvidia_ctk_yaml(&host, DRIVER)).unwrap();
    let (code, d, _) = c.check("nvidia.com/gpu=all");
    assert_eq!((code, d["verdict"].as_str()), (0, Some("allow")), "{d}");
    assert!(host_errors(&d).is_empty(), "{d}");
    let (code, _, _) = c.check("nvidia.com/gpu=0");
    assert_eq!(code, 0);
    // The spec left from before the upgrade to 535.104.05.
    std::fs::write(&spec, nvidia_ctk_yaml(&host, "530.30.02")).unwrap();
    let (code, d, _) = c.check("nvidia.com/gpu=all");
    assert_eq!((code, d["verdict"].as_str()), (1, Some("refuse")), "{d}");
    let e = &host_errors(&d)[0];
    assert_eq!(e["severity"], "error");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("generated for NVIDIA driver 530.30.02, but this host runs 535.104.05"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!(
            "{}/usr/lib/x86_64-linux-gnu/libcuda.so.530.30.02",
            host.display()
        )),
        "{msg}"
    );
    let fix = e["fix"].as_str().unwrap();
    assert!(
        fix.contains(&format!(
            "nvidia-ctk cdi generate --output={}",
            spec.display()
        )),
        "{fix}"
    );
    // A fresh spec in the later directory overrides the stale one.
    std::fs::write(c.run.join("nvidia.yaml"), nvidia_ctk_yaml(&host, DRIVER)).unwrap();
    let (code, d, _) = c.check("nvidia.com/gpu=all");
    assert_eq!(code, 0, "{d}");
    // A device no spec defines.
    let (code, d, _) = c.check("nvidia.com/gpu=7");
    assert_eq!(code, 1, "{d}");
    assert!(
        host_errors(&d)[0]["message"]
            .as_str()
            .unwrap()
            .contains("not defined in any CDI spec"),
        "{d}"
    );
    // The prestart hook decides the same.
    let b = c.t.join("bundle");
    std::fs::create_dir_all(&b).unwrap();
    std::fs::remove_file(c.run.join("nvidia.yaml")).unwrap();
    write_json(
        &b.join("config.json"),
        &gpu_spec(
            serde_json::json!([]),
            serde_json::json!({"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}),
        ),
    );
    let st = format!(
        r#"{{"ociVersion":"1.0.2","id":"x","status":"creating","pid":1,"bundle":"{}"}}"#,
        b.display()
    );
    let o = run(&["--config", &a(&c.cfg), "hook", "prestart"], st.as_bytes());
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("generated for NVIDIA driver 530.30.02")
            && err.contains("nvidia-ctk cdi generate"),
        "{err}"
    );
}

#[test]
fn hostile_cdi_directories_take_bounded_time_with_a_clear_message() {
    let c = cdi_setup("cdi-hostile");
    let host = c.t.join("host");
    std::fs::write(c.etc.join("nvidia.yaml"), nvidia_ctk_yaml(&host, DRIVER)).unwrap();
    // Malformed, 10,000 devices, a FIFO: CDI's own reader would block on it.
    std::fs::write(
        c.run.join("broken.yaml"),
        "cdiVersion: [0.5.0\nkind: nvidia.com/gpu\n",
    )
    .unwrap();
    let many: String = (0..10_000)
        .map(|i| {
            format!(
                "- name: d{i}\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia{i}\n"
            )
        })
        .collect();
    std::fs::write(
        c.run.join("many.yaml"),
        format!("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n{many}"),
    )
    .unwrap();
    nix::unistd::mkfifo(
        &c.run.join("fifo.json"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let (code, d, took) = c.check("nvidia.com/gpu=all");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The device resolves from /etc/cdi; the files not read that could
    // override it are named. A FIFO is a warning (the container may well
    // start); a spec past a bound (10,000 devices) is an error: a bound
    // never turns the check off silently.
    assert_eq!(code, 1, "{d}");
    let text = d["findings"].to_string();
    assert!(
        text.contains("fifo.json could not be read (a FIFO, not a regular file)"),
        "{d}"
    );
    let errors: Vec<_> = host_errors(&d)
        .into_iter()
        .filter(|f| f["severity"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "{d}");
    let msg = errors[0]["message"].as_str().unwrap();
    assert!(
        msg.contains("defines 10000 devices of nvidia.com/gpu, more than gpu-guard reads (1024)")
            && msg.contains("nvidia.com/gpu=all"),
        "{d}"
    );
    // `gpu-guard host` names every one of them, the malformed one too.
    let t0 = Instant::now();
    let o = run(&["--config", &a(&c.cfg), "host"], b"");
    assert!(t0.elapsed() < Duration::from_secs(5));
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{out}");
    for needle in [
        "broken.yaml is not a valid CDI spec",
        "many.yaml defines 10000 devices",
        "fifo.json could not be read",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
}

#[test]
fn cdi_bounds_fail_closed_and_specs_of_unknown_authorship_are_never_parsed() {
    use std::os::unix::fs::PermissionsExt;
    let c = cdi_setup("cdi-bounds");
    let host = c.t.join("host");
    std::fs::write(c.etc.join("nvidia.yaml"), nvidia_ctk_yaml(&host, DRIVER)).unwrap();
    // 60,000 nested lists (120 KB): seconds of libyaml's scanner each
    // start if it were parsed. As root's file: not parsed, past the bound.
    let deep = format!("{}{}", "[".repeat(60_000), "]".repeat(60_000));
    let deep_path = c.run.join("deep.yaml");
    std::fs::write(&deep_path, &deep).unwrap();
    let (code, d, took) = c.check("nvidia.com/gpu=all");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(code, 1, "{d}");
    let msg = host_errors(&d)[0]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("deep.yaml was not read (it may nest more than 256 levels deep")
            && msg.contains("nvidia.com/gpu=all"),
        "{msg}"
    );
    // As anyone's: the trust rule, before a byte is parsed.
    std::fs::set_permissions(&deep_path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, d, took) = c.check("nvidia.com/gpu=all");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(code, 1, "{d}");
    let msg = host_errors(&d)[0]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("which others could have written (mode 0666") && msg.contains("deep.yaml"),
        "{msg}"
    );
    // Padding: names of a generated kind and names CDI cannot parse
    // before the one an untrusted spec defines hide nothing.
    std::fs::write(
        &deep_path,
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: evil\n  containerEdits:\n    hooks:\n    - hookName: createContainer\n      path: /tmp/evil\n",
    )
    .unwrap();
    let mut asked: Vec<String> = (0..100)
        .map(|i| format!("runtime.nvidia.com/gpu={i}"))
        .collect();
    asked.extend((0..100).map(|i| format!("nvidia.com/gpu{i}")));
    asked.push("nvidia.com/gpu=evil".into());
    let (code, d, _) = c.check(&asked.join(","));
    assert_eq!(code, 1, "{d}");
    assert!(
        host_errors(&d).iter().any(|e| {
            let m = e["message"].as_str().unwrap();
            m.contains("nvidia.com/gpu=evil") && m.contains("which others could have written")
        }),
        "{d}"
    );
}

#[test]
fn gpu_guard_host_warns_about_a_stale_or_untrusted_spec() {
    use std::os::unix::fs::PermissionsExt;
    let c = cdi_setup("cdi-host");
    let host = c.t.join("host");
    let spec = c.etc.join("nvidia.yaml");
    std::fs::write(&spec, nvidia_ctk_yaml(&host, DRIVER)).unwrap();
    let o = run(&["--config", &a(&c.cfg), "host"], b"");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(!out.contains("CDI spec"), "{out}");
    std::fs::write(&spec, nvidia_ctk_yaml(&host, "530.30.02")).unwrap();
    let o = run(&["--config", &a(&c.cfg), "host"], b"");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("generated for NVIDIA driver 530.30.02"),
        "{out}"
    );
    assert!(out.contains("nvidia-ctk cdi generate --output="), "{out}");
    // Writable by others: the host says so, the container is refused.
    std::fs::write(&spec, nvidia_ctk_yaml(&host, DRIVER)).unwrap();
    std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = run(&["--config", &a(&c.cfg), "host"], b"");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("could be written by others"), "{out}");
    let (code, d, _) = c.check("nvidia.com/gpu=all");
    assert_eq!(code, 1, "{d}");
    assert!(
        host_errors(&d)[0]["message"]
            .as_str()
            .unwrap()
            .contains("which others could have written"),
        "{d}"
    );
}

/// The metric lines of a textfile, `name{labels} value`, as a map.
fn samples(text: &str) -> std::collections::BTreeMap<String, u64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse::<f64>().ok()? as u64))
        })
        .collect()
}

#[test]
fn forty_hooks_eight_at_a_time_leave_exact_counts() {
    let t = TempDir::new("metrics");
    let prom = t.join("prom/gpu-guard.prom");
    std::fs::create_dir(t.join("prom")).unwrap();
    let cfg = config(
        t.path(),
        "c.toml",
        &format!(
            "[metrics]\ntextfile = \"{}\"\nstate_dir = \"{}\"\n",
            prom.display(),
            t.join("state").display()
        ),
    );
    let bundle = |name: &str, spec: serde_json::Value| {
        let b = t.join(name);
        std::fs::create_dir_all(&b).unwrap();
        write_json(&b.join("config.json"), &spec);
        b
    };
    let allow = bundle(
        "allow",
        gpu_spec(serde_json::json!([]), serde_json::json!({})),
    );
    let mut r = gpu_spec(serde_json::json!([]), serde_json::json!({}));
    r["process"]["env"][2] = "NVIDIA_REQUIRE_CUDA=cuda>=13.0".into();
    let refuse = bundle("refuse", r);
    let skip = bundle(
        "skip",
        serde_json::json!({"process": {"env": ["PATH=/bin"]}}),
    );
    let jobs: Vec<&PathBuf> = (0..40)
        .map(|i| match i % 4 {
            0 | 1 => &allow,
            2 => &refuse,
            _ => &skip,
        })
        .collect();
    let codes = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for chunk in jobs.chunks(5) {
            let (cfg, codes) = (&cfg, &codes);
            s.spawn(move || {
                for b in chunk {
                    let st = format!(r#"{{"ociVersion":"1.0.2","id":"c","status":"creating","pid":1,"bundle":"{}"}}"#, b.display());
                    let o = run(&["--config", &a(cfg), "hook", "prestart"], st.as_bytes());
                    codes.lock().unwrap().push(o.status.code());
                }
            });
        }
    });
    let codes = codes.into_inner().unwrap();
    assert_eq!(codes.iter().filter(|c| **c == Some(1)).count(), 10);
    let m = samples(&std::fs::read_to_string(&prom).unwrap());
    let dropped = m["gpu_guard_metrics_dropped_total"];
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    let allowed = get(
        r#"gpu_guard_decisions_total{verdict="allow",check="none",entry="prestart",mode="enforce"}"#,
    );
    let refused = get(
        r#"gpu_guard_decisions_total{verdict="refuse",check="requirement",entry="prestart",mode="enforce"}"#,
    );
    let skipped = get(
        r#"gpu_guard_decisions_total{verdict="skip",check="none",entry="prestart",mode="enforce"}"#,
    );
    // A hook that finds the lock busy leaves its decision pending for the
    // holder: every one is counted, none dropped.
    assert_eq!(dropped, 0, "{m:?}");
    assert_eq!((allowed, refused, skipped), (20, 10, 10), "{m:?}");
    assert_eq!(
        get(r#"gpu_guard_decision_seconds_count{entry="prestart"}"#),
        40
    );
    assert_eq!(
        get(r#"gpu_guard_host_info{driver="535.104.05",cuda="12.2"}"#),
        1,
        "{m:?}"
    );
    // One non-UTF-8 byte in the state's line of the allowed decisions:
    // that line alone is lost, and counting goes on (on main it stopped
    // for good: every update failed to read the state).
    let state = t.join("state/gpu-guard.prom.state");
    let mut bytes = std::fs::read(&state).unwrap();
    let at = bytes
        .windows(16)
        .position(|w| w == b"d allow none pre")
        .unwrap();
    bytes[at + 2] = 0xff;
    std::fs::write(&state, &bytes).unwrap();
    for b in [&allow, &refuse] {
        let st = format!(
            r#"{{"ociVersion":"1.0.2","id":"c","status":"creating","pid":1,"bundle":"{}"}}"#,
            b.display()
        );
        run(&["--config", &a(&cfg), "hook", "prestart"], st.as_bytes());
    }
    let m = samples(&std::fs::read_to_string(&prom).unwrap());
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    let allowed = get(
        r#"gpu_guard_decisions_total{verdict="allow",check="none",entry="prestart",mode="enforce"}"#,
    );
    let refused = get(
        r#"gpu_guard_decisions_total{verdict="refuse",check="requirement",entry="prestart",mode="enforce"}"#,
    );
    assert_eq!((allowed, refused), (1, 11), "{m:?}");
}

#[test]
fn a_metrics_failure_changes_no_decision() {
    use std::os::unix::fs::PermissionsExt;
    let t = TempDir::new("metrics-bad");
    let open = t.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let plain = config(t.path(), "plain.toml", "");
    let spec = serde_json::to_vec(&gpu_spec(runc_shm(), serde_json::json!({}))).unwrap();
    let mut refused = gpu_spec(serde_json::json!([]), serde_json::json!({}));
    refused["process"]["env"][2] = "NVIDIA_REQUIRE_CUDA=cuda>=13.0".into();
    let refused = serde_json::to_vec(&refused).unwrap();
    let good = t.join("good");
    std::fs::create_dir(&good).unwrap();
    // An unwritable textfile (no directory, a world-writable one, a
    // directory), and a state directory others can write.
    let cases = [
        (t.join("nodir/x.prom"), t.join("state")),
        (open.join("x.prom"), t.join("state")),
        (t.path().to_path_buf(), t.join("state")),
        (good.join("x.prom"), open.clone()),
    ];
    for (bad, state) in cases {
        let cfg = config(
            t.path(),
            "bad.toml",
            &format!(
                "[metrics]\ntextfile = \"{}\"\nstate_dir = \"{}\"\n",
                bad.display(),
                state.display()
            ),
        );
        for input in [&spec, &refused] {
            let want = run(&["--config", &a(&plain), "hook", "precreate"], input);
            let t0 = Instant::now();
            let got = run(&["--config", &a(&cfg), "hook", "precreate"], input);
            assert!(t0.elapsed() < Duration::from_secs(5));
            assert_eq!(got.status.code(), want.status.code(), "{}", bad.display());
            assert_eq!(got.stdout, want.stdout, "{}", bad.display());
        }
        assert!(!open.join("x.prom").exists() && !good.join("x.prom").exists());
    }
}
