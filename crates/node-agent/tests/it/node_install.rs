//! packaging/kubernetes/node-install.sh, the init container's script, run
//! as the DaemonSet runs it (HOST_ROOT, ENGINE, RESTART_RUNTIME) against
//! host roots: it runs the copied binary in the host's root (chroot)
//! before it registers anything, and refuses one that cannot run there.

use crate::support::{have_root, have_tool, TempDir};
use crate::{gpu_guard_bin, runnable_root};
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

const CONTAINERD: &str = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n";

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/kubernetes/node-install.sh")
}

/// Runs the script with the image's binary being `image_bin`, the
/// `gpu-guard` on PATH this build's (as in the image).
fn node_install(root: &Path, image_bin: &Path) -> (Output, String) {
    let gg = gpu_guard_bin().unwrap();
    let path_dir = root.parent().unwrap().join(format!(
        "{}-path",
        root.file_name().unwrap().to_string_lossy()
    ));
    fs::create_dir_all(&path_dir).unwrap();
    let _ = fs::remove_file(path_dir.join("gpu-guard"));
    std::os::unix::fs::symlink(&gg, path_dir.join("gpu-guard")).unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/config.toml");
    let out = Command::new("sh")
        .arg(script())
        .env("HOST_ROOT", root)
        .env("ENGINE", "containerd")
        .env("RESTART_RUNTIME", "false")
        .env("IMAGE_BIN", image_bin)
        .env("IMAGE_CONFIG", config)
        .env(
            "PATH",
            format!("{}:{}", path_dir.display(), std::env::var("PATH").unwrap()),
        )
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    let _ = fs::remove_dir_all(&path_dir);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

fn host_with_containerd(root: &Path) {
    fs::create_dir_all(root.join("etc/containerd")).unwrap();
    fs::write(root.join("etc/containerd/config.toml"), CONTAINERD).unwrap();
}

#[test]
fn a_binary_that_cannot_run_on_the_host_is_never_registered() {
    if !have_root("chroot into a host root") {
        return;
    }
    let Some(gg) = gpu_guard_bin() else { return };
    // A host root without the loader the binary needs: exec fails there,
    // as it does on a host whose glibc is older than the binary's.
    let root = TempDir::new("ni-cannot-run");
    host_with_containerd(root.path());
    let (out, text) = node_install(root.path(), &gg);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("cannot run on this host"), "{text}");
    assert!(
        text.contains("nothing was registered with containerd"),
        "{text}"
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/containerd/config.toml")).unwrap(),
        CONTAINERD,
        "the engine's configuration is unchanged"
    );
    assert!(!root.join("opt/gpu-guard/bin/gpu-guard").exists(), "{text}");
    assert!(
        !root.join("opt/gpu-guard/bin/gpu-guard.new").exists(),
        "{text}"
    );
    assert!(!root.join("var/lib/gpu-guard/engines").exists(), "{text}");

    // A binary for another machine (an aarch64 ELF header) is refused too,
    // and an earlier, working binary on the host stays in place.
    let Some(ok_root) = runnable_root("ni-other-arch") else {
        return;
    };
    host_with_containerd(ok_root.path());
    let foreign = ok_root.path().parent().unwrap().join("gg-foreign-elf");
    let mut elf = fs::read(&gg).unwrap();
    elf[18] = 0xb7; // e_machine = EM_AARCH64
    elf[19] = 0x00;
    fs::write(&foreign, &elf).unwrap();
    let before = fs::read(ok_root.join("opt/gpu-guard/bin/gpu-guard")).unwrap();
    let (out, text) = node_install(ok_root.path(), &foreign);
    let _ = fs::remove_file(&foreign);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("cannot run on this host"), "{text}");
    assert_eq!(
        fs::read(ok_root.join("opt/gpu-guard/bin/gpu-guard")).unwrap(),
        before,
        "the working binary is not replaced"
    );
    assert_eq!(
        fs::read_to_string(ok_root.join("etc/containerd/config.toml")).unwrap(),
        CONTAINERD
    );
}

#[test]
fn a_binary_that_runs_is_checked_then_registered() {
    if !have_tool("ldd") {
        return;
    }
    let Some(root) = runnable_root("ni-runs") else {
        return;
    };
    let gg = gpu_guard_bin().unwrap();
    // The host has the loader and libraries, and an older binary.
    fs::write(root.join("opt/gpu-guard/bin/gpu-guard"), b"old").unwrap();
    host_with_containerd(root.path());
    let (out, text) = node_install(root.path(), &gg);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("gpu-guard: on this host: gpu-guard"),
        "{text}"
    );
    assert!(
        text.contains("installed /opt/gpu-guard/bin/gpu-guard"),
        "{text}"
    );
    assert_eq!(
        fs::read(root.join("opt/gpu-guard/bin/gpu-guard")).unwrap(),
        fs::read(&gg).unwrap()
    );
    assert!(text.contains("gpu-guard: doctor: "), "doctor ran: {text}");
    let cfg = fs::read_to_string(root.join("etc/containerd/config.toml")).unwrap();
    assert!(
        cfg.contains("BinaryName = \"/opt/gpu-guard/bin/gpu-guard-runtime\""),
        "{cfg}"
    );
    assert!(
        text.contains("restart containerd on this node to apply"),
        "{text}"
    );
    // An invalid host config would refuse every GPU container: refused.
    let root2 = runnable_root("ni-bad-config").unwrap();
    host_with_containerd(root2.path());
    fs::create_dir_all(root2.join("etc/gpu-guard")).unwrap();
    fs::write(
        root2.join("etc/gpu-guard/config.toml"),
        "mode = \"sometimes\"\n",
    )
    .unwrap();
    let (out, text) = node_install(root2.path(), &gg);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("the host's gpu-guard config is invalid"),
        "{text}"
    );
    assert_eq!(
        fs::read_to_string(root2.join("etc/containerd/config.toml")).unwrap(),
        CONTAINERD
    );
}
