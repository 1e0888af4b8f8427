//! The device nodes a GPU container will use, judged (no I/O; the host
//! side, crate::host::devnodes, reads them): the checks are every
//! vendor's ([`judge`]), the wording and the faults each vendor's
//! ([`Vendor`]; AMD's `/dev/kfd` and render nodes in core::amd::nodes).
//! NVIDIA's: `/dev/nvidiactl`,
//! `/dev/nvidia-uvm` (CUDA needs it) and `/dev/nvidiaN` of each GPU the
//! container gets. NVIDIA's stack gives a container the host's nodes:
//! libnvidia-container bind-mounts them (nvc_mount.c `mount_device`) and a
//! CDI spec's deviceNodes take the host node's type, major, minor and
//! permissions where the spec leaves them out (container-device-interface
//! pkg/cdi/container-edits.go `fillMissingInfo`). So what the host has is
//! what CUDA opens, and each of these fails it with "no CUDA-capable device
//! is detected" (cudaErrorNoDevice):
//!
//! - a node that is missing: a warning, since NVIDIA's legacy hook creates
//!   missing nodes itself (nvidia-container-cli `--load-kmods` runs
//!   nvidia-modprobe) while a CDI spec that lists it fails the start (the
//!   CDI check, core::cdi, says so);
//! - a node that is not a character device (a directory left by
//!   `docker run -v /dev/nvidia0:/dev/nvidia0` before the node existed, a
//!   regular file), or one whose major is not the driver's (`195` or
//!   /proc/devices' `nvidia`/`nvidia-frontend`; /proc/devices' `nvidia-uvm`
//!   for nvidia-uvm, a dynamic major): an error;
//! - a node the container's user cannot open for reading and writing
//!   (CUDA opens them O_RDWR): the owner, group and other bits checked as
//!   the kernel checks them (fs/namei.c `acl_permission_check`), the
//!   container's uid, gid and additional gids against the node's owner and
//!   group; root with CAP_DAC_OVERRIDE in its effective set passes. An
//!   error. Not judged for a container in a user namespace (its ids map
//!   to others on the host) or whose user is unknown (`check --env`).

use crate::core::decision::{Check, Finding};

/// NVIDIA's registered character major (nv.c NV_MAJOR_DEVICE_NUMBER),
/// for `/dev/nvidiactl` (minor 255) and `/dev/nvidiaN` (minor N).
pub const NVIDIA_MAJOR: u32 = 195;

/// What the host has at one device path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Missing,
    /// Something that is not a character device: "a directory", ...
    NotChar(&'static str),
    Char {
        major: u32,
        minor: u32,
        /// Permission bits (`st_mode & 0o7777`).
        mode: u32,
        uid: u32,
        gid: u32,
        /// The group's name on the host, when /etc/group has it.
        group: Option<String>,
    },
    /// stat(2) failed otherwise (permission denied on /dev, ...).
    Unreadable(String),
}

/// One node: its host path (`/dev/nvidia0`), what is there, and the major
/// the driver registered for it (None: the driver's entry is missing from
/// /proc/devices, or /proc/devices could not be read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub path: String,
    pub kind: NodeKind,
    pub expected_major: Option<u32>,
    /// Whether /proc/devices was read: then a node whose major is not
    /// registered there has no driver behind it.
    pub registry_read: bool,
}

/// The container's user, as runc sets it (`process.user`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
    /// CAP_DAC_OVERRIDE in the effective set: root opens any node.
    pub dac_override: bool,
}

/// `ls -l`'s spelling of a character device's permission bits.
pub fn mode_text(mode: u32) -> String {
    let mut s = String::from("c");
    for shift in [6u32, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// Whether `user` may open a node with `mode`, owner `uid`, group `gid`
/// for reading and writing.
pub fn can_open(user: &User, mode: u32, uid: u32, gid: u32) -> bool {
    if user.uid == 0 && user.dac_override {
        return true;
    }
    let bits = if user.uid == uid {
        mode >> 6
    } else if user.gid == gid || user.additional_gids.contains(&gid) {
        mode >> 3
    } else {
        mode
    };
    bits & 6 == 6
}

fn owner_text(uid: u32, gid: u32, group: &Option<String>) -> String {
    match group {
        Some(g) => format!("uid {uid}, group {g} ({gid})"),
        None => format!("uid {uid}, gid {gid}"),
    }
}

/// The fault of one node whatever the user: (severity is error, message,
/// fix), or None when it is a character device of the driver's major.
fn node_fault(n: &Node) -> Option<(bool, String, String)> {
    let recreate = "reload the driver or recreate the nodes: `nvidia-modprobe -u -c 0` (or run `nvidia-smi` once as root); enable nvidia-persistenced so they exist after boot";
    match &n.kind {
        NodeKind::Missing => Some((
            false,
            format!("{} is missing on this host; CUDA in the container will report \"no CUDA-capable device is detected\" unless NVIDIA's hook creates it", n.path),
            format!("create it: {recreate}"),
        )),
        NodeKind::NotChar(what) => Some((
            true,
            format!("{} is {what}, not a character device: CUDA in the container will report \"no CUDA-capable device is detected\"", n.path),
            format!("remove it (`docker run -v {p}:{p}` before the node existed leaves a directory) and {recreate}", p = n.path),
        )),
        NodeKind::Unreadable(e) => Some((
            false,
            format!("{} cannot be examined: {e}", n.path),
            "run gpu-guard as root (OCI hooks and runtimes run as root)".to_string(),
        )),
        NodeKind::Char { major, minor, .. } => match n.expected_major {
            Some(want) if want != *major => Some((
                true,
                format!("{} is character device {major}:{minor}, not the NVIDIA driver's major {want}: CUDA in the container will report \"no CUDA-capable device is detected\"", n.path),
                format!("remove it and {recreate}"),
            )),
            None if n.registry_read => Some((
                true,
                format!("{} is character device {major}:{minor}, but no driver has registered that device (/proc/devices lists none for it): its kernel module is not loaded", n.path),
                "load the module (`modprobe nvidia-uvm` for /dev/nvidia-uvm, `modprobe nvidia` otherwise), or run `nvidia-modprobe -u -c 0`".to_string(),
            )),
            _ => None,
        },
    }
}

/// How one vendor's nodes are judged and worded: the checks are the same
/// for every vendor's nodes (a character device of the driver's major
/// that the container's user can open for reading and writing), what a
/// fault means and how it is fixed are the vendor's.
pub struct Vendor {
    /// The fault of one node whatever the user: (is an error, message,
    /// fix), None when it is a character device of its driver's major.
    pub fault: fn(&Node) -> Option<(bool, String, String)>,
    /// What the GPU runtime in the container reports without the node.
    pub fails: &'static str,
    /// How the nodes are made open to every user.
    pub open_to_all: &'static str,
}

/// NVIDIA's nodes.
pub const NVIDIA: Vendor = Vendor {
    fault: node_fault,
    fails: "CUDA will report \"no CUDA-capable device is detected\"",
    open_to_all: "the driver's NVreg_DeviceFileMode=0666, or nvidia-modprobe's defaults",
};

/// The `host` findings for a container whose user is `user` (None: not
/// judged for access) and that uses NVIDIA's `nodes`.
pub fn findings(nodes: &[Node], user: Option<&User>) -> Vec<Finding> {
    judge(nodes, user, &NVIDIA)
}

/// The `host` findings for a container whose user is `user` (None: not
/// judged for access) and that uses `vendor`'s `nodes`.
pub fn judge(nodes: &[Node], user: Option<&User>, vendor: &Vendor) -> Vec<Finding> {
    let mut out = Vec::new();
    for n in nodes {
        if let Some((error, message, fix)) = (vendor.fault)(n) {
            let f = if error {
                Finding::error(Check::Host, message)
            } else {
                Finding::warning(Check::Host, message)
            };
            out.push(f.with_fix(fix));
            continue;
        }
        if let Some(f) = access_finding(n, user, vendor) {
            out.push(f);
        }
    }
    out
}

/// The finding of a character device `user` cannot open, if it cannot.
fn access_finding(n: &Node, user: Option<&User>, vendor: &Vendor) -> Option<Finding> {
    let (
        NodeKind::Char {
            mode,
            uid,
            gid,
            group,
            ..
        },
        Some(u),
    ) = (&n.kind, user)
    else {
        return None;
    };
    if can_open(u, *mode, *uid, *gid) {
        return None;
    }
    let who = match &group {
        Some(g) => format!("add group {g} ({gid})"),
        None => format!("add gid {gid}"),
    };
    let extra = if u.additional_gids.is_empty() {
        String::new()
    } else {
        let gids: Vec<String> = u.additional_gids.iter().map(u32::to_string).collect();
        format!(" (additional gids {})", gids.join(","))
    };
    Some(
        Finding::error(
            Check::Host,
            format!(
                "{} is {} ({}) and the container runs as uid {} gid {}{extra}: it cannot open it, and {}",
                n.path,
                mode_text(*mode),
                owner_text(*uid, *gid, group),
                u.uid,
                u.gid,
                vendor.fails
            ),
        )
        .with_fix(format!(
            "{who} to the container (`docker run --group-add {gid}`, a pod's securityContext.supplementalGroups), or make the nodes accessible to all ({})",
            vendor.open_to_all
        )),
    )
}

/// The host's node problems for `gpu-guard host` and `doctor`, one line
/// each: (is an error, message, fix). Restrictive permissions are said as
/// a warning: only some containers' users can use such nodes.
pub fn host_problems(nodes: &[Node]) -> Vec<(bool, String, String)> {
    let mut out = Vec::new();
    for n in nodes {
        if let Some(p) = node_fault(n) {
            out.push(p);
            continue;
        }
        if let NodeKind::Char {
            mode,
            uid,
            gid,
            group,
            ..
        } = &n.kind
        {
            if mode & 0o6 != 0o6 {
                out.push((
                    false,
                    format!(
                        "{} is {} ({}): only its owner and group can use it; containers running as another user get \"no CUDA-capable device is detected\"",
                        n.path,
                        mode_text(*mode),
                        owner_text(*uid, *gid, group)
                    ),
                    "give GPU containers that group (docker --group-add, a pod's supplementalGroups), or set the driver's NVreg_DeviceFileMode=0666".to_string(),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::decision::Severity;

    fn char_node(path: &str, major: u32, mode: u32, gid: u32) -> Node {
        Node {
            path: path.into(),
            kind: NodeKind::Char {
                major,
                minor: 0,
                mode,
                uid: 0,
                gid,
                group: Some("video".into()),
            },
            expected_major: Some(NVIDIA_MAJOR),
            registry_read: true,
        }
    }

    #[test]
    fn access_as_the_kernel_checks_it() {
        let user = |uid, gid, extra: &[u32]| User {
            uid,
            gid,
            additional_gids: extra.to_vec(),
            dac_override: false,
        };
        assert!(can_open(&user(1000, 1000, &[]), 0o666, 0, 44));
        assert!(!can_open(&user(1000, 1000, &[]), 0o660, 0, 44));
        assert!(can_open(&user(1000, 1000, &[44]), 0o660, 0, 44));
        assert!(can_open(&user(1000, 44, &[]), 0o660, 0, 44));
        // The owner's bits decide for the owner, even when others may.
        assert!(!can_open(&user(5, 5, &[]), 0o066, 5, 44));
        assert!(can_open(&user(0, 0, &[]), 0o600, 0, 0));
        assert!(!can_open(&user(0, 0, &[]), 0o000, 7, 7));
        let root = User {
            dac_override: true,
            ..user(0, 0, &[])
        };
        assert!(can_open(&root, 0o000, 7, 7));
    }

    #[test]
    fn each_fault_is_named() {
        let nodes = vec![
            Node {
                path: "/dev/nvidia-uvm".into(),
                kind: NodeKind::Missing,
                expected_major: Some(508),
                registry_read: true,
            },
            Node {
                path: "/dev/nvidia0".into(),
                kind: NodeKind::NotChar("a directory"),
                expected_major: Some(NVIDIA_MAJOR),
                registry_read: true,
            },
            char_node("/dev/nvidia1", 10, 0o666, 0),
            char_node("/dev/nvidiactl", NVIDIA_MAJOR, 0o660, 44),
        ];
        let u = User {
            uid: 1000,
            gid: 1000,
            additional_gids: vec![],
            dac_override: false,
        };
        let f = findings(&nodes, Some(&u));
        assert_eq!(f.len(), 4, "{f:?}");
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(f[1].message.contains("is a directory"), "{}", f[1].message);
        assert_eq!(f[1].severity, Severity::Error);
        assert!(f[2].message.contains("not the NVIDIA driver's major 195"));
        assert!(
            f[3].message
                .contains("crw-rw---- (uid 0, group video (44))"),
            "{}",
            f[3].message
        );
        assert!(f[3].fix.as_deref().unwrap().contains("--group-add 44"));
        assert!(f.iter().all(|x| x.check == Check::Host));
        // Without a user, access is not judged.
        assert_eq!(findings(&nodes, None).len(), 3);
        let p = host_problems(&nodes);
        assert_eq!(p.len(), 4);
        assert!(!p[3].0 && p[3].1.contains("only its owner and group"));
        // A node whose major no driver registered.
        let mut stale = char_node("/dev/nvidia-uvm", 508, 0o666, 0);
        stale.expected_major = None;
        let f = findings(&[stale], Some(&u));
        assert!(f[0].message.contains("not loaded"), "{f:?}");
    }
}
