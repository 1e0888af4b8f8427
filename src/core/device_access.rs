//! Which GPU device nodes a container can open through its device cgroup
//! rules (`linux.resources.devices`), whatever the nodes are called.
//!
//! `--device-cgroup-rule 'c 195:* rwm'` with `CAP_MKNOD` gives a working
//! GPU without a single `/dev/nvidia*` path in the spec: the container
//! creates `/dev/whatever c 195 0` itself. A rule gives a GPU only when the
//! container can also get the node:
//! - it holds `CAP_MKNOD` in any capability set runc applies (it may raise
//!   it into its effective set): runc appends `c *:* m` to every
//!   container's rules (libcontainer/specconv/spec_linux.go
//!   `AllowedDevices`, "allow mknod for any device"), so mknod is never
//!   what the cgroup refuses;
//! - the host's device nodes are mounted in (a bind mount of `/`, `/dev`
//!   or a directory under it, a directory on the host's `/dev`
//!   filesystem, or a `devtmpfs` mount);
//! - or the node is in `linux.devices` or bind-mounted, which
//!   `core::detect` counts by itself.
//!
//! The rules are evaluated as runc evaluates them, for cgroup v1 and v2
//! alike (opencontainers/cgroups devices/devices_emulator.go): a new
//! cgroup denies everything; a rule of type `a` (whatever its numbers) is
//! a wildcard that resets to deny-all or allow-all; in deny-all mode an
//! allow rule adds an exception and a deny rule removes one (only an
//! exact one: a hole cannot be punched in a wildcard, runc then fails the
//! create); in allow-all mode the other way round. A device may be opened
//! for read or write when an exception with `r` or `w` covers it
//! (deny-all), or when none does (allow-all).
//!
//! What a wildcard means for detection: a rule that names NVIDIA's major
//! (`c 195:* rw`) asks for NVIDIA GPUs and counts wherever it is. A rule
//! that names every major (`a *:* rwm`, `c *:* rwm`, Kubernetes'
//! `privileged: true`) gives the GPUs only on a host whose kernel has
//! NVIDIA's driver registered (`/proc/devices`): there it counts, as all
//! GPUs, since the container can open every one; on a host without
//! NVIDIA's driver it gives none, and a privileged system container there
//! (a CNI or CSI daemon) is no GPU container. A privileged docker or
//! Kubernetes container on a GPU host also lists every host device node
//! in `linux.devices` (moby oci_linux.go `WithDevices`, containerd
//! `WithHostDevices`), so it is a GPU container by its nodes anyway.

use crate::core::container::{Container, DeviceRule};
use crate::core::device_table::{majors_of, DeviceClass, HostMajors, TABLE};
use std::collections::{BTreeMap, BTreeSet};

/// Access bits of a rule.
const R: u8 = 1;
const W: u8 = 2;
const M: u8 = 4;

fn bits(access: &str) -> u8 {
    access.bytes().fold(0, |b, c| match c {
        b'r' => b | R,
        b'w' => b | W,
        b'm' => b | M,
        _ => b,
    })
}

/// An exception's key: type (`c`/`b`), major and minor (-1: wildcard).
type Key = (u8, i64, i64);

/// The device cgroup runc sets up from the rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cgroup {
    /// Allow-all mode (a deny-list); a new cgroup is deny-all.
    default_allow: bool,
    exceptions: BTreeMap<Key, u8>,
}

/// How a device is allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// An exception that names its major.
    ByMajor,
    /// A rule that names every major (a wildcard, allow-all mode).
    AnyMajor,
}

impl Cgroup {
    /// The cgroup runc builds from `rules`, in order.
    pub fn from_rules(rules: &[DeviceRule]) -> Cgroup {
        let mut cg = Cgroup::default();
        for r in rules {
            cg.apply(r);
        }
        cg
    }

    fn apply(&mut self, r: &DeviceRule) {
        let kind = match r.kind.as_str() {
            "" | "a" => {
                // runc's emulator: a type-`a` rule is the wildcard, its
                // numbers notwithstanding.
                *self = Cgroup {
                    default_allow: r.allow,
                    exceptions: BTreeMap::new(),
                };
                return;
            }
            "c" => b'c',
            "b" => b'b',
            // runc refuses the spec (stringToCgroupDeviceRune).
            _ => return,
        };
        let key = (kind, r.major.unwrap_or(-1), r.minor.unwrap_or(-1));
        let perms = bits(&r.access);
        if r.allow != self.default_allow {
            *self.exceptions.entry(key).or_insert(0) |= perms;
        } else if !self.punches_hole(key, perms) {
            let left = self.exceptions.get(&key).copied().unwrap_or(0) & !perms;
            if left == 0 {
                self.exceptions.remove(&key);
            } else {
                self.exceptions.insert(key, left);
            }
        }
        // A hole in a wildcard exception: runc fails the create
        // (devices_emulator.go rmRule); the rule changes nothing here.
    }

    fn punches_hole(&self, (t, major, minor): Key, perms: u8) -> bool {
        [(t, -1, minor), (t, major, -1), (t, -1, -1)]
            .into_iter()
            .filter(|k| *k != (t, major, minor))
            .any(|k| self.exceptions.get(&k).is_some_and(|p| p & perms != 0))
    }

    /// Whether the character device `major:minor` may be opened for read
    /// or write, and how; None when it may not.
    pub fn opens(&self, major: u32, minor: u32) -> Option<Grant> {
        let (major, minor) = (i64::from(major), i64::from(minor));
        let covering = self.exceptions.iter().filter(|((t, ma, mi), _)| {
            *t == b'c' && (*ma == -1 || *ma == major) && (*mi == -1 || *mi == minor)
        });
        if self.default_allow {
            let denied = [R, W]
                .iter()
                .all(|b| covering.clone().any(|(_, p)| p & b != 0));
            return (!denied).then_some(Grant::AnyMajor);
        }
        let mut grant = None;
        for ((_, ma, _), p) in covering {
            if p & (R | W) != 0 {
                if *ma == major {
                    return Some(Grant::ByMajor);
                }
                grant = Some(Grant::AnyMajor);
            }
        }
        grant
    }

    /// Minors the exceptions name (for any major).
    fn named_minors(&self) -> BTreeSet<u32> {
        self.exceptions
            .keys()
            .filter_map(|(_, _, mi)| u32::try_from(*mi).ok())
            .collect()
    }
}

/// GPU nodes of one class the rules let the container open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleGrant {
    pub class: &'static DeviceClass,
    pub major: u32,
    /// The minor granted; None: every minor of the class.
    pub minor: Option<u32>,
    pub grant: Grant,
}

impl RuleGrant {
    /// The grant as a rule would be written: `c 195:* (every GPU)`.
    pub fn describe(&self) -> String {
        let minor = self.minor.map_or("*".to_string(), |m| m.to_string());
        let how = match self.grant {
            Grant::ByMajor => "",
            Grant::AnyMajor => ", by a rule for every device",
        };
        format!("c {}:{minor} ({}{how})", self.major, self.class.nodes)
    }
}

/// What lets the container create or reach device nodes the rules allow:
/// `CAP_MKNOD` or the host's device nodes mounted in; None: nothing.
pub fn node_source(c: &Container) -> Option<String> {
    if c.capabilities.union().contains(&"CAP_MKNOD") {
        return Some("CAP_MKNOD".into());
    }
    c.mounts
        .iter()
        .find(|m| brings_host_devices(m))
        .map(|m| format!("the host's device nodes mounted at {}", m.destination))
}

/// A mount that brings the host's device nodes: `devtmpfs`, or a bind
/// mount of `/`, `/dev` or below, or of a directory of the host's `/dev`.
fn brings_host_devices(m: &crate::core::container::Mount) -> bool {
    use crate::core::container::MountSource;
    if m.kind == "devtmpfs" {
        return true;
    }
    if !m.is_bind() {
        return false;
    }
    if m.host == Some(MountSource::DeviceDir) {
        return true;
    }
    let parts: Vec<&str> = m
        .source
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    m.source.starts_with('/') && (parts.is_empty() || parts[0] == "dev")
}

/// The GPU device nodes the container can open through its rules and
/// create or reach (see the module doc), on a host with `host`'s majors.
/// Empty when it has no rule, or no way to get a node.
pub fn rule_grants(c: &Container, host: &HostMajors) -> Vec<RuleGrant> {
    if c.device_rules.is_empty() || node_source(c).is_none() {
        return Vec::new();
    }
    let cg = Cgroup::from_rules(&c.device_rules);
    let named = cg.named_minors();
    let mut out = Vec::new();
    for class in TABLE {
        let wildcard_counts = host.has(class.vendor);
        for major in majors_of(class, host) {
            let (lo, hi) = class.minors;
            let in_class: Vec<u32> = named.range(lo..=hi).copied().collect();
            // A minor no rule names stands for all the others.
            let rest = (lo..=hi).find(|m| !named.contains(m));
            let counts = |g: Option<Grant>| g.filter(|g| *g == Grant::ByMajor || wildcard_counts);
            if let Some(g) = rest.and_then(|m| counts(cg.opens(major, m))) {
                out.push(RuleGrant {
                    class,
                    major,
                    minor: None,
                    grant: g,
                });
                continue;
            }
            for m in in_class {
                if let Some(g) = counts(cg.opens(major, m)) {
                    out.push(RuleGrant {
                        class,
                        major,
                        minor: Some(m),
                        grant: g,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        allow: bool,
        kind: &str,
        major: Option<i64>,
        minor: Option<i64>,
        access: &str,
    ) -> DeviceRule {
        DeviceRule {
            allow,
            kind: kind.into(),
            major,
            minor,
            access: access.into(),
        }
    }

    #[test]
    fn the_cgroup_is_runcs() {
        let deny_all = rule(false, "a", None, None, "rwm");
        // docker's default: deny all, then its allow list.
        let cg = Cgroup::from_rules(&[deny_all.clone(), rule(true, "c", Some(1), Some(3), "rwm")]);
        assert_eq!(cg.opens(195, 0), None);
        assert_eq!(cg.opens(1, 3), Some(Grant::ByMajor));
        // --device-cgroup-rule 'c 195:* rwm'
        let cg = Cgroup::from_rules(&[deny_all.clone(), rule(true, "c", Some(195), None, "rwm")]);
        assert_eq!(cg.opens(195, 7), Some(Grant::ByMajor));
        // mknod alone opens nothing; a later deny of the same rule removes it.
        let cg = Cgroup::from_rules(&[
            rule(true, "c", Some(195), None, "rw"),
            rule(true, "c", Some(195), Some(0), "m"),
            rule(false, "c", Some(195), None, "rw"),
        ]);
        assert_eq!(cg.opens(195, 0), None);
        // A hole cannot be punched in a wildcard exception (runc fails).
        let cg = Cgroup::from_rules(&[
            rule(true, "c", Some(195), None, "rw"),
            rule(false, "c", Some(195), Some(0), "rw"),
        ]);
        assert_eq!(cg.opens(195, 0), Some(Grant::ByMajor));
        // Privileged: allow all; a type-a rule is a wildcard whatever its numbers.
        for r in [
            rule(true, "a", None, None, "rwm"),
            rule(true, "", Some(10), Some(1), "r"),
        ] {
            let cg = Cgroup::from_rules(&[deny_all.clone(), r]);
            assert_eq!(cg.opens(195, 0), Some(Grant::AnyMajor));
        }
        // c *:* rw names no major; a deny exception in allow-all mode closes it.
        let cg = Cgroup::from_rules(&[rule(true, "c", None, None, "rw")]);
        assert_eq!(cg.opens(195, 3), Some(Grant::AnyMajor));
        let cg = Cgroup::from_rules(&[
            rule(true, "a", None, None, "rwm"),
            rule(false, "c", Some(195), None, "rw"),
        ]);
        assert_eq!(cg.opens(195, 3), None);
        assert_eq!(cg.opens(10, 229), Some(Grant::AnyMajor));
    }
}
