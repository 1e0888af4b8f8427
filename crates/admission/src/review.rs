//! One AdmissionReview (admission.k8s.io/v1) in, one out: find the
//! containers that will get GPUs, place each image ([`crate::judge`]),
//! and answer with a JSONPatch that ANDs gpu-guard's node-label terms with
//! the pod's own required node affinity ([`crate::affinity`]) and adds the
//! `gpu-guard.io/needs` annotation. The patch touches nothing else.
//! Style after kube-rs `examples/admission_controller.rs` and linkerd2
//! `policy-controller/src/admission.rs`: the review parsed as kube-core's
//! `AdmissionReview<DynamicObject>`, `try_into` the request, the response
//! built `from(&req)` and then denied or patched. One deliberate
//! difference: both answer an unparsable body with HTTP 200 and an invalid
//! (not allowed) response, which makes the API server refuse the object;
//! here it is HTTP 400, a failed call, which the webhook's
//! `failurePolicy: Ignore` turns into "admitted unchanged" (a broken caller
//! never blocks pods; the node's check still decides).

use crate::affinity;
use crate::judge::{self, Cache, ImageJudge, Placement};
use crate::pod::{self, GpuContainer};
use base64::Engine as _;
use gpu_guard::core::admission::OnUnreadable;
use k8s_openapi::api::core::v1::{NodeSelectorTerm, Pod};
use kube_core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube_core::DynamicObject;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const NEEDS_ANNOTATION: &str = "gpu-guard.io/needs";
/// Annotation values and warnings are kept short (Kubernetes shows warnings
/// to `kubectl` users one per line).
const MAX_ANNOTATION: usize = 2048;
const MAX_WARNING: usize = 250;
const MAX_WARNINGS: usize = 8;

pub struct Reviewer<J: ImageJudge> {
    pub judge: Arc<J>,
    pub cache: Arc<Cache>,
    pub on_unreadable: OnUnreadable,
    pub read_timeout: Duration,
}

/// An HTTP status and a JSON body.
pub type Answer = (u16, Vec<u8>);

/// The review as JSON. The patch is written as a base64 string, the way Go's
/// encoding/json writes the API server's `Patch []byte` (kube-core writes a
/// byte array, which Go also reads; the string is the canonical form).
fn answer(status: u16, resp: AdmissionResponse) -> Answer {
    let mut v = serde_json::to_value(resp.into_review()).unwrap_or_default();
    if let Some(p) = v.pointer_mut("/response/patch") {
        if let Some(bytes) = p.as_array().map(|a| {
            a.iter()
                .filter_map(|b| b.as_u64())
                .map(|b| b as u8)
                .collect::<Vec<u8>>()
        }) {
            *p = serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
        }
    }
    (
        status,
        serde_json::to_vec(&v).unwrap_or_else(|_| b"{}".to_vec()),
    )
}

fn one_line(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') { ' ' } else { c })
        .collect();
    if out.chars().count() > max {
        out = out.chars().take(max.saturating_sub(3)).collect::<String>() + "...";
    }
    out
}

fn invalid(msg: &str) -> Answer {
    answer(400, AdmissionResponse::invalid(one_line(msg, 500)))
}

/// `/` in a JSON pointer token is `~1`, `~` is `~0` (RFC 6901).
fn pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The JSONPatch: the combined required node affinity and the annotation.
pub fn patch(pod: &Pod, terms: Option<Vec<NodeSelectorTerm>>, needs: &str) -> json_patch::Patch {
    let mut ops = Vec::new();
    if let Some(terms) = terms {
        let terms = serde_json::to_value(terms).unwrap_or_default();
        let spec = pod.spec.as_ref();
        let aff = spec.and_then(|s| s.affinity.as_ref());
        let na = aff.and_then(|a| a.node_affinity.as_ref());
        let req = na.and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
        let (path, value) = match (aff, na, req) {
            (None, _, _) => ("/spec/affinity", serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})),
            (Some(_), None, _) => ("/spec/affinity/nodeAffinity", serde_json::json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}})),
            (_, Some(_), None) => ("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution", serde_json::json!({"nodeSelectorTerms": terms})),
            (_, _, Some(_)) => ("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms", terms),
        };
        // `add` replaces an existing member (RFC 6902 section 4.1), so one op fits every case.
        ops.push(serde_json::json!({"op": "add", "path": path, "value": value}));
    }
    if pod.metadata.annotations.is_none() {
        ops.push(serde_json::json!({"op": "add", "path": "/metadata/annotations", "value": {NEEDS_ANNOTATION: needs}}));
    } else {
        let path = format!("/metadata/annotations/{}", pointer_token(NEEDS_ANNOTATION));
        ops.push(serde_json::json!({"op": "add", "path": path, "value": needs}));
    }
    serde_json::from_value(serde_json::Value::Array(ops)).unwrap_or(json_patch::Patch(Vec::new()))
}

/// The pod's own required terms (empty when it has none).
fn own_terms(pod: &Pod) -> Vec<NodeSelectorTerm> {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.clone())
        .unwrap_or_default()
}

impl<J: ImageJudge> Reviewer<J> {
    /// Parses a POST /mutate body and answers it.
    pub async fn review(&self, body: &[u8]) -> Answer {
        let v: serde_json::Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return invalid(&format!("the body is not JSON: {e}")),
        };
        if v.get("kind").and_then(|k| k.as_str()) != Some("AdmissionReview")
            || v.get("apiVersion").and_then(|k| k.as_str()) != Some("admission.k8s.io/v1")
        {
            return invalid("the body is not an admission.k8s.io/v1 AdmissionReview");
        }
        let pod_json = v.pointer("/request/object").cloned();
        let review: AdmissionReview<DynamicObject> = match serde_json::from_value(v) {
            Ok(r) => r,
            Err(e) => return invalid(&format!("the AdmissionReview is not valid: {e}")),
        };
        let req: AdmissionRequest<DynamicObject> = match review.try_into() {
            Ok(r) => r,
            Err(_) => return invalid("the AdmissionReview has no request"),
        };
        let resp = AdmissionResponse::from(&req);
        let is_pod =
            req.kind.group.is_empty() && req.kind.version == "v1" && req.kind.kind == "Pod";
        if !is_pod || req.operation != Operation::Create {
            return answer(200, resp);
        }
        let pod: Pod = match pod_json.map(serde_json::from_value) {
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                return answer(
                    200,
                    self.unreadable(resp, &format!("the pod could not be parsed: {e}")),
                )
            }
            None => return answer(200, resp),
        };
        answer(200, self.decide(resp, &pod).await)
    }

    fn unreadable(&self, resp: AdmissionResponse, msg: &str) -> AdmissionResponse {
        let msg = one_line(&format!("gpu-guard: {msg}"), MAX_WARNING);
        match self.on_unreadable {
            OnUnreadable::Deny => resp.deny(msg),
            OnUnreadable::Allow => warn(
                resp,
                vec![format!("{msg}; admitted without a GPU node affinity")],
            ),
        }
    }

    async fn decide(&self, resp: AdmissionResponse, pod: &Pod) -> AdmissionResponse {
        let gpus = pod::gpu_containers(pod);
        if gpus.is_empty() {
            return resp;
        }
        let deadline = Instant::now() + self.read_timeout;
        let mut tasks = Vec::new();
        for c in &gpus {
            let (j, cache, img) = (self.judge.clone(), self.cache.clone(), c.image.clone());
            tasks.push(tokio::spawn(async move {
                judge::place(&j, &cache, &img, deadline).await
            }));
        }
        let mut placed: Vec<(&GpuContainer, Arc<Placement>)> = Vec::new();
        for (c, t) in gpus.iter().zip(tasks) {
            let r = t
                .await
                .unwrap_or_else(|e| Err(format!("the image read stopped: {e}")));
            match r {
                Ok(p) => placed.push((c, p)),
                Err(e) => {
                    return self.unreadable(
                        resp,
                        &format!("cannot read image {} of container {}: {e}", c.image, c.name),
                    )
                }
            }
        }
        let mut lists = Vec::new();
        let mut summaries = Vec::new();
        let mut notes = Vec::new();
        for (c, p) in &placed {
            match p.as_ref() {
                Placement::Nowhere { diagnosis } => {
                    return resp.deny(one_line(&format!("gpu-guard: container {} (image {}) cannot run on any GPU node: {diagnosis}", c.name, c.image), 1000));
                }
                Placement::Unplaceable { reason } => {
                    let msg = format!("image {} of container {}: {reason}", c.image, c.name);
                    return self.unreadable(resp, &msg);
                }
                Placement::Terms {
                    terms,
                    summary,
                    notes: n,
                } => {
                    if !terms.is_empty() {
                        lists.push(terms.clone());
                    }
                    summaries.push(format!("{}: {summary}", c.name));
                    notes.extend(
                        n.iter()
                            .map(|x| format!("gpu-guard: container {}: {x}", c.name)),
                    );
                }
            }
        }
        let own = own_terms(pod);
        let terms = match lists.is_empty() {
            true => None,
            false => match affinity::and_all(&lists).and_then(|ours| affinity::and(&own, &ours)) {
                Ok(t) => Some(t),
                Err(e) => return self.unreadable(resp, &e.to_string()),
            },
        };
        if terms.as_ref().is_some_and(|t| t.is_empty()) {
            return resp.deny(one_line(
                &format!("gpu-guard: no node can satisfy both the pod's own node affinity and what its images need ({})", summaries.join("; ")),
                1000,
            ));
        }
        let needs = one_line(&summaries.join("; "), MAX_ANNOTATION);
        let p = patch(pod, terms, &needs);
        let resp = warn(resp, notes);
        match resp.clone().with_patch(p) {
            Ok(r) => r,
            Err(e) => self.unreadable(resp, &format!("the patch could not be written: {e}")),
        }
    }
}

fn warn(mut resp: AdmissionResponse, notes: Vec<String>) -> AdmissionResponse {
    if notes.is_empty() {
        return resp;
    }
    let w = resp.warnings.get_or_insert_with(Vec::new);
    w.extend(
        notes
            .into_iter()
            .take(MAX_WARNINGS)
            .map(|n| one_line(&n, MAX_WARNING)),
    );
    resp
}
