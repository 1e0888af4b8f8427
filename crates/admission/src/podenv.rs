//! A container's own environment, as the node will run it over its image's.
//!
//! The kubelet turns a container's `envFrom` and `env` into one list
//! (`envFrom` first, then `env`, a later name replacing an earlier one;
//! kubernetes `pkg/kubelet/kubelet_pods.go`, `makeEnvironmentVariables`),
//! expanding `$(NAME)` in `env` values against the names defined before
//! it (`third_party/forked/golang/expansion`: `$$` is a literal `$`, an
//! unknown `$(NAME)` stays as written). The runtime then sets these over
//! the image config's `Env`, a name in both taking the container's value
//! (containerd `oci.WithEnv`, CRI-O `addImageEnvs`). So the container is
//! judged with the image's env overlaid by this list.
//!
//! The webhook has no access to the API: a value from a Secret, a
//! ConfigMap or a resource field cannot be known. A `fieldRef` to the pod's
//! own metadata is resolved from the pod in the review; anything else is
//! named in [`Overlay::unresolved`] (said to the user) and the container is
//! judged without it.

use k8s_openapi::api::core::v1::{Container, Pod};
use std::collections::BTreeMap;

/// Names whose value changes what gpu-guard decides: NVIDIA's and CUDA's
/// variables (nvidia-container-toolkit `internal/config/image`), and the
/// loader's (the libraries scan).
pub fn decides(name: &str) -> bool {
    ["NVIDIA_", "CUDA_", "_CUDA_", "LD_"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// A container's env over its image's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overlay {
    /// Name and value, in the order the kubelet sets them (a name appears once).
    pub env: Vec<(String, String)>,
    /// What could not be resolved and may change the decision, one phrase each.
    pub unresolved: Vec<String>,
}

impl Overlay {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `$(NAME)` references expanded against `defined` (Kubernetes' `expansion.Expand`).
pub fn expand(input: &str, defined: &BTreeMap<String, String>) -> String {
    let b = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        if b[i] != b'$' || i + 1 >= b.len() {
            i += 1;
            continue;
        }
        out.push_str(&input[last..i]);
        match b[i + 1] {
            b'$' => {
                out.push('$');
                i += 2;
            }
            b'(' => match input[i + 2..].find(')') {
                Some(end) => {
                    let name = &input[i + 2..i + 2 + end];
                    match defined.get(name) {
                        Some(v) => out.push_str(v),
                        None => out.push_str(&input[i..i + 3 + end]),
                    }
                    i += 3 + end;
                }
                // No closing paren: `$(` and the rest are kept as written.
                None => {
                    out.push_str(&input[i..]);
                    i = b.len();
                }
            },
            _ => {
                // `$x`: not a reference; the `$` kept, the next character read as usual.
                out.push('$');
                i += 1;
            }
        }
        last = i;
    }
    if last < b.len() {
        out.push_str(&input[last..]);
    }
    out
}

/// A `fieldRef` the pod in the review answers: its namespace, name,
/// labels, annotations, service account (the downward API's fields,
/// kubernetes `pkg/fieldpath`). Node and status fields are not known yet.
fn field(pod: &Pod, namespace: &str, path: &str) -> Option<String> {
    let md = &pod.metadata;
    let keyed = |prefix: &str, map: &Option<BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.as_ref()?.get(key).cloned().unwrap_or_default())
    };
    match path {
        "metadata.namespace" => Some(namespace.to_string()),
        "metadata.name" => md.name.clone(),
        "spec.serviceAccountName" => Some(
            pod.spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_else(|| "default".to_string()),
        ),
        _ => keyed("metadata.labels['", &md.labels)
            .or_else(|| keyed("metadata.annotations['", &md.annotations)),
    }
}

/// The env `c` runs with over its image's, in the pod of the review.
pub fn overlay(pod: &Pod, namespace: &str, c: &Container) -> Overlay {
    let mut o = Overlay::default();
    let mut defined: BTreeMap<String, String> = BTreeMap::new();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let source = match (&from.config_map_ref, &from.secret_ref) {
            (Some(cm), _) => format!("ConfigMap {}", cm.name),
            (_, Some(s)) => format!("Secret {}", s.name),
            _ => "an unnamed source".to_string(),
        };
        // Any key of it may be an NVIDIA_ variable unless the prefix rules it out.
        let could = decides(&prefix)
            || ["NVIDIA_", "CUDA_", "_CUDA_", "LD_"]
                .iter()
                .any(|p| p.starts_with(prefix.as_str()));
        if could {
            o.unresolved
                .push(format!("envFrom {source} (not readable by the webhook)"));
        }
    }
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (_, Some(vf)) => match vf
                .field_ref
                .as_ref()
                .and_then(|f| field(pod, namespace, &f.field_path))
            {
                Some(v) => Some(v),
                None => {
                    if decides(&e.name) {
                        o.unresolved.push(format!(
                            "env {} (valueFrom, not readable by the webhook)",
                            e.name
                        ));
                    }
                    None
                }
            },
            (Some(v), None) => Some(expand(v, &defined)),
            // `value` absent: the empty string (core/v1 EnvVar).
            (None, None) => Some(String::new()),
        };
        let Some(v) = value else {
            continue;
        };
        defined.insert(e.name.clone(), v.clone());
        o.env.retain(|(k, _)| k != &e.name);
        o.env.push((e.name.clone(), v));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_as_kubernetes_does_it() {
        let d: BTreeMap<String, String> = [("A".to_string(), "x".to_string())].into();
        assert_eq!(expand("$(A)-$(B)-$$(A)-$x-$", &d), "x-$(B)-$(A)-$x-$");
        assert_eq!(expand("cuda>=$(A", &d), "cuda>=$(A");
        assert_eq!(expand("plain", &d), "plain");
        assert_eq!(expand("$é$(A)", &d), "$éx");
    }

    #[test]
    fn env_over_image_with_unresolved_named() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": {"cuda": "12.4"}},
            "spec": {"containers": [{"name": "c", "image": "i",
                "envFrom": [{"configMapRef": {"name": "cm"}}, {"prefix": "APP_", "secretRef": {"name": "s"}}],
                "env": [
                    {"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['cuda']"}}},
                    {"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=$(V)"},
                    {"name": "NVIDIA_DISABLE_REQUIRE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                    {"name": "OTHER", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                    {"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.8"}
                ]}]}
        }))
        .unwrap();
        let c = &pod.spec.as_ref().unwrap().containers[0];
        let o = overlay(&pod, "ns", c);
        assert_eq!(o.get("V"), Some("12.4"));
        assert_eq!(o.get("NVIDIA_REQUIRE_CUDA"), Some("cuda>=12.8"));
        assert_eq!(o.env.len(), 2);
        assert_eq!(o.unresolved.len(), 2, "{:?}", o.unresolved);
        assert!(o.unresolved[0].contains("ConfigMap cm"));
        assert!(o.unresolved[1].contains("NVIDIA_DISABLE_REQUIRE"));
    }
}
