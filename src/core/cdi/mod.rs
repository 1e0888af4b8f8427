//! CDI specs (the Container Device Interface, cncf-tags/container-device-interface
//! SPEC.md) and whether the CDI devices a container asks for can be set
//! up on this host.
//!
//! Since CDI became NVIDIA's default mode, a driver upgrade that leaves
//! `/etc/cdi/nvidia.yaml` (or `/var/run/cdi/...`) as it was leaves a spec
//! that mounts the previous driver's `libcuda.so.<old>`; the container then
//! fails at start with `no such file or directory`
//! (NVIDIA/nvidia-container-toolkit#856). This module resolves a
//! container's devices as CDI's registry does and judges their edits
//! against what the caller found on the host ([`HostPaths`]).
//!
//! Resolution follows pkg/cdi/cache.go `refresh`: specs are read directory
//! by directory in the configured order (the directory's index is its
//! priority) and by name within one; a device defined again in a later
//! directory replaces the earlier definition; one defined twice in the
//! same directory is a conflict, and CDI then drops it whatever other
//! directories say. A spec that cannot be parsed is skipped, as CDI skips
//! it. The edits of a device are its own `containerEdits` and the spec's
//! top-level ones (SPEC.md "OCI Edits").
//!
//! What a missing path means follows what the runtime does with it: a
//! mount's `hostPath` is bind-mounted (followed through symlinks), a
//! device node's `hostPath` (else `path`) is stat'ed without following a
//! link when the spec does not give its type and major number
//! (pkg/cdi/container-edits_unix.go `fillMissingInfo`, `deviceInfoFromPath`),
//! and a hook's `path` is executed.

use crate::core::sanitize::esc;
use serde::Deserialize;
use std::collections::BTreeSet;

mod judge;
mod nesting;
pub use judge::MAX_CHECKED;
pub use judge::{audit, judge};
pub use nesting::{may_nest_deeper, MAX_NESTING};

/// AMD's GPU kind: `amd-ctk cdi generate` writes one spec of it
/// (ROCm/container-toolkit internal/cdi/cdi.go: `/etc/cdi/amd.json` by
/// default), a device per GPU named by its number, and `all`. Each device
/// node it writes carries the host node's type, major and minor as they
/// were when it ran (internal/amdgpu `GetAMDGPU` stats the node), and the
/// CDI runtime creates the container's node from those numbers without
/// looking at the host (container-edits.go `fillMissingInfo` only fills
/// what is missing). So after amdkfd drew another dynamic major at boot,
/// or the render minors moved (a GPU added, removed or reordered), the
/// spec gives containers nodes that reach no GPU or another one: such a
/// spec is stale, as NVIDIA's is after a driver upgrade.
pub const AMD_KIND: &str = "amd.com/gpu";

/// Kinds whose specs NVIDIA's runtime writes afresh for every container
/// (internal/modifier/cdi.go, automaticDeviceKind): never stale, never in
/// the spec directories.
pub const GENERATED_KINDS: &[&str] = &["runtime.nvidia.com/gpu"];

/// The most devices of one spec gpu-guard reads: NVIDIA's spec for 8 GPUs
/// with MIG has a few hundred; more is not a spec a start should pay for.
pub const MAX_DEVICES: usize = 1024;

/// A spec file as serde reads it. Every field is optional here; what CDI
/// requires is checked by [`Spec::from_file`]. Unknown fields are ignored.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecFile {
    #[serde(default)]
    pub cdi_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub devices: Option<Vec<DeviceDef>>,
    #[serde(default)]
    pub container_edits: Option<Edits>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceDef {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub container_edits: Option<Edits>,
}

/// The `containerEdits` that need something on the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Edits {
    #[serde(default)]
    pub device_nodes: Option<Vec<DeviceNode>>,
    #[serde(default)]
    pub mounts: Option<Vec<CdiMount>>,
    #[serde(default)]
    pub hooks: Option<Vec<CdiHook>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub host_path: Option<String>,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub major: Option<i64>,
    #[serde(default)]
    pub minor: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    #[serde(default)]
    pub host_path: Option<String>,
    #[serde(default)]
    pub container_path: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiHook {
    #[serde(default)]
    pub hook_name: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub args: Option<Vec<String>>,
}

/// A spec CDI accepts: a kind, at least one device, unique device names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub kind: String,
    pub edits: Edits,
    pub devices: Vec<(String, Edits)>,
}

/// A valid kind: `vendor/class`, the vendor a DNS-like name, the class
/// alphanumerics with `-`, `_`, `.` (SPEC.md "Kind").
pub fn valid_kind(kind: &str) -> bool {
    let Some((vendor, class)) = kind.split_once('/') else {
        return false;
    };
    let ok = |s: &str, extra: &[char]| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    ok(vendor, &['-', '.']) && ok(class, &['-', '_', '.'])
}

/// Why a spec file is not one gpu-guard checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotChecked {
    /// Not a valid spec (CDI skips it too).
    Invalid(String),
    /// Valid, but more devices than [`MAX_DEVICES`].
    TooMany { kind: String, devices: usize },
}

impl Spec {
    /// The spec a file holds, checked as CDI checks it (pkg/cdi/spec.go
    /// `validate`): version, kind, device names, at least one device.
    pub fn from_file(f: SpecFile) -> Result<Spec, NotChecked> {
        let invalid = |m: String| Err(NotChecked::Invalid(m));
        if f.cdi_version.as_deref().map_or(true, str::is_empty) {
            return invalid("no cdiVersion".into());
        }
        let kind = f.kind.unwrap_or_default();
        if !valid_kind(&kind) {
            return invalid(format!("`{}` is not a CDI kind (vendor/class)", esc(&kind)));
        }
        let devices = f.devices.unwrap_or_default();
        if devices.is_empty() {
            return invalid("no devices".into());
        }
        if devices.len() > MAX_DEVICES {
            return Err(NotChecked::TooMany {
                kind,
                devices: devices.len(),
            });
        }
        let mut names = BTreeSet::new();
        let mut out = Vec::with_capacity(devices.len());
        for d in devices {
            let name = d.name.unwrap_or_default();
            if name.is_empty() {
                return invalid("a device has no name".into());
            }
            if !names.insert(name.clone()) {
                return invalid(format!("device `{}` is defined twice", esc(&name)));
            }
            out.push((name, d.container_edits.unwrap_or_default()));
        }
        Ok(Spec {
            kind,
            edits: f.container_edits.unwrap_or_default(),
            devices: out,
        })
    }
}

/// One file of the spec directories as the reader found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecEntry {
    pub path: String,
    /// The index of its directory in `host.cdi_spec_dirs`.
    pub priority: usize,
    /// Why others could have written it (owner, mode, directory), if so.
    pub untrusted: Option<String>,
    pub state: SpecState,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecState {
    Read(Spec),
    /// Not read, never parsed: others could have written it (the entry's
    /// `untrusted` says how). A spec decides what is mounted into a
    /// container and which hooks run as root; one of unknown authorship is
    /// not even parsed.
    Untrusted,
    /// Could not be read (not a regular file, an I/O error).
    Unreadable(String),
    /// Not read: past one of gpu-guard's bounds (larger than it reads, the
    /// byte budget of a decision spent, nested deeper than any spec is).
    OverBound(String),
    NotChecked(NotChecked),
}

impl SpecState {
    /// Whether not checking the file must refuse a container whose device
    /// it may define: a bound reached or a file of unknown authorship
    /// (fail closed); a file that merely cannot be read is a warning.
    pub fn refuses_when_unread(&self) -> bool {
        matches!(
            self,
            SpecState::Untrusted
                | SpecState::OverBound(_)
                | SpecState::NotChecked(NotChecked::TooMany { .. })
        )
    }
}

/// Spec files that may exist but were not even listed: the directories of
/// priorities `from..=to` hold more than gpu-guard lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub from: usize,
    pub to: usize,
    /// One line: which bound, in which directory.
    pub message: String,
}

/// Everything the spec directories held, in CDI's reading order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CdiSpecs {
    pub dirs: Vec<String>,
    pub entries: Vec<SpecEntry>,
    /// Directories or files the reader gave up on, as one-line messages.
    pub problems: Vec<String>,
    /// Where a bound stopped the listing: files there were not seen.
    pub cuts: Vec<Cut>,
    /// NVIDIA's `nvidia-cdi-refresh` systemd unit is installed.
    pub refresh_unit: bool,
}

/// What is at a path on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathState {
    Missing,
    /// A character or block device, or a FIFO (what CDI accepts as a node).
    Device,
    /// Something else that exists.
    Other,
    /// Could not be told (permission, I/O error): not judged.
    Unknown(String),
}

/// The host's filesystem as the judgement needs it; the caller does the I/O.
pub trait HostPaths {
    /// The state of `path`: through symlinks, or of the link itself when
    /// `nofollow`.
    fn state(&self, path: &str, nofollow: bool) -> PathState;

    /// The (major, minor) of the character device at `path` (through
    /// symlinks); None when it is not one or cannot be told.
    fn char_numbers(&self, _path: &str) -> Option<(u64, u64)> {
        None
    }
}

/// A fully qualified CDI name split into kind and device (`nvidia.com/gpu=0`).
pub fn split_name(qualified: &str) -> Option<(&str, &str)> {
    let (kind, name) = qualified.split_once('=')?;
    (kind.contains('/') && !name.is_empty()).then_some((kind, name))
}

/// How one requested device resolves.
#[derive(Debug)]
pub(crate) enum Resolved<'a> {
    Found(&'a SpecEntry, &'a Spec, &'a Edits),
    /// Defined twice in one directory: these files.
    Conflict(Vec<&'a str>),
    Missing,
}

/// One definition of a device: the file, its spec, the device's edits.
pub(crate) type Definition<'a> = (&'a SpecEntry, &'a Spec, &'a Edits);

/// Every device the specs that were read define, by kind and name, in
/// CDI's reading order: built once, so a container asking for many
/// devices costs one lookup each, not a walk of every spec.
pub(crate) struct Index<'a> {
    by_name: std::collections::HashMap<(&'a str, &'a str), Vec<Definition<'a>>>,
}

impl<'a> Index<'a> {
    pub(crate) fn of(specs: &'a CdiSpecs) -> Index<'a> {
        let mut by_name: std::collections::HashMap<_, Vec<_>> = std::collections::HashMap::new();
        for e in &specs.entries {
            let SpecState::Read(s) = &e.state else {
                continue;
            };
            for (name, edits) in &s.devices {
                by_name
                    .entry((s.kind.as_str(), name.as_str()))
                    .or_default()
                    .push((e, s, edits));
            }
        }
        Index { by_name }
    }

    /// A device as CDI's registry resolves it (cache.go `refresh`): the
    /// definition of the latest directory wins; two in one directory clash.
    pub(crate) fn resolve(&self, kind: &str, name: &str) -> Resolved<'a> {
        let Some(found) = self.by_name.get(&(kind, name)) else {
            return Resolved::Missing;
        };
        let priorities: Vec<usize> = found.iter().map(|(e, _, _)| e.priority).collect();
        let clash = priorities.windows(2).find(|w| w[0] == w[1]).map(|w| w[0]);
        if let Some(p) = clash {
            let files = found
                .iter()
                .filter(|(e, _, _)| e.priority == p)
                .map(|(e, _, _)| e.path.as_str())
                .collect();
            return Resolved::Conflict(files);
        }
        match found.last() {
            Some((e, s, d)) => Resolved::Found(e, s, d),
            None => Resolved::Missing,
        }
    }
}

/// The driver version a path of NVIDIA's spec is tied to: a driver
/// library's `.so.VERSION` (`libcuda.so.535.104.05`, `libEGL_nvidia.so.…`),
/// or a firmware directory `firmware/nvidia/VERSION/`. Only versions that
/// look like a driver's (a major of three or more digits): NVIDIA's
/// specs also mount libraries with versions of their own
/// (`libnvidia-egl-wayland.so.1.1.13`).
pub(crate) fn driver_version_in(path: &str) -> Option<&str> {
    let driverish = |v: &str| {
        let mut parts = v.split('.');
        let major = parts.next().unwrap_or("");
        let rest: Vec<&str> = parts.collect();
        major.len() >= 3
            && major.bytes().all(|b| b.is_ascii_digit())
            && !rest.is_empty()
            && rest
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    let file = path.rsplit('/').next().unwrap_or(path);
    if let Some((stem, v)) = file.split_once(".so.") {
        let gpu_lib = ["libcu", "libnv", "libnccl", "libnpp"]
            .iter()
            .any(|p| stem.starts_with(p))
            || stem.contains("nvidia");
        if gpu_lib && driverish(v) {
            return Some(v);
        }
    }
    let (_, after) = path.split_once("/firmware/nvidia/")?;
    let v = after.split('/').next()?;
    driverish(v).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::decision::{Check, Severity};
    use std::collections::BTreeMap;

    /// A host whose filesystem holds exactly these paths.
    struct Fake(BTreeMap<&'static str, PathState>);

    impl HostPaths for Fake {
        fn state(&self, path: &str, _: bool) -> PathState {
            self.0.get(path).cloned().unwrap_or(PathState::Missing)
        }
    }

    const DRIVER: &str = "570.133.20";

    /// A spec as `nvidia-ctk cdi generate` writes it (trimmed), for `v`.
    fn nvidia_yaml(v: &str) -> String {
        format!(
            r#"---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidia-uvm
  - path: /dev/nvidiactl
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  hooks:
  - args:
    - nvidia-cdi-hook
    - enable-cuda-compat
    - --host-driver-version={v}
    hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
  mounts:
  - containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.{v}
    hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.{v}
    options: [ro, nosuid, nodev, bind]
  - containerPath: /usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.13
    hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.13
  - containerPath: /lib/firmware/nvidia/{v}/gsp_ga10x.bin
    hostPath: /lib/firmware/nvidia/{v}/gsp_ga10x.bin
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: all
kind: nvidia.com/gpu
"#
        )
    }

    fn spec(text: &str) -> Spec {
        Spec::from_file(serde_yaml_ng::from_str(text).unwrap()).unwrap()
    }

    fn entry(path: &str, priority: usize, s: Spec) -> SpecEntry {
        SpecEntry {
            path: path.into(),
            priority,
            untrusted: None,
            state: SpecState::Read(s),
        }
    }

    fn host(v: &str) -> Fake {
        let mut m = BTreeMap::new();
        for p in ["/dev/nvidia-uvm", "/dev/nvidiactl", "/dev/nvidia0"] {
            m.insert(p, PathState::Device);
        }
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        for p in [
            "/usr/bin/nvidia-cdi-hook".to_string(),
            format!("/usr/lib/x86_64-linux-gnu/libcuda.so.{v}"),
            "/usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.13".to_string(),
            format!("/lib/firmware/nvidia/{v}/gsp_ga10x.bin"),
        ] {
            m.insert(leak(p), PathState::Other);
        }
        Fake(m)
    }

    fn specs(entries: Vec<SpecEntry>) -> CdiSpecs {
        CdiSpecs {
            dirs: vec!["/etc/cdi".into(), "/var/run/cdi".into()],
            entries,
            problems: Vec::new(),
            cuts: Vec::new(),
            refresh_unit: false,
        }
    }

    fn all() -> Vec<String> {
        vec!["nvidia.com/gpu=all".into()]
    }

    #[test]
    fn a_spec_for_the_running_driver_passes() {
        let s = specs(vec![entry(
            "/etc/cdi/nvidia.yaml",
            0,
            spec(&nvidia_yaml(DRIVER)),
        )]);
        let f = judge(&all(), &s, Some(DRIVER), &host(DRIVER));
        assert!(f.is_empty(), "{f:?}");
        let f = judge(
            &["nvidia.com/gpu=0".into()],
            &s,
            Some(DRIVER),
            &host(DRIVER),
        );
        assert!(f.is_empty(), "{f:?}");
        // The runtime's own generated kind is never looked up.
        let f = judge(
            &["runtime.nvidia.com/gpu=all".into()],
            &specs(vec![]),
            Some(DRIVER),
            &host(DRIVER),
        );
        assert!(f.is_empty());
    }

    #[test]
    fn a_spec_for_the_previous_driver_refuses_with_the_fix() {
        let old = "565.57.01";
        let s = specs(vec![entry(
            "/etc/cdi/nvidia.yaml",
            0,
            spec(&nvidia_yaml(old)),
        )]);
        // After the upgrade the old files are gone, the new ones there.
        let f = judge(&all(), &s, Some(DRIVER), &host(DRIVER));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].check, f[0].severity), (Check::Host, Severity::Error));
        assert!(
            f[0].message
                .contains("generated for NVIDIA driver 565.57.01"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].message.contains("this host runs 570.133.20"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].message.contains("libcuda.so.565.57.01"),
            "{}",
            f[0].message
        );
        let fix = f[0].fix.as_deref().unwrap();
        assert!(
            fix.contains("nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"),
            "{fix}"
        );
        assert!(!fix.contains("nvidia-cdi-refresh"));
        // The library, the firmware and the hook argument; not egl-wayland.
        assert_eq!(f[0].details.len(), 3, "{:?}", f[0].details);
        // Where NVIDIA's refresh unit is installed, the fix names it.
        let mut s2 = s.clone();
        s2.refresh_unit = true;
        let f = judge(&all(), &s2, Some(DRIVER), &host(DRIVER));
        assert!(f[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("systemctl restart nvidia-cdi-refresh.service"));
        // Unknown driver version: only what is missing counts.
        let f = judge(&all(), &s, None, &host(DRIVER));
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("does not have"), "{}", f[0].message);
    }

    #[test]
    fn missing_nodes_hooks_and_mounts() {
        let s = specs(vec![entry(
            "/var/run/cdi/nvidia.json",
            1,
            spec(&nvidia_yaml(DRIVER)),
        )]);
        let mut h = host(DRIVER);
        h.0.remove("/dev/nvidia0");
        h.0.insert("/dev/nvidia-uvm", PathState::Other);
        h.0.remove("/usr/bin/nvidia-cdi-hook");
        let f = judge(&all(), &s, Some(DRIVER), &h);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].message.contains("3 paths"), "{}", f[0].message);
        assert_eq!(
            f[0].details,
            vec![
                "device node /dev/nvidia-uvm (not a device)",
                "hook /usr/bin/nvidia-cdi-hook",
                "device node /dev/nvidia0"
            ]
        );
        assert!(f[0].fix.as_deref().unwrap().ends_with("--format=json"));
        // A node the spec describes (type and major) is created, not looked up.
        let described = "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n- name: x\n  containerEdits:\n    deviceNodes:\n    - {path: /dev/nvidia9, type: c, major: 195, minor: 9}\n";
        let s = specs(vec![entry("/etc/cdi/x.yaml", 0, spec(described))]);
        assert!(judge(&["nvidia.com/gpu=x".into()], &s, Some(DRIVER), &h).is_empty());
    }

    /// A host with AMD's nodes at these numbers.
    struct AmdHost(BTreeMap<&'static str, (u64, u64)>);

    impl HostPaths for AmdHost {
        fn state(&self, path: &str, _: bool) -> PathState {
            match self.0.get(path) {
                Some(_) => PathState::Device,
                None => PathState::Missing,
            }
        }

        fn char_numbers(&self, path: &str) -> Option<(u64, u64)> {
            self.0.get(path).copied()
        }
    }

    /// A spec as `amd-ctk cdi generate` writes it: kfd at major `kfd`.
    fn amd_json(kfd: u64) -> String {
        let node = |p: &str, major: u64, minor: u64| {
            format!(
                r#"{{"path":"{p}","type":"c","major":{major},"minor":{minor},"fileMode":8624,"permissions":"rwm","uid":0,"gid":109}}"#
            )
        };
        let kfd = node("/dev/kfd", kfd, 0);
        let r0 = node("/dev/dri/renderD128", 226, 128);
        let r1 = node("/dev/dri/renderD136", 226, 136);
        format!(
            r#"{{"cdiVersion":"0.6.0","kind":"amd.com/gpu","devices":[
            {{"name":"0","containerEdits":{{"deviceNodes":[{r0},{kfd}]}}}},
            {{"name":"1","containerEdits":{{"deviceNodes":[{r1},{kfd}]}}}},
            {{"name":"all","containerEdits":{{"deviceNodes":[{r0},{r1},{kfd}]}}}}]}}"#
        )
    }

    #[test]
    fn an_amd_spec_whose_nodes_moved_is_stale() {
        let host = AmdHost(BTreeMap::from([
            ("/dev/kfd", (511, 0)),
            ("/dev/dri/renderD128", (226, 128)),
            ("/dev/dri/renderD136", (226, 136)),
        ]));
        let at = |kfd| specs(vec![entry("/etc/cdi/amd.json", 0, spec(&amd_json(kfd)))]);
        let one = vec!["amd.com/gpu=1".to_string()];
        assert!(judge(&one, &at(511), None, &host).is_empty());
        // Generated before a reboot that gave amdkfd another major.
        let f = judge(&one, &at(510), None, &host);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].check, f[0].severity), (Check::Host, Severity::Error));
        assert!(
            f[0].message
                .contains("/dev/kfd is 510:0 in the spec, 511:0 on this host"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].fix
                .as_deref()
                .unwrap()
                .contains("amd-ctk cdi generate --output=/etc/cdi/amd.json"),
            "{:?}",
            f[0].fix
        );
        // A GPU gone: its render node is missing.
        let mut gone = AmdHost(host.0.clone());
        gone.0.remove("/dev/dri/renderD136");
        let f = judge(&one, &at(511), None, &gone);
        assert!(f[0].message.contains("renderD136"), "{f:?}");
        assert!(f[0].fix.as_deref().unwrap().contains("amd-ctk"));
        // The audit `host` and `doctor` print sees the same, as a warning.
        let a = audit(&at(510), &["nvidia.com/gpu"], None, &host);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0].severity, Severity::Warning);
        // An undefined AMD device names AMD's tool.
        let f = judge(&["amd.com/gpu=7".into()], &at(511), None, &host);
        assert!(f[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("amd-ctk cdi generate"));
    }

    #[test]
    fn later_directories_win_and_same_directory_clashes() {
        let old = spec(&nvidia_yaml("565.57.01"));
        let new = spec(&nvidia_yaml(DRIVER));
        // Stale in /etc/cdi, fresh in /var/run/cdi: the later one is used.
        let s = specs(vec![
            entry("/etc/cdi/nvidia.yaml", 0, old.clone()),
            entry("/var/run/cdi/nvidia.yaml", 1, new.clone()),
        ]);
        assert!(judge(&all(), &s, Some(DRIVER), &host(DRIVER)).is_empty());
        // The other way round: the stale one is used.
        let s = specs(vec![
            entry("/etc/cdi/nvidia.yaml", 0, new.clone()),
            entry("/var/run/cdi/nvidia.yaml", 1, old.clone()),
        ]);
        let f = judge(&all(), &s, Some(DRIVER), &host(DRIVER));
        assert!(
            f[0].message.contains("/var/run/cdi/nvidia.yaml"),
            "{}",
            f[0].message
        );
        // Twice in one directory: CDI drops the device, even though a
        // later directory defines it too.
        let s = specs(vec![
            entry("/etc/cdi/a.yaml", 0, new.clone()),
            entry("/etc/cdi/b.yaml", 0, new.clone()),
            entry("/var/run/cdi/c.yaml", 1, new),
        ]);
        let f = judge(&all(), &s, Some(DRIVER), &host(DRIVER));
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message.contains("/etc/cdi/a.yaml and /etc/cdi/b.yaml"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn undefined_untrusted_and_unread() {
        let new = spec(&nvidia_yaml(DRIVER));
        let s = specs(vec![entry("/etc/cdi/nvidia.yaml", 0, new.clone())]);
        let f = judge(
            &["nvidia.com/gpu=7".into()],
            &s,
            Some(DRIVER),
            &host(DRIVER),
        );
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message
                .contains("not defined in any CDI spec in /etc/cdi, /var/run/cdi"),
            "{}",
            f[0].message
        );
        assert!(f[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("nvidia-ctk cdi generate"));
        // Others could have written a spec that may define it: not read,
        // refused; one in an earlier directory cannot override.
        let open = |priority: usize| SpecEntry {
            path: format!("/x/{priority}/open.yaml"),
            priority,
            untrusted: Some("mode 0666".into()),
            state: SpecState::Untrusted,
        };
        for entries in [
            vec![open(0)],
            vec![entry("/etc/cdi/nvidia.yaml", 0, new.clone()), open(1)],
            vec![entry("/etc/cdi/nvidia.yaml", 0, new.clone()), open(0)],
        ] {
            let f = judge(&all(), &specs(entries), Some(DRIVER), &host(DRIVER));
            assert_eq!(f.len(), 1, "{f:?}");
            assert_eq!(f[0].severity, Severity::Error);
            assert!(
                f[0].message.contains("which others could have written")
                    && f[0].message.contains("nvidia.com/gpu=all"),
                "{}",
                f[0].message
            );
        }
        let s = specs(vec![
            open(0),
            entry("/var/run/cdi/nvidia.yaml", 1, new.clone()),
        ]);
        assert!(judge(&all(), &s, Some(DRIVER), &host(DRIVER)).is_empty());
        // An unread file in a later directory may override: a warning.
        let fifo = SpecEntry {
            path: "/var/run/cdi/fifo.yaml".into(),
            priority: 1,
            untrusted: None,
            state: SpecState::Unreadable("a FIFO".into()),
        };
        let s = specs(vec![
            entry("/etc/cdi/nvidia.yaml", 0, new.clone()),
            fifo.clone(),
        ]);
        let f = judge(&all(), &s, Some(DRIVER), &host(DRIVER));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(
            f[0].message.contains("could not be read (a FIFO)"),
            "{}",
            f[0].message
        );
        // Not defined anywhere readable, but a file was not read: a
        // warning, not a refusal.
        let f = judge(&all(), &specs(vec![fifo]), Some(DRIVER), &host(DRIVER));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        // A spec with too many devices of the kind asked for: the same.
        let big = SpecEntry {
            path: "/etc/cdi/big.yaml".into(),
            priority: 0,
            untrusted: None,
            state: SpecState::NotChecked(NotChecked::TooMany {
                kind: "nvidia.com/gpu".into(),
                devices: 10_000,
            }),
        };
        // A spec past a bound (too many devices of the kind, too large,
        // nested too deep) may define it: refused, never skipped silently.
        let f = judge(&all(), &specs(vec![big]), Some(DRIVER), &host(DRIVER));
        assert!(f[0].message.contains("10000 devices"), "{}", f[0].message);
        assert_eq!(f[0].severity, Severity::Error);
        let deep = SpecEntry {
            path: "/var/run/cdi/deep.yaml".into(),
            priority: 1,
            untrusted: None,
            state: SpecState::OverBound("it may nest more than 256 levels deep".into()),
        };
        let s = specs(vec![entry("/etc/cdi/nvidia.yaml", 0, new.clone()), deep]);
        let f = judge(&all(), &s, Some(DRIVER), &host(DRIVER));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Error);
        assert!(
            f[0].message.contains("deep.yaml was not read (it may nest")
                && f[0].message.contains("not started unchecked"),
            "{}",
            f[0].message
        );
        // A listing a bound cut short, in a directory as late as the
        // definition: refused too.
        let mut s = specs(vec![entry("/etc/cdi/nvidia.yaml", 0, new)]);
        s.cuts.push(Cut {
            from: 1,
            to: 1,
            message: "CDI spec directory /var/run/cdi holds more than 1024 spec files".into(),
        });
        let f = judge(&all(), &s, Some(DRIVER), &host(DRIVER));
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].message.contains("holds more than 1024"),
            "{}",
            f[0].message
        );
        s.cuts[0] = Cut {
            from: 0,
            to: 0,
            ..s.cuts[0].clone()
        };
        assert_eq!(judge(&all(), &s, Some(DRIVER), &host(DRIVER)).len(), 1);
    }

    #[test]
    fn every_requested_device_is_checked_and_padding_hides_none() {
        let new = spec(&nvidia_yaml(DRIVER));
        let open = SpecEntry {
            path: "/var/run/cdi/open.yaml".into(),
            priority: 1,
            untrusted: Some("mode 0666".into()),
            state: SpecState::Untrusted,
        };
        let s = specs(vec![entry("/etc/cdi/nvidia.yaml", 0, new), open]);
        // Names of a generated kind, and names CDI cannot parse, pad the
        // list: none of them is counted, the last one is still checked.
        let mut asked: Vec<String> = (0..200)
            .map(|i| format!("runtime.nvidia.com/gpu={i}"))
            .collect();
        asked.extend((0..200).map(|i| format!("nvidia.com/gpu{i}")));
        asked.extend(std::iter::repeat("nvidia.com/gpu=0".to_string()).take(200));
        asked.push("nvidia.com/gpu=evil".into());
        let f = judge(&asked, &s, Some(DRIVER), &host(DRIVER));
        assert!(
            f.iter().any(|f| f.severity == Severity::Error
                && f.message.contains("nvidia.com/gpu=evil")
                && f.message.contains("open.yaml")),
            "{f:?}"
        );
        // More distinct devices than gpu-guard checks: refused, saying so.
        let many: Vec<String> = (0..=MAX_CHECKED)
            .map(|i| format!("nvidia.com/gpu={i}"))
            .collect();
        let f = judge(&many, &s, Some(DRIVER), &host(DRIVER));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Error);
        assert!(
            f[0].message.contains("more than gpu-guard checks (1024)"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn what_cdi_accepts_as_a_spec() {
        let bad = |t: &str| match Spec::from_file(serde_yaml_ng::from_str(t).unwrap()) {
            Err(NotChecked::Invalid(m)) => m,
            other => panic!("{t}: {other:?}"),
        };
        assert!(bad("kind: nvidia.com/gpu\ndevices: [{name: a}]").contains("cdiVersion"));
        assert!(bad("cdiVersion: 0.5.0\nkind: nvidia\ndevices: [{name: a}]").contains("kind"));
        assert!(bad("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []").contains("no devices"));
        assert!(
            bad("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [{name: a}, {name: a}]")
                .contains("twice")
        );
        // JSON is YAML; null lists are empty; unknown fields are ignored.
        let s = spec(
            r#"{"cdiVersion": "0.8.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": {"mounts": null, "netDevices": []}}], "annotations": {}}"#,
        );
        assert_eq!(s.devices.len(), 1);
        assert!(valid_kind("k8s.device-plugin.nvidia.com/gpu"));
        assert!(!valid_kind("vendor.com/foo/bar") && !valid_kind("/gpu") && !valid_kind("a/"));
        assert_eq!(
            split_name("nvidia.com/gpu=0:1"),
            Some(("nvidia.com/gpu", "0:1"))
        );
        assert_eq!(split_name("gpu=0"), None);
    }

    #[test]
    fn driver_versions_in_paths() {
        assert_eq!(
            driver_version_in("/usr/lib/libcuda.so.535.104.05"),
            Some("535.104.05")
        );
        assert_eq!(
            driver_version_in("/usr/lib/libEGL_nvidia.so.580.65.06"),
            Some("580.65.06")
        );
        assert_eq!(
            driver_version_in("/lib/firmware/nvidia/535.104.05/gsp.bin"),
            Some("535.104.05")
        );
        assert_eq!(
            driver_version_in("/usr/lib/libnvidia-egl-wayland.so.1.1.13"),
            None
        );
        assert_eq!(driver_version_in("/usr/lib/libcudnn.so.9.1.0"), None);
        assert_eq!(driver_version_in("/usr/lib/libfoo.so.535.104.05"), None);
        assert_eq!(driver_version_in("/usr/lib/libcuda.so.1"), None);
        assert_eq!(driver_version_in("/usr/bin/nvidia-smi"), None);
    }

    #[test]
    fn the_host_audit_covers_every_nvidia_spec() {
        let mut untrusted = entry(
            "/etc/cdi/other.yaml",
            0,
            spec("cdiVersion: 0.5.0\nkind: vendor.com/x\ndevices: [{name: a}]"),
        );
        untrusted.untrusted = Some("owner uid 1000".into());
        untrusted.state = SpecState::Untrusted;
        let s = specs(vec![
            entry("/etc/cdi/nvidia.yaml", 0, spec(&nvidia_yaml("565.57.01"))),
            untrusted,
            SpecEntry {
                path: "/etc/cdi/bad.yaml".into(),
                priority: 0,
                untrusted: None,
                state: SpecState::NotChecked(NotChecked::Invalid("no devices".into())),
            },
        ]);
        let f = audit(&s, &["nvidia.com/gpu"], Some(DRIVER), &host(DRIVER));
        assert!(f.iter().all(|f| f.severity == Severity::Warning), "{f:?}");
        let text: Vec<&str> = f.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(f.len(), 3, "{text:?}");
        assert!(text[0].contains("generated for NVIDIA driver 565.57.01"));
        assert!(text[1].contains("could be written by others"));
        assert!(text[2].contains("not a valid CDI spec"));
        assert!(audit(
            &specs(vec![entry(
                "/etc/cdi/n.yaml",
                0,
                spec(&nvidia_yaml(DRIVER))
            )]),
            &["nvidia.com/gpu"],
            Some(DRIVER),
            &host(DRIVER)
        )
        .is_empty());
    }
}
