//! AMD GPU containers' device nodes at start through the real binary, as
//! NVIDIA's are (docs/amd.md, "Device nodes at start"): `check --spec` on a
//! probed AMD host (the MI300X KFD tree under GPU_GUARD_HOST_ROOT, its
//! /dev made with mknod under GPU_GUARD_DEV_DIR, /proc/devices under
//! GPU_GUARD_PROC_DEVICES) names `/dev/kfd` and the render nodes of the
//! GPUs the container gets when they are missing, not character devices
//! of amdkfd's or DRM's major, or closed to the container's user.

use crate::support::{have_root, TempDir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gpu-guard");

/// The fake host: its directory, with `dev/` and `devices`.
struct AmdHost {
    dir: TempDir,
}

impl AmdHost {
    /// MI300X's GPUs (render minors 128 and 136), kfd at major 235, every
    /// node crw-rw---- root:44.
    fn new() -> AmdHost {
        let dir = TempDir::new("amd-devnodes");
        std::fs::create_dir_all(dir.join("dev/dri")).unwrap();
        std::fs::create_dir_all(dir.join("rootfs")).unwrap();
        std::fs::create_dir_all(dir.join("proc-nvidia-none")).unwrap();
        std::fs::write(dir.join("modules"), "").unwrap();
        let h = AmdHost { dir };
        h.registry(true);
        h.node("kfd", 235, 0);
        h.node("dri/renderD128", 226, 128);
        h.node("dri/renderD136", 226, 136);
        std::fs::write(
            h.dir.join("config.toml"),
            "[host]\ncache_file = \"\"\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n\
             [kernel_image]\ncache_dir = \"\"\n[libraries]\ncache_dir = \"\"\n[log]\nsyslog = false\n",
        )
        .unwrap();
        h
    }

    /// /proc/devices, with amdkfd's `kfd` registered or not.
    fn registry(&self, kfd: bool) {
        let kfd = if kfd { "235 kfd\n" } else { "" };
        std::fs::write(
            self.dir.join("devices"),
            format!("Character devices:\n  1 mem\n226 drm\n{kfd}\nBlock devices:\n  8 sd\n"),
        )
        .unwrap();
    }

    fn dev(&self, name: &str) -> PathBuf {
        self.dir.join("dev").join(name)
    }

    /// (Re)makes /dev/`name` as character device `major:minor`, 0660 root:44.
    fn node(&self, name: &str, major: u64, minor: u64) {
        let p = self.dev(name);
        let _ = std::fs::remove_file(&p);
        let _ = std::fs::remove_dir(&p);
        nix::sys::stat::mknod(
            &p,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o660),
            nix::sys::stat::makedev(major, minor),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o660)).unwrap();
        std::os::unix::fs::chown(&p, Some(0), Some(44)).unwrap();
    }

    /// `check --spec --json` of a container given `devices` and running as `user`.
    fn check(&self, devices: &[(&str, u32, u32)], user: Value) -> (i32, Value) {
        let devs: Vec<Value> = devices
            .iter()
            .map(
                |(p, major, minor)| json!({"path": p, "type": "c", "major": major, "minor": minor}),
            )
            .collect();
        let spec = json!({
            "ociVersion": "1.0.2",
            "process": {"user": user, "args": ["true"], "cwd": "/", "env": []},
            "root": {"path": self.dir.join("rootfs")},
            "linux": {"devices": devs}
        });
        let p = self.dir.join("spec.json");
        std::fs::write(&p, spec.to_string()).unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/amd/mi300x");
        let o = Command::new(BIN)
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .args(["check", "--json", "--spec"])
            .arg(&p)
            .env_remove("GPU_GUARD_CONFIG")
            .env("GPU_GUARD_HOST_ROOT", &root)
            .env("GPU_GUARD_SYS_DIR", root.join("sys"))
            .env("GPU_GUARD_DEV_DIR", self.dir.join("dev"))
            .env("GPU_GUARD_PROC_DEVICES", self.dir.join("devices"))
            .env("GPU_GUARD_PROC_MODULES", self.dir.join("modules"))
            .env("GPU_GUARD_PROC_NVIDIA", self.dir.join("proc-nvidia-none"))
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        (o.status.code().unwrap_or(-1), v)
    }
}

/// The `host` findings' messages.
fn host_findings(d: &Value) -> Vec<String> {
    d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "host")
        .map(|f| format!("{}: {}", f["severity"], f["message"]))
        .collect()
}

/// `--device=/dev/kfd --device=/dev/dri/renderD136`: AMD GPU 1.
const GPU1: [(&str, u32, u32); 2] = [("/dev/kfd", 235, 0), ("/dev/dri/renderD136", 226, 136)];

#[test]
fn amd_nodes_are_checked_at_start_for_the_gpus_the_container_gets() {
    if !have_root("the fake host's device nodes are made with mknod") {
        return;
    }
    let host = AmdHost::new();
    let member = json!({"uid": 1000, "gid": 1000, "additionalGids": [44]});
    // A member of the nodes' group: nothing to say, and no "no NVIDIA
    // driver" for a container of AMD GPUs only.
    let (code, d) = host.check(&GPU1, member.clone());
    assert_eq!((code, &d["visible_gpus"]), (0, &json!([1])), "{d:#}");
    assert!(host_findings(&d).is_empty(), "{d:#}");
    // GPU 0's node broken: not this container's.
    std::fs::remove_file(host.dev("dri/renderD128")).unwrap();
    std::fs::create_dir(host.dev("dri/renderD128")).unwrap();
    let (code, d) = host.check(&GPU1, member.clone());
    assert_eq!(code, 0, "{d:#}");
    // Another user: kfd and GPU 1's render node closed to it, as NVIDIA's are.
    let (code, d) = host.check(&GPU1, json!({"uid": 1000, "gid": 1000}));
    assert_eq!(code, 1, "{d:#}");
    let f = host_findings(&d);
    assert_eq!(f.len(), 2, "{f:#?}");
    for (m, node) in f.iter().zip(["/dev/kfd", "/dev/dri/renderD136"]) {
        // The group's name is this machine's /etc/group's, if it has one.
        let head = format!("\"error\": \"{node} is crw-rw---- (uid 0, ");
        assert!(m.starts_with(&head) && m.contains("44)"), "{m}");
        assert!(
            m.contains("uid 1000 gid 1000") && m.contains("ROCm in it finds no GPU"),
            "{m}"
        );
    }
    let fix = d["findings"][0]["fix"].as_str().unwrap_or("");
    assert!(fix.contains("--group-add 44"), "{d:#}");
    // kfd of another major than /proc/devices' `kfd`.
    host.node("kfd", 10, 0);
    let (code, d) = host.check(&GPU1, member.clone());
    assert_eq!(code, 1, "{d:#}");
    let f = host_findings(&d).join("\n");
    assert!(
        f.contains("/dev/kfd is character device 10:0, not amdkfd's"),
        "{f}"
    );
    assert!(f.contains("major 235"), "{f}");
    host.node("kfd", 235, 0);
    // amdkfd not registered in /proc/devices.
    host.registry(false);
    let (code, d) = host.check(&GPU1, member.clone());
    assert_eq!(code, 1, "{d:#}");
    assert!(
        host_findings(&d)
            .join("\n")
            .contains("amdkfd driver is not loaded"),
        "{d:#}"
    );
    host.registry(true);
    // The render node missing, then a directory.
    std::fs::remove_file(host.dev("dri/renderD136")).unwrap();
    let (code, d) = host.check(&GPU1, member.clone());
    assert_eq!(code, 1, "{d:#}");
    let f = host_findings(&d).join("\n");
    assert!(
        f.contains("/dev/dri/renderD136 is missing on this host"),
        "{f}"
    );
    assert!(!f.contains("renderD128"), "only the GPUs it gets: {f}");
    std::fs::create_dir(host.dev("dri/renderD136")).unwrap();
    let (code, d) = host.check(&GPU1, member);
    assert_eq!(code, 1, "{d:#}");
    assert!(
        host_findings(&d)
            .join("\n")
            .contains("/dev/dri/renderD136 is a directory, not a character device"),
        "{d:#}"
    );
}
