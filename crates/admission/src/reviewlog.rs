//! One log line per pod review, `key=value` (logfmt: a value with a space,
//! a quote or `=` in double quotes, a quote in it as `\"`), every value
//! from the pod escaped by gpu-guard's one sanitizer
//! (`gpu_guard::core::sanitize`) and bounded, so a pod's name or image
//! cannot forge or break lines:
//!
//! `review uid=... namespace=... pod=... owner=ReplicaSet/x gpu_containers=1
//! images=reg/repo@sha256:... attested=0 cached=1 decision=patched ms=3
//! reason="..."`

use gpu_guard::core::sanitize::esc_bounded;
use k8s_openapi::api::core::v1::Pod;
use std::fmt::Write as _;
use std::time::Instant;

/// Longest value of one field; the image list is cut at [`MAX_IMAGES`].
const MAX_VALUE: usize = 253;
const MAX_IMAGES: usize = 8;
const MAX_REASON: usize = 400;

pub struct ReviewLog {
    started: Instant,
    pub uid: String,
    pub namespace: String,
    /// `name`, or `generateName` followed by `*` when the name is not set yet.
    pub pod: String,
    /// `Kind/name` of the controlling owner, `-` when none.
    pub owner: String,
    pub gpu_containers: usize,
    pub images: Vec<String>,
    pub attested: usize,
    pub cached: usize,
    pub decision: &'static str,
    pub reason: String,
}

fn kv(out: &mut String, k: &str, v: &str, max: usize) {
    let e = esc_bounded(v, max);
    if e.is_empty() || e.contains([' ', '"', '=']) {
        let _ = write!(out, " {k}=\"{}\"", e.replace('"', "\\\""));
    } else {
        let _ = write!(out, " {k}={e}");
    }
}

impl ReviewLog {
    pub fn new(uid: &str, namespace: &str) -> ReviewLog {
        ReviewLog {
            started: Instant::now(),
            uid: uid.to_string(),
            namespace: namespace.to_string(),
            pod: "-".to_string(),
            owner: "-".to_string(),
            gpu_containers: 0,
            images: Vec::new(),
            attested: 0,
            cached: 0,
            decision: "unchanged",
            reason: String::new(),
        }
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn pod(&mut self, pod: &Pod) {
        let md = &pod.metadata;
        self.pod = match (&md.name, &md.generate_name) {
            (Some(n), _) if !n.is_empty() => n.clone(),
            (_, Some(g)) => format!("{g}*"),
            _ => "-".to_string(),
        };
        let owners = md.owner_references.iter().flatten();
        let mut chosen = None;
        for o in owners {
            if o.controller == Some(true) || chosen.is_none() {
                chosen = Some(format!("{}/{}", o.kind, o.name));
            }
            if o.controller == Some(true) {
                break;
            }
        }
        if let Some(o) = chosen {
            self.owner = o;
        }
    }

    /// The line, without the logger's prefix.
    pub fn line(&self) -> String {
        let mut out = String::from("review");
        kv(&mut out, "uid", &self.uid, MAX_VALUE);
        kv(&mut out, "namespace", &self.namespace, MAX_VALUE);
        kv(&mut out, "pod", &self.pod, MAX_VALUE);
        kv(&mut out, "owner", &self.owner, MAX_VALUE);
        let _ = write!(out, " gpu_containers={}", self.gpu_containers);
        let mut images: Vec<&str> = self
            .images
            .iter()
            .map(String::as_str)
            .take(MAX_IMAGES)
            .collect();
        let more = self.images.len().saturating_sub(MAX_IMAGES);
        let tail = format!("+{more}");
        if more > 0 {
            images.push(&tail);
        }
        kv(
            &mut out,
            "images",
            &images.join(","),
            MAX_VALUE * MAX_IMAGES,
        );
        let _ = write!(
            out,
            " attested={} cached={} decision={} ms={}",
            self.attested,
            self.cached,
            self.decision,
            self.started.elapsed().as_millis()
        );
        if !self.reason.is_empty() {
            kv(&mut out, "reason", &self.reason, MAX_REASON);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_quoted() {
        let mut l = ReviewLog::new("u-1", "team a");
        let pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {
            "generateName": "train-\n", "ownerReferences": [
                {"apiVersion": "v1", "kind": "X", "name": "first", "uid": "1"},
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "2", "controller": true}]}}))
        .unwrap();
        l.pod(&pod);
        l.images = vec!["r/a@sha256:1".into(), "r/\"b".into()];
        l.reason = "say \"hi\"\u{202e}".into();
        let line = l.line();
        assert!(!line.contains('\n') && !line.contains('\u{202e}'), "{line}");
        assert!(line.contains("namespace=\"team a\""), "{line}");
        assert!(line.contains("pod=train-\\x0a*"), "{line}");
        assert!(line.contains("owner=ReplicaSet/rs"), "{line}");
        assert!(line.contains("images=\"r/a@sha256:1,r/\\\"b\""), "{line}");
        assert!(
            line.contains("reason=\"say \\\"hi\\\"\\u{202e}\""),
            "{line}"
        );
    }
}
