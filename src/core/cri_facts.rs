//! The facts about a Kubernetes container that its CRI runtime writes into
//! the OCI spec (namespace, pod, image, handler), which select
//! `[[security.exceptions]]`, and when gpu-guard believes them.
//!
//! The spec alone never says which runtime wrote it: anyone who starts a
//! container can put these keys in its annotations (`docker run
//! --annotation`, `podman run --annotation`; podman itself writes CRI-O's
//! `io.kubernetes.cri-o.ContainerType` on its pods, libpod
//! pkg/annotations), containerd passes pod annotations through for the
//! runtime's `pod_annotations` / `container_annotations` patterns, and
//! CRI-O copies the sandbox's annotations into every container's spec
//! before writing its own keys (internal/factory/container
//! `SpecAddAnnotations`). So the evidence must come from outside the
//! spec: the runtime root the engine passed the runtime wrapper, which
//! `gpu-guard install` sets per engine and no container can choose
//! ([`crate::core::runtime_engines`]). Only then are that runtime's own
//! keys read; each runtime writes them after what it copies in, so its
//! values win over a copied one of the same key:
//! - containerd: `io.kubernetes.cri.*` (containerd pkg/cri/annotations in
//!   1.6, internal/cri/annotations in 2.x: `ContainerType`,
//!   `SandboxNamespace`, `SandboxName`, `ContainerName`, `ImageName`,
//!   all set by `DefaultCRIAnnotations` on every workload container),
//!   written by the CRI plugin's spec options after the pass-through
//!   annotations (pkg/cri/server/container_create_linux.go in 1.6,
//!   internal/cri/server/container_create.go `buildLinuxSpec` in 2.x);
//! - CRI-O: its own `io.kubernetes.cri-o.ContainerType`, `.ImageName` and
//!   `.RuntimeHandler` (pkg/annotations; `internal.go` in current
//!   releases), and the kubelet's container labels
//!   `io.kubernetes.pod.namespace`, `io.kubernetes.pod.name` and
//!   `io.kubernetes.container.name` (kubelet pkg/kubelet/kuberuntime/labels.go
//!   `newContainerLabels`), which `SpecAddAnnotations`
//!   (internal/factory/container/container.go) writes last, after the
//!   sandbox's and the pod's annotations.
//!
//! The hooks (precreate, prestart) have no such evidence and never read
//! these facts. A spec that carries both runtimes' keys, disagreeing, was
//! partly written by someone else: it is refused ([`conflict`]).

use crate::core::sanitize::esc;
use std::collections::BTreeMap;

/// Which CRI runtime made the container, by evidence from outside its
/// spec (the runtime root the wrapper was invoked with).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CriRuntime {
    Containerd,
    Crio,
}

impl CriRuntime {
    pub fn name(self) -> &'static str {
        match self {
            CriRuntime::Containerd => "containerd",
            CriRuntime::Crio => "CRI-O",
        }
    }

    fn keys(self) -> &'static KeySet {
        match self {
            CriRuntime::Containerd => &CONTAINERD,
            CriRuntime::Crio => &CRIO,
        }
    }

    fn other(self) -> CriRuntime {
        match self {
            CriRuntime::Containerd => CriRuntime::Crio,
            CriRuntime::Crio => CriRuntime::Containerd,
        }
    }
}

/// The facts a container's CRI runtime recorded; `None` where it did not
/// record one (or where they are not believed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CriFacts {
    pub namespace: Option<String>,
    pub pod: Option<String>,
    /// The container's name in its pod.
    pub container: Option<String>,
    pub image: Option<String>,
    pub handler: Option<String>,
}

/// containerd's keys (pkg/cri/annotations/annotations.go).
pub const CONTAINERD_CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";
pub const CONTAINERD_NAMESPACE: &str = "io.kubernetes.cri.sandbox-namespace";
pub const CONTAINERD_POD: &str = "io.kubernetes.cri.sandbox-name";
pub const CONTAINERD_IMAGE: &str = "io.kubernetes.cri.image-name";
pub const CONTAINERD_CONTAINER_NAME: &str = "io.kubernetes.cri.container-name";
/// CRI-O's keys (pkg/annotations), and the kubelet's container labels.
pub const CRIO_CONTAINER_TYPE: &str = "io.kubernetes.cri-o.ContainerType";
pub const CRIO_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const CRIO_POD: &str = "io.kubernetes.pod.name";
pub const CRIO_IMAGE: &str = "io.kubernetes.cri-o.ImageName";
pub const CRIO_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// CRI-O writes the handler on the pod sandbox's spec
/// (server/sandbox_run_linux.go `g.AddAnnotation(annotations.RuntimeHandler, ...)`);
/// a workload container's spec may not carry it, so a `handler` selector
/// matches only where it does. containerd records no handler in a
/// container's spec (`io.containerd.cri.runtime-handler` is a pod
/// annotation a pod author sets), so a handler selector never matches there.
pub const CRIO_HANDLER: &str = "io.kubernetes.cri-o.RuntimeHandler";

/// One runtime's keys.
struct KeySet {
    container_type: &'static str,
    namespace: &'static str,
    pod: &'static str,
    container: &'static str,
    image: &'static str,
    handler: Option<&'static str>,
}

const CONTAINERD: KeySet = KeySet {
    container_type: CONTAINERD_CONTAINER_TYPE,
    namespace: CONTAINERD_NAMESPACE,
    pod: CONTAINERD_POD,
    container: CONTAINERD_CONTAINER_NAME,
    image: CONTAINERD_IMAGE,
    handler: None,
};

const CRIO: KeySet = KeySet {
    container_type: CRIO_CONTAINER_TYPE,
    namespace: CRIO_NAMESPACE,
    pod: CRIO_POD,
    container: CRIO_CONTAINER_NAME,
    image: CRIO_IMAGE,
    handler: Some(CRIO_HANDLER),
};

impl KeySet {
    fn facts(&self, a: &BTreeMap<String, String>) -> CriFacts {
        let get = |k: &str| a.get(k).filter(|v| !v.is_empty()).cloned();
        CriFacts {
            namespace: get(self.namespace),
            pod: get(self.pod),
            container: get(self.container),
            image: get(self.image),
            handler: self.handler.and_then(get),
        }
    }

    /// The (key, fact name) pairs compared between runtimes.
    fn compared(&self) -> [(&'static str, &'static str); 3] {
        [
            (self.namespace, "namespace"),
            (self.pod, "pod"),
            (self.image, "image"),
        ]
    }
}

/// The facts the container's CRI runtime wrote into its `annotations`:
/// read only when the entry point knows that runtime (`runtime`) from
/// outside the spec, from that runtime's own keys, when its
/// container-type key is there (it writes one on every container and
/// sandbox) and nothing [`conflict`]s. No facts otherwise: no exception
/// matches.
pub fn trusted(a: &BTreeMap<String, String>, runtime: Option<CriRuntime>) -> CriFacts {
    let Some(rt) = runtime else {
        return CriFacts::default();
    };
    if !a.contains_key(rt.keys().container_type) || conflict(a, runtime).is_some() {
        return CriFacts::default();
    }
    rt.keys().facts(a)
}

/// Why the spec's CRI keys (`a`) cannot all have come from the runtime that
/// made the container (`runtime`): the other runtime's keys are there too
/// and disagree: it claims to have made the container (its container-type
/// key), or names another namespace, pod or image. None when there is no
/// evidence of the runtime (nothing is believed then anyway) or nothing
/// disagrees (the same value under both spellings is no conflict).
pub fn conflict(a: &BTreeMap<String, String>, runtime: Option<CriRuntime>) -> Option<String> {
    let rt = runtime?;
    let (own, other) = (rt.keys(), rt.other().keys());
    if let Some(t) = a.get(other.container_type) {
        return Some(format!(
            "{}={} claims {} made the container, which {} made",
            other.container_type,
            esc(t),
            rt.other().name(),
            rt.name()
        ));
    }
    for ((own_key, what), (other_key, _)) in own.compared().into_iter().zip(other.compared()) {
        let Some(theirs) = a.get(other_key) else {
            continue;
        };
        let ours = a.get(own_key).map(String::as_str).unwrap_or("");
        if ours != theirs {
            return Some(format!(
                "the {what} is {own_key}={} as {} wrote it, but {other_key}={}",
                esc(ours),
                rt.name(),
                esc(theirs)
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Annotations and the runtime known from outside the spec.
    struct C(BTreeMap<String, String>, Option<CriRuntime>);

    fn with(rt: Option<CriRuntime>, keys: &[(&str, &str)]) -> C {
        C(
            keys.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            rt,
        )
    }

    fn trusted(c: &C) -> CriFacts {
        super::trusted(&c.0, c.1)
    }

    fn conflict(c: &C) -> Option<String> {
        super::conflict(&c.0, c.1)
    }

    #[test]
    fn facts_need_evidence_from_outside_the_spec() {
        let keys = [
            (CONTAINERD_CONTAINER_TYPE, "container"),
            (CONTAINERD_NAMESPACE, "gpu-operator"),
        ];
        // The same annotations: believed only with the runtime known.
        assert_eq!(trusted(&with(None, &keys)), CriFacts::default());
        assert_eq!(
            trusted(&with(Some(CriRuntime::Crio), &keys)),
            CriFacts::default()
        );
        let c = with(Some(CriRuntime::Containerd), &keys);
        assert_eq!(trusted(&c).namespace.as_deref(), Some("gpu-operator"));
        // Without the runtime's container-type key: not its container.
        let c = with(
            Some(CriRuntime::Containerd),
            &[(CONTAINERD_NAMESPACE, "gpu-operator")],
        );
        assert_eq!(trusted(&c), CriFacts::default());
    }

    #[test]
    fn the_other_runtimes_keys_conflict_when_they_disagree() {
        let mut keys = vec![
            (CONTAINERD_CONTAINER_TYPE, "container"),
            (CONTAINERD_NAMESPACE, "default"),
        ];
        let c = with(Some(CriRuntime::Containerd), &keys);
        assert_eq!(conflict(&c), None);
        // The same namespace under CRI-O's spelling: no conflict.
        keys.push((CRIO_NAMESPACE, "default"));
        assert_eq!(conflict(&with(Some(CriRuntime::Containerd), &keys)), None);
        keys.pop();
        keys.push((CRIO_NAMESPACE, "gpu-operator"));
        let c = with(Some(CriRuntime::Containerd), &keys);
        let why = conflict(&c).unwrap();
        assert!(
            why.contains("io.kubernetes.pod.namespace=gpu-operator"),
            "{why}"
        );
        assert_eq!(trusted(&c), CriFacts::default());
        // Both runtimes claim the container.
        keys.pop();
        keys.push((CRIO_CONTAINER_TYPE, "container"));
        let why = conflict(&with(Some(CriRuntime::Containerd), &keys)).unwrap();
        assert!(why.contains("claims CRI-O made the container"), "{why}");
        // No evidence: nothing is believed, nothing conflicts.
        assert_eq!(conflict(&with(None, &keys)), None);
    }

    #[test]
    fn crio_reads_its_own_keys_and_the_kubelets_labels() {
        let keys = [
            (CRIO_CONTAINER_TYPE, "container"),
            (CRIO_NAMESPACE, "gpu-operator"),
            (CRIO_POD, "nvidia-driver"),
            (CRIO_HANDLER, "nvidia"),
            (CONTAINERD_NAMESPACE, "kube-system"),
        ];
        let c = with(Some(CriRuntime::Crio), &keys);
        // containerd's namespace key disagrees: refused, nothing believed.
        assert!(conflict(&c).is_some());
        let c = with(Some(CriRuntime::Crio), &keys[..4]);
        let f = trusted(&c);
        assert_eq!(f.namespace.as_deref(), Some("gpu-operator"));
        assert_eq!(f.pod.as_deref(), Some("nvidia-driver"));
        assert_eq!(f.handler.as_deref(), Some("nvidia"));
        let mut named = keys[..4].to_vec();
        named.push((CRIO_CONTAINER_NAME, "driver"));
        let f = trusted(&with(Some(CriRuntime::Crio), &named));
        assert_eq!(f.container.as_deref(), Some("driver"));
    }
}
