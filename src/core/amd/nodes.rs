//! AMD's device nodes on a host, judged (no I/O; crate::host::devnodes
//! reads them): `/dev/kfd`, the compute interface every ROCm process opens
//! first (ROCR-Runtime libhsakmt `hsaKmtOpenKFD` opens `/dev/kfd` O_RDWR,
//! and fails with HSA_STATUS_ERROR_OUT_OF_RESOURCES / "No ROCm-capable
//! device is detected" without it), and each GPU's DRM render node
//! `/dev/dri/renderD<drm_render_minor>` (libhsakmt opens it for the GPU's
//! memory; a GPU without one is skipped by the runtime).
//!
//! - `/dev/kfd` is the character device amdkfd registers with a dynamic
//!   major under the name `kfd` (linux drivers/gpu/drm/amd/amdkfd/
//!   kfd_chardev.c, `register_chrdev(0, "kfd", ...)`), so its major is the
//!   one /proc/devices lists for `kfd`; the render nodes are DRM's, major
//!   226 (include/uapi/drm/drm.h `DRM_MAJOR`).
//! - Access: distributions give the nodes to group `render` (older ones
//!   `video`), and ROCm's install prerequisites have users join both
//!   ("Configuring permissions for GPU access": `usermod -a -G render,video`);
//!   AMD's container instructions give a container the same groups
//!   (`docker run --device=/dev/kfd --device=/dev/dri --group-add video
//!   --group-add render`, ROCm docs "Running ROCm Docker containers"). So
//!   a node everyone may open, or that group `render` or `video` may open,
//!   is as expected; one only its owner (or another group) can open is a
//!   warning: only containers running as root, or given that group, can
//!   use the GPU.

use crate::core::decision::Finding;
use crate::core::device_nodes::{judge, mode_text, Node, NodeKind, User, Vendor};

/// The groups AMD's instructions give a container for its GPU nodes.
pub const GPU_GROUPS: [&str; 2] = ["render", "video"];

/// The fix for nodes that are missing or wrong: the driver makes them.
const RELOAD: &str = "load the amdgpu driver (`modprobe amdgpu`; with AMD's DKMS driver, `amdgpu-install --usecase=dkms`), then check `dmesg | grep -i -e amdgpu -e kfd`; udev recreates the nodes";

/// Which driver the node belongs to, for messages.
fn owner_driver(path: &str) -> &'static str {
    if path.ends_with("/kfd") {
        "amdkfd's (`kfd` in /proc/devices)"
    } else {
        "DRM's"
    }
}

/// The fault of one node whatever the container's user: (is an error,
/// message, fix), or None when it is a character device of its driver's
/// major.
fn node_fault(n: &Node) -> Option<(bool, String, String)> {
    let dies =
        "ROCm in a container given it fails (\"No HIP GPUs are available\", hipErrorNoDevice)";
    match &n.kind {
        NodeKind::Missing => Some((
            true,
            format!("{} is missing on this host: {dies}", n.path),
            RELOAD.to_string(),
        )),
        NodeKind::NotChar(what) => Some((
            true,
            format!("{} is {what}, not a character device: {dies}", n.path),
            format!(
                "remove it (`docker run -v {p}:{p}` before the node existed leaves a directory) and {RELOAD}",
                p = n.path
            ),
        )),
        NodeKind::Unreadable(e) => Some((
            false,
            format!("{} cannot be examined: {e}", n.path),
            "run gpu-guard as root (OCI hooks and runtimes run as root)".to_string(),
        )),
        NodeKind::Char { major, minor, .. } => match n.expected_major {
            Some(want) if want != *major => Some((
                true,
                format!(
                    "{} is character device {major}:{minor}, not {} major {want}: {dies}",
                    n.path,
                    owner_driver(&n.path)
                ),
                format!("remove it and {RELOAD}"),
            )),
            None if n.registry_read => Some((
                true,
                format!(
                    "{} is character device {major}:{minor}, but /proc/devices lists no `kfd`: the amdkfd driver is not loaded ({dies})",
                    n.path
                ),
                RELOAD.to_string(),
            )),
            _ => None,
        },
    }
}

/// Whether a node's permissions let containers use it the way AMD's
/// instructions run them: everyone may open it, or its group (`render`,
/// `video`) may and that group is one of [`GPU_GROUPS`].
fn access_problem(n: &Node) -> Option<String> {
    let NodeKind::Char {
        mode,
        uid,
        gid,
        group,
        ..
    } = &n.kind
    else {
        return None;
    };
    if mode & 0o6 == 0o6 {
        return None;
    }
    let group_rw = mode & 0o60 == 0o60;
    let named = group.as_deref();
    if group_rw && named.is_some_and(|g| GPU_GROUPS.contains(&g)) {
        return None;
    }
    let who = match named {
        Some(g) => format!("uid {uid}, group {g} ({gid})"),
        None => format!("uid {uid}, gid {gid}"),
    };
    let why = if group_rw {
        "its group is neither render nor video, the groups AMD's instructions give a container (`--group-add render --group-add video`)"
    } else {
        "only its owner can open it"
    };
    Some(format!(
        "{} is {} ({who}): {why}; containers not running as root cannot use the GPU",
        n.path,
        mode_text(*mode)
    ))
}

/// AMD's nodes as a container's start judges them (core::device_nodes):
/// this module's faults, and ROCm's words for a node it cannot open.
pub const AMD: Vendor = Vendor {
    fault: node_fault,
    fails: "ROCm in it finds no GPU (\"No HIP GPUs are available\", hipErrorNoDevice)",
    open_to_all: "a udev rule such as `KERNEL==\"kfd\", MODE=\"0666\"` and `SUBSYSTEM==\"drm\", KERNEL==\"renderD*\", MODE=\"0666\"`; AMD's instructions give containers group render instead",
};

/// The `host` findings for a container whose user is `user` (None: not
/// judged for access) and that uses AMD's `nodes` (`/dev/kfd`, its GPUs'
/// render nodes): missing, not a character device of amdkfd's or DRM's
/// major, or not open to its user.
pub fn findings(nodes: &[Node], user: Option<&User>) -> Vec<Finding> {
    judge(nodes, user, &AMD)
}

/// The host's AMD node problems for `doctor`, one line each: (is an
/// error, message, fix).
pub fn host_problems(nodes: &[Node]) -> Vec<(bool, String, String)> {
    let mut out = Vec::new();
    for n in nodes {
        if let Some(p) = node_fault(n) {
            out.push(p);
        } else if let Some(m) = access_problem(n) {
            out.push((
                false,
                m,
                "give the node to group render with mode 0660 (a udev rule such as `KERNEL==\"kfd\", GROUP=\"render\", MODE=\"0660\"`) and run GPU containers with `--group-add render --group-add video`".to_string(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(path: &str, major: u32, mode: u32, group: Option<&str>, want: Option<u32>) -> Node {
        Node {
            path: path.into(),
            kind: NodeKind::Char {
                major,
                minor: 0,
                mode,
                uid: 0,
                gid: 109,
                group: group.map(str::to_string),
            },
            expected_major: want,
            registry_read: true,
        }
    }

    #[test]
    fn faults_and_access() {
        let ok = [
            node("/dev/kfd", 509, 0o660, Some("render"), Some(509)),
            node("/dev/dri/renderD128", 226, 0o660, Some("video"), Some(226)),
            node("/dev/dri/renderD129", 226, 0o666, None, Some(226)),
        ];
        assert!(host_problems(&ok).is_empty(), "{:?}", host_problems(&ok));
        let bad = [
            node("/dev/kfd", 226, 0o660, Some("render"), Some(509)),
            node("/dev/kfd", 509, 0o660, Some("render"), None),
            node("/dev/dri/renderD128", 226, 0o660, Some("disk"), Some(226)),
            node("/dev/dri/renderD128", 226, 0o600, Some("render"), Some(226)),
            Node {
                path: "/dev/dri/renderD130".into(),
                kind: NodeKind::NotChar("a directory"),
                expected_major: Some(226),
                registry_read: true,
            },
        ];
        let p = host_problems(&bad);
        assert_eq!(p.len(), 5, "{p:?}");
        assert!(p[0].0 && p[0].1.contains("not amdkfd's"), "{p:?}");
        assert!(p[0].1.contains("major 509"), "{p:?}");
        assert!(p[1].0 && p[1].1.contains("amdkfd driver is not loaded"));
        assert!(!p[2].0 && p[2].1.contains("neither render nor video"));
        assert!(p[2].1.contains("crw-rw----"), "{p:?}");
        assert!(!p[3].0 && p[3].1.contains("only its owner"));
        assert!(p[4].0 && p[4].1.contains("is a directory"));
        assert!(p[4].2.contains("modprobe amdgpu"));
    }

    #[test]
    fn start_findings_judge_the_container_user_as_nvidias_do() {
        let nodes = [
            node("/dev/kfd", 509, 0o660, Some("render"), Some(509)),
            Node {
                path: "/dev/dri/renderD136".into(),
                kind: NodeKind::Missing,
                expected_major: Some(226),
                registry_read: true,
            },
        ];
        let user = |extra: Vec<u32>| User {
            uid: 1000,
            gid: 1000,
            additional_gids: extra,
            dac_override: false,
        };
        let f = findings(&nodes, Some(&user(vec![])));
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].message.contains("ROCm in it finds no GPU"), "{f:?}");
        assert!(f[0].fix.as_deref().unwrap().contains("--group-add 109"));
        assert!(f[1].message.contains("renderD136 is missing"), "{f:?}");
        assert_eq!(findings(&nodes, Some(&user(vec![109]))).len(), 1);
        // Without a user (a user namespace), only the faults.
        assert_eq!(findings(&nodes, None).len(), 1);
    }
}
