//! Reads the NVIDIA device nodes and AMD's (`/dev/kfd`, render nodes)
//! (stat(2), following a symlink as the bind mount and CDI's
//! `fillMissingInfo` do) and the majors the drivers registered
//! (/proc/devices) for core::device_nodes and core::amd::nodes to judge.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::core::device_nodes::{Node, NodeKind, NVIDIA_MAJOR};
use crate::core::device_table::DRM_MAJOR;
use crate::core::facts::Gpu;

/// /etc/group is read for group names only, at most this much.
const MAX_GROUP_FILE: u64 = 1 << 20;

/// The node names (under /dev) a container given `gpus` uses: the control
/// node, nvidia-uvm and each GPU's `nvidiaN` (by its minor number; a GPU
/// whose minor is unknown names none).
pub fn nvidia_names<'a>(gpus: impl IntoIterator<Item = &'a Gpu>) -> Vec<String> {
    let mut names = vec!["nvidiactl".to_string(), "nvidia-uvm".to_string()];
    let mut minors: Vec<u32> = gpus.into_iter().filter_map(|g| g.minor_number).collect();
    minors.sort_unstable();
    minors.dedup();
    names.extend(minors.into_iter().map(|m| format!("nvidia{m}")));
    names
}

/// The character majors /proc/devices lists, by name; None when it could
/// not be read.
fn char_majors(devices: Option<&Path>) -> Option<Vec<(String, u32)>> {
    crate::host::kernel::char_majors(devices).ok()
}

/// The major the driver registered for node `name`: nvidia-uvm's own
/// (dynamic), else the NVIDIA driver's (`nvidia-frontend` in the
/// proprietary module, `nvidia` in others; 195 when /proc/devices could
/// not be read).
fn expected_major(name: &str, majors: Option<&[(String, u32)]>) -> Option<u32> {
    let find = |want: &[&str]| {
        majors?
            .iter()
            .find(|(n, _)| want.contains(&n.as_str()))
            .map(|(_, m)| *m)
    };
    if name == "nvidia-uvm" {
        return find(&["nvidia-uvm"]);
    }
    match majors {
        Some(_) => find(&["nvidia-frontend", "nvidia"]),
        None => Some(NVIDIA_MAJOR),
    }
}

/// The name of group `gid` in an /etc/group file.
fn group_name(group_file: &Path, gid: u32) -> Option<String> {
    let text = crate::sys::fsutil::read_to_string_limited(group_file, MAX_GROUP_FILE).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let id = f.nth(1)?;
        (id.trim().parse::<u32>().ok()? == gid && !name.is_empty()).then(|| name.to_string())
    })
}

fn kind_of(path: &Path, group_file: &Path) -> NodeKind {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return NodeKind::Missing,
        Err(e) => return NodeKind::Unreadable(e.to_string()),
    };
    let ft = meta.file_type();
    if !ft.is_char_device() {
        return NodeKind::NotChar(if ft.is_dir() {
            "a directory"
        } else if ft.is_file() {
            "a regular file"
        } else if ft.is_block_device() {
            "a block device"
        } else {
            "not a device"
        });
    }
    let rdev = meta.rdev();
    let mode = meta.mode() & 0o7777;
    let gid = meta.gid();
    NodeKind::Char {
        major: nix::sys::stat::major(rdev) as u32,
        minor: nix::sys::stat::minor(rdev) as u32,
        mode,
        uid: meta.uid(),
        gid,
        // Named only where it helps: a node not everyone can open.
        group: (mode & 0o6 != 0o6)
            .then(|| group_name(group_file, gid))
            .flatten(),
    }
}

/// Reads each node `names` under `dev`; `devices` is /proc/devices'
/// stand-in (None: the kernel's), `group_file` /etc/group's.
pub fn read(dev: &Path, devices: Option<&Path>, names: &[String], group_file: &Path) -> Vec<Node> {
    let majors = char_majors(devices);
    names
        .iter()
        .map(|name| {
            let path = dev.join(name);
            Node {
                path: path.display().to_string(),
                kind: kind_of(&path, group_file),
                expected_major: expected_major(name, majors.as_deref()),
                registry_read: majors.is_some(),
            }
        })
        .collect()
}

/// Reads AMD's nodes under `dev`: `kfd` and each `dri/renderD<minor>`
/// in `render_nodes` (host paths such as `/dev/dri/renderD128`; others are
/// ignored). kfd's major is the one /proc/devices lists for `kfd` (amdkfd
/// registers it dynamically), the render nodes' DRM's 226.
pub fn read_amd(
    dev: &Path,
    devices: Option<&Path>,
    render_nodes: &[String],
    group_file: &Path,
) -> Vec<Node> {
    let majors = char_majors(devices);
    let kfd = majors
        .as_deref()
        .and_then(|m| m.iter().find(|(n, _)| n == "kfd").map(|(_, m)| *m));
    let mut names: Vec<(String, Option<u32>)> = vec![("kfd".into(), kfd)];
    let mut renders: Vec<&str> = render_nodes
        .iter()
        .filter_map(|r| r.strip_prefix("/dev/"))
        .filter(|r| {
            r.strip_prefix("dri/renderD")
                .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    renders.sort_unstable();
    renders.dedup();
    names.extend(
        renders
            .into_iter()
            .map(|r| (r.to_string(), Some(DRM_MAJOR))),
    );
    names
        .into_iter()
        .map(|(name, expected_major)| {
            let path = dev.join(&name);
            Node {
                path: format!("/dev/{name}"),
                kind: kind_of(&path, group_file),
                expected_major,
                registry_read: majors.is_some(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors_by_name() {
        let m = vec![
            ("nvidia-frontend".to_string(), 195),
            ("nvidia-uvm".to_string(), 508),
        ];
        assert_eq!(expected_major("nvidiactl", Some(&m)), Some(195));
        assert_eq!(expected_major("nvidia-uvm", Some(&m)), Some(508));
        assert_eq!(expected_major("nvidia-uvm", Some(&[])), None);
        assert_eq!(expected_major("nvidia0", None), Some(195));
        assert_eq!(expected_major("nvidia-uvm", None), None);
    }

    #[test]
    fn reads_kinds_and_groups() {
        let d = std::env::temp_dir().join(format!("gg-devnodes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("nvidia0")).unwrap();
        std::fs::write(d.join("nvidiactl"), b"").unwrap();
        std::os::unix::fs::symlink("/dev/null", d.join("nvidia-uvm")).unwrap();
        std::fs::write(d.join("group"), "root:x:0:\nvideo:x:44:alice\n").unwrap();
        let names = nvidia_names(&[Gpu {
            minor_number: Some(0),
            ..Gpu::default()
        }]);
        assert_eq!(names, ["nvidiactl", "nvidia-uvm", "nvidia0"]);
        let nodes = read(&d, Some(&d.join("none")), &names, &d.join("group"));
        assert_eq!(nodes[0].kind, NodeKind::NotChar("a regular file"));
        assert!(matches!(
            nodes[1].kind,
            NodeKind::Char {
                major: 1,
                minor: 3,
                ..
            }
        ));
        assert_eq!(nodes[2].kind, NodeKind::NotChar("a directory"));
        assert!(!nodes[0].registry_read);
        assert_eq!(group_name(&d.join("group"), 44).as_deref(), Some("video"));
        assert_eq!(group_name(&d.join("group"), 7), None);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
