//! `gpu-guard doctor --host-root` on AMD hosts, through the binary: the
//! MI210 KFD tree of tests/data/hosts/amd with `/dev/kfd` and its render
//! node made as the kernel makes them (amdkfd's dynamic major as
//! /proc/devices lists it, DRM's 226), then each fault: a wrong major, kfd
//! not registered, a missing or misplaced render node, a group that is not
//! render/video, no amdgpu module, `/dev/kfd` with no KFD GPU; and no AMD
//! checks at all on a node without AMD GPUs or `/dev/kfd`.

use crate::doctor::{doctor, expect, put};
use crate::install_support::{bin, tempdir};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// amdkfd's dynamic major on the fake host.
const KFD_MAJOR: u64 = 510;
const PROC_DEVICES: &str = "Character devices:\n  1 mem\n226 drm\n510 kfd\n";

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// A character device MAJOR:MINOR, root:GID, with `mode` at `rel`.
fn char_node(root: &Path, rel: &str, major: u64, gid: u32, mode: u32) {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    let _ = fs::remove_file(&p);
    mknod(&p, SFlag::S_IFCHR, Mode::empty(), makedev(major, 128)).unwrap();
    nix::unistd::chown(&p, Some(0.into()), Some(gid.into())).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
}

/// The MI210 host: its KFD tree, the nodes root:render 0660, docker
/// registered, and a config that keeps NVML off this machine.
fn mi210(tag: &str) -> Option<PathBuf> {
    if !crate::support::have_root("the host root's device nodes are made with mknod") {
        return None;
    }
    let root = tempdir(tag);
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/amd/mi210"),
        &root,
    );
    put(&root, "usr/bin/gpu-guard", "#!/bin/sh\n", 0o755);
    std::os::unix::fs::symlink("gpu-guard", root.join("usr/bin/gpu-guard-runtime")).unwrap();
    put(&root, "usr/bin/runc", "#!/bin/sh\n", 0o755);
    put(&root, "etc/docker/daemon.json", "{}\n", 0o644);
    put(&root, "proc/devices", PROC_DEVICES, 0o444);
    put(
        &root,
        "etc/group",
        "root:x:0:\nvideo:x:44:\ndisk:x:6:\nrender:x:109:\n",
        0o644,
    );
    char_node(&root, "dev/kfd", KFD_MAJOR, 109, 0o660);
    char_node(&root, "dev/dri/renderD128", 226, 109, 0o660);
    put(
        &root,
        "etc/gpu-guard/config.toml",
        "[host]\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\ncache_file = \"\"\n[kernel_image]\ncache_dir = \"\"\n[log]\nsyslog = false\n",
        0o644,
    );
    let o = bin()
        .args(["install", "docker", "--bin-dir", "/usr/bin", "--host-root"])
        .arg(&root)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(root)
}

fn find<'a>(v: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
}

#[test]
fn a_healthy_amd_node() {
    let Some(root) = mi210("doctor-amd-ok") else {
        return;
    };
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    expect(&v, "host.amd.driver", "ok", &["amdgpu driver 6.12.12"]);
    expect(
        &v,
        "host.amd.gpus",
        "ok",
        &["1 AMD GPU", "AMD Instinct MI210", "gfx90a:sramecc+:xnack-"],
    );
    expect(
        &v,
        "host.amd.device-nodes",
        "ok",
        &["/dev/kfd, /dev/dri/renderD128", "render or video"],
    );
    // No NVIDIA driver is no problem where the GPUs are AMD's.
    expect(&v, "host.nvidia", "ok", &["AMD's"]);
    assert!(find(&v, "host.driver").is_none(), "{v:#}");
    assert!(find(&v, "host.nvml").is_none(), "{v:#}");
    // Group video is as good as render; everyone-may-open too.
    char_node(&root, "dev/dri/renderD128", 226, 44, 0o660);
    char_node(&root, "dev/kfd", KFD_MAJOR, 0, 0o666);
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    expect(&v, "host.amd.device-nodes", "ok", &[]);
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn each_amd_fault_is_named_with_its_fix() {
    let Some(root) = mi210("doctor-amd-faults") else {
        return;
    };
    // A kfd node of DRM's major, not amdkfd's.
    char_node(&root, "dev/kfd", 226, 109, 0o660);
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(
        &v,
        "host.amd.device-nodes",
        "error",
        &["/dev/kfd is character device 226:128", "major 510"],
    );
    // amdkfd not registered at all.
    char_node(&root, "dev/kfd", KFD_MAJOR, 109, 0o660);
    put(
        &root,
        "proc/devices",
        "Character devices:\n  1 mem\n226 drm\n",
        0o444,
    );
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(
        &v,
        "host.amd.device-nodes",
        "error",
        &["amdkfd driver is not loaded"],
    );
    put(&root, "proc/devices", PROC_DEVICES, 0o444);
    // The GPU's render node missing, then a directory in its place.
    fs::remove_file(root.join("dev/dri/renderD128")).unwrap();
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(
        &v,
        "host.amd.device-nodes",
        "error",
        &["/dev/dri/renderD128 is missing"],
    );
    fs::create_dir(root.join("dev/dri/renderD128")).unwrap();
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(&v, "host.amd.device-nodes", "error", &["is a directory"]);
    fs::remove_dir(root.join("dev/dri/renderD128")).unwrap();
    // A group containers are not given: a warning, exit 0.
    char_node(&root, "dev/dri/renderD128", 226, 6, 0o660);
    let (code, v) = doctor(&root);
    assert_eq!(code, 0, "{v:#}");
    expect(
        &v,
        "host.amd.device-nodes",
        "warning",
        &["crw-rw----", "group disk (6)", "neither render nor video"],
    );
    char_node(&root, "dev/dri/renderD128", 226, 109, 0o660);
    // No amdgpu module.
    fs::remove_dir_all(root.join("sys/module/amdgpu")).unwrap();
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(&v, "host.amd.driver", "error", &["amdgpu kernel module"]);
    // /dev/kfd, but KFD lists no GPU.
    fs::remove_dir_all(root.join("sys/class/kfd")).unwrap();
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    expect(&v, "host.amd.gpus", "error", &["KFD lists no GPU"]);
    // Neither AMD GPUs nor /dev/kfd: no AMD check, and the NVIDIA checks
    // say there is no driver.
    fs::remove_file(root.join("dev/kfd")).unwrap();
    let (code, v) = doctor(&root);
    assert_eq!(code, 1, "{v:#}");
    let names: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("host.amd")),
        "{names:?}"
    );
    assert!(find(&v, "host.nvidia").is_none(), "{v:#}");
    expect(&v, "host.driver", "error", &["no NVIDIA driver"]);
    fs::remove_dir_all(root).unwrap();
}
