//! sha256 digests: parsed strictly (a digest names a file under
//! `blobs/sha256/`, so anything but 64 lowercase hex digits is refused
//! before it becomes a path), and checked while a blob streams past.

use super::error::ImageError;
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::io::{self, Read};

/// A `sha256:<64 hex>` digest. The only algorithm accepted: it is the one
/// every registry and `docker save` writes (OCI image-spec descriptor.md,
/// "Registered algorithms"; sha512 is allowed there but not seen in practice).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// Parses `sha256:<hex>`; `what` names the referrer in the error.
    pub fn parse(s: &str, what: &str) -> Result<Digest, ImageError> {
        let bad = || ImageError::BadDigest {
            what: what.to_string(),
            digest: s.to_string(),
        };
        let (alg, hex) = s.split_once(':').ok_or_else(bad)?;
        if alg != "sha256" {
            if !alg.is_empty()
                && alg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+._-".contains(&b))
            {
                return Err(ImageError::UnsupportedDigest {
                    what: what.to_string(),
                    algorithm: alg.to_string(),
                });
            }
            return Err(bad());
        }
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad());
        }
        Ok(Digest {
            hex: hex.to_string(),
        })
    }

    /// The digest a path names, when it is `blobs/sha256/<hex>` or
    /// `<hex>.json` / `<hex>/layer.tar` (docker-archive names).
    pub fn from_path(path: &str) -> Option<Digest> {
        let ok = |h: &str| Digest::parse(&format!("sha256:{h}"), "").ok();
        if let Some(h) = path.strip_prefix("blobs/sha256/") {
            return ok(h);
        }
        if let Some(h) = path.strip_suffix(".json") {
            return ok(h);
        }
        None
    }

    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// Where the blob lies in an OCI layout.
    pub fn blob_path(&self) -> String {
        format!("blobs/sha256/{}", self.hex)
    }

    pub fn of_bytes(b: &[u8]) -> Digest {
        Digest {
            hex: hex(&Sha256::digest(b)),
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Counts and hashes the bytes read through it.
pub struct HashRead<R> {
    inner: R,
    hasher: Option<Sha256>,
    count: u64,
}

impl<R: Read> HashRead<R> {
    pub fn new(inner: R) -> HashRead<R> {
        HashRead {
            inner,
            hasher: Some(Sha256::new()),
            count: 0,
        }
    }

    /// Counts without hashing ([`HashRead::finish`] then gives the digest
    /// of nothing).
    pub fn counting(inner: R) -> HashRead<R> {
        HashRead {
            inner,
            hasher: None,
            count: 0,
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Reads what is left (hashing it, not keeping it), then returns the
    /// digest and the byte count.
    pub fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        let hex = hex(&self.hasher.take().unwrap_or_default().finalize());
        Ok((Digest { hex }, self.count))
    }
}

impl<R: Read> Read for HashRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(h) = &mut self.hasher {
            h.update(&buf[..n]);
        }
        self.count += n as u64;
        Ok(n)
    }
}

/// Refuses `actual` unless it equals `expected`.
pub fn check(what: &str, expected: &Digest, actual: &Digest) -> Result<(), ImageError> {
    if expected == actual {
        return Ok(());
    }
    Err(ImageError::DigestMismatch {
        what: what.to_string(),
        expected: expected.to_string(),
        actual: actual.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_parse() {
        let h = "a".repeat(64);
        assert_eq!(Digest::parse(&format!("sha256:{h}"), "x").unwrap().hex(), h);
        for bad in [
            "sha256:../../etc/passwd",
            "sha256:",
            "nocolon",
            &format!("sha256:{}", "A".repeat(64)),
            ":abc",
        ] {
            assert!(
                matches!(Digest::parse(bad, "x"), Err(ImageError::BadDigest { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            Digest::parse("sha512:abc", "x"),
            Err(ImageError::UnsupportedDigest { .. })
        ));
        assert_eq!(
            Digest::from_path(&format!("blobs/sha256/{h}"))
                .unwrap()
                .hex(),
            h
        );
        assert!(Digest::from_path("blobs/sha256/../x").is_none());
    }
}
