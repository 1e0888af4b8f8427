//! Blobs: streamed and verified while they stream (`GET /v2/<name>/blobs/<digest>`,
//! redirects to blob storage followed), and pushed (`POST .../blobs/uploads/`
//! then a monolithic `PUT <location>?digest=...`, distribution
//! `docs/spec/api.md`, "Monolithic Upload").

use crate::client::{Client, Req};
use crate::error::RegistryError;
use crate::reference::valid_digest;
use gpu_guard::core::sanitize::esc;
use sha2::{Digest as _, Sha256};
use std::io::{self, Read};
use std::sync::atomic::Ordering;
use ureq::http::Method;

pub fn sha256_digest(b: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(b)))
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A blob's bytes as they arrive. Reading past the expected size, ending
/// short of it, or ending with another digest is an `InvalidData` error
/// whose message names the registry and the blob; the caller must discard
/// what it computed from the bytes when a read fails.
pub struct VerifiedBlob {
    inner: Box<dyn Read + Send>,
    hasher: Sha256,
    count: u64,
    size: Option<u64>,
    expected: String,
    registry: String,
    done: bool,
}

impl VerifiedBlob {
    pub fn new(
        inner: Box<dyn Read + Send>,
        expected: &str,
        size: Option<u64>,
        registry: &str,
    ) -> VerifiedBlob {
        VerifiedBlob {
            inner,
            hasher: Sha256::new(),
            count: 0,
            size,
            expected: expected.to_string(),
            registry: registry.to_string(),
            done: false,
        }
    }

    fn fail(&self, msg: String) -> io::Error {
        let e = RegistryError::Protocol {
            registry: self.registry.clone(),
            what: format!("blob {}", self.expected),
            msg,
        };
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

impl Read for VerifiedBlob {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        if let Some(s) = self.size {
            if self.count > s {
                return Err(self.fail(format!("more than the {s} bytes its descriptor says")));
            }
        }
        self.hasher.update(&buf[..n]);
        if n == 0 && !buf.is_empty() {
            self.done = true;
            if let Some(s) = self.size {
                if self.count != s {
                    return Err(self.fail(format!("truncated: {} of {s} bytes", self.count)));
                }
            }
            let got = format!("sha256:{}", hex(&self.hasher.clone().finalize()));
            if got != self.expected {
                let e = RegistryError::DigestMismatch {
                    registry: self.registry.clone(),
                    what: format!("blob {}", self.expected),
                    expected: self.expected.clone(),
                    actual: got,
                };
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
        Ok(n)
    }
}

impl Client {
    fn scope(repo: &str, push: bool) -> String {
        format!(
            "repository:{repo}:{}",
            if push { "pull,push" } else { "pull" }
        )
    }

    pub(crate) fn scope_pull(repo: &str) -> String {
        Client::scope(repo, false)
    }

    pub(crate) fn scope_push(repo: &str) -> String {
        Client::scope(repo, true)
    }

    /// Streams a blob. With `verify`, the stream checks its size and digest
    /// (a [`VerifiedBlob`]); without, the caller must (the image reader
    /// hashes every layer itself).
    pub fn blob(
        &self,
        repo: &str,
        digest: &str,
        size: Option<u64>,
        verify: bool,
    ) -> Result<Box<dyn Read + Send>, RegistryError> {
        if !valid_digest(digest) {
            return Err(RegistryError::Protocol {
                registry: self.name().to_string(),
                what: "blob".to_string(),
                msg: format!("invalid digest {:?}", esc(digest)),
            });
        }
        self.stats.blob_gets.fetch_add(1, Ordering::Relaxed);
        let what = format!("blob {digest}");
        let target = format!("/v2/{repo}/blobs/{digest}");
        let resp = self.send(&Req {
            method: Method::GET,
            target: &target,
            accept: None,
            body: None,
            scope: Client::scope_pull(repo),
            what: &what,
            // A layer is bounded by the read's deadline and the stall timeout only.
            small: size.is_some_and(|s| s <= crate::client::SMALL_MAX),
        })?;
        if resp.status() != 200 {
            return Err(self.status_error(resp, &what));
        }
        let reader: Box<dyn Read + Send> = Box::new(resp.into_body().into_reader());
        if verify {
            Ok(Box::new(VerifiedBlob::new(
                reader,
                digest,
                size,
                self.name(),
            )))
        } else {
            Ok(reader)
        }
    }

    /// Reads a small blob whole (a config, an attestation), verified.
    pub fn blob_bytes(
        &self,
        repo: &str,
        digest: &str,
        size: u64,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let what = format!("blob {digest}");
        if size > limit {
            return Err(RegistryError::TooLarge {
                registry: self.name().to_string(),
                what,
                limit,
            });
        }
        let mut r = self.blob(repo, digest, Some(size), true)?;
        let mut v = Vec::new();
        r.read_to_end(&mut v)
            .map_err(|e| into_registry_error(e, self.name(), &what))?;
        Ok(v)
    }

    /// Whether the repository already has the blob.
    fn has_blob(&self, repo: &str, digest: &str) -> Result<bool, RegistryError> {
        let what = format!("blob {digest}");
        let target = format!("/v2/{repo}/blobs/{digest}");
        let resp = self.send(&Req {
            method: Method::HEAD,
            target: &target,
            accept: None,
            body: None,
            scope: Client::scope_push(repo),
            what: &what,
            small: true,
        })?;
        match resp.status().as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(self.status_error(resp, &what)),
        }
    }

    /// Pushes a blob (unless the repository has it) and returns its digest.
    pub fn push_blob(&self, repo: &str, bytes: &[u8]) -> Result<String, RegistryError> {
        let digest = sha256_digest(bytes);
        if self.has_blob(repo, &digest)? {
            return Ok(digest);
        }
        let what = format!("upload of blob {digest}");
        let target = format!("/v2/{repo}/blobs/uploads/");
        let resp = self.send(&Req {
            method: Method::POST,
            target: &target,
            accept: None,
            body: Some((&[], "application/octet-stream")),
            scope: Client::scope_push(repo),
            what: &what,
            small: true,
        })?;
        if resp.status() != 202 {
            return Err(self.status_error(resp, &what));
        }
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .ok_or_else(|| RegistryError::Protocol {
                registry: self.name().to_string(),
                what: what.clone(),
                msg: "no Location header".to_string(),
            })?;
        // The location may be relative (distribution answers `/v2/...`),
        // absolute on the registry, or on another host (storage), which
        // gets no credentials; never plain HTTP from an HTTPS registry.
        let put_base = self.upload_url(&target, &location, &what)?;
        let sep = if put_base.contains('?') { '&' } else { '?' };
        let put = format!("{put_base}{sep}digest={}", digest.replace(':', "%3A"));
        let resp = self.send(&Req {
            method: Method::PUT,
            target: &put,
            accept: None,
            body: Some((bytes, "application/octet-stream")),
            scope: Client::scope_push(repo),
            what: &what,
            small: true,
        })?;
        if resp.status() != 201 {
            return Err(self.status_error(resp, &what));
        }
        Ok(digest)
    }
}

impl Client {
    /// The absolute URL of an upload `Location` answered to `POST target`.
    fn upload_url(
        &self,
        target: &str,
        location: &str,
        what: &str,
    ) -> Result<String, RegistryError> {
        use crate::origin::{resolve, Destination, Refused};
        match resolve(self.origin(), &self.url(target), location) {
            Ok(Destination::Registry(u) | Destination::Elsewhere(u)) => Ok(u),
            Err(Refused::Downgrade(u)) => Err(RegistryError::Protocol {
                registry: self.name().to_string(),
                what: what.to_string(),
                msg: format!(
                    "the upload location {} is plain HTTP; refused from an HTTPS registry",
                    esc(&u)
                ),
            }),
            Err(Refused::Invalid(u)) => Err(RegistryError::Protocol {
                registry: self.name().to_string(),
                what: what.to_string(),
                msg: format!("the upload location {} is not an http(s) URL", esc(&u)),
            }),
        }
    }
}

/// The registry error inside an io::Error from a [`VerifiedBlob`], or a new one.
pub fn into_registry_error(e: io::Error, registry: &str, what: &str) -> RegistryError {
    if e.get_ref().is_some_and(|i| i.is::<RegistryError>()) {
        if let Ok(inner) = e
            .into_inner()
            .unwrap_or_else(|| Box::new(io::Error::other("?")))
            .downcast::<RegistryError>()
        {
            return *inner;
        }
        return RegistryError::Protocol {
            registry: registry.to_string(),
            what: what.to_string(),
            msg: "read failed".to_string(),
        };
    }
    RegistryError::Io {
        registry: registry.to_string(),
        what: what.to_string(),
        source: e,
    }
}
