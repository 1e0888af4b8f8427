//! Is this a GPU container, and which GPUs does it ask for?
//!
//! A container asks for GPUs in one of two ways (NVIDIA's container toolkit,
//! internal/config/image and internal/modifier/cdi):
//!
//! Requests that something else must act on ("env requests"):
//! - `NVIDIA_VISIBLE_DEVICES`: `all`, `none` (a GPU container without
//!   devices), a comma list of indices, GPU UUIDs, MIG UUIDs, `gpu:mig`
//!   pairs or fully qualified CDI names (`nvidia.com/gpu=0`,
//!   `runtime.nvidia.com/gpu=all`), mixed freely; `void`, empty or unset
//!   mean no GPU; a legacy image (`CUDA_VERSION` set, `NVIDIA_REQUIRE_CUDA`
//!   not) with it unset means `all` (nvidia-container-toolkit
//!   internal/config/image/cuda_image.go devicesFromEnvvars).
//! - `/dev/null` bind mounts under `/var/run/nvidia-container-devices/`
//!   (the device plugin's volume-mounts strategy), by name or as
//!   `cdi/<vendor>/<class>/<device>` (cuda_image.go visibleDevicesFromMounts,
//!   cdiDeviceMountRequest).
//!
//! NVIDIA's own settings decide which of the two it acts on
//! (`detect.nvidia_config`, [`NvidiaDeviceSettings`]; cuda_image.go
//! `VisibleDevices`): the mounts only with
//! `accept-nvidia-visible-devices-as-volume-mounts` (then they win over the
//! env), the env in a container without `CAP_SYS_ADMIN` in its bounding set
//! only with `accept-nvidia-visible-devices-envvar-when-unprivileged`. A
//! request NVIDIA ignores attaches nothing, and is not one here either.
//!
//! Under plain runc such a request attaches nothing: the container gets no
//! GPU, so judging it against the driver would refuse CPU-only jobs in CUDA
//! images. It counts only when something will attach GPUs (or with
//! `detect.env_requests = "always"`, or when the caller assumes GPUs
//! attached, as `check --env` does):
//! - NVIDIA's hook in the spec: `nvidia-container-runtime-hook` (legacy
//!   mode, docker `--gpus`), `nvidia-cdi-hook`, or `nvidia-ctk` run as `hook`
//!   (CDI specs; internal/discover/hooks.go getFixedArgsForCDIHookCLI);
//! - NVIDIA's runtime as the wrapper's real runtime
//!   (`nvidia-container-runtime`, `.cdi`, `.legacy`): it turns the env into
//!   CDI edits or its hook (internal/modifier/cdi.go);
//! - either of the attached forms below.
//!
//! Attached forms, GPU containers by themselves:
//! - CDI requests of an NVIDIA kind in `cdi.k8s.io/*` annotations (and the
//!   device plugin's `nvidia.cdi.k8s.io/*`);
//! - NVIDIA's device nodes, by number whatever their path
//!   (core::device_table: major 195, and the `nvidia-uvm`, `nvidia-caps`,
//!   ... majors of the host's `/proc/devices`), in `linux.devices` or
//!   bind-mounted (what CDI injection, `--device` and
//!   `-v /dev/nvidia0:/dev/nvidia0` leave), and `/dev/nvidia*` paths;
//! - a device cgroup rule that lets the container open such nodes when
//!   it can create or reach them (core::device_access: `CAP_MKNOD`, the
//!   host's `/dev` mounted in).
//!
//! NVIDIA's hook alone is not a request: nvidia-container-runtime in its
//! standard mode adds it to every container and it acts only when devices
//! are requested (cmd/nvidia-container-runtime/README.md).
//!
//! CDI kinds that name NVIDIA GPUs: `nvidia.com/gpu` (nvidia-ctk cdi
//! generate), `nvidia.com/mig`, `runtime.nvidia.com/gpu` (the runtime's
//! just-in-time CDI, internal/modifier/cdi.go automaticDeviceKind), plus
//! `detect.cdi_kinds`. A device of another kind is not an NVIDIA GPU request.

mod devices;

pub use devices::{AmdNodes, RenderNode};

use crate::core::container::Container;
use crate::core::facts::HostFacts;
use crate::core::policy::{DetectConfig, EnvRequests, NvidiaDeviceSettings};
use std::collections::HashSet;

/// Where a request for GPUs, or what attaches them, came from, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    Env(String),
    LegacyImage,
    Cdi(String),
    /// A node in `linux.devices`: its path, and its number and class when
    /// known (`/dev/g0 (c 195:0, /dev/nvidiaN)`).
    DeviceNode(String),
    /// A GPU device bind-mounted (its destination, else its source; with
    /// the number of the host's node when it was looked at).
    DeviceMount(String),
    /// A device cgroup rule that lets the container open GPU nodes it can
    /// create or reach (core::device_access).
    DeviceRule(String),
    NvidiaHook(String),
    /// The runtime wrapper chains to NVIDIA's runtime (its path).
    NvidiaRuntime(String),
    VolumeMounts,
    /// `AMD_VISIBLE_DEVICES` (AMD's container runtime), where GPUs count as
    /// attached.
    AmdVisibleDevices(String),
}

impl Signal {
    pub fn describe(&self) -> String {
        match self {
            Signal::Env(v) => format!("NVIDIA_VISIBLE_DEVICES={v}"),
            Signal::LegacyImage => {
                "legacy CUDA image (CUDA_VERSION set, NVIDIA_VISIBLE_DEVICES unset)".into()
            }
            Signal::Cdi(k) => format!("CDI annotation {k}"),
            Signal::DeviceNode(p) => format!("device {p}"),
            Signal::DeviceMount(p) => format!("bind mount {p}"),
            Signal::DeviceRule(r) => format!("device cgroup rule {r}"),
            Signal::NvidiaHook(p) => format!("NVIDIA hook {p}"),
            Signal::NvidiaRuntime(p) => format!("NVIDIA runtime {p}"),
            Signal::VolumeMounts => "NVIDIA volume-mounts device list".into(),
            Signal::AmdVisibleDevices(v) => format!("AMD_VISIBLE_DEVICES={v}"),
        }
    }
}

/// One requested device, as the container named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRef {
    /// The name resolved against the host: an index, `gpu:mig` pair, UUID,
    /// MIG UUID or `minor:N` (a CDI name's kind is stripped).
    pub name: String,
    /// Which signal named it (`NVIDIA_VISIBLE_DEVICES`, an annotation key, `linux.devices`).
    pub via: String,
    /// How the container wrote it, when that differs from `name`
    /// (`nvidia.com/gpu=gpu1`), for messages.
    pub written: Option<String>,
}

impl DeviceRef {
    /// The device as the container wrote it.
    pub fn shown(&self) -> String {
        match (&self.written, self.name.strip_prefix("minor:")) {
            (Some(w), _) => w.clone(),
            (None, Some(m)) => format!("/dev/nvidia{m}"),
            (None, None) => self.name.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub all: bool,
    pub devices: Vec<DeviceRef>,
}

#[derive(Clone, Debug, Default)]
pub struct Detection {
    pub gpu: bool,
    pub signals: Vec<Signal>,
    pub request: Request,
    /// The env request that nothing will attach (`detect.env_requests =
    /// "when-attached"`), described; the container is then not a GPU container.
    pub unattached_env: Option<String>,
    /// The fully qualified CDI names of NVIDIA kinds asked for
    /// (`nvidia.com/gpu=all`, `k8s.device-plugin.nvidia.com/gpu=GPU-...`),
    /// once each in the order first named: the devices whose CDI specs
    /// must hold for the container to start (core::cdi).
    pub cdi_devices: Vec<String>,
    /// AMD device nodes the container gets (`/dev/kfd`, DRM render nodes;
    /// core::device_table), or its `AMD_VISIBLE_DEVICES` where GPUs count
    /// as attached: they make a GPU container, whose AMD GPUs
    /// core::amd::visible names.
    pub amd_signals: Vec<Signal>,
    /// The container is a GPU container through AMD's signals alone: no
    /// NVIDIA GPU is asked for, so NVIDIA's checks (its driver, CUDA
    /// requirements) do not apply and a CUDA image is a `vendor` finding.
    pub amd_only: bool,
    /// The devices of AMD's CDI kind (`amd.com/gpu=1`, `amd.com/gpu=all`)
    /// asked for in CDI annotations: `name` is the device part, `written`
    /// the qualified name. core::amd::visible says which GPUs they are;
    /// they are in `cdi_devices` too, for the spec check (core::cdi).
    pub amd_cdi: Vec<DeviceRef>,
    /// AMD's device nodes, which of them (devices::AmdNodes): the render
    /// nodes by minor, whether every render node or `/dev/kfd` is given.
    pub amd_nodes: AmdNodes,
    /// Names in `request.devices`: a list of 100,000 names must not cost
    /// 100,000² comparisons.
    named: HashSet<String>,
    /// Names in `cdi_devices`, for the same reason.
    cdi_named: HashSet<String>,
}

const VOLUME_MOUNTS_DIR: &str = "/var/run/nvidia-container-devices";
/// Hook binaries: the legacy hook (and its old name), the CDI hook.
const NVIDIA_HOOKS: &[&str] = &[
    "nvidia-container-runtime-hook",
    "nvidia-container-toolkit",
    "nvidia-cdi-hook",
];
/// nvidia-ctk runs CDI hooks as `nvidia-ctk hook ...`.
const NVIDIA_CTK: &str = "nvidia-ctk";
/// NVIDIA's runtime and its mode-specific names (nvidia-container-toolkit
/// cmd/nvidia-container-runtime.cdi, cmd/nvidia-container-runtime.legacy).
const NVIDIA_RUNTIMES: &[&str] = &[
    "nvidia-container-runtime",
    "nvidia-container-runtime.cdi",
    "nvidia-container-runtime.legacy",
];
const CDI_PREFIXES: &[&str] = &["cdi.k8s.io/", "nvidia.cdi.k8s.io/"];
/// The CDI kind of AMD's GPUs (core::cdi::AMD_KIND): `amd-ctk cdi
/// generate` writes a device per GPU, named by its number, and `all`
/// (ROCm/container-toolkit internal/cdi/cdi.go `GenerateSpec`).
pub const AMD_CDI_KIND: &str = crate::core::cdi::AMD_KIND;
/// CDI kinds that always name NVIDIA GPUs.
const BUILTIN_CDI_KINDS: &[&str] = &["nvidia.com/gpu", "nvidia.com/mig", "runtime.nvidia.com/gpu"];

fn is_legacy_image(c: &Container) -> bool {
    let cuda = c.env.get("CUDA_VERSION").unwrap_or("");
    let req = c.env.get("NVIDIA_REQUIRE_CUDA").unwrap_or("");
    !cuda.is_empty() && req.is_empty()
}

/// The last path component (a hook path or runtime path may be bare).
fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// One entry of a device list.
enum Entry<'a> {
    /// A plain name (index, UUID, MIG UUID, `gpu:mig`, `all`).
    Plain(&'a str),
    /// A fully qualified CDI name of an NVIDIA kind: its device part.
    Nvidia(&'a str),
    /// A fully qualified CDI name of another vendor's kind.
    Other,
}

/// Reads one entry: `vendor/class=device` is a CDI name (as the CDI
/// parser's IsQualifiedName splits it: kind before the first `=`, with a
/// `/` in it), anything else a plain name.
fn entry<'a>(name: &'a str, kinds: &[&str]) -> Entry<'a> {
    match name.split_once('=') {
        Some((kind, dev)) if kind.contains('/') => {
            if kinds.contains(&kind) {
                Entry::Nvidia(dev)
            } else {
                Entry::Other
            }
        }
        _ => Entry::Plain(name),
    }
}

/// A CDI device name as a plain one: nvidia-ctk's `type-index` naming
/// strategy calls GPU 0 `gpu0` and MIG device 1 of GPU 0 `mig0:1`
/// (pkg/nvcdi/namer.go); the `index` and `uuid` strategies use the plain
/// forms already.
fn cdi_device(dev: &str) -> String {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(n) = dev.strip_prefix("gpu").filter(|n| digits(n)) {
        return n.to_string();
    }
    if let Some((g, m)) = dev.strip_prefix("mig").and_then(|r| r.split_once(':')) {
        if digits(g) && digits(m) {
            return format!("{g}:{m}");
        }
    }
    dev.to_string()
}

impl Detection {
    /// Records a requested device (`all` sets the whole-host flag), once
    /// per name, remembering the first signal that named it.
    fn add(&mut self, name: &str, via: &str, written: Option<&str>) {
        if name == "all" {
            self.request.all = true;
        } else if self.named.insert(name.to_string()) {
            self.request.devices.push(DeviceRef {
                name: name.to_string(),
                via: via.to_string(),
                written: written.filter(|w| *w != name).map(String::from),
            });
        }
    }

    /// Records one list entry (plain or CDI); false when it is another
    /// vendor's CDI device, which asks for no NVIDIA GPU.
    fn add_entry(&mut self, raw: &str, via: &str, kinds: &[&str]) -> bool {
        match entry(raw, kinds) {
            Entry::Plain(name) => self.add(name, via, None),
            Entry::Nvidia(dev) => match dev {
                // `none` asks for no device, as the plain form does.
                "" | "none" => {}
                _ => {
                    self.add(&cdi_device(dev), via, Some(raw));
                    self.add_cdi(raw);
                }
            },
            Entry::Other => return false,
        }
        true
    }

    /// Records a qualified CDI name once; false when it was recorded before.
    fn add_cdi(&mut self, qualified: &str) -> bool {
        let new = self.cdi_named.insert(qualified.to_string());
        if new {
            self.cdi_devices.push(qualified.to_string());
        }
        new
    }

    /// Records a device of AMD's CDI kind (`dev` its device part), once.
    fn add_amd_cdi(&mut self, qualified: &str, dev: &str, via: &str) {
        if !dev.is_empty() && dev != "none" && self.add_cdi(qualified) {
            self.amd_cdi.push(DeviceRef {
                name: dev.to_string(),
                via: via.to_string(),
                written: Some(qualified.to_string()),
            });
        }
    }

    fn merge(&mut self, other: Detection) {
        for q in &other.cdi_devices {
            self.add_cdi(q);
        }
        self.gpu |= other.gpu;
        self.signals.extend(other.signals);
        self.request.all |= other.request.all;
        for d in other.request.devices {
            if self.named.insert(d.name.clone()) {
                self.request.devices.push(d);
            }
        }
    }
}

/// The CDI kinds whose devices are NVIDIA GPUs: the built-in ones and
/// `detect.cdi_kinds`.
pub fn nvidia_cdi_kinds(cfg: &DetectConfig) -> Vec<&str> {
    let mut kinds: Vec<&str> = BUILTIN_CDI_KINDS.to_vec();
    kinds.extend(cfg.cdi_kinds.iter().map(String::as_str));
    kinds
}

pub use devices::reads_host_majors;

/// Classifies a container under the default detection policy.
pub fn classify(c: &Container) -> Detection {
    classify_with(c, &DetectConfig::default())
}

/// Classifies a container. Pure: reads only the container view and the
/// policy. Signals are read in this order (the order of `signals` and of
/// first naming a device): env requests, CDI annotations, device nodes and
/// mounts, then what attaches GPUs.
pub fn classify_with(c: &Container, cfg: &DetectConfig) -> Detection {
    let kinds = nvidia_cdi_kinds(cfg);

    let mut env = Detection::default();
    env_request_signals(c, &kinds, &cfg.nvidia, &mut env);
    let mut attached = Detection::default();
    cdi_signals(c, &kinds, &mut attached);
    devices::signals(c, &cfg.majors, &mut attached);
    let attachers = attach_signals(c);

    let counts = attached.gpu
        || !attachers.is_empty()
        || c.assume_attached
        || cfg.env_requests == EnvRequests::Always;
    let mut d = Detection::default();
    if env.gpu && !counts {
        let what: Vec<String> = env.signals.iter().map(Signal::describe).collect();
        d.unattached_env = Some(what.join(", "));
        d.signals = env.signals;
    } else {
        d.merge(env);
    }
    if !attached.amd_nodes.kfd && attached.amd_cdi.is_empty() {
        // Render nodes without `/dev/kfd` give graphics and video only
        // (VA-API, Vulkan, OpenGL), often of another vendor's GPU: NVIDIA's
        // CDI specs list nvidia-drm's render nodes, media servers get an
        // iGPU's. ROCm computes through amdkfd: ROCR-Runtime opens
        // `/dev/kfd` before any render node (libhsakmt `hsaKmtOpenKFD`),
        // and AMD's docs give containers both (`--device=/dev/kfd
        // --device=/dev/dri`). Such a container asks for no AMD GPU.
        attached.amd_signals.clear();
    }
    d.amd_signals = std::mem::take(&mut attached.amd_signals);
    d.amd_cdi = std::mem::take(&mut attached.amd_cdi);
    d.amd_nodes = std::mem::take(&mut attached.amd_nodes);
    if c.assume_attached || !d.amd_signals.is_empty() || chains_amd_runtime(c) {
        if let Some(v) = amd_env_request(c) {
            d.amd_signals.push(Signal::AmdVisibleDevices(v.to_string()));
        }
    }
    d.merge(attached);
    d.signals.extend(attachers);
    if !d.gpu && !d.amd_signals.is_empty() {
        d.gpu = true;
        d.amd_only = true;
    }
    d
}

/// AMD's runtime behind the wrapper (`install --chain-runtime amd`):
/// `amd-container-runtime` adds the GPUs `AMD_VISIBLE_DEVICES` names to the
/// spec before it execs runc (ROCm/container-toolkit internal/oci
/// `AddGPUDevices`), so the env attaches GPUs there as NVIDIA's runtime
/// makes `NVIDIA_VISIBLE_DEVICES` do.
fn chains_amd_runtime(c: &Container) -> bool {
    c.chained_runtime
        .as_deref()
        .is_some_and(|rt| basename(rt) == AMD_RUNTIME)
}

/// AMD's runtime binary (ROCm/container-toolkit cmd/container-runtime).
pub const AMD_RUNTIME: &str = "amd-container-runtime";

/// `AMD_VISIBLE_DEVICES` when it asks for GPUs (set, not empty, not
/// `none`/`void`), as AMD's container runtime reads it
/// (core::amd::visible).
pub fn amd_env_request(c: &Container) -> Option<&str> {
    let v = c.env.get("AMD_VISIBLE_DEVICES")?.trim();
    (!v.is_empty() && v != "none" && v != "void").then_some(v)
}

/// `NVIDIA_VISIBLE_DEVICES` (or, unset, the legacy-image rule) and the
/// volume-mounts device list: the requests NVIDIA's runtime or hook acts on,
/// as its settings `nv` let it.
fn env_request_signals(
    c: &Container,
    kinds: &[&str],
    nv: &NvidiaDeviceSettings,
    d: &mut Detection,
) {
    if nv.accept_volume_mounts && volume_mount_signals(c, kinds, d) {
        return;
    }
    // NVIDIA's privileged test: CAP_SYS_ADMIN in the bounding set
    // (internal/config/image/privileged.go, `IsPrivileged`).
    let privileged = c.capabilities.bounding.as_ref().is_some_and(|b| {
        b.iter()
            .any(|x| x.trim().eq_ignore_ascii_case("CAP_SYS_ADMIN"))
    });
    if !nv.accept_envvar_unprivileged && !privileged {
        return;
    }
    let Some(v) = c.env.get("NVIDIA_VISIBLE_DEVICES") else {
        if is_legacy_image(c) {
            d.gpu = true;
            d.request.all = true;
            d.signals.push(Signal::LegacyImage);
        }
        return;
    };
    let v = v.trim();
    match v {
        "" | "void" => {}
        "none" => {
            d.gpu = true;
            d.signals.push(Signal::Env(v.to_string()));
        }
        // The device plugin's marker for the volume-mounts strategy with no
        // device mounted: a GPU request naming no device.
        VOLUME_MOUNTS_DIR => {
            d.gpu = true;
            d.signals.push(Signal::VolumeMounts);
        }
        list => {
            let mut nvidia = false;
            for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                nvidia |= d.add_entry(name, "NVIDIA_VISIBLE_DEVICES", kinds);
            }
            if nvidia {
                d.gpu = true;
                d.signals.push(Signal::Env(list.to_string()));
            }
        }
    }
}

/// `/dev/null` mounted at `/var/run/nvidia-container-devices/<device>` or
/// `.../cdi/<vendor>/<class>/<device>` (or `.../cdi/<vendor>/<class>=<device>`);
/// `imex/` channels name no GPU. True when any names an NVIDIA device:
/// NVIDIA then takes the list from the mounts, not the env
/// (cuda_image.go VisibleDevices).
fn volume_mount_signals(c: &Container, kinds: &[&str], d: &mut Detection) -> bool {
    let via = "NVIDIA_VISIBLE_DEVICES (volume mounts)";
    let mut found = false;
    for m in &c.mounts {
        if m.source.trim_end_matches('/') != "/dev/null" {
            continue;
        }
        let Some(rest) = m.destination.strip_prefix(VOLUME_MOUNTS_DIR) else {
            continue;
        };
        if !rest.starts_with('/') {
            continue;
        }
        let dev = rest.trim_matches('/');
        if dev.is_empty() || dev.starts_with("imex/") {
            continue;
        }
        let named = match dev.strip_prefix("cdi/") {
            Some(cdi) => {
                let qualified = if cdi.contains('=') {
                    cdi.to_string()
                } else {
                    match cdi.splitn(3, '/').collect::<Vec<_>>()[..] {
                        [vendor, class, name] => format!("{vendor}/{class}={name}"),
                        _ => continue,
                    }
                };
                d.add_entry(&qualified, via, kinds)
            }
            None => {
                d.add(dev, via, None);
                true
            }
        };
        found |= named;
    }
    if found {
        d.gpu = true;
        d.signals.push(Signal::VolumeMounts);
    }
    found
}

/// CDI requests of an NVIDIA kind in the CDI annotations: each annotation
/// that names one is a signal. Devices of AMD's kind ([`AMD_CDI_KIND`]) are
/// AMD signals, as `/dev/kfd` in the spec is: the CDI runtime injects
/// `/dev/kfd` and the GPU's DRM nodes for them.
fn cdi_signals(c: &Container, kinds: &[&str], d: &mut Detection) {
    for (key, value) in &c.annotations {
        if !CDI_PREFIXES.iter().any(|p| key.starts_with(p)) {
            continue;
        }
        let (mut found, mut amd) = (false, false);
        for dev in value.split(',').map(str::trim) {
            if let Entry::Nvidia(_) = entry(dev, kinds) {
                found = true;
                d.add_entry(dev, key, kinds);
            } else if let Some((AMD_CDI_KIND, name)) = dev.split_once('=') {
                amd = true;
                d.add_amd_cdi(dev, name, key);
            }
        }
        if found {
            d.gpu = true;
            d.signals.push(Signal::Cdi(key.clone()));
        }
        if amd {
            d.amd_signals.push(Signal::Cdi(key.clone()));
        }
    }
}

/// What will act on env requests: NVIDIA's hook in the spec, NVIDIA's
/// runtime behind the wrapper. Neither is a request by itself.
fn attach_signals(c: &Container) -> Vec<Signal> {
    let mut out = Vec::new();
    for h in &c.hooks {
        let base = basename(&h.path);
        let ctk_hook = base == NVIDIA_CTK && h.args.iter().skip(1).any(|a| a == "hook");
        if NVIDIA_HOOKS.contains(&base) || ctk_hook {
            out.push(Signal::NvidiaHook(h.path.clone()));
        }
    }
    if let Some(rt) = &c.chained_runtime {
        if NVIDIA_RUNTIMES.contains(&basename(rt)) {
            out.push(Signal::NvidiaRuntime(rt.clone()));
        }
    }
    out
}

/// A device the host does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unknown {
    pub device: DeviceRef,
}

/// Maps the request onto the host's GPUs: indices into `facts.gpus`, sorted,
/// each once (a MIG device counts as its parent GPU, as dsl.c evaluates it).
pub fn resolve(req: &Request, facts: &HostFacts) -> (Vec<usize>, Vec<Unknown>) {
    // NVIDIA's names (indices, UUIDs, minors) name NVIDIA GPUs only: on a
    // host with both vendors an AMD GPU is never one of them
    // (core::amd::visible names those).
    if facts.gpus.iter().any(|g| g.is_amd()) {
        let mut nvidia = facts.clone();
        let at: Vec<usize> = (0..facts.gpus.len())
            .filter(|i| !facts.gpus[*i].is_amd())
            .collect();
        nvidia.gpus = at.iter().map(|i| facts.gpus[*i].clone()).collect();
        let (idx, unknown) = resolve(req, &nvidia);
        return (idx.into_iter().map(|i| at[i]).collect(), unknown);
    }
    if req.all {
        return ((0..facts.gpus.len()).collect(), Vec::new());
    }
    let by_minor = facts.gpus.iter().any(|g| g.minor_number.is_some());
    let mut seen = Vec::new();
    let mut unknown = Vec::new();
    for dev in &req.devices {
        let name = dev.name.as_str();
        let found = if let Some(minor) = name.strip_prefix("minor:") {
            let n: Option<u32> = minor.parse().ok();
            facts.gpus.iter().position(|g| {
                if by_minor {
                    g.minor_number == n
                } else {
                    Some(g.index) == n
                }
            })
        } else if name.bytes().all(|b| b.is_ascii_digit()) {
            let n: Option<u32> = name.parse().ok();
            facts.gpus.iter().position(|g| Some(g.index) == n)
        } else if let Some((gpu, mig)) = name.split_once(':') {
            // MIG `gpu:mig` index pair: the parent must exist, and the MIG
            // index must be within its MIG devices when we know them.
            let g: Option<u32> = gpu.parse().ok();
            let m: Option<usize> = mig.parse().ok();
            facts
                .gpus
                .iter()
                .position(|x| Some(x.index) == g && m.is_some_and(|m| m < x.mig_devices.len()))
        } else if name
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case("MIG-"))
        {
            facts.gpus.iter().position(|g| {
                g.mig_devices
                    .iter()
                    .any(|m| m.uuid.eq_ignore_ascii_case(name))
            })
        } else {
            facts
                .gpus
                .iter()
                .position(|g| !g.uuid.is_empty() && g.uuid.eq_ignore_ascii_case(name))
        };
        match found {
            Some(i) => seen.push(i),
            None => unknown.push(Unknown {
                device: dev.clone(),
            }),
        }
    }
    seen.sort_unstable();
    seen.dedup();
    (seen, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::{Env, Hook, Mount};
    use crate::core::facts::{Gpu, MigDevice};

    fn env(vars: &[&str]) -> Container {
        Container::from_env(Env::from_entries(vars))
    }

    fn host() -> HostFacts {
        HostFacts {
            driver_version: Some("550.54.15".into()),
            cuda_driver_version: Some("12.4".into()),
            gpus: vec![
                Gpu {
                    index: 0,
                    uuid: "GPU-aaa".into(),
                    mig_devices: vec![
                        MigDevice {
                            uuid: "MIG-m0".into(),
                        },
                        MigDevice {
                            uuid: "MIG-m1".into(),
                        },
                    ],
                    ..Default::default()
                },
                Gpu {
                    index: 1,
                    uuid: "GPU-bbb".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn env_table() {
        let cases: &[(&[&str], bool, bool, usize)] = &[
            (&[], false, false, 0),
            (&["NVIDIA_VISIBLE_DEVICES=void"], false, false, 0),
            (&["NVIDIA_VISIBLE_DEVICES="], false, false, 0),
            (&["NVIDIA_VISIBLE_DEVICES=all"], true, true, 0),
            (&["NVIDIA_VISIBLE_DEVICES=none"], true, false, 0),
            (&["NVIDIA_VISIBLE_DEVICES=0,1"], true, false, 2),
            (&["NVIDIA_VISIBLE_DEVICES=GPU-aaa, MIG-m1,"], true, false, 2),
            (&["CUDA_VERSION=10.0.130"], true, true, 0),
            (
                &["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"],
                false,
                false,
                0,
            ),
            (
                &["CUDA_VERSION=10.0", "NVIDIA_VISIBLE_DEVICES=void"],
                false,
                false,
                0,
            ),
        ];
        for (vars, gpu, all, n) in cases {
            let d = classify(&env(vars));
            assert_eq!(d.gpu, *gpu, "{vars:?}");
            assert_eq!(d.request.all, *all, "{vars:?}");
            assert_eq!(d.request.devices.len(), *n, "{vars:?}");
        }
    }

    #[test]
    fn cdi_names_are_kept_as_written() {
        let mut c = env(&["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all,0,vendor.com/x=1"]);
        c.annotations.insert(
            "cdi.k8s.io/a".into(),
            "nvidia.com/gpu=all,k8s.device-plugin.nvidia.com/gpu=GPU-aaa".into(),
        );
        c.mounts = vec![Mount {
            source: "/dev/null".into(),
            destination: "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/1".into(),
            ..Default::default()
        }];
        // NVIDIA's default: device-list volume mounts are not accepted, the env is.
        let d = classify(&c);
        assert_eq!(
            d.cdi_devices,
            vec![
                "nvidia.com/gpu=all",
                "k8s.device-plugin.nvidia.com/gpu=GPU-aaa"
            ]
        );
        // Where they are accepted, the mounts win over the env
        // (cuda_image.go VisibleDevices).
        let mut cfg = DetectConfig::default();
        cfg.nvidia.accept_volume_mounts = true;
        let d = classify_with(&c, &cfg);
        assert_eq!(
            d.cdi_devices,
            vec![
                "nvidia.com/gpu=1",
                "nvidia.com/gpu=all",
                "k8s.device-plugin.nvidia.com/gpu=GPU-aaa"
            ]
        );
        // An env request nothing attaches names no CDI device to check.
        let mut c = env(&["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"]);
        c.assume_attached = false;
        let d = classify(&c);
        assert!(!d.gpu && d.cdi_devices.is_empty());
    }

    #[test]
    fn cdi_devices_and_hooks() {
        let mut c = Container::default();
        c.annotations.insert(
            "cdi.k8s.io/gpu".into(),
            "nvidia.com/gpu=1,vendor.com/x=2".into(),
        );
        let d = classify(&c);
        assert!(d.gpu);
        assert_eq!(d.request.devices[0].name, "1");

        let mut c = Container::default();
        c.annotations
            .insert("cdi.k8s.io/other".into(), "vendor.com/x=2".into());
        assert!(!classify(&c).gpu);

        let c = Container {
            devices: vec![
                "/dev/nvidiactl".into(),
                "/dev/nvidia1".into(),
                "/dev/null".into(),
            ],
            ..Default::default()
        };
        let d = classify(&c);
        assert!(d.gpu);
        assert_eq!(
            d.request.devices,
            vec![DeviceRef {
                name: "minor:1".into(),
                via: "linux.devices".into(),
                written: None,
            }]
        );

        // NVIDIA's hook alone (standard-mode runtime adds it everywhere) is not a request.
        let c = Container {
            hooks: vec![Hook {
                path: "/usr/bin/nvidia-container-runtime-hook".into(),
                args: vec![],
            }],
            ..Default::default()
        };
        let d = classify(&c);
        assert!(!d.gpu);
        assert_eq!(d.signals.len(), 1);
    }

    #[test]
    fn amd_visible_devices_attach_under_amds_runtime() {
        let mut c = env(&["AMD_VISIBLE_DEVICES=0"]);
        c.assume_attached = false;
        assert!(!classify(&c).gpu, "nothing attaches it");
        c.chained_runtime = Some("/usr/bin/amd-container-runtime".into());
        let d = classify(&c);
        assert!(d.gpu && d.amd_only, "{d:?}");
        assert_eq!(d.amd_signals, [Signal::AmdVisibleDevices("0".into())]);
        c.chained_runtime = Some("/usr/bin/runc".into());
        assert!(!classify(&c).gpu);
    }

    #[test]
    fn amd_cdi_devices_are_amd_signals() {
        // AMD's CDI kind in an annotation: an AMD signal and a CDI device.
        let mut c = Container::default();
        c.annotations.insert(
            "cdi.k8s.io/x".into(),
            "amd.com/gpu=1,amd.com/gpu=1,amd.com/gpu=none".into(),
        );
        let d = classify(&c);
        assert!(d.gpu && d.amd_only);
        assert_eq!(d.cdi_devices, ["amd.com/gpu=1"]);
        assert_eq!(d.amd_cdi.len(), 1);
        assert_eq!(d.amd_cdi[0].name, "1");
    }

    #[test]
    fn volume_mounts_strategy() {
        // The device plugin's volume-mounts strategy needs NVIDIA's
        // accept-nvidia-visible-devices-as-volume-mounts = true.
        let mut cfg = DetectConfig::default();
        cfg.nvidia.accept_volume_mounts = true;
        let mut c = env(&["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"]);
        c.mounts = vec![
            Mount {
                source: "/dev/null".into(),
                destination: "/var/run/nvidia-container-devices/GPU-bbb".into(),
                ..Default::default()
            },
            Mount {
                source: "proc".into(),
                destination: "/proc".into(),
                ..Default::default()
            },
        ];
        let d = classify_with(&c, &cfg);
        assert!(d.gpu);
        let (idx, unknown) = resolve(&d.request, &host());
        assert_eq!(idx, vec![1]);
        assert!(unknown.is_empty());
    }

    #[test]
    fn resolves_against_host() {
        let h = host();
        let r = |v: &str| {
            resolve(
                &classify(&env(&[&format!("NVIDIA_VISIBLE_DEVICES={v}")])).request,
                &h,
            )
        };
        assert_eq!(r("all").0, vec![0, 1]);
        assert_eq!(r("none").0, Vec::<usize>::new());
        assert_eq!(r("1").0, vec![1]);
        assert_eq!(r("gpu-BBB").0, vec![1]);
        assert_eq!(r("MIG-m1").0, vec![0]);
        assert_eq!(r("0:1").0, vec![0]);
        assert_eq!(r("0:2").1.len(), 1);
        assert_eq!(r("1,0,1").0, vec![0, 1]);
        let (_, unknown) = r("5,GPU-zzz");
        assert_eq!(unknown.len(), 2);
        assert_eq!(unknown[0].device.name, "5");
    }

    #[test]
    fn render_nodes_without_kfd_ask_for_no_amd_gpu() {
        use crate::core::container::DeviceNode;
        use crate::core::device_table::HostMajors;
        let node = |path: &str, major, minor| DeviceNode {
            path: path.into(),
            kind: "c".into(),
            major,
            minor,
        };
        let cfg = DetectConfig {
            majors: HostMajors::new([("kfd".to_string(), 235)]),
            ..Default::default()
        };
        // An iGPU's render node (a media server): not a GPU container.
        let igpu = Container {
            device_nodes: vec![node("/dev/dri/renderD128", 226, 128)],
            ..Default::default()
        };
        let d = classify_with(&igpu, &cfg);
        assert!(!d.gpu && d.amd_signals.is_empty(), "{d:?}");
        // NVIDIA's CDI edits: a GPU and nvidia-drm's render node.
        let nvidia = Container {
            device_nodes: vec![
                node("/dev/nvidia0", 195, 0),
                node("/dev/dri/renderD128", 226, 128),
            ],
            ..Default::default()
        };
        let d = classify_with(&nvidia, &cfg);
        assert!(d.gpu && !d.amd_only && d.amd_signals.is_empty(), "{d:?}");
        // With `/dev/kfd` the same render node selects an AMD GPU.
        let rocm = Container {
            device_nodes: vec![
                node("/dev/kfd", 235, 0),
                node("/dev/dri/renderD128", 226, 128),
            ],
            ..Default::default()
        };
        let d = classify_with(&rocm, &cfg);
        assert!(
            d.gpu && d.amd_only && d.amd_nodes.render.len() == 1,
            "{d:?}"
        );
    }

    #[test]
    fn amd_render_nodes_by_number_whatever_their_path() {
        use crate::core::container::DeviceNode;
        use crate::core::device_table::HostMajors;
        let node = |path: &str, major, minor| DeviceNode {
            path: path.into(),
            kind: "c".into(),
            major,
            minor,
        };
        let c = Container {
            device_nodes: vec![
                node("/dev/kfd", 235, 0),
                node("/dev/gpu-b", 226, 129),
                node("/dev/dri/renderD129", 226, 129),
                node("/dev/dri/card1", 226, 1),
            ],
            ..Default::default()
        };
        let cfg = DetectConfig {
            majors: HostMajors::new([("kfd".to_string(), 235)]),
            ..Default::default()
        };
        let d = classify_with(&c, &cfg);
        assert!(d.gpu && d.amd_only);
        assert!(d.amd_nodes.kfd && !d.amd_nodes.all_render);
        let minors: Vec<u32> = d.amd_nodes.render.iter().map(|n| n.minor).collect();
        assert_eq!(minors, [129], "once, the card node not a render node");
        assert_eq!(d.amd_nodes.render[0].shown, "/dev/gpu-b (c 226:129)");
        // Without the host's kfd major, /dev/kfd counts by its path.
        let d = classify(&c);
        assert!(d.amd_nodes.kfd && d.amd_nodes.render.len() == 1);
        let only_kfd = Container {
            device_nodes: vec![node("/dev/kfd", 235, 0)],
            ..Default::default()
        };
        let d = classify(&only_kfd);
        assert!(d.gpu && d.amd_only && d.amd_nodes.render.is_empty());
    }
}
