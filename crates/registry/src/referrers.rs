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

use crate::client::{Client, Req};
use crate::document::decode;
use crate::error::RegistryError;
use crate::manifest::{OCI_INDEX, OCI_MANIFEST};
use gpu_guard::core::sanitize::esc;
use oci_spec::image::{Descriptor, ImageIndex, ImageManifest, MediaType};
use std::collections::HashMap;
use std::str::FromStr;
use ureq::http::Method;

/// The empty JSON config of an artifact (image-spec `manifest.md`, "Guidance for an Empty Descriptor").
const EMPTY_JSON: &[u8] = b"{}";
const CREATED: &str = "org.opencontainers.image.created";

/// How an artifact was made findable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReferrersSource {
    ReferrersApi,
    TagSchema,
}

/// Referrers read for one subject, newest first; the rest are skipped.
pub const MAX_REFERRERS: usize = 8;

/// What [`Client::find_artifact`] found, and what it skipped on the way.
#[derive(Clone, Debug, Default)]
pub struct Found {
    pub artifact: Option<Artifact>,
    /// One line per referrer (or referrers list) that could not be used.
    pub skipped: Vec<String>,
}

/// A found artifact: its manifest digest and its one layer's bytes.
#[derive(Clone, Debug)]
pub struct Artifact {
    pub manifest_digest: String,
    pub created: Option<String>,
    pub layer: Vec<u8>,
    pub via: ReferrersSource,
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
    ) -> Result<(Vec<Descriptor>, ReferrersSource), RegistryError> {
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
            small: true,
        })?;
        let (bytes, via) = match resp.status().as_u16() {
            200 => (
                self.read_small(resp, &what, crate::manifest::MAX_MANIFEST_BYTES)?,
                ReferrersSource::ReferrersApi,
            ),
            // No Referrers API (distribution 2.8 answers 404): the tag schema.
            400 | 404 | 405 | 406 => match self.manifest(repo, &fallback_tag(subject)) {
                Ok(m) => (m.bytes, ReferrersSource::TagSchema),
                Err(e) if e.is_not_found() => return Ok((Vec::new(), ReferrersSource::TagSchema)),
                Err(e) => return Err(e),
            },
            _ => return Err(self.status_error(resp, &what)),
        };
        let what = match via {
            ReferrersSource::ReferrersApi => what,
            ReferrersSource::TagSchema => {
                format!("referrers index {} (tag schema)", fallback_tag(subject))
            }
        };
        let idx: ImageIndex = decode(self, &what, "image index", &bytes)?;
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
    /// `subject`, whose one layer has that media type and at most
    /// `max_layer` bytes, and which `accept` takes, read and verified.
    ///
    /// Anyone who can push to the repository can add referrers, so none of
    /// them can stop the image from being read: a referrer that cannot be
    /// read, is malformed, is about another subject or is refused by
    /// `accept` is skipped with a line in [`Found::skipped`], and so is a
    /// referrers list that cannot be read (the caller then reads the
    /// layers). At most [`MAX_REFERRERS`] referrers are read, newest first.
    pub fn find_artifact(
        &self,
        repo: &str,
        subject: &str,
        artifact_type: &str,
        max_layer: u64,
        accept: &dyn Fn(&[u8]) -> Result<(), String>,
    ) -> Found {
        let mut skipped = Vec::new();
        let (mut found, via) = match self.referrers(repo, subject, artifact_type) {
            Ok(x) => x,
            Err(e) => {
                skipped.push(format!("the referrers of {subject} could not be read: {e}"));
                return Found {
                    artifact: None,
                    skipped,
                };
            }
        };
        let created = |d: &Descriptor| {
            d.annotations()
                .as_ref()
                .and_then(|a| a.get(CREATED).cloned())
        };
        // Newest first (RFC 3339 strings in UTC compare as text); unnamed last, in index order.
        found.reverse();
        found.sort_by_key(|d| std::cmp::Reverse(created(d)));
        if found.len() > MAX_REFERRERS {
            skipped.push(format!(
                "{} referrers of {subject}; only the newest {MAX_REFERRERS} were read",
                found.len()
            ));
            found.truncate(MAX_REFERRERS);
        }
        for d in found {
            match self.read_artifact(repo, subject, artifact_type, max_layer, &d, via) {
                Ok(a) => match accept(&a.layer) {
                    Ok(()) => {
                        return Found {
                            artifact: Some(a),
                            skipped,
                        }
                    }
                    Err(e) => skipped.push(format!(
                        "artifact {} skipped: {}",
                        a.manifest_digest,
                        esc(&e)
                    )),
                },
                Err(e) => skipped.push(format!("referrer {} skipped: {e}", d.digest())),
            }
        }
        Found {
            artifact: None,
            skipped,
        }
    }

    /// One referrer, checked: its manifest names `subject`, has the type,
    /// and one layer of that type within `max_layer` bytes.
    fn read_artifact(
        &self,
        repo: &str,
        subject: &str,
        artifact_type: &str,
        max_layer: u64,
        d: &Descriptor,
        via: ReferrersSource,
    ) -> Result<Artifact, RegistryError> {
        let m = self.manifest(repo, d.digest().as_ref())?;
        let what = format!("artifact {}", m.digest);
        let am: ImageManifest = decode(self, &what, "image manifest", &m.bytes)?;
        let subject_ok = am
            .subject()
            .as_ref()
            .is_some_and(|s| s.digest().as_ref() == subject);
        if !subject_ok {
            return Err(proto(self, &what, format!("not about {subject}")));
        }
        let type_ok = am
            .artifact_type()
            .as_ref()
            .map(|t| t.to_string())
            .as_deref()
            == Some(artifact_type);
        let layer = match am.layers().as_slice() {
            [l] if type_ok && l.media_type().to_string() == artifact_type => l.clone(),
            _ => {
                return Err(proto(
                    self,
                    &what,
                    format!("not one layer of type {artifact_type}"),
                ))
            }
        };
        let bytes = self.blob_bytes(repo, layer.digest().as_ref(), layer.size(), max_layer)?;
        Ok(Artifact {
            manifest_digest: m.digest,
            created: am
                .annotations()
                .as_ref()
                .and_then(|a| a.get(CREATED).cloned()),
            layer: bytes,
            via,
        })
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
    ) -> Result<(String, ReferrersSource), RegistryError> {
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
            return Ok((digest_put, ReferrersSource::ReferrersApi));
        }
        self.update_fallback_index(
            repo,
            subject.1,
            artifact_type,
            (&digest, bytes.len() as u64),
            created,
        )?;
        Ok((digest_put, ReferrersSource::TagSchema))
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
                let idx: ImageIndex = decode(self, &what, "image index", &m.bytes)?;
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
