//! The annotations containerd passes to gpu-guard's runtime: CDI device
//! requests through, and never a pattern that would let a pod's own
//! annotation pose as a key the CRI runtime writes (which security
//! exceptions trust).

use toml_edit::{Item, Table};

/// The pattern of CDI device annotations (`cdi.k8s.io/<name>`), which
/// NVIDIA's device plugin (cdi-annotations strategy) and the kubelet's
/// device-plugin API put on a container. containerd copies container
/// annotations into the OCI spec only when the runtime's
/// `container_annotations` lists a matching pattern
/// (getPassthroughAnnotations, `path.Match`); without it gpu-guard never
/// sees the CDI request that attaches GPUs.
pub const CDI_ANNOTATIONS: &str = "cdi.k8s.io/*";

/// The keys gpu-guard's security exceptions trust (core::profiles): a
/// pass-through pattern that matches one would let a pod author write it,
/// where the runtime itself does not.
const TRUSTED_KEYS: [&str; 9] = [
    crate::core::cri_facts::CONTAINERD_CONTAINER_TYPE,
    crate::core::cri_facts::CONTAINERD_NAMESPACE,
    crate::core::cri_facts::CONTAINERD_POD,
    crate::core::cri_facts::CONTAINERD_IMAGE,
    crate::core::cri_facts::CRIO_CONTAINER_TYPE,
    crate::core::cri_facts::CRIO_NAMESPACE,
    crate::core::cri_facts::CRIO_POD,
    crate::core::cri_facts::CRIO_IMAGE,
    crate::core::cri_facts::CRIO_HANDLER,
];

/// Whether a pass-through pattern (Go `path.Match`) could let a pod's own
/// annotation through under a key gpu-guard trusts, or under any
/// `io.kubernetes.` key. Patterns with character classes or escapes are
/// judged by their literal prefix, conservatively.
pub fn untrusted_pattern(pattern: &str) -> bool {
    if pattern.starts_with("io.kubernetes.") {
        return true;
    }
    let literal: String = pattern
        .chars()
        .take_while(|c| !matches!(c, '*' | '?' | '[' | '\\'))
        .collect();
    if pattern.contains(['[', '\\']) {
        return TRUSTED_KEYS
            .iter()
            .chain(["io.kubernetes."].iter())
            .any(|k| k.starts_with(&literal) || literal.starts_with(k));
    }
    TRUSTED_KEYS
        .iter()
        .any(|k| crate::core::profiles::glob_match(pattern, k))
        || crate::core::profiles::glob_match(pattern, "io.kubernetes.x")
}

/// gpu-guard's runtime passes CDI annotations through
/// (`container_annotations` gains [`CDI_ANNOTATIONS`], keeping what it
/// copied from the base runtime), and never a pattern that matches a key
/// security exceptions trust (those are dropped from
/// `container_annotations` and `pod_annotations`).
pub(super) fn pass_through_annotations(ours: &mut Table) {
    for key in ["container_annotations", "pod_annotations"] {
        let Some(arr) = ours.get_mut(key).and_then(Item::as_array_mut) else {
            continue;
        };
        let n = arr.len();
        arr.retain(|v| !v.as_str().is_some_and(untrusted_pattern));
        if arr.len() != n {
            // A removed first element leaves the next one's leading space.
            arr.fmt();
        }
    }
    let has = ours
        .get("container_annotations")
        .and_then(Item::as_array)
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(CDI_ANNOTATIONS)));
    if has {
        return;
    }
    match ours
        .get_mut("container_annotations")
        .and_then(Item::as_array_mut)
    {
        Some(arr) => arr.push(CDI_ANNOTATIONS),
        None => {
            let mut arr = toml_edit::Array::new();
            arr.push(CDI_ANNOTATIONS);
            ours.insert("container_annotations", toml_edit::value(arr));
        }
    }
}
