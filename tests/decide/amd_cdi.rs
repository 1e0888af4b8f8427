//! CDI devices of AMD's kind through the binary: `check --spec` of a
//! container whose `cdi.k8s.io/*` annotation asks for `amd.com/gpu=N` on
//! AMD host facts (`gpu-guard host --json` of the MI300X KFD tree) gets the
//! GPUs amd-ctk numbers N (PCI bus order, not KFD's), `all` every AMD GPU,
//! and a number the host lacks is a `device` error; then the CDI spec
//! check on `/etc/cdi/amd.json` as `amd-ctk cdi generate` writes it: one
//! whose device nodes are the host's allows, one whose kfd major is no
//! longer the host's refuses with `amd-ctk cdi generate` as the fix.

use crate::support::TempDir;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

/// MI300X facts as `host --json` reads them, the two GPUs' bus ids
/// swapped so that KFD's order (the facts' index) is not amd-ctk's.
fn facts(dir: &TempDir) -> PathBuf {
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/amd/mi300x");
    let cfg = dir.join("probe.toml");
    std::fs::write(
        &cfg,
        "[host]\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\ncache_file = \"\"\n",
    )
    .unwrap();
    let o = Command::new(*BIN)
        .arg("--config")
        .arg(&cfg)
        .args(["host", "--json", "--host-root"])
        .arg(&tree)
        .output()
        .unwrap();
    let mut v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(v["gpus"][0]["pci_bus_id"], "0000:0c:00.0", "{v}");
    v["gpus"][0]["pci_bus_id"] = "0000:22:00.0".into();
    v["gpus"][1]["pci_bus_id"] = "0000:0c:00.0".into();
    let p = dir.join("mi300x.json");
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

/// A config on `facts`, the CDI spec directory `cdi` (or none).
fn config(dir: &TempDir, facts: &Path, cdi: Option<&Path>) -> PathBuf {
    let dirs = cdi.map_or(String::new(), |d| format!("\"{}\"", d.display()));
    let p = dir.join("config.toml");
    std::fs::write(
        &p,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\ncdi_spec_dirs = [{dirs}]\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n",
            facts.display()
        ),
    )
    .unwrap();
    p
}

/// `check --json --spec` of a container asking for `devices` by annotation.
fn check(dir: &TempDir, cfg: &Path, devices: &str) -> (i32, Value) {
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": {"env": ["PATH=/bin"], "noNewPrivileges": true, "args": ["true"]},
        "root": {"path": "rootfs"},
        "annotations": {"cdi.k8s.io/amd-gpu": devices}
    });
    let path = dir.join("spec.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    let o = Command::new(*BIN)
        .env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(cfg)
        .args(["check", "--json", "--spec"])
        .arg(&path)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap_or(-1), v)
}

fn findings<'a>(d: &'a Value, check: &str) -> Vec<&'a Value> {
    d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect()
}

#[test]
fn amd_cdi_devices_make_an_amd_gpu_container_of_the_named_gpus() {
    let dir = TempDir::new("amd-cdi");
    let cfg = config(&dir, &facts(&dir), None);
    // amd.com/gpu=0 is the lowest bus id: the facts' GPU 1 here.
    let (code, d) = check(&dir, &cfg, "amd.com/gpu=0");
    assert_eq!((code, d["verdict"].as_str()), (0, Some("allow")), "{d}");
    assert_eq!(d["gpu_container"], true, "{d}");
    assert_eq!(d["visible_gpus"], json!([1]), "{d}");
    let (_, d) = check(&dir, &cfg, "amd.com/gpu=1");
    assert_eq!(d["visible_gpus"], json!([0]), "{d}");
    let (_, d) = check(&dir, &cfg, "amd.com/gpu=all");
    assert_eq!(d["visible_gpus"], json!([0, 1]), "{d}");
    // Not a GPU of this host: a device error naming the CDI device.
    let (code, d) = check(&dir, &cfg, "amd.com/gpu=5");
    assert_eq!((code, d["verdict"].as_str()), (1, Some("refuse")), "{d}");
    let dev = findings(&d, "device");
    assert_eq!(dev.len(), 1, "{d}");
    let m = dev[0]["message"].as_str().unwrap();
    assert!(m.contains("CDI device amd.com/gpu=5"), "{m}");
    assert!(
        dev[0]["fix"].as_str().unwrap().contains("amd-ctk cdi"),
        "{d}"
    );
    // A name as written is escaped in the message.
    let (_, d) = check(&dir, &cfg, "amd.com/gpu=\u{1b}[31mx");
    let m = findings(&d, "device")[0]["message"].as_str().unwrap();
    assert!(!m.contains('\u{1b}'), "{m}");
    // Another vendor's CDI kind makes no GPU container.
    let (code, d) = check(&dir, &cfg, "vendor.com/fpga=0");
    assert_eq!(code, 0, "{d}");
    assert_eq!(d["gpu_container"], false, "{d}");
}

/// `/etc/cdi/amd.json` as amd-ctk writes it, its nodes under `dev` with
/// kfd at major `kfd`.
fn amd_spec(dev: &Path, kfd: u64) -> String {
    let node = |p: &str, major: u64, minor: u64| {
        json!({"path": dev.join(p), "type": "c", "major": major, "minor": minor,
               "fileMode": 8624, "permissions": "rwm", "uid": 0, "gid": 109})
    };
    let (kfd, r0, r1) = (
        node("kfd", kfd, 0),
        node("dri/renderD128", 226, 128),
        node("dri/renderD136", 226, 136),
    );
    json!({"cdiVersion": "0.6.0", "kind": "amd.com/gpu", "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [r0, kfd]}},
        {"name": "1", "containerEdits": {"deviceNodes": [r1, kfd]}},
        {"name": "all", "containerEdits": {"deviceNodes": [r0, r1, kfd]}}
    ]})
    .to_string()
}

#[test]
fn a_stale_amd_cdi_spec_refuses_with_amd_ctk_as_the_fix() {
    if !crate::support::have_root("the host's device nodes are made with mknod") {
        return;
    }
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let dir = TempDir::new("amd-cdi-stale");
    let dev = dir.join("dev");
    std::fs::create_dir_all(dev.join("dri")).unwrap();
    for (p, major, minor) in [
        ("kfd", 511, 0),
        ("dri/renderD128", 226, 128),
        ("dri/renderD136", 226, 136),
    ] {
        let mode = Mode::from_bits_truncate(0o660);
        mknod(&dev.join(p), SFlag::S_IFCHR, mode, makedev(major, minor)).unwrap();
    }
    let cdi = dir.join("cdi");
    std::fs::create_dir(&cdi).unwrap();
    let spec = cdi.join("amd.json");
    std::fs::write(&spec, amd_spec(&dev, 511)).unwrap();
    let cfg = config(&dir, &facts(&dir), Some(&cdi));
    let (code, d) = check(&dir, &cfg, "amd.com/gpu=1");
    assert_eq!((code, d["verdict"].as_str()), (0, Some("allow")), "{d}");
    assert!(findings(&d, "host").is_empty(), "{d}");
    // Written before a boot that gave amdkfd major 511 instead of 510.
    std::fs::write(&spec, amd_spec(&dev, 510)).unwrap();
    let (code, d) = check(&dir, &cfg, "amd.com/gpu=1");
    assert_eq!((code, d["verdict"].as_str()), (1, Some("refuse")), "{d}");
    let h = findings(&d, "host");
    assert_eq!(h.len(), 1, "{d}");
    let m = h[0]["message"].as_str().unwrap();
    assert!(
        m.contains(&format!(
            "{}/kfd is 510:0 in the spec, 511:0 on this host",
            dev.display()
        )),
        "{m}"
    );
    let fix = h[0]["fix"].as_str().unwrap();
    assert!(
        fix.contains(&format!("amd-ctk cdi generate --output={}", spec.display())),
        "{fix}"
    );
    // A GPU removed since: its render node is gone.
    std::fs::write(&spec, amd_spec(&dev, 511)).unwrap();
    std::fs::remove_file(dev.join("dri/renderD136")).unwrap();
    let (code, d) = check(&dir, &cfg, "amd.com/gpu=1");
    assert_eq!(code, 1, "{d}");
    let m = findings(&d, "host")[0]["message"].as_str().unwrap();
    assert!(m.contains("renderD136"), "{m}");
    // The GPU whose nodes are all there still starts.
    let (code, d) = check(&dir, &cfg, "amd.com/gpu=0");
    assert_eq!(code, 0, "{d}");
}
