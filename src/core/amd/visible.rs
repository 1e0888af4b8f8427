//! Which of the host's AMD GPUs a container gets: the one function that
//! says so ([`amd_gpus`]), so that a finer rule (render nodes mapped to
//! KFD nodes through `drm_render_minor`, CDI `amd.com/gpu` devices) changes
//! it in one place.
//!
//! The rule here: a container with AMD signals (core::detect: `/dev/kfd`
//! or render nodes in its spec, or `AMD_VISIBLE_DEVICES` where GPUs count
//! as attached) gets the GPUs `AMD_VISIBLE_DEVICES` names, else all of the
//! host's AMD GPUs (`/dev/kfd` opens every GPU the render nodes allow, and
//! `docker run --device=/dev/kfd --device=/dev/dri` passes them all).
//! `AMD_VISIBLE_DEVICES` is read as AMD's container runtime reads it
//! (ROCm/container-toolkit, `internal/amdgpu`: `all`, `none`/`void`,
//! comma-separated indices, `a-b` ranges, or GPU UUIDs); indices number the
//! AMD GPUs from 0 in KFD node order, as the host facts do.

use crate::core::container::Container;
use crate::core::detect::Detection;
use crate::core::facts::{Gpu, HostFacts};

/// The most names of one `AMD_VISIBLE_DEVICES` read, and the widest range.
const MAX_NAMES: usize = 1024;

pub use crate::core::detect::amd_env_request as env_request;

/// The AMD GPUs a container gets, and the names it asked for that the
/// host does not have.
#[derive(Debug, Default)]
pub struct AmdVisible<'a> {
    pub gpus: Vec<&'a Gpu>,
    pub unknown: Vec<String>,
}

/// The host's AMD GPUs `c` gets (none without AMD signals).
pub fn amd_gpus<'a>(c: &Container, det: &Detection, facts: &'a HostFacts) -> AmdVisible<'a> {
    let mut out = AmdVisible::default();
    if det.amd_signals.is_empty() {
        return out;
    }
    let amd: Vec<&Gpu> = facts.gpus.iter().filter(|g| g.is_amd()).collect();
    let Some(list) = env_request(c).filter(|v| *v != "all") else {
        out.gpus = amd;
        return out;
    };
    for name in list
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .take(MAX_NAMES)
    {
        let found: Vec<&Gpu> = match range(name) {
            Some((a, b)) => amd
                .iter()
                .copied()
                .filter(|g| g.index >= a && g.index <= b)
                .collect(),
            None => amd
                .iter()
                .copied()
                .filter(|g| !g.uuid.is_empty() && g.uuid.eq_ignore_ascii_case(name))
                .collect(),
        };
        if found.is_empty() {
            out.unknown.push(name.to_string());
        }
        for g in found {
            if !out.gpus.iter().any(|x| std::ptr::eq(*x, g)) {
                out.gpus.push(g);
            }
        }
    }
    out
}

/// An index (`2`) or range (`0-3`) as inclusive bounds.
fn range(name: &str) -> Option<(u32, u32)> {
    let num = |s: &str| -> Option<u32> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    };
    match name.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (num(a)?, num(b)?);
            (a <= b && b - a < MAX_NAMES as u32).then_some((a, b))
        }
        None => num(name).map(|n| (n, n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::Env;
    use crate::core::detect::Signal;
    use crate::core::facts::Vendor;

    fn host() -> HostFacts {
        let gpu = |index: u32, vendor: Vendor, uuid: &str| Gpu {
            index,
            vendor,
            uuid: uuid.into(),
            ..Gpu::default()
        };
        HostFacts {
            gpus: vec![
                gpu(0, Vendor::Nvidia, "GPU-nv"),
                gpu(0, Vendor::Amd, "GPU-aaaa"),
                gpu(1, Vendor::Amd, "GPU-bbbb"),
                gpu(2, Vendor::Amd, "GPU-cccc"),
            ],
            ..HostFacts::default()
        }
    }

    fn with(env: &[(&str, &str)]) -> (Container, Detection) {
        let mut e = Env::default();
        for (k, v) in env {
            e.set(k, v);
        }
        let c = Container {
            env: e,
            ..Container::default()
        };
        let mut det = Detection::default();
        det.amd_signals.push(Signal::DeviceNode("/dev/kfd".into()));
        (c, det)
    }

    #[test]
    fn all_amd_gpus_or_those_named() {
        let h = host();
        let uuids = |v: &AmdVisible| v.gpus.iter().map(|g| g.uuid.clone()).collect::<Vec<_>>();
        let (c, det) = with(&[]);
        assert_eq!(
            uuids(&amd_gpus(&c, &det, &h)),
            ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
        );
        let (c, det) = with(&[("AMD_VISIBLE_DEVICES", "2,0-1,GPU-BBBB,7")]);
        let v = amd_gpus(&c, &det, &h);
        assert_eq!(uuids(&v), ["GPU-cccc", "GPU-aaaa", "GPU-bbbb"]);
        assert_eq!(v.unknown, ["7"]);
        // No AMD signal: none, whatever the env says.
        let (c, _) = with(&[("AMD_VISIBLE_DEVICES", "all")]);
        assert!(amd_gpus(&c, &Detection::default(), &h).gpus.is_empty());
        assert_eq!(range("3-1"), None);
        assert_eq!(range("0-99999999"), None);
    }
}
