//! Reads the container view from an OCI config.json (or exec's process.json)
//! as runc will use it.
//!
//! runc decodes these files with Go's encoding/json into runtime-spec's Go
//! structs (specs-go config.go). The view here follows that decoder, not
//! serde's, so what gpu-guard decides on is what runc runs:
//!
//! - the file is read by [`crate::oci::gojson`] (Go's depth limit, numbers
//!   kept as text, U+FFFD for bad UTF-8 and lone surrogates, every member of
//!   an object kept);
//! - a key names a struct field when it equals the field's JSON name or
//!   folds to it (`"Env"`, `"NoNewPrivileges"`, `"proceſſ"`);
//! - members are applied in order, so the last key for a field wins; a
//!   pointer-to-struct or struct field that appears again is decoded into
//!   the same struct, so the two merge field by field (`"process"` twice:
//!   env from one, capabilities from the other); a map (annotations) is
//!   merged key by key;
//! - a slice is decoded element by element into the slice it replaces
//!   (decode.go array: elements past the new length survive in the backing
//!   array and are reused by a later, longer decode), so struct elements of
//!   a repeated list merge too ([`GoSlice`]);
//! - `null` clears a pointer, slice or map and is ignored for strings, bools
//!   and structs;
//! - a value of the wrong type is an error, as it is for runc (which then
//!   refuses the spec).
//!
//! Unknown fields are skipped without being looked at, as Go skips them.

use crate::core::container::{Capabilities, Container, Env, Hook, Mount};
use crate::oci::gojson::{self, fold, Node, Value as GoValue};
use crate::oci::spec_decode::{members, pointer, slice, Decode, R};
pub use crate::oci::spec_decode::{GoSlice, SpecError};
use crate::oci::spec_devices::LinuxView;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `process.rlimits[]` (specs-go POSIXRlimit).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RlimitView {
    pub kind: String,
    pub hard: u64,
    pub soft: u64,
}

impl Decode for RlimitView {
    fn decode(&mut self, n: &Node, path: &'static str) -> R {
        members(n, path, |k, v| match k {
            "type" => self.kind.decode(v, "process.rlimits.type"),
            "hard" => self.hard.decode(v, "process.rlimits.hard"),
            "soft" => self.soft.decode(v, "process.rlimits.soft"),
            _ => Ok(()),
        })
    }
}

/// `process.capabilities` (specs-go LinuxCapabilities).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CapsView {
    /// In [`Capabilities::SETS`] order.
    pub sets: [Option<GoSlice<String>>; 5],
}

const CAP_PATHS: [&str; 5] = [
    "process.capabilities.bounding",
    "process.capabilities.effective",
    "process.capabilities.inheritable",
    "process.capabilities.permitted",
    "process.capabilities.ambient",
];

impl CapsView {
    fn field(&mut self, k: &str, v: &Node) -> R {
        for (i, name) in Capabilities::SETS.iter().enumerate() {
            if k == *name {
                return slice(&mut self.sets[i], v, CAP_PATHS[i]);
            }
        }
        Ok(())
    }

    fn set(&self, i: usize) -> Option<Vec<String>> {
        self.sets[i].as_ref().map(|s| s.items().to_vec())
    }

    pub fn to_capabilities(&self) -> Capabilities {
        Capabilities {
            bounding: self.set(0),
            effective: self.set(1),
            inheritable: self.set(2),
            permitted: self.set(3),
            ambient: self.set(4),
        }
    }
}

/// `process` (specs-go Process): the fields gpu-guard reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessView {
    pub env: Option<GoSlice<String>>,
    pub rlimits: Option<GoSlice<RlimitView>>,
    /// `process.user.uid` (a struct in specs-go: present means 0 when unset).
    pub uid: Option<u32>,
    /// `process.user.gid` and `.additionalGids`.
    pub gid: u32,
    pub additional_gids: Option<GoSlice<u32>>,
    pub capabilities: Option<CapsView>,
    pub no_new_privileges: bool,
    pub selinux_label: String,
    pub apparmor_profile: String,
    /// `process.cwd`: the loader resolves relative search paths from it.
    pub cwd: String,
}

impl ProcessView {
    fn field(&mut self, k: &str, v: &Node) -> R {
        match k {
            "env" => slice(&mut self.env, v, "process.env"),
            "rlimits" => slice(&mut self.rlimits, v, "process.rlimits"),
            "user" => {
                let uid = self.uid.get_or_insert(0);
                let (gid, extra) = (&mut self.gid, &mut self.additional_gids);
                // gid and additionalGids are read only where they have
                // the right type: a type error is runc's to report
                // (spec_file keeps it), not this view's.
                members(v, "process.user", |k, v| match k {
                    "uid" => uid.decode(v, "process.user.uid"),
                    "gid" => {
                        let mut g = *gid;
                        if g.decode(v, "process.user.gid").is_ok() {
                            *gid = g;
                        }
                        Ok(())
                    }
                    "additionalgids" => {
                        let mut e = extra.clone();
                        if slice(&mut e, v, "process.user.additionalGids").is_ok() {
                            *extra = e;
                        }
                        Ok(())
                    }
                    _ => Ok(()),
                })
            }
            "capabilities" => pointer(
                &mut self.capabilities,
                v,
                "process.capabilities",
                |c, k, v| c.field(k, v),
            ),
            "nonewprivileges" => self.no_new_privileges.decode(v, "process.noNewPrivileges"),
            "selinuxlabel" => self.selinux_label.decode(v, "process.selinuxLabel"),
            // Read when it is a string only: the type errors of a spec are
            // runc's to report (spec_file keeps them), not this view's.
            "cwd" => {
                if let Some(c) = v.as_str() {
                    self.cwd = c.to_string();
                }
                Ok(())
            }
            "apparmorprofile" => self.apparmor_profile.decode(v, "process.apparmorProfile"),
            _ => Ok(()),
        }
    }

    /// The process of an exec `--process` file (the file is the Process).
    pub fn from_node(root: &Node) -> Result<ProcessView, SpecError> {
        if root.as_object().is_none() {
            return Err(SpecError::NotAnObject);
        }
        let mut p = ProcessView::default();
        members(root, "process", |k, v| p.field(k, v))?;
        Ok(p)
    }

    /// The rlimits runc will set, by type; the last entry of a type wins,
    /// as runc applies them in order.
    fn rlimit_map(&self) -> BTreeMap<String, crate::core::decision::Rlimit> {
        self.rlimits
            .as_ref()
            .map(|r| {
                r.items()
                    .iter()
                    .map(|r| {
                        let limit = crate::core::decision::Rlimit {
                            soft: r.soft,
                            hard: r.hard,
                        };
                        (r.kind.clone(), limit)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn env_entries(&self) -> Vec<String> {
        self.env
            .as_ref()
            .map(|e| e.items().to_vec())
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
struct MountView {
    source: String,
    destination: String,
    kind: String,
    options: Option<GoSlice<String>>,
    /// How many keys of the entries decoded into this one named `options`.
    options_keys: usize,
}

impl Decode for MountView {
    fn decode(&mut self, n: &Node, _: &'static str) -> R {
        members(n, "mounts", |k, v| match k {
            "source" => self.source.decode(v, "mounts.source"),
            "destination" => self.destination.decode(v, "mounts.destination"),
            "type" => self.kind.decode(v, "mounts.type"),
            "options" => {
                self.options_keys += 1;
                slice(&mut self.options, v, "mounts.options")
            }
            _ => Ok(()),
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookView {
    pub path: String,
    pub args: Option<GoSlice<String>>,
}

impl Decode for HookView {
    fn decode(&mut self, n: &Node, _: &'static str) -> R {
        members(n, "hooks", |k, v| match k {
            "path" => self.path.decode(v, "hooks.path"),
            "args" => slice(&mut self.args, v, "hooks.args"),
            _ => Ok(()),
        })
    }
}

/// The hook stages of runtime-spec (specs-go Hooks); runc runs no others.
const HOOK_STAGES: [&str; 6] = [
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

#[derive(Clone, Debug, Default, PartialEq)]
pub struct HooksView {
    /// In [`HOOK_STAGES`] order.
    pub stages: [Option<GoSlice<HookView>>; 6],
}

#[derive(Clone, Debug, Default, PartialEq)]
struct RootView {
    path: String,
}

/// The parts of a config.json gpu-guard reads, as runc's decoder leaves them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecView {
    pub process: Option<ProcessView>,
    root: Option<RootView>,
    mounts: Option<GoSlice<MountView>>,
    /// How many top-level keys named `mounts` (a repeated list is merged
    /// element by element, so its entries cannot be rewritten in place).
    mounts_keys: usize,
    pub hooks: Option<HooksView>,
    annotations: Option<BTreeMap<String, String>>,
    linux: Option<LinuxView>,
    /// Top-level keys that fold to `linux`.
    linux_keys: usize,
}

impl SpecView {
    pub fn from_node(root: &Node) -> Result<SpecView, SpecError> {
        if root.as_object().is_none() {
            return Err(SpecError::NotAnObject);
        }
        let mut s = SpecView::default();
        members(root, "config.json", |k, v| match k {
            "process" => pointer(&mut s.process, v, "process", |p, k, v| p.field(k, v)),
            "root" => pointer(&mut s.root, v, "root", |r, k, v| match k {
                "path" => r.path.decode(v, "root.path"),
                _ => Ok(()),
            }),
            "mounts" => {
                s.mounts_keys += 1;
                slice(&mut s.mounts, v, "mounts")
            }
            "hooks" => pointer(&mut s.hooks, v, "hooks", |h, k, v| {
                for (i, stage) in HOOK_STAGES.iter().enumerate() {
                    if k == fold(stage) {
                        return slice(&mut h.stages[i], v, "hooks");
                    }
                }
                Ok(())
            }),
            "annotations" => match &v.value {
                GoValue::Null => {
                    s.annotations = None;
                    Ok(())
                }
                GoValue::Object(ms) => {
                    let map = s.annotations.get_or_insert_with(BTreeMap::new);
                    for m in ms {
                        // Map keys match exactly; null stores the zero
                        // value. A non-string value is a type error for
                        // runc, which then refuses the spec; it is skipped
                        // here, as before.
                        match &m.node.value {
                            GoValue::String(s) => {
                                map.insert(m.key.clone(), s.clone());
                            }
                            GoValue::Null => {
                                map.insert(m.key.clone(), String::new());
                            }
                            _ => {}
                        }
                    }
                    Ok(())
                }
                _ => Err(SpecError::WrongType("annotations")),
            },
            "linux" => {
                s.linux_keys += 1;
                pointer(&mut s.linux, v, "linux", |l, k, v| l.field(k, v))
            }
            _ => Ok(()),
        })?;
        Ok(s)
    }

    /// Every hook with a path, by stage, as (stage, hook).
    pub fn hooks_by_stage(&self) -> Vec<(&'static str, Hook)> {
        let Some(h) = &self.hooks else {
            return Vec::new();
        };
        HOOK_STAGES
            .iter()
            .zip(h.stages.iter())
            .filter_map(|(stage, list)| list.as_ref().map(|l| (*stage, l)))
            .flat_map(|(stage, l)| {
                l.items()
                    .iter()
                    .filter(|h| !h.path.is_empty())
                    .map(move |h| {
                        (
                            stage,
                            Hook {
                                path: h.path.clone(),
                                args: h
                                    .args
                                    .as_ref()
                                    .map(|a| a.items().to_vec())
                                    .unwrap_or_default(),
                            },
                        )
                    })
            })
            .collect()
    }

    /// The container view; `bundle` resolves a relative `root.path`
    /// (runtime-spec: relative to the bundle).
    pub fn container(&self, bundle: Option<&Path>) -> Container {
        let process = self.process.clone().unwrap_or_default();
        Container {
            id: None,
            env: Env::from_entries(process.env_entries()),
            annotations: self.annotations.clone().unwrap_or_default(),
            devices: self
                .linux
                .as_ref()
                .map(LinuxView::paths)
                .unwrap_or_default(),
            device_nodes: self
                .linux
                .as_ref()
                .map(LinuxView::nodes)
                .unwrap_or_default(),
            device_rules: self
                .linux
                .as_ref()
                .map(LinuxView::rules)
                .unwrap_or_default(),
            hooks: self.hooks_by_stage().into_iter().map(|(_, h)| h).collect(),
            mounts: self
                .mounts
                .as_ref()
                .map(|m| {
                    m.items()
                        .iter()
                        .map(|m| Mount {
                            source: m.source.clone(),
                            destination: m.destination.clone(),
                            kind: m.kind.clone(),
                            options: m
                                .options
                                .as_ref()
                                .map(|o| o.items().to_vec())
                                .unwrap_or_default(),
                            patchable: self.mounts_keys == 1 && m.options_keys <= 1,
                            host: None,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            capabilities: process
                .capabilities
                .as_ref()
                .map(|c| c.to_capabilities())
                .unwrap_or_default(),
            no_new_privileges: process.no_new_privileges,
            rlimits: process.rlimit_map(),
            uid: process.uid,
            gid: process.uid.map(|_| process.gid),
            additional_gids: process
                .additional_gids
                .as_ref()
                .map(|g| g.items().to_vec())
                .unwrap_or_default(),
            user_namespace: self.linux.as_ref().is_some_and(|l| l.user_namespace),
            cpuset: match &self.linux {
                Some(l) => l.cpuset(self.linux_keys),
                // No `linux` (or null): nothing runc would read to set.
                None => crate::core::container::Cpuset::default(),
            },
            rootfs: rootfs(self.root.as_ref().map(|r| r.path.as_str()), bundle),
            cwd: (!process.cwd.is_empty()).then(|| process.cwd.clone()),
            chained_runtime: None,
            cri_runtime: None,
            assume_attached: false,
        }
    }
}

/// `root.path`, made absolute: runtime-spec resolves a relative one against
/// the bundle; without a bundle it cannot be known.
fn rootfs(p: Option<&str>, bundle: Option<&Path>) -> Option<PathBuf> {
    let p = PathBuf::from(p.filter(|p| !p.is_empty())?);
    match (p.is_absolute(), bundle) {
        (true, _) => Some(p),
        (false, Some(b)) => Some(b.join(p)),
        (false, None) => None,
    }
}

impl Container {
    /// Builds the view from a parsed config.json (a serde value has no
    /// duplicate keys; case variants are read as runc reads them). `bundle`
    /// resolves a relative `root.path`.
    pub fn from_spec(spec: &Value, bundle: Option<&Path>) -> Result<Container, SpecError> {
        let bytes = serde_json::to_vec(spec).map_err(|_| SpecError::NotAnObject)?;
        let node = gojson::parse(&bytes).map_err(|_| SpecError::NotAnObject)?;
        let view = SpecView::from_node(&node);
        gojson::drop_deep(node);
        Ok(view?.container(bundle))
    }

    /// The view of an exec process file, as a container with that process.
    pub fn from_process(p: &ProcessView) -> Container {
        SpecView {
            process: Some(p.clone()),
            ..Default::default()
        }
        .container(None)
    }
}

/// Parses JSON bytes with serde (the hook State). Go's encoding/json
/// accepts invalid UTF-8 inside strings and reads it as U+FFFD; serde_json
/// refuses it, so we retry lossily.
pub fn parse_spec_bytes(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(e) => match std::str::from_utf8(bytes) {
            Ok(_) => Err(e),
            Err(_) => serde_json::from_str(&String::from_utf8_lossy(bytes)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::Container;
    use serde_json::json;

    #[test]
    fn reads_the_parts_we_need() {
        let spec = json!({
            "ociVersion": "1.0.2",
            "process": {
                "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=1", "BROKEN"],
                "capabilities": { "bounding": ["CAP_CHOWN", "CAP_NET_RAW"], "effective": ["CAP_CHOWN"] },
                "noNewPrivileges": true
            },
            "root": { "path": "rootfs" },
            "annotations": { "cdi.k8s.io/x": "nvidia.com/gpu=0", "n": 5 },
            "hooks": { "prestart": [ { "path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"] } ],
                       "createContainer": [ { "args": ["no-path"] } ] },
            "linux": { "devices": [ { "path": "/dev/nvidia0", "type": "c" } ] },
            "mounts": [ { "destination": "/proc" }, { "source": "/dev/nvidia0", "destination": "/dev/nvidia0" } ],
            "unknownField": { "kept": true }
        });
        let c = Container::from_spec(&spec, Some(Path::new("/b"))).unwrap();
        assert_eq!(c.env.get("NVIDIA_VISIBLE_DEVICES"), Some("1"));
        assert_eq!(c.env.get("BROKEN"), None);
        assert_eq!(c.annotations.len(), 1);
        assert_eq!(c.devices, vec!["/dev/nvidia0"]);
        assert_eq!(
            c.hooks,
            vec![Hook {
                path: "/usr/bin/nvidia-container-runtime-hook".into(),
                args: vec!["nvidia-container-runtime-hook".into(), "prestart".into()],
            }]
        );
        assert_eq!(c.mounts.len(), 2);
        assert_eq!(c.mounts[0].source, "");
        assert_eq!(c.mounts[1].source, "/dev/nvidia0");
        assert!(!c.assume_attached);
        assert_eq!(c.rootfs.as_deref(), Some(Path::new("/b/rootfs")));
        assert!(c.no_new_privileges);
        assert_eq!(c.capabilities.union(), vec!["CAP_CHOWN", "CAP_NET_RAW"]);
        assert_eq!(c.capabilities.inheritable, None);
    }

    #[test]
    fn user_ids_user_namespace_and_cpuset() {
        let read = |text: &str| {
            let node = gojson::parse(text.as_bytes()).unwrap();
            SpecView::from_node(&node).unwrap().container(None)
        };
        let c = read(
            r#"{"process": {"user": {"uid": 1000, "gid": 44, "additionalGids": [5, 6]}},
                "linux": {"uidMappings": [{"containerID": 0, "hostID": 1, "size": 1}],
                          "resources": {"cpu": {"cpus": "0-3", "mems": "0"}}}}"#,
        );
        assert_eq!((c.uid, c.gid), (Some(1000), Some(44)));
        assert_eq!(c.additional_gids, [5, 6]);
        assert!(c.user_namespace);
        assert_eq!(
            (c.cpuset.cpus.as_str(), c.cpuset.mems.as_str()),
            ("0-3", "0")
        );
        assert!(c.cpuset.is_set() && c.cpuset.patchable);
        let c =
            read(r#"{"process": {"user": {}}, "linux": {"resources": {"cpu": {"shares": 2}}}}"#);
        assert_eq!((c.uid, c.gid), (Some(0), Some(0)));
        assert!(!c.user_namespace && !c.cpuset.is_set() && c.cpuset.patchable);
        // Read as Go merges repeats, but not rewritable from one key.
        let c = read(
            r#"{"linux": {"resources": {"cpu": {"cpus": "1"}}}, "Linux": {"resources": {"cpu": {"mems": "0"}}}}"#,
        );
        assert_eq!((c.cpuset.cpus.as_str(), c.cpuset.mems.as_str()), ("1", "0"));
        assert!(!c.cpuset.patchable);
        // Wrong types: runc's error to report, not the view's; not rewritten.
        let c = read(
            r#"{"process": {"user": {"gid": "x"}}, "linux": {"resources": {"cpu": {"cpus": 5}}}}"#,
        );
        assert_eq!(c.gid, Some(0));
        assert!(!c.cpuset.patchable);
        assert!(!read("{}").cpuset.patchable);
    }

    #[test]
    fn mounts_keep_type_options_and_whether_they_can_be_rewritten() {
        let one = br#"{"mounts": [
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "size=65536k"]},
            {"destination": "/x", "type": "none", "source": "/y", "options": ["rbind"], "Options": ["bind"]}]}"#;
        let c = SpecView::from_node(&gojson::parse(one).unwrap())
            .unwrap()
            .container(None);
        assert_eq!(c.mounts[0].kind, "tmpfs");
        assert_eq!(c.mounts[0].options, vec!["nosuid", "size=65536k"]);
        assert!(c.mounts[0].patchable && !c.mounts[0].is_bind());
        // Two keys that fold to `options`: Go's last one wins, and the
        // entry is not rewritten.
        assert_eq!(c.mounts[1].options, vec!["bind"]);
        assert!(!c.mounts[1].patchable && c.mounts[1].is_bind());
        // A repeated `mounts` list merges element by element: nothing of
        // it is rewritten.
        let two = br#"{"mounts": [{"destination": "/dev/shm", "type": "tmpfs"}],
                      "Mounts": [{"options": ["size=1m"]}]}"#;
        let c = SpecView::from_node(&gojson::parse(two).unwrap())
            .unwrap()
            .container(None);
        assert_eq!(c.mounts[0].destination, "/dev/shm");
        assert_eq!(c.mounts[0].options, vec!["size=1m"]);
        assert!(!c.mounts[0].patchable);
    }

    #[test]
    fn wrong_shapes_are_errors_not_panics() {
        assert!(Container::from_spec(&json!([1]), None).is_err());
        assert!(Container::from_spec(&json!({"process": {"env": "x"}}), None).is_err());
        assert!(Container::from_spec(&json!({"process": {"env": [1]}}), None).is_err());
        assert!(Container::from_spec(&json!({"process": 3}), None).is_err());
        assert!(Container::from_spec(&json!({}), None).is_ok());
    }

    #[test]
    fn invalid_utf8_is_read_lossily() {
        let mut bytes = br#"{"process":{"env":["A="#.to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(br#"","B=2"]}}"#);
        let v = parse_spec_bytes(&bytes).unwrap();
        let c = Container::from_spec(&v, None).unwrap();
        assert_eq!(c.env.get("B"), Some("2"));
        assert!(parse_spec_bytes(b"{not json").is_err());
    }
}
