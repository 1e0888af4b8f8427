//! Which Kubernetes workload a container is, for the records that name a
//! decision (syslog, the runtime's `--log`): its namespace, pod, container
//! name and image, from the annotations its CRI runtime wrote.
//!
//! They are named only where gpu-guard believes them, as for
//! `[[security.exceptions]]` (core::cri_facts: the runtime wrapper invoked
//! under a runtime root only that CRI runtime uses). Elsewhere (the hooks,
//! docker, podman, a runtime root no CRI runtime vouches for) the same keys
//! are whatever the container's creator wrote, and a log line is what an
//! operator acts on when a node refuses GPU pods: a forged pod name would
//! send them to someone else's workload. So nothing is named there, not
//! even marked as unverified; the container id, which the engine passed
//! the runtime itself, is always there.

use crate::core::cri_facts::CriFacts;
use serde::{Deserialize, Serialize};

/// A container's place in Kubernetes, as its CRI runtime recorded it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The container's name in its pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// The workload of a container from its believed CRI facts
/// (`Container::cri_facts`), when its CRI runtime is known from outside its
/// spec and wrote at least one of them.
pub fn of(f: CriFacts) -> Option<Workload> {
    let w = Workload {
        namespace: f.namespace,
        pod: f.pod,
        container: f.container,
        image: f.image,
    };
    (w != Workload::default()).then_some(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::Container;
    use crate::core::cri_facts::*;

    fn container(keys: &[(&str, &str)], rt: Option<CriRuntime>) -> Container {
        Container {
            annotations: keys
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cri_runtime: rt,
            ..Container::default()
        }
    }

    #[test]
    fn named_only_where_the_cri_runtime_is_known() {
        let keys = [
            (CONTAINERD_CONTAINER_TYPE, "container"),
            (CONTAINERD_NAMESPACE, "ml"),
            (CONTAINERD_POD, "train-0"),
            (CONTAINERD_CONTAINER_NAME, "pytorch"),
            (CONTAINERD_IMAGE, "nvcr.io/nvidia/pytorch:24.05-py3"),
        ];
        let w = of(container(&keys, Some(CriRuntime::Containerd)).cri_facts()).unwrap();
        assert_eq!(w.namespace.as_deref(), Some("ml"));
        assert_eq!(w.container.as_deref(), Some("pytorch"));
        assert_eq!(of(container(&keys, None).cri_facts()), None);
        assert_eq!(
            of(container(&keys, Some(CriRuntime::Crio)).cri_facts()),
            None
        );
        let crio = [
            (CRIO_CONTAINER_TYPE, "container"),
            (CRIO_NAMESPACE, "ml"),
            (CRIO_POD, "train-0"),
            (CRIO_CONTAINER_NAME, "pytorch"),
            (CRIO_IMAGE, "docker.io/x/y:1"),
        ];
        let w = of(container(&crio, Some(CriRuntime::Crio)).cri_facts()).unwrap();
        assert_eq!(w.image.as_deref(), Some("docker.io/x/y:1"));
        assert_eq!(w.pod.as_deref(), Some("train-0"));
    }
}
