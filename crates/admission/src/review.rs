//! One AdmissionReview (admission.k8s.io/v1) in, one out: find the
//! containers that will get GPUs, read each image ([`crate::reads`]),
//! place each container as the node will run it (its image's env with its
//! own over it, [`crate::podenv`]), and answer with a JSONPatch that ANDs
//! gpu-guard's node-label terms with the pod's own required node affinity
//! ([`crate::affinity`]), adds the `gpu-guard.io/needs` annotation, and
//! sets `[admission] runtime_class` on a GPU pod that names none. The
//! patch touches nothing else.
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
use crate::judge::{ImageJudge, ImageKey, Placement};
use crate::metrics::{Metrics, ReviewResult};
use crate::pod::{self, GpuContainer};
use crate::reads::{Got, Reads, ReviewBudget};
use crate::reviewlog::ReviewLog;
use base64::Engine as _;
use gpu_guard::core::admission::{AdmissionConfig, OnUnreadable};
use gpu_guard::core::sanitize::esc_bounded;
use k8s_openapi::api::core::v1::{NodeSelectorTerm, Pod};
use kube_core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube_core::DynamicObject;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const NEEDS_ANNOTATION: &str = "gpu-guard.io/needs";
/// Annotation values and warnings are kept short (Kubernetes shows warnings
/// to `kubectl` users one per line).
const MAX_ANNOTATION: usize = 2048;
const MAX_WARNING: usize = 250;
const MAX_WARNINGS: usize = 8;
/// Distinct (image, env) pairs one review places; more are unreadable.
const MAX_PLACEMENTS: usize = 64;

pub struct Reviewer<J: ImageJudge> {
    pub reads: Arc<Reads<J>>,
    pub on_unreadable: OnUnreadable,
    pub read_timeout: Duration,
    /// Set on GPU pods that name no RuntimeClass.
    pub runtime_class: Option<String>,
    pub metrics: Arc<Metrics>,
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

/// A message for the user: escaped, one line, at most `max` characters.
fn line(s: &str, max: usize) -> String {
    esc_bounded(s, max)
}

/// `s` escaped and cut to at most `max` characters at a token boundary
/// (a space, `;` or `,`), never inside a token, with ` …` when cut.
pub fn cut_at_token(s: &str, max: usize) -> String {
    let s = esc_bounded(s, s.len());
    if s.chars().count() <= max {
        return s;
    }
    let keep: String = s.chars().take(max.saturating_sub(2)).collect();
    // The character after `keep` decides: a separator there ends a token.
    let next = s.chars().nth(keep.chars().count());
    let end = if next.is_some_and(|c| matches!(c, ' ' | ';' | ',')) {
        keep.len()
    } else {
        keep.rfind([' ', ';', ',']).unwrap_or(0)
    };
    let head = keep[..end].trim_end_matches([' ', ';', ',']);
    if head.is_empty() {
        "…".to_string()
    } else {
        format!("{head} …")
    }
}

/// `/` in a JSON pointer token is `~1`, `~` is `~0` (RFC 6901).
fn pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The RuntimeClass to set on `pod`: the configured one when it names none.
fn runtime_class<'a>(pod: &Pod, class: Option<&'a str>) -> Option<&'a str> {
    let named = pod
        .spec
        .as_ref()
        .and_then(|s| s.runtime_class_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    class.filter(|_| !named && pod.spec.is_some())
}

/// The JSONPatch: the combined required node affinity, the annotation, and
/// the RuntimeClass when one is to be set.
pub fn patch(
    pod: &Pod,
    terms: Option<Vec<NodeSelectorTerm>>,
    needs: Option<&str>,
    class: Option<&str>,
) -> json_patch::Patch {
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
    if let Some(needs) = needs {
        if pod.metadata.annotations.is_none() {
            ops.push(serde_json::json!({"op": "add", "path": "/metadata/annotations", "value": {NEEDS_ANNOTATION: needs}}));
        } else {
            let path = format!("/metadata/annotations/{}", pointer_token(NEEDS_ANNOTATION));
            ops.push(serde_json::json!({"op": "add", "path": path, "value": needs}));
        }
    }
    if let Some(c) = class {
        ops.push(serde_json::json!({"op": "add", "path": "/spec/runtimeClassName", "value": c}));
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

fn warn(mut resp: AdmissionResponse, notes: Vec<String>) -> AdmissionResponse {
    if notes.is_empty() {
        return resp;
    }
    let mut seen = std::collections::BTreeSet::new();
    let w = resp.warnings.get_or_insert_with(Vec::new);
    w.extend(
        notes
            .into_iter()
            .filter(|n| seen.insert(n.clone()))
            .take(MAX_WARNINGS)
            .map(|n| line(&n, MAX_WARNING)),
    );
    resp
}

/// The id of a container env, for the placement cache.
fn env_id(env: &[(String, String)]) -> String {
    gpu_guard_registry::blob::sha256_digest(&serde_json::to_vec(env).unwrap_or_default())
}

/// The terms and summary of each placed container; an error or an
/// unplaceable image goes to `failed`, the placement's notes to `notes`.
fn gather<R>(
    placed: &[Placed<'_, R>],
    placements: Vec<Result<Arc<Placement>, String>>,
    failed: &mut Option<String>,
    notes: &mut Vec<String>,
) -> (Vec<Vec<NodeSelectorTerm>>, Vec<String>) {
    let mut lists = Vec::new();
    let mut summaries = Vec::new();
    for (p, pl) in placed.iter().zip(placements) {
        match pl.as_deref() {
            Err(e) => {
                failed.get_or_insert_with(|| e.clone());
            }
            Ok(Placement::Unplaceable { reason }) => {
                failed.get_or_insert_with(|| {
                    format!("image {} of container {}: {reason}", p.c.image, p.c.name)
                });
            }
            Ok(Placement::Terms {
                terms,
                summary,
                notes: n,
            }) => {
                // Empty terms: any node; nothing to AND.
                if !terms.is_empty() {
                    lists.push(crate::placement::for_gpu_count(terms, p.c.gpus));
                }
                summaries.push(format!("{}: {summary}", p.c.name));
                notes.extend(
                    n.iter()
                        .map(|x| format!("gpu-guard: container {}: {x}", p.c.name)),
                );
            }
            Ok(Placement::Nowhere { .. }) => {}
        }
    }
    (lists, summaries)
}

/// A placement to compute: the image, the env id, the read, the env.
type ToPlace<R> = (ImageKey, String, Arc<R>, Vec<(String, String)>);

/// A container whose image was read: the key, the read, and the placement key.
struct Placed<'a, R> {
    c: &'a GpuContainer,
    key: ImageKey,
    read: Arc<R>,
    env_id: String,
}

impl<J: ImageJudge> Reviewer<J> {
    pub fn new(reads: Arc<Reads<J>>, a: &AdmissionConfig, metrics: Arc<Metrics>) -> Reviewer<J> {
        Reviewer {
            reads,
            on_unreadable: a.on_unreadable,
            read_timeout: Duration::from_millis(a.read_timeout_ms),
            runtime_class: Some(a.runtime_class.clone()).filter(|c| !c.is_empty()),
            metrics,
        }
    }

    fn invalid(&self, msg: &str) -> Answer {
        self.metrics.review(ReviewResult::Invalid, Duration::ZERO);
        answer(400, AdmissionResponse::invalid(line(msg, 500)))
    }

    /// Parses a POST /mutate body and answers it.
    pub async fn review(&self, body: &[u8]) -> Answer {
        let v: serde_json::Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return self.invalid(&format!("the body is not JSON: {e}")),
        };
        if v.get("kind").and_then(|k| k.as_str()) != Some("AdmissionReview")
            || v.get("apiVersion").and_then(|k| k.as_str()) != Some("admission.k8s.io/v1")
        {
            return self.invalid("the body is not an admission.k8s.io/v1 AdmissionReview");
        }
        let pod_json = v.pointer("/request/object").cloned();
        let review: AdmissionReview<DynamicObject> = match serde_json::from_value(v) {
            Ok(r) => r,
            Err(e) => return self.invalid(&format!("the AdmissionReview is not valid: {e}")),
        };
        let req: AdmissionRequest<DynamicObject> = match review.try_into() {
            Ok(r) => r,
            Err(_) => return self.invalid("the AdmissionReview has no request"),
        };
        let resp = AdmissionResponse::from(&req);
        let is_pod =
            req.kind.group.is_empty() && req.kind.version == "v1" && req.kind.kind == "Pod";
        if !is_pod || req.operation != Operation::Create {
            return answer(200, resp);
        }
        let mut log = ReviewLog::new(&req.uid, req.namespace.as_deref().unwrap_or(""));
        let (resp, result) = match pod_json.map(serde_json::from_value::<Pod>) {
            Some(Ok(pod)) => {
                log.pod(&pod);
                self.decide_pod(resp, &pod, &mut log).await
            }
            Some(Err(e)) => {
                let msg = format!("the pod could not be parsed: {e}");
                log.reason = msg.clone();
                self.unreadable(resp, None, &msg)
            }
            None => (resp, ReviewResult::Unchanged),
        };
        log.decision = result.label();
        self.metrics.review(result, log.started().elapsed());
        log::info!("{}", log.line());
        answer(200, resp)
    }

    /// An image that cannot be read or placed: `on_unreadable`. Allowed,
    /// the pod still gets the RuntimeClass (node protection does not
    /// depend on the image read).
    fn unreadable(
        &self,
        resp: AdmissionResponse,
        pod: Option<&Pod>,
        msg: &str,
    ) -> (AdmissionResponse, ReviewResult) {
        let msg = format!("gpu-guard: {msg}");
        match self.on_unreadable {
            OnUnreadable::Deny => (resp.deny(line(&msg, 1000)), ReviewResult::UnreadableDenied),
            OnUnreadable::Allow => {
                let resp = warn(
                    resp,
                    vec![format!("{msg}; admitted without a GPU node affinity")],
                );
                let class = pod.and_then(|p| runtime_class(p, self.runtime_class.as_deref()));
                let resp = match (pod, class) {
                    (Some(p), Some(c)) => resp
                        .clone()
                        .with_patch(patch(p, None, None, Some(c)))
                        .unwrap_or(resp),
                    _ => resp,
                };
                (resp, ReviewResult::UnreadableAllowed)
            }
        }
    }

    /// Reads each distinct image of `gpus` at once, within `deadline`.
    async fn read_images(
        &self,
        gpus: &[GpuContainer],
        deadline: Instant,
    ) -> HashMap<String, Got<J::Read>> {
        let budget = Arc::new(ReviewBudget::new(self.reads.settings.per_review));
        let mut tasks = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for c in gpus.iter().filter(|c| seen.insert(c.image.clone())) {
            let (reads, img, budget) = (self.reads.clone(), c.image.clone(), budget.clone());
            tasks.push((
                c.image.clone(),
                tokio::spawn(async move { reads.get(&img, deadline, &budget).await }),
            ));
        }
        let mut out = HashMap::new();
        for (img, t) in tasks {
            let g = t
                .await
                .unwrap_or_else(|e| Got::Failed(format!("the image read stopped: {e}")));
            out.insert(img, g);
        }
        out
    }

    /// The placement of each container, from the cache or computed now
    /// (on the blocking pool, by `deadline` and a second's grace).
    async fn place_all(
        &self,
        placed: &[Placed<'_, J::Read>],
        deadline: Instant,
    ) -> Vec<Result<Arc<Placement>, String>> {
        let cache = &self.reads.cache;
        let mut todo: Vec<ToPlace<J::Read>> = Vec::new();
        for p in placed {
            let fresh = cache.placement(&p.key, &p.env_id).is_none()
                && !todo.iter().any(|t| t.0 == p.key && t.1 == p.env_id);
            if fresh && todo.len() < MAX_PLACEMENTS {
                todo.push((
                    p.key.clone(),
                    p.env_id.clone(),
                    p.read.clone(),
                    p.c.env.env.clone(),
                ));
            }
        }
        if !todo.is_empty() {
            let (judge, cache) = (self.reads.judge().clone(), cache.clone());
            let work = tokio::task::spawn_blocking(move || {
                for (key, id, read, env) in todo {
                    cache.remember_placement(&key, &id, Arc::new(judge.place(&read, &env)));
                }
            });
            let grace = tokio::time::Instant::from_std(deadline + Duration::from_secs(1));
            let _ = tokio::time::timeout_at(grace, work).await;
        }
        placed
            .iter()
            .map(|p| {
                cache.placement(&p.key, &p.env_id).ok_or_else(|| {
                    format!("container {} could not be placed in time (more than {MAX_PLACEMENTS} distinct GPU containers, or past the deadline)", p.c.name)
                })
            })
            .collect()
    }

    async fn decide_pod(
        &self,
        resp: AdmissionResponse,
        pod: &Pod,
        log: &mut ReviewLog,
    ) -> (AdmissionResponse, ReviewResult) {
        let gpus = pod::gpu_containers(pod, &log.namespace);
        log.gpu_containers = gpus.len();
        if gpus.is_empty() {
            return (resp, ReviewResult::Unchanged);
        }
        let deadline = log.started() + self.read_timeout;
        let got = self.read_images(&gpus, deadline).await;
        let judge = self.reads.judge().clone();
        let mut placed = Vec::new();
        let mut failed: Option<String> = None;
        let mut notes: Vec<String> = Vec::new();
        for c in &gpus {
            match got.get(&c.image) {
                Some(Got::Cached(key, read) | Got::Read(key, read)) => {
                    let info = judge.info(read);
                    notes.extend(
                        info.notes
                            .iter()
                            .map(|n| format!("gpu-guard: image {}: {n}", c.image)),
                    );
                    placed.push(Placed {
                        c,
                        key: key.clone(),
                        read: read.clone(),
                        env_id: env_id(&c.env.env),
                    });
                }
                Some(Got::Failed(e)) => {
                    failed.get_or_insert_with(|| {
                        format!("cannot read image {} of container {}: {e}", c.image, c.name)
                    });
                }
                None => {}
            }
            notes.extend(
                c.env
                    .unresolved
                    .iter()
                    .map(|u| format!("gpu-guard: container {}: {u}; judged without it", c.name)),
            );
        }
        self.log_images(&got, log);
        let placements = self.place_all(&placed, deadline).await;
        self.combine(resp, pod, &placed, placements, failed, notes, log)
    }

    fn log_images(&self, got: &HashMap<String, Got<J::Read>>, log: &mut ReviewLog) {
        let judge = self.reads.judge();
        let mut images: Vec<String> = Vec::new();
        for (img, g) in got {
            match g {
                Got::Cached(k, r) | Got::Read(k, r) => {
                    images.push(k.to_string());
                    if judge.info(r).attestation.is_some() {
                        log.attested += 1;
                        if matches!(g, Got::Read(..)) {
                            Metrics::inc(&self.metrics.attestations_used);
                        }
                    }
                    if matches!(g, Got::Cached(..)) {
                        log.cached += 1;
                    }
                }
                Got::Failed(_) => images.push(format!("{img}(unread)")),
            }
        }
        images.sort();
        log.images = images;
    }

    /// Denials first (a fact whatever the other images are), then
    /// unreadable images, then the AND of every container's terms.
    #[allow(clippy::too_many_arguments)]
    fn combine(
        &self,
        resp: AdmissionResponse,
        pod: &Pod,
        placed: &[Placed<'_, J::Read>],
        placements: Vec<Result<Arc<Placement>, String>>,
        mut failed: Option<String>,
        mut notes: Vec<String>,
        log: &mut ReviewLog,
    ) -> (AdmissionResponse, ReviewResult) {
        for (p, pl) in placed.iter().zip(&placements) {
            if let Ok(Placement::Nowhere { diagnosis }) = pl.as_deref() {
                let msg = format!(
                    "gpu-guard: container {} (image {}) cannot run on any GPU node: {diagnosis}",
                    p.c.name, p.c.image
                );
                log.reason = msg.clone();
                return (resp.deny(line(&msg, 1000)), ReviewResult::Denied);
            }
        }
        let (lists, summaries) = gather(placed, placements, &mut failed, &mut notes);
        if let Some(msg) = failed {
            log.reason = msg.clone();
            let (r, result) = self.unreadable(warn(resp, notes), Some(pod), &msg);
            return (r, result);
        }
        let terms = match lists.is_empty() {
            true => None,
            false => {
                match affinity::and_all(&lists) {
                    // The GPU containers together leave no node.
                    Ok(ours) if ours.is_empty() => {
                        let msg = format!("gpu-guard: no node can run all of the pod's GPU containers together ({})", summaries.join("; "));
                        log.reason = msg.clone();
                        return (resp.deny(line(&msg, 1000)), ReviewResult::Denied);
                    }
                    Ok(ours) => match affinity::and(&own_terms(pod), &ours) {
                        Ok(t) => Some(t),
                        Err(e) => {
                            log.reason = e.to_string();
                            return self.unreadable(resp, Some(pod), &e.to_string());
                        }
                    },
                    Err(e) => {
                        log.reason = e.to_string();
                        return self.unreadable(resp, Some(pod), &e.to_string());
                    }
                }
            }
        };
        if terms.as_ref().is_some_and(|t| t.is_empty()) {
            let msg = format!("gpu-guard: no node can satisfy both the pod's own node affinity and what its images need ({})", summaries.join("; "));
            log.reason = msg.clone();
            return (resp.deny(line(&msg, 1000)), ReviewResult::Denied);
        }
        let needs = cut_at_token(&summaries.join("; "), MAX_ANNOTATION);
        let class = runtime_class(pod, self.runtime_class.as_deref());
        let p = patch(pod, terms, Some(&needs), class);
        let resp = warn(resp, notes);
        match resp.clone().with_patch(p) {
            Ok(r) => (r, ReviewResult::Patched),
            Err(e) => self.unreadable(
                resp,
                Some(pod),
                &format!("the patch could not be written: {e}"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotation_cut_between_tokens() {
        let s = "train: sha256:abcd linux/amd64: cuda>=12.4; 3 libraries, GPU code sm_80 sm_90";
        assert_eq!(cut_at_token(s, 200), s);
        let c = cut_at_token(s, 30);
        assert!(c.chars().count() <= 30, "{c}");
        assert!(s.starts_with(c.trim_end_matches(" …")), "{c}");
        assert!(c.ends_with(" …"));
        // Every token kept is whole.
        let kept: Vec<&str> = c.trim_end_matches(" …").split([' ', ';', ',']).collect();
        let all: Vec<&str> = s.split([' ', ';', ',']).collect();
        assert!(kept.iter().all(|t| all.contains(t)), "{c}");
        // One long token: nothing of it.
        assert_eq!(cut_at_token(&"x".repeat(100), 10), "…");
        // Control characters escaped.
        assert!(!cut_at_token("a\nb", 100).contains('\n'));
    }
}
