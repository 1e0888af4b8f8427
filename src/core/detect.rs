//! Is this a GPU container, and which GPUs does it ask for?
//!
//! Signals, after NVIDIA's toolkit (shared/research/nvidia-requirements.md):
//! - `NVIDIA_VISIBLE_DEVICES`: `all`, `none` (a GPU container without
//!   devices), a comma list of indices, GPU UUIDs, MIG UUIDs or `gpu:mig`
//!   pairs; `void`, empty or unset mean no GPU; a legacy image (`CUDA_VERSION`
//!   set, `NVIDIA_REQUIRE_CUDA` not) with it unset means `all`. The value
//!   `/var/run/nvidia-container-devices` selects the volume-mounts strategy:
//!   the devices are the names of mounts under that directory.
//! - CDI requests for `nvidia.com/gpu=...` in `cdi.k8s.io/*` annotations
//!   (and the device plugin's `nvidia.cdi.k8s.io/*`).
//! - `/dev/nvidia*` nodes in `linux.devices` (what CDI injection and
//!   `--device` leave in the spec).
//! - NVIDIA's hook in the spec's hooks. On its own it does not make a GPU
//!   container: nvidia-container-runtime in its standard mode adds that hook
//!   to every container it creates and the hook acts only when devices are
//!   requested (nvidia-container-toolkit cmd/nvidia-container-runtime/README.md),
//!   so treating it as a request would lock down every container on such hosts.

use crate::core::container::Container;
use crate::core::facts::HostFacts;

/// Where a request for GPUs came from, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    Env(String),
    LegacyImage,
    Cdi(String),
    DeviceNode(String),
    NvidiaHook(String),
    VolumeMounts,
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
            Signal::NvidiaHook(p) => format!("NVIDIA hook {p}"),
            Signal::VolumeMounts => "NVIDIA volume-mounts device list".into(),
        }
    }
}

/// One requested device, as the container named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRef {
    pub name: String,
    /// Which signal named it (`NVIDIA_VISIBLE_DEVICES`, an annotation key, `linux.devices`).
    pub via: String,
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
}

const VOLUME_MOUNTS_DIR: &str = "/var/run/nvidia-container-devices";
const NVIDIA_HOOKS: &[&str] = &["nvidia-container-runtime-hook", "nvidia-container-toolkit"];
const CDI_PREFIXES: &[&str] = &["cdi.k8s.io/", "nvidia.cdi.k8s.io/"];
const CDI_KIND: &str = "nvidia.com/gpu=";

fn is_legacy_image(c: &Container) -> bool {
    let cuda = c.env.get("CUDA_VERSION").unwrap_or("");
    let req = c.env.get("NVIDIA_REQUIRE_CUDA").unwrap_or("");
    !cuda.is_empty() && req.is_empty()
}

impl Detection {
    /// Records a requested device (`all` sets the whole-host flag), once
    /// per name, remembering the first signal that named it.
    fn add(&mut self, name: &str, via: &str) {
        if name == "all" {
            self.request.all = true;
        } else if !self.request.devices.iter().any(|r| r.name == name) {
            self.request.devices.push(DeviceRef {
                name: name.to_string(),
                via: via.to_string(),
            });
        }
    }
}

/// Classifies a container. Pure: reads only the spec. Each signal is read
/// by its own helper, in this order (the order of `signals` and of first
/// naming a device).
pub fn classify(c: &Container) -> Detection {
    let mut d = Detection::default();
    visible_devices_signal(c, &mut d);
    cdi_signals(c, &mut d);
    device_node_signals(c, &mut d);
    hook_signals(c, &mut d);
    d
}

/// `NVIDIA_VISIBLE_DEVICES` (or, unset, the legacy-image rule): `none`, the
/// volume-mounts directory, or a device list. Its own helper because it is
/// the one signal with several forms.
fn visible_devices_signal(c: &Container, d: &mut Detection) {
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
        VOLUME_MOUNTS_DIR => {
            d.gpu = true;
            d.signals.push(Signal::VolumeMounts);
            let prefix = format!("{VOLUME_MOUNTS_DIR}/");
            for m in &c.mount_destinations {
                if let Some(name) = m.strip_prefix(&prefix) {
                    if !name.is_empty() && !name.contains('/') {
                        d.add(name, "NVIDIA_VISIBLE_DEVICES (volume mounts)");
                    }
                }
            }
        }
        list => {
            d.gpu = true;
            d.signals.push(Signal::Env(list.to_string()));
            for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                d.add(name, "NVIDIA_VISIBLE_DEVICES");
            }
        }
    }
}

/// CDI requests for `nvidia.com/gpu=...` in the CDI annotations: each
/// annotation that names one is a signal.
fn cdi_signals(c: &Container, d: &mut Detection) {
    for (key, value) in &c.annotations {
        if !CDI_PREFIXES.iter().any(|p| key.starts_with(p)) {
            continue;
        }
        let mut found = false;
        for dev in value.split(',').map(str::trim) {
            if let Some(name) = dev.strip_prefix(CDI_KIND) {
                found = true;
                if !name.is_empty() {
                    d.add(name, key);
                }
            }
        }
        if found {
            d.gpu = true;
            d.signals.push(Signal::Cdi(key.clone()));
        }
    }
}

/// `/dev/nvidia*` nodes in `linux.devices`: any makes a GPU container; the
/// numbered ones name a GPU by minor number.
fn device_node_signals(c: &Container, d: &mut Detection) {
    for path in &c.devices {
        let Some(node) = path.strip_prefix("/dev/nvidia") else {
            continue;
        };
        d.gpu = true;
        d.signals.push(Signal::DeviceNode(path.clone()));
        // /dev/nvidiaN is the GPU with minor number N; nvidiactl, nvidia-uvm,
        // nvidia-caps/* are shared control nodes that name no GPU.
        if !node.is_empty() && node.bytes().all(|b| b.is_ascii_digit()) {
            d.add(&format!("minor:{node}"), "linux.devices");
        }
    }
}

/// NVIDIA's hook in the spec: recorded as a signal only, never making a
/// GPU container on its own (see the module comment).
fn hook_signals(c: &Container, d: &mut Detection) {
    for p in &c.hook_paths {
        let base = p.rsplit('/').next().unwrap_or(p);
        if NVIDIA_HOOKS.contains(&base) {
            d.signals.push(Signal::NvidiaHook(p.clone()));
        }
    }
}

/// A device the host does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unknown {
    pub device: DeviceRef,
}

/// Maps the request onto the host's GPUs: indices into `facts.gpus`, sorted,
/// each once (a MIG device counts as its parent GPU, as dsl.c evaluates it).
pub fn resolve(req: &Request, facts: &HostFacts) -> (Vec<usize>, Vec<Unknown>) {
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
        } else if name.len() > 4 && name[..4].eq_ignore_ascii_case("MIG-") {
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
    use crate::core::container::Env;
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
                via: "linux.devices".into()
            }]
        );

        // NVIDIA's hook alone (standard-mode runtime adds it everywhere) is not a request.
        let c = Container {
            hook_paths: vec!["/usr/bin/nvidia-container-runtime-hook".into()],
            ..Default::default()
        };
        let d = classify(&c);
        assert!(!d.gpu);
        assert_eq!(d.signals.len(), 1);
    }

    #[test]
    fn volume_mounts_strategy() {
        let mut c = env(&["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"]);
        c.mount_destinations = vec![
            "/var/run/nvidia-container-devices/GPU-bbb".into(),
            "/proc".into(),
        ];
        let d = classify(&c);
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
}
