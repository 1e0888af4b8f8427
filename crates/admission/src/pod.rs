//! Which containers of a Pod will get GPUs, and the images to read.
//!
//! A container gets GPUs when it asks for a `nvidia.com/*` extended
//! resource (limits or requests, non-zero: the NVIDIA device plugin's
//! `nvidia.com/gpu`, MIG profiles `nvidia.com/mig-1g.5gb`, shared GPUs), or
//! when its own env sets `NVIDIA_VISIBLE_DEVICES` to devices (NVIDIA's
//! runtime reads it; `void`, `none` and empty attach none:
//! nvidia-container-toolkit `internal/config/image/cuda_image.go`). Init
//! containers count; the image env is not read for this (only GPU
//! containers' images are read at all). Each comes with its own env
//! ([`crate::podenv`]), which the node runs over its image's.
//!
//! A container that asks for AMD's resource (`amd.com/gpu`, AMD's device
//! plugin: ROCm/k8s-device-plugin gives it `/dev/kfd` and the allocated
//! GPUs' render nodes) gets AMD GPUs: it is judged as one whose env asks for
//! them (`AMD_VISIBLE_DEVICES=all` where its own env sets none), so that an
//! image built for CUDA is kept off AMD nodes and a ROCm image is placed on
//! nodes whose processor it has code for.

use crate::podenv::{overlay, Overlay};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// One container that will get GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuContainer {
    pub name: String,
    pub image: String,
    pub init: bool,
    /// Why it counts (`nvidia.com/gpu: 1`, `NVIDIA_VISIBLE_DEVICES=all`).
    pub reason: String,
    /// Its own env, set over the image's.
    pub env: Overlay,
    /// The GPUs it asks for: its resource's quantity (an extended
    /// resource is a whole number), 1 for an env request.
    pub gpus: u32,
}

fn nonzero(q: &Quantity) -> bool {
    let s = q.0.trim();
    !s.is_empty()
        && s.trim_start_matches(['0', '.', '+'])
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
}

/// AMD's device plugin's resource.
pub const AMD_RESOURCE: &str = "amd.com/gpu";

/// The GPU resource the container asks for, as `name: quantity`, whether
/// it is AMD's, and how many.
fn gpu_resource(c: &Container) -> Option<(String, bool, u32)> {
    let r = c.resources.as_ref()?;
    let maps: [&Option<BTreeMap<String, Quantity>>; 2] = [&r.limits, &r.requests];
    for m in maps.into_iter().flatten() {
        for (k, v) in m {
            let amd = k == AMD_RESOURCE;
            if (amd || k.starts_with("nvidia.com/")) && nonzero(v) {
                // Kubernetes takes extended resources in whole numbers;
                // another spelling counts as one GPU.
                let n = v.0.trim().parse::<u32>().unwrap_or(1).max(1);
                return Some((format!("{k}: {}", v.0), amd, n));
            }
        }
    }
    None
}

fn env_request(env: &Overlay) -> Option<String> {
    let val = env.get("NVIDIA_VISIBLE_DEVICES")?.trim();
    if val.is_empty() || val == "void" || val == "none" {
        return None;
    }
    Some(format!("NVIDIA_VISIBLE_DEVICES={val}"))
}

/// The containers (init containers first, as they start) that will get
/// GPUs, in the pod of a review in `namespace`.
pub fn gpu_containers(pod: &Pod, namespace: &str) -> Vec<GpuContainer> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let init = spec.init_containers.iter().flatten().map(|c| (c, true));
    let main = spec.containers.iter().map(|c| (c, false));
    init.chain(main)
        .filter_map(|(c, init)| {
            let mut env = overlay(pod, namespace, c);
            let (reason, gpus) = match gpu_resource(c) {
                Some((r, amd, n)) => {
                    if amd && env.get("AMD_VISIBLE_DEVICES").is_none() {
                        env.env.push(("AMD_VISIBLE_DEVICES".into(), "all".into()));
                    }
                    (r, n)
                }
                None => (env_request(&env)?, 1),
            };
            Some(GpuContainer {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                init,
                reason,
                env,
                gpus,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn detects_gpu_containers() {
        let p = pod(serde_json::json!({"spec": {
        "initContainers": [{"name": "i", "image": "init:1", "resources": {"limits": {"nvidia.com/mig-1g.5gb": "1"}}}],
        "containers": [
            {"name": "a", "image": "a:1", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}}},
            {"name": "b", "image": "b:1", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
            {"name": "c", "image": "c:1", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]},
            {"name": "d", "image": "d:1", "resources": {"limits": {"nvidia.com/gpu": "0"}}},
            {"name": "e", "image": "e:1", "resources": {"limits": {"cpu": "1"}}}
        ]}}));
        let g = gpu_containers(&p, "default");
        let names: Vec<&str> = g.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["i", "a", "b"]);
        assert!(g[0].init && !g[1].init);
        assert_eq!(g[1].reason, "nvidia.com/gpu: 2");
        assert!(gpu_containers(
            &pod(serde_json::json!({"spec": {"containers": [{"name": "x", "image": "x"}]}})),
            "default"
        )
        .is_empty());
        assert!(gpu_containers(&pod(serde_json::json!({})), "default").is_empty());
        // AMD's resource: a GPU container asking for AMD GPUs.
        let p = pod(serde_json::json!({"spec": {"containers": [
            {"name": "r", "image": "rocm:1", "resources": {"limits": {"amd.com/gpu": "1"}}},
            {"name": "z", "image": "rocm:1", "resources": {"limits": {"amd.com/gpu": "0"}}}
        ]}}));
        let g = gpu_containers(&p, "default");
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].reason, "amd.com/gpu: 1");
        assert_eq!(g[0].env.get("AMD_VISIBLE_DEVICES"), Some("all"));
    }
}
