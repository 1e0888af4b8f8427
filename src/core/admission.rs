//! `[admission]`: the settings of the Kubernetes admission webhook
//! (`gpu-guard admission`, served by the `gpu-guard-admission` binary; see
//! docs/kubernetes.md). Parsed with the rest of the config so
//! a typo fails `gpu-guard check` and `doctor` as any other key does.

use serde::{Deserialize, Serialize};

/// What the webhook does with a pod whose GPU image it cannot read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUnreadable {
    /// Admitted unchanged, with an AdmissionResponse warning.
    Allow,
    /// Denied, naming the image and the cause.
    Deny,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionConfig {
    /// Registries (`HOST[:PORT]`) read over plain HTTP; every other one over HTTPS.
    pub plain_http_registries: Vec<String>,
    /// A PEM file of CAs trusted for registries besides the system's ("" none).
    pub registry_ca: String,
    /// A docker `config.json` with registry credentials (a mounted Secret);
    /// "" reads $REGISTRY_AUTH_FILE, $DOCKER_CONFIG/config.json, ~/.docker/config.json.
    pub docker_config: String,
    pub on_unreadable: OnUnreadable,
    /// The platform whose image is read from a multi-platform index.
    pub platform: String,
    /// How long reading one pod's images may take. Keep it below the
    /// MutatingWebhookConfiguration's `timeoutSeconds`.
    pub read_timeout_ms: u64,
    /// Image results kept (by registry, repository and manifest digest).
    pub cache_entries: usize,
    /// Bytes of image results kept (an image's needs are a few KiB; an
    /// image with thousands of libraries, a few MiB).
    pub cache_bytes: u64,
    /// How long an image's result is kept.
    pub cache_ttl_s: u64,
    /// How long an image that could not be read is answered as unreadable
    /// without reading it again.
    pub unreadable_cache_s: u64,
    /// How long a tag's digest is trusted before the registry is asked again.
    pub tag_cache_s: u64,
    /// Image reads at once, all reviews together.
    pub max_reads: usize,
    /// Images one review may read (more are answered as unreadable).
    pub max_reads_per_review: usize,
    /// Reads that go on after their review was answered, so the next pod
    /// of the image is placed from the cache (0: none).
    pub background_reads: usize,
    /// The most one read may take, in the background included.
    pub background_read_s: u64,
    /// Uncompressed layer bytes one read may stream.
    pub max_image_bytes: u64,
    /// A RuntimeClass set on GPU pods that name none ("": none set).
    pub runtime_class: String,
    /// AdmissionReview bodies over this are refused (HTTP 413).
    pub max_body_bytes: u64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            plain_http_registries: Vec::new(),
            registry_ca: String::new(),
            docker_config: String::new(),
            on_unreadable: OnUnreadable::Allow,
            platform: "linux/amd64".to_string(),
            read_timeout_ms: 8000,
            cache_entries: 1024,
            cache_bytes: 64 << 20,
            cache_ttl_s: 3600,
            unreadable_cache_s: 30,
            tag_cache_s: 300,
            max_reads: 4,
            max_reads_per_review: 2,
            background_reads: 2,
            background_read_s: 300,
            max_image_bytes: 32 << 30,
            runtime_class: String::new(),
            // A Pod object is far below etcd's 1.5 MiB request limit.
            max_body_bytes: 3 << 20,
        }
    }
}
