//! Artifacts attached to an image (OCI image-spec 1.1 `manifest.md`,
//! "Guidelines for Artifact Usage"; distribution-spec 1.1 "Listing
//! Referrers" and "Referrers Tag Schema").
//!
//! An artifact is an image manifest with `artifactType`, the empty config
//! (`application/vnd.oci.empty.v1+json`, `{}`), its layers, and `subject`:
//! the descriptor of the image manifest it is about. It is found through
//! `GET /v2/<name>/referrers/<digest>` where the registry has the API; a
//! registry without it (distribution 2.8: distribution#3716) answers 404,
//! and then the index at the tag `sha256-<hex>` lists the referrers
//! instead. Pushing keeps that index up to date when the registry does not
//! answer the manifest push with `OCI-Subject`.

use crate::client::{clean, Client, Req};
use crate::error::RegistryError;
use crate::manifest::{OCI_INDEX, OCI_MANIFEST};
use oci_spec::image::{Descriptor, ImageIndex, ImageManifest, MediaType};
use std::collections::HashMap;
use std::str::FromStr;
use ureq::http::Method;

/// The empty JSON config of an artifact (image-spec `manifest.md`, "Guidance for an Empty Descriptor").
const EMPTY_JSON: &[u8] = b"{}";
const CREATED: &str = "org.opencontainers.image.created";

/// How an artifact was made findable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    ReferrersApi,
    TagSchema,
}

/// A found artifact: its manifest digest and its one layer's bytes.
#[derive(Clone, Debug)]
pub struct Artifact {
    pub manifest_digest: String,
    pub created: Option<String>,
    pub layer: Vec<u8>,
    pub via: Via,
}

/// The tag of the referrers index for `digest` (distribution-spec
/// "Referrers Tag Schema": `<alg>-<ref>`, truncated to 128 characters).
pub fn fallback_tag(digest: &str) -> String {
    digest.replacen(':', "-", 1).chars().take(128).collect()
}

fn proto(c: &Client, what: &str, msg: String) -> RegistryError {
    RegistryError::Protocol {
        registry: c.name().to_string(),
        what: what.to_string(),
        msg,
    }
}

fn descriptor(
    media_type: &str,
    digest: &str,
    size: u64,
    what: &str,
    c: &Client,
) -> Result<Descriptor, RegistryError> {
    let d = oci_spec::image::Digest::from_str(digest).map_err(|e| proto(c, what, e.to_string()))?;
    Ok(Descriptor::new(MediaType::from(media_type), size, d))
}

impl Client {
    /// The referrers of `subject` with `artifact_type`: from the Referrers
    /// API, or from the tag schema where the registry has no API.
    pub fn referrers(
        &self,
        repo: &str,
        subject: &str,
        artifact_type: &str,
    ) -> Result<(Vec<Descriptor>, Via), RegistryError> {
        let what = format!("referrers of {subject}");
        let target = format!(
            "/v2/{repo}/referrers/{subject}?artifactType={}",
            artifact_type.replace('+', "%2B").replace('/', "%2F")
        );
        let resp = self.send(&Req {
            method: Method::GET,
            target: &target,
            accept: Some(OCI_INDEX),
            body: None,
            scope: Client::scope_pull(repo),
            what: &what,
        })?;
        let (bytes, via) = match resp.status().as_u16() {
            200 => (
                self.read_small(resp, &what, crate::manifest::MAX_MANIFEST_BYTES)?,
                Via::ReferrersApi,
            ),
            // No Referrers API (distribution 2.8 answers 404): the tag schema.
            400 | 404 | 405 | 406 => match self.manifest(repo, &fallback_tag(subject)) {
                Ok(m) => (m.bytes, Via::TagSchema),
                Err(e) if e.is_not_found() => return Ok((Vec::new(), Via::TagSchema)),
                Err(e) => return Err(e),
            },
            _ => return Err(self.status_error(resp, &what)),
        };
        let idx = ImageIndex::from_reader(bytes.as_slice())
            .map_err(|e| proto(self, &what, clean(&e.to_string())))?;
        let found = idx
            .manifests()
            .iter()
            .filter(|d| {
                d.artifact_type().as_ref().map(|t| t.to_string()).as_deref() == Some(artifact_type)
            })
            .cloned()
            .collect();
        Ok((found, via))
    }

    /// The newest artifact of `artifact_type` whose manifest names exactly
    /// `subject` and whose one layer has that media type, read and verified;
    /// None when there is none. `max_layer` bounds the layer's size.
    pub fn find_artifact(
        &self,
        repo: &str,
        subject: &str,
        artifact_type: &str,
        max_layer: u64,
    ) -> Result<Option<Artifact>, RegistryError> {
        let (mut found, via) = self.referrers(repo, subject, artifact_type)?;
        let created = |d: &Descriptor| {
            d.annotations()
                .as_ref()
                .and_then(|a| a.get(CREATED).cloned())
        };
        // Newest first (RFC 3339 strings in UTC compare as text); unnamed last, in index order.
        found.reverse();
        found.sort_by_key(|d| std::cmp::Reverse(created(d)));
        for d in found {
            let m = self.manifest(repo, d.digest().as_ref())?;
            let what = format!("artifact {}", m.digest);
            let am = ImageManifest::from_reader(m.bytes.as_slice())
                .map_err(|e| proto(self, &what, clean(&e.to_string())))?;
            let subject_ok = am
                .subject()
                .as_ref()
                .is_some_and(|s| s.digest().as_ref() == subject);
            let type_ok = am
                .artifact_type()
                .as_ref()
                .map(|t| t.to_string())
                .as_deref()
                == Some(artifact_type);
            let layer = match am.layers().as_slice() {
                [l] if l.media_type().to_string() == artifact_type => l.clone(),
                _ => continue,
            };
            if !subject_ok || !type_ok {
                continue;
            }
            let bytes = self.blob_bytes(repo, layer.digest().as_ref(), layer.size(), max_layer)?;
            return Ok(Some(Artifact {
                manifest_digest: m.digest,
                created: am
                    .annotations()
                    .as_ref()
                    .and_then(|a| a.get(CREATED).cloned()),
                layer: bytes,
                via,
            }));
        }
        Ok(None)
    }

    /// Pushes `layer` as an artifact of `artifact_type` about `subject`
    /// (the image manifest's media type, digest and size), and makes it
    /// findable. `created` is an RFC 3339 time for the annotation.
    pub fn attach(
        &self,
        repo: &str,
        subject: (&str, &str, u64),
        artifact_type: &str,
        layer: &[u8],
        created: &str,
    ) -> Result<(String, Via), RegistryError> {
        let what = format!("artifact for {}", subject.1);
        let config_digest = self.push_blob(repo, EMPTY_JSON)?;
        let layer_digest = self.push_blob(repo, layer)?;
        let annotations: HashMap<String, String> =
            [(CREATED.to_string(), created.to_string())].into();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": artifact_type,
            "config": descriptor("application/vnd.oci.empty.v1+json", &config_digest, EMPTY_JSON.len() as u64, &what, self)?,
            "layers": [descriptor(artifact_type, &layer_digest, layer.len() as u64, &what, self)?],
            "subject": descriptor(subject.0, subject.1, subject.2, &what, self)?,
            "annotations": annotations,
        });
        let bytes = serde_json::to_vec(&manifest).map_err(|e| proto(self, &what, e.to_string()))?;
        let digest = crate::blob::sha256_digest(&bytes);
        let (digest_put, oci_subject) = self.put_manifest(repo, &digest, &bytes, OCI_MANIFEST)?;
        if oci_subject.as_deref() == Some(subject.1) {
            return Ok((digest_put, Via::ReferrersApi));
        }
        self.update_fallback_index(
            repo,
            subject.1,
            artifact_type,
            (&digest, bytes.len() as u64),
            created,
        )?;
        Ok((digest_put, Via::TagSchema))
    }

    /// Adds the artifact to the tag-schema index of `subject`, replacing
    /// older artifacts of the same type (readers take the newest).
    fn update_fallback_index(
        &self,
        repo: &str,
        subject: &str,
        artifact_type: &str,
        (digest, size): (&str, u64),
        created: &str,
    ) -> Result<(), RegistryError> {
        let tag = fallback_tag(subject);
        let what = format!("referrers index {tag}");
        let mut kept: Vec<serde_json::Value> = match self.manifest(repo, &tag) {
            Ok(m) => {
                let idx = ImageIndex::from_reader(m.bytes.as_slice())
                    .map_err(|e| proto(self, &what, clean(&e.to_string())))?;
                idx.manifests()
                    .iter()
                    .filter(|d| {
                        d.artifact_type().as_ref().map(|t| t.to_string()).as_deref()
                            != Some(artifact_type)
                    })
                    .map(|d| serde_json::to_value(d).unwrap_or_default())
                    .collect()
            }
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => return Err(e),
        };
        kept.push(serde_json::json!({
            "mediaType": OCI_MANIFEST,
            "digest": digest,
            "size": size,
            "artifactType": artifact_type,
            "annotations": { CREATED: created },
        }));
        let index =
            serde_json::json!({ "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": kept });
        let bytes = serde_json::to_vec(&index).map_err(|e| proto(self, &what, e.to_string()))?;
        self.put_manifest(repo, &tag, &bytes, OCI_INDEX)?;
        Ok(())
    }
}
