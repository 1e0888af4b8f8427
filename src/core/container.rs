//! A read-only view of one container: what the core decides on. It is built
//! from an OCI config.json by [`crate::oci::spec`] or, for `check --env`,
//! from an environment alone.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The container's environment: `KEY=VALUE` entries in order. Lookups take
/// the last entry for a key, as NVIDIA's toolkit builds its env map
/// (internal/config/image/cuda_image.go NewCUDAImageFromEnv).
#[derive(Clone, Debug, Default)]
pub struct Env {
    entries: Vec<(String, String)>,
}

impl Env {
    pub fn from_entries<I, S>(entries: I) -> Env
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut env = Env::default();
        for e in entries {
            env.push_entry(e.as_ref());
        }
        env
    }

    /// Adds `KEY=VALUE`. An entry without `=` is passed to the process as it
    /// is by runc, and getenv never finds it, so it is skipped here.
    pub fn push_entry(&mut self, entry: &str) {
        if let Some((k, v)) = entry.split_once('=') {
            if !k.is_empty() {
                self.entries.push((k.to_string(), v.to_string()));
            }
        }
    }

    /// Sets a variable, replacing earlier values (`check --env` overrides the spec).
    pub fn set(&mut self, key: &str, value: &str) {
        self.entries.retain(|(k, _)| k != key);
        self.entries.push((key.to_string(), value.to_string()));
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Each distinct variable once, with its effective (last) value, sorted by name.
    pub fn vars(&self) -> BTreeMap<&str, &str> {
        self.entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

/// The five capability sets of `process.capabilities`; None where the spec
/// has no such list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Capabilities {
    pub bounding: Option<Vec<String>>,
    pub effective: Option<Vec<String>>,
    pub inheritable: Option<Vec<String>>,
    pub permitted: Option<Vec<String>>,
    pub ambient: Option<Vec<String>>,
}

impl Capabilities {
    pub const SETS: [&'static str; 5] = [
        "bounding",
        "effective",
        "inheritable",
        "permitted",
        "ambient",
    ];

    pub fn set(&self, name: &str) -> Option<&Vec<String>> {
        match name {
            "bounding" => self.bounding.as_ref(),
            "effective" => self.effective.as_ref(),
            "inheritable" => self.inheritable.as_ref(),
            "permitted" => self.permitted.as_ref(),
            "ambient" => self.ambient.as_ref(),
            _ => None,
        }
    }

    /// Every capability in any set, once.
    pub fn union(&self) -> Vec<&str> {
        let mut all: Vec<&str> = Self::SETS
            .iter()
            .filter_map(|s| self.set(s))
            .flatten()
            .map(|s| s.as_str())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// One hook of the spec, any stage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hook {
    pub path: String,
    pub args: Vec<String>,
}

/// One entry of `mounts`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mount {
    pub source: String,
    pub destination: String,
    /// `type` (`tmpfs`, `bind`, ...; empty when unset).
    pub kind: String,
    /// `options`, in order.
    pub options: Vec<String>,
    /// The spec writes this entry so that gpu-guard can rewrite its
    /// options in place: one `mounts` list, one `options` key in the entry
    /// (crate::oci::spec_file). Anything else is left as it is.
    pub patchable: bool,
    /// What a bind mount's source is on the host, when the caller looked
    /// (pipeline: one stat, through symlinks as mount(2) follows them);
    /// None when not looked at or not a device.
    pub host: Option<MountSource>,
}

/// What a bind mount brings from the host, by what it is, not its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MountSource {
    /// A character device node, by number.
    CharDevice { major: u32, minor: u32 },
    /// A directory of the host's device nodes (on the filesystem of the
    /// host's `/dev`): every node in it comes along.
    DeviceDir,
}

/// One entry of `linux.devices` (runtime-spec config-linux.md "Devices"):
/// runc creates the node in the container as given, without looking at
/// the host (libcontainer/specconv `createDevices`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceNode {
    pub path: String,
    /// `c`, `b`, `u` (unbuffered character) or `p`.
    pub kind: String,
    pub major: i64,
    pub minor: i64,
}

/// One entry of `linux.resources.devices`, the device cgroup's rules
/// (runtime-spec config-linux.md "Device allowlist"): `None` is a wildcard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceRule {
    pub allow: bool,
    /// `a`, `c` or `b`; `""` is `a` (runc specconv `CreateCgroupConfig`).
    pub kind: String,
    pub major: Option<i64>,
    pub minor: Option<i64>,
    /// Any of `r`, `w`, `m`.
    pub access: String,
}

impl Mount {
    /// A bind mount, as runc tells one: type `bind`, or a `bind` or
    /// `rbind` option (runc libcontainer/specconv/spec_linux.go
    /// createLibcontainerMount, parseMountOptions).
    pub fn is_bind(&self) -> bool {
        self.kind == "bind" || self.options.iter().any(|o| o == "bind" || o == "rbind")
    }
}

/// The cpuset a spec gives its container (`linux.resources.cpu`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cpuset {
    /// `cpus`, "" when unset.
    pub cpus: String,
    /// `mems`, "" when unset.
    pub mems: String,
    /// runc reads `linux`, `resources`, `cpu`, `cpus` and `mems` each from
    /// at most one key (crate::oci::cpuset_patch rewrites only such a spec).
    pub patchable: bool,
}

impl Cpuset {
    /// Whether the user, kubelet or engine set a cpuset of its own.
    pub fn is_set(&self) -> bool {
        !self.cpus.trim().is_empty() || !self.mems.trim().is_empty()
    }
}

#[derive(Clone, Debug, Default)]
pub struct Container {
    pub id: Option<String>,
    pub env: Env,
    pub annotations: BTreeMap<String, String>,
    /// `linux.devices[].path`.
    pub devices: Vec<String>,
    /// `linux.devices`, with their numbers.
    pub device_nodes: Vec<DeviceNode>,
    /// `linux.resources.devices`, in order.
    pub device_rules: Vec<DeviceRule>,
    /// Every hook in the spec (all stages), path and args.
    pub hooks: Vec<Hook>,
    /// `mounts[]`: source and destination.
    pub mounts: Vec<Mount>,
    pub capabilities: Capabilities,
    pub no_new_privileges: bool,
    /// `process.rlimits` the spec sets, by type (`RLIMIT_MEMLOCK`): tuning
    /// only raises a limit, never lowers one the container set.
    pub rlimits: BTreeMap<String, Rlimit>,
    /// `process.user.uid`, when the spec has one.
    pub uid: Option<u32>,
    /// `process.user.gid` (0 when the spec has a user without one).
    pub gid: Option<u32>,
    /// `process.user.additionalGids`.
    pub additional_gids: Vec<u32>,
    /// `linux.uidMappings` is not empty: the container's ids are not the
    /// host's (a user namespace).
    pub user_namespace: bool,
    /// `linux.resources.cpu.cpus` and `.mems`, and whether gpu-guard can
    /// set them (core::tuning::numa).
    pub cpuset: Cpuset,
    /// Absolute path of the root filesystem, when known.
    pub rootfs: Option<PathBuf>,
    /// `process.cwd`, when the spec sets it (the loader resolves relative
    /// `LD_LIBRARY_PATH` entries from it).
    pub cwd: Option<String>,
    /// The OCI runtime the runtime wrapper execs for this container, when
    /// known: NVIDIA's runtime there acts on the env's GPU requests.
    pub chained_runtime: Option<String>,
    /// The CRI runtime that made the container, known from outside its
    /// spec (the runtime root the engine invoked the wrapper with); None
    /// elsewhere (the hooks, `check` without `--engine`). Only then are
    /// the spec's CRI facts believed (core::cri_facts).
    pub cri_runtime: Option<crate::core::cri_facts::CriRuntime>,
    /// The caller judges the container as run with GPUs attached (`check
    /// --env` with no spec, like `docker run --gpus`): env requests count
    /// without an attach signal in a spec.
    pub assume_attached: bool,
}

impl Container {
    /// The facts its CRI runtime recorded, as far as they are believed
    /// (core::cri_facts: only with `cri_runtime` known).
    pub fn cri_facts(&self) -> crate::core::cri_facts::CriFacts {
        crate::core::cri_facts::trusted(&self.annotations, self.cri_runtime)
    }

    /// Why its CRI keys cannot all be its runtime's own, if they cannot.
    pub fn cri_conflict(&self) -> Option<String> {
        crate::core::cri_facts::conflict(&self.annotations, self.cri_runtime)
    }

    /// A container described by its environment alone (`check --env`):
    /// there is no spec to say what attaches GPUs, so it is judged as run
    /// with GPUs attached (`docker run --gpus` would).
    pub fn from_env(env: Env) -> Container {
        Container {
            env,
            assume_attached: true,
            // No cpuset, and one a runtime's default spec could be given.
            cpuset: Cpuset {
                patchable: true,
                ..Cpuset::default()
            },
            ..Default::default()
        }
    }
}

/// One `process.rlimits` entry's values (runtime-spec `POSIXRlimit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rlimit {
    pub soft: u64,
    pub hard: u64,
}
