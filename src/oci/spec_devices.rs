//! The device parts of a spec's `linux` object, as runc's Go decoder reads
//! them into runtime-spec's structs (specs-go config.go `LinuxDevice`,
//! `LinuxDeviceCgroup`, `LinuxResources`), with the decoding rules of
//! [`crate::oci::spec`]: `linux.devices` (the nodes runc creates) and
//! `linux.resources.devices` (the device cgroup's rules), with
//! `uidMappings` and the cpuset (`linux.resources.cpu`). GPU detection
//! reads them by number (core::detect, core::device_access).

use crate::core::container::{DeviceNode, DeviceRule};
use crate::oci::gojson::{Node, Value as GoValue};
use crate::oci::spec_decode::{members, pointer, slice, Decode, GoSlice, SpecError, R};

impl Decode for i64 {
    fn decode(&mut self, n: &Node, path: &'static str) -> R {
        match &n.value {
            // Go decodes into int64 only an integer literal that fits
            // (decode.go literalStore: strconv.ParseInt).
            GoValue::Number(s) => *self = s.parse().map_err(|_| SpecError::WrongType(path))?,
            GoValue::Null => {}
            _ => return Err(SpecError::WrongType(path)),
        }
        Ok(())
    }
}

/// A `*int64` field: null clears it, a number sets it.
fn optional_i64(slot: &mut Option<i64>, n: &Node, path: &'static str) -> R {
    if n.is_null() {
        *slot = None;
        return Ok(());
    }
    let mut v = slot.unwrap_or(0);
    v.decode(n, path)?;
    *slot = Some(v);
    Ok(())
}

/// One entry of `linux.devices` (specs-go `LinuxDevice`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct DeviceView {
    path: String,
    kind: String,
    major: i64,
    minor: i64,
}

impl Decode for DeviceView {
    fn decode(&mut self, n: &Node, _: &'static str) -> R {
        members(n, "linux.devices", |k, v| match k {
            "path" => self.path.decode(v, "linux.devices.path"),
            "type" => self.kind.decode(v, "linux.devices.type"),
            "major" => self.major.decode(v, "linux.devices.major"),
            "minor" => self.minor.decode(v, "linux.devices.minor"),
            _ => Ok(()),
        })
    }
}

/// One entry of `linux.resources.devices` (specs-go `LinuxDeviceCgroup`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct RuleView {
    allow: bool,
    kind: String,
    major: Option<i64>,
    minor: Option<i64>,
    access: String,
}

impl Decode for RuleView {
    fn decode(&mut self, n: &Node, _: &'static str) -> R {
        const AT: &str = "linux.resources.devices";
        members(n, AT, |k, v| match k {
            "allow" => self.allow.decode(v, "linux.resources.devices.allow"),
            "type" => self.kind.decode(v, "linux.resources.devices.type"),
            "major" => optional_i64(&mut self.major, v, "linux.resources.devices.major"),
            "minor" => optional_i64(&mut self.minor, v, "linux.resources.devices.minor"),
            "access" => self.access.decode(v, "linux.resources.devices.access"),
            _ => Ok(()),
        })
    }
}

/// `linux.resources` (specs-go `LinuxResources`): the device rules.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct ResourcesView {
    devices: Option<GoSlice<RuleView>>,
    cpu: Option<CpuView>,
    cpu_keys: usize,
    /// A `cpu` value of a type runc refuses.
    cpu_unread: bool,
}

/// `linux.resources.cpu` (specs-go `LinuxCPU`): the cpuset.
#[derive(Clone, Debug, Default, PartialEq)]
struct CpuView {
    cpus: String,
    mems: String,
    cpus_keys: usize,
    mems_keys: usize,
}

impl ResourcesView {
    fn field(&mut self, k: &str, v: &Node) -> R {
        match k {
            "devices" => slice(&mut self.devices, v, "linux.resources.devices"),
            // A cpuset of a type runc refuses is runc's error to report
            // (it then starts nothing), not a reason to misread the rest;
            // such a cpuset is not rewritten. Device rules are read
            // strictly: a GPU must never go unseen.
            "cpu" => {
                self.cpu_keys += 1;
                let mut cpu = self.cpu.clone();
                let read = pointer(&mut cpu, v, "linux.resources.cpu", |c, k, v| match k {
                    "cpus" => {
                        c.cpus_keys += 1;
                        c.cpus.decode(v, "linux.resources.cpu.cpus")
                    }
                    "mems" => {
                        c.mems_keys += 1;
                        c.mems.decode(v, "linux.resources.cpu.mems")
                    }
                    _ => Ok(()),
                });
                match read {
                    Ok(()) => self.cpu = cpu,
                    Err(_) => self.cpu_unread = true,
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// `linux` (specs-go `Linux`): the parts gpu-guard reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LinuxView {
    devices: Option<GoSlice<DeviceView>>,
    /// `uidMappings` as the last key left it: not empty.
    pub(crate) user_namespace: bool,
    resources: Option<ResourcesView>,
    /// Keys of this struct (and its repeats) that fold to `resources`.
    resources_keys: usize,
}

impl LinuxView {
    /// Decodes one member of `linux` (its key folded).
    pub(crate) fn field(&mut self, k: &str, v: &Node) -> R {
        match k {
            "devices" => slice(&mut self.devices, v, "linux.devices"),
            "uidmappings" => {
                self.user_namespace = matches!(&v.value, GoValue::Array(a) if !a.is_empty());
                Ok(())
            }
            "resources" => {
                self.resources_keys += 1;
                pointer(
                    &mut self.resources,
                    v,
                    "linux.resources",
                    ResourcesView::field,
                )
            }
            _ => Ok(()),
        }
    }

    /// The cpuset runc will set, and whether each of its parts is read
    /// from one key only.
    pub(crate) fn cpuset(&self, linux_keys: usize) -> crate::core::container::Cpuset {
        let r = self.resources.as_ref();
        let c = r.and_then(|r| r.cpu.as_ref());
        crate::core::container::Cpuset {
            cpus: c.map(|c| c.cpus.clone()).unwrap_or_default(),
            mems: c.map(|c| c.mems.clone()).unwrap_or_default(),
            patchable: linux_keys <= 1
                && self.resources_keys <= 1
                && r.map_or(true, |r| r.cpu_keys <= 1 && !r.cpu_unread)
                && c.map_or(true, |c| c.cpus_keys <= 1 && c.mems_keys <= 1),
        }
    }

    fn device_items(&self) -> &[DeviceView] {
        self.devices.as_ref().map_or(&[], |d| d.items())
    }

    /// `linux.devices[].path`, in order.
    pub(super) fn paths(&self) -> Vec<String> {
        self.device_items().iter().map(|d| d.path.clone()).collect()
    }

    /// `linux.devices`, with their numbers.
    pub(super) fn nodes(&self) -> Vec<DeviceNode> {
        self.device_items()
            .iter()
            .map(|d| DeviceNode {
                path: d.path.clone(),
                kind: d.kind.clone(),
                major: d.major,
                minor: d.minor,
            })
            .collect()
    }

    /// `linux.resources.devices`, in order.
    pub(super) fn rules(&self) -> Vec<DeviceRule> {
        let Some(rules) = self.resources.as_ref().and_then(|r| r.devices.as_ref()) else {
            return Vec::new();
        };
        rules
            .items()
            .iter()
            .map(|r| DeviceRule {
                allow: r.allow,
                kind: r.kind.clone(),
                major: r.major,
                minor: r.minor,
                access: r.access.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::oci::gojson;
    use crate::oci::spec::SpecView;

    #[test]
    fn devices_and_rules_as_go_decodes_them() {
        let text = br#"{"linux": {
            "devices": [{"path": "/dev/g0", "type": "c", "major": 195, "minor": 0}],
            "resources": {"devices": [
                {"allow": false, "access": "rwm"},
                {"allow": true, "type": "c", "major": 195, "minor": null, "access": "rw"}],
              "Devices": [{"allow": false}, {"major": 508}]}}}"#;
        let c = SpecView::from_node(&gojson::parse(text).unwrap())
            .unwrap()
            .container(None);
        assert_eq!(c.devices, vec!["/dev/g0"]);
        assert_eq!(
            (c.device_nodes[0].kind.as_str(), c.device_nodes[0].major),
            ("c", 195)
        );
        // `Devices` again decodes element by element into the same slice
        // (decode.go array): the second rule keeps its type and access.
        assert_eq!(c.device_rules.len(), 2);
        assert!(!c.device_rules[0].allow);
        assert_eq!(c.device_rules[0].access, "rwm");
        assert_eq!(c.device_rules[1].major, Some(508));
        assert_eq!(c.device_rules[1].minor, None);
        assert_eq!(c.device_rules[1].access, "rw");
        for bad in [
            &br#"{"linux": {"devices": [{"major": 1.5}]}}"#[..],
            br#"{"linux": {"resources": {"devices": [{"major": "195"}]}}}"#,
        ] {
            assert!(SpecView::from_node(&gojson::parse(bad).unwrap()).is_err());
        }
    }
}
