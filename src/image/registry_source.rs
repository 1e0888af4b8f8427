//! The seam for images that are not files: a registry (`docker://...`),
//! whose manifest the caller has already fetched and verified, and whose
//! blobs are fetched by digest as streams. The image reader then reads the
//! config and layers exactly as it reads an OCI layout's, verifying every
//! digest and size itself while the bytes stream, and writes nothing.
//! The HTTP side lives outside this crate (crates/registry), so the hook
//! and the runtime wrapper never link it.

use super::digest::Digest;
use std::io::{self, Read};

/// Blobs addressed by digest.
pub trait BlobSource: Send + Sync {
    /// The blob's bytes as they arrive. The image reader checks digest and
    /// size; the source need not (it must not buffer the blob whole).
    fn open_blob(&self, digest: &Digest) -> io::Result<Box<dyn Read + Send>>;
    /// Where the blobs come from, for messages (`registry HOST/REPO`).
    fn describe(&self) -> String;
}
