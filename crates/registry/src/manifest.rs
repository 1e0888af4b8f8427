//! Manifests: fetched with every media type gpu-guard reads in `Accept`
//! (OCI image index and manifest, Docker schema 2 manifest list and
//! manifest), verified against the digest asked for or the registry's
//! `Docker-Content-Digest`, and resolved through indexes to the one image
//! manifest of a platform (OCI image-spec `image-index.md`; buildx
//! attestation manifests, `vnd.docker.reference.type: attestation-manifest`,
//! are never picked).

use crate::blob::sha256_digest;
use crate::client::{Client, Req};
use crate::document::decode;
use crate::error::RegistryError;
use crate::reference::{repo_ref, valid_digest, Reference};
use gpu_guard::core::sanitize::esc;
use oci_spec::image::{Descriptor, ImageIndex, ImageManifest};
use std::sync::atomic::Ordering;
use ureq::http::Method;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";
/// Manifests and indexes over this are refused (real ones are a few KiB).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Indexes nested deeper than this are refused.
const MAX_DEPTH: usize = 4;

/// A manifest's bytes as the registry served them, verified.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub bytes: Vec<u8>,
    pub media_type: String,
    pub digest: String,
}

/// `os/arch[/variant]` to pick from an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    fn matches(&self, d: &Descriptor) -> bool {
        let Some(p) = d.platform() else { return false };
        p.os().to_string() == self.os
            && p.architecture().to_string() == self.architecture
            && (self.variant.is_none() || p.variant().is_none() || self.variant == *p.variant())
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// The image manifest a reference names for a platform.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The digest the reference resolved to (an index's, or the manifest's).
    pub top_digest: String,
    /// The platform's image manifest.
    pub manifest: Manifest,
}

fn kind_of(m: &Manifest) -> Result<&'static str, String> {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(rename = "schemaVersion")]
        schema_version: Option<u64>,
        #[serde(rename = "mediaType")]
        media_type: Option<String>,
        manifests: Option<serde_json::Value>,
        config: Option<serde_json::Value>,
    }
    let p: Probe = serde_json::from_slice(&m.bytes)
        .map_err(|e| crate::document::cause("image manifest or index", &e))?;
    if p.schema_version == Some(1) {
        return Err(
            "a Docker schema 1 manifest (deprecated; push the image again with a current client)"
                .to_string(),
        );
    }
    let mt = p.media_type.as_deref().unwrap_or(m.media_type.as_str());
    match (mt, p.manifests.is_some(), p.config.is_some()) {
        (OCI_INDEX | DOCKER_LIST, _, _) | (_, true, false) => Ok("index"),
        (OCI_MANIFEST | DOCKER_MANIFEST, _, _) | (_, false, true) => Ok("manifest"),
        _ => Err(format!("unknown manifest media type {:?}", esc(mt))),
    }
}

impl Client {
    /// `GET /v2/<name>/manifests/<reference>`, verified.
    pub fn manifest(&self, repo: &str, reference: &str) -> Result<Manifest, RegistryError> {
        self.stats.manifest_gets.fetch_add(1, Ordering::Relaxed);
        let what = format!("manifest {}", repo_ref(repo, reference));
        let target = format!("/v2/{repo}/manifests/{reference}");
        let resp = self.send(&Req {
            method: Method::GET,
            target: &target,
            accept: Some(ACCEPT),
            body: None,
            scope: Client::scope_pull(repo),
            what: &what,
            small: true,
        })?;
        if resp.status() != 200 {
            return Err(self.status_error(resp, &what));
        }
        let header = |k: &str| {
            resp.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let media_type = header("content-type")
            .map(|c| c.split(';').next().unwrap_or("").trim().to_string())
            .unwrap_or_default();
        let served = header("docker-content-digest");
        let bytes = self.read_small(resp, &what, MAX_MANIFEST_BYTES)?;
        let digest = sha256_digest(&bytes);
        // By digest: that digest. By tag: the registry's header when it sent one.
        let expected = if valid_digest(reference) {
            Some(reference.to_string())
        } else {
            served.filter(|d| valid_digest(d))
        };
        if let Some(e) = expected {
            if e != digest {
                return Err(RegistryError::DigestMismatch {
                    registry: self.name().to_string(),
                    what,
                    expected: e,
                    actual: digest,
                });
            }
        }
        Ok(Manifest {
            bytes,
            media_type,
            digest,
        })
    }

    /// Follows the reference through indexes to `platform`'s image manifest.
    pub fn resolve(&self, r: &Reference, platform: &Platform) -> Result<Resolved, RegistryError> {
        let repo = r.repository.as_str();
        let mut m = self.manifest(repo, r.manifest_ref())?;
        let top_digest = m.digest.clone();
        for _ in 0..=MAX_DEPTH {
            let what = format!("manifest {}", repo_ref(repo, &m.digest));
            let proto = |msg: String| RegistryError::Protocol {
                registry: self.name().to_string(),
                what: what.clone(),
                msg,
            };
            match kind_of(&m).map_err(proto)? {
                "manifest" => {
                    decode::<ImageManifest>(self, &what, "image manifest", &m.bytes)?;
                    return Ok(Resolved {
                        top_digest,
                        manifest: m,
                    });
                }
                _ => {
                    let idx: ImageIndex = decode(self, &what, "image index", &m.bytes)?;
                    let d = pick(&idx, platform).map_err(proto)?;
                    m = self.manifest(repo, d.digest().as_ref())?;
                }
            }
        }
        Err(RegistryError::Protocol {
            registry: self.name().to_string(),
            what: format!("manifest {}", repo_ref(repo, &top_digest)),
            msg: format!("indexes nested more than {MAX_DEPTH} deep"),
        })
    }

    /// `PUT /v2/<name>/manifests/<reference>`; returns the digest and the
    /// registry's `OCI-Subject` header (set when it indexed the subject for
    /// the Referrers API, OCI distribution-spec 1.1 "Pushing Manifests with Subject").
    pub fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        bytes: &[u8],
        media_type: &str,
    ) -> Result<(String, Option<String>), RegistryError> {
        let digest = sha256_digest(bytes);
        let what = format!("manifest push {}", repo_ref(repo, reference));
        let target = format!("/v2/{repo}/manifests/{reference}");
        let resp = self.send(&Req {
            method: Method::PUT,
            target: &target,
            accept: None,
            body: Some((bytes, media_type)),
            scope: Client::scope_push(repo),
            what: &what,
            small: true,
        })?;
        if resp.status() != 201 {
            return Err(self.status_error(resp, &what));
        }
        let subject = resp
            .headers()
            .get("oci-subject")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok((digest, subject))
    }
}

/// The one descriptor of `idx` for `platform`.
fn pick<'a>(idx: &'a ImageIndex, platform: &Platform) -> Result<&'a Descriptor, String> {
    let cands: Vec<&Descriptor> = idx
        .manifests()
        .iter()
        .filter(|d| {
            d.annotations()
                .as_ref()
                .and_then(|a| a.get("vnd.docker.reference.type"))
                .map(String::as_str)
                != Some("attestation-manifest")
        })
        .collect();
    if let Some(d) = cands.iter().find(|d| platform.matches(d)) {
        return Ok(d);
    }
    let available: Vec<String> = cands
        .iter()
        .map(|d| match d.platform() {
            Some(p) => match p.variant() {
                Some(v) => format!("{}/{}/{v}", p.os(), p.architecture()),
                None => format!("{}/{}", p.os(), p.architecture()),
            },
            None => "unknown".to_string(),
        })
        .collect();
    if available.is_empty() {
        return Err("the index lists no image".to_string());
    }
    Err(format!(
        "no image for platform {platform} (the index has: {})",
        esc(&available.join(", "))
    ))
}
