//! Streams one layer: raw blob -> (deadline, compressed count, digest) ->
//! gzip / zstd / plain ([`super::decoder`]) -> byte budget, expansion bound
//! and deadline ([`super::budget`]) (-> the diff_id hash, when the config
//! gives one) -> a guard on tar extension headers ([`super::tar_guard`]) ->
//! the `tar` crate. Memory stays at the decoders' windows plus one
//! 512-byte header; every entry name is held to PATH_MAX and counted.

use super::budget::{Budget, Compressed, Decompressed};
use super::decoder::Decoder;
use super::digest::{self, Digest, HashRead};
use super::error::ImageError;
use super::tar_guard::TarGuard;
use super::tree::{normalize, RawEntry, RawKind};
use std::io::{self, BufReader, Read};

/// PATH_MAX of <linux/limits.h>, with its NUL: the longest name a path
/// or a symlink target can have on Linux (path_resolution(7), symlink(2)
/// ENAMETOOLONG). An entry longer than that cannot be extracted.
pub(crate) const NAME_MAX_BYTES: usize = 4095;

/// Refuses a name over PATH_MAX and counts it against the name budget.
pub(crate) fn take_name(
    budget: &Budget,
    what: &str,
    field: &'static str,
    len: usize,
) -> Result<(), ImageError> {
    if len > NAME_MAX_BYTES {
        return Err(ImageError::NameTooLong {
            what: what.to_string(),
            field,
            len,
            limit: NAME_MAX_BYTES,
        });
    }
    budget.take_path_bytes(len as u64)
}

/// How a layer is checked.
#[derive(Clone, Debug)]
pub(crate) struct LayerRef {
    /// Path of the blob in the layout or archive.
    pub path: String,
    /// Digest of the stored (compressed) blob, when the manifest gives it.
    pub digest: Option<Digest>,
    /// Size of the stored blob, when the manifest gives it.
    pub size: Option<u64>,
    /// The config's rootfs.diff_ids entry: digest of the uncompressed tar.
    pub diff_id: Option<Digest>,
}

/// Called with each tar entry of a layer and its index in the layer.
pub(crate) type EntryVisitor<'v> =
    dyn FnMut(&mut tar::Entry<'_, &mut dyn Read>, u64) -> Result<Flow, ImageError> + 'v;

/// What the visitor of a layer's entries tells the streamer.
pub(crate) enum Flow {
    Continue,
    /// No more entries are needed; the rest is only hashed.
    Stop,
}

/// One entry's header, normalized (the root entry has the path ""); its
/// path and link target are held to PATH_MAX and counted in `budget`.
pub(crate) fn raw_entry<R: Read>(
    e: &tar::Entry<'_, R>,
    index: u64,
    what: &str,
    budget: &Budget,
) -> Result<RawEntry, ImageError> {
    let unsafe_entry = |p: &str| ImageError::UnsafeEntry {
        what: what.to_string(),
        path: p.to_string(),
    };
    let raw = e.path_bytes();
    take_name(budget, what, "entry path", raw.len())?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let path = normalize(&raw).ok_or_else(|| unsafe_entry(&raw))?;
    let link_bytes = e.link_name_bytes();
    if let Some(l) = &link_bytes {
        take_name(budget, what, "link target", l.len())?;
    }
    let link = || {
        link_bytes
            .as_ref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let t = e.header().entry_type();
    let kind = if t.is_file() || t == tar::EntryType::Continuous {
        RawKind::File
    } else if t.is_dir() {
        RawKind::Dir
    } else if t.is_symlink() {
        RawKind::Symlink(link())
    } else if t.is_hard_link() {
        let l = link();
        RawKind::HardLink(normalize(&l).ok_or_else(|| unsafe_entry(&l))?)
    } else {
        RawKind::Other
    };
    Ok(RawEntry {
        path,
        kind,
        size: e.size(),
        mode: e.header().mode().unwrap_or(0),
        index,
    })
}

/// Streams layer `n` and hands each entry to `visit`, then checks the
/// blob's size and digests. `open` gives the raw blob.
pub(crate) fn stream(
    n: usize,
    layer: &LayerRef,
    raw: Box<dyn Read + Send>,
    budget: &Budget,
    visit: &mut EntryVisitor<'_>,
) -> Result<(), ImageError> {
    let what = format!("layer {n} ({})", layer.path);
    // Never past the declared size: a blob that goes on is refused at its
    // first byte too many, not after reading it to the end.
    let raw: Box<dyn Read + Send> = match layer.size {
        Some(s) => Box::new(raw.take(s.saturating_add(1))),
        None => raw,
    };
    let mut rawh = HashRead::new(Compressed { inner: raw, budget });
    let result = stream_inner(&what, layer, &mut rawh, budget, visit);
    let got = rawh.count();
    let fail = |e: ImageError| -> ImageError {
        if let Some(t) = budget.take_tripped() {
            return t;
        }
        if let Some(expected) = layer.size {
            if got < expected {
                if let ImageError::Corrupt { .. } | ImageError::Io { .. } = e {
                    return ImageError::Truncated {
                        what: what.clone(),
                        got,
                        expected,
                    };
                }
            }
        }
        e
    };
    result.map_err(fail)?;
    let (d, count) = rawh.finish().map_err(|e| {
        fail(ImageError::Corrupt {
            what: what.clone(),
            source: e,
        })
    })?;
    if let Some(expected) = layer.size {
        if count != expected {
            if count < expected {
                return Err(ImageError::Truncated {
                    what,
                    got: count,
                    expected,
                });
            }
            return Err(ImageError::BadJson {
                what,
                msg: format!("more than the {expected} bytes the manifest says"),
            });
        }
    }
    if let Some(expected) = &layer.digest {
        digest::check(&what, expected, &d)?;
    }
    Ok(())
}

fn stream_inner<R: Read>(
    what: &str,
    layer: &LayerRef,
    raw: &mut HashRead<R>,
    budget: &Budget,
    visit: &mut EntryVisitor<'_>,
) -> Result<(), ImageError> {
    let corrupt = |e: io::Error| ImageError::Corrupt {
        what: what.to_string(),
        source: e,
    };
    let dec = Decoder::new(BufReader::with_capacity(64 * 1024, raw), budget).map_err(corrupt)?;
    let plain = Decompressed { inner: dec, budget };
    // The uncompressed tar is hashed only when there is a diff_id to check
    // it against (docker-archive); an OCI layer is checked by its blob digest.
    let mut plain = match layer.diff_id {
        Some(_) => HashRead::new(plain),
        None => HashRead::counting(plain),
    };
    {
        let guarded: &mut dyn Read = &mut TarGuard::new(&mut plain, budget, what);
        let mut ar = tar::Archive::new(guarded);
        for (index, e) in (0u64..).zip(ar.entries().map_err(corrupt)?) {
            let mut e = e.map_err(corrupt)?;
            match visit(&mut e, index)? {
                Flow::Continue => {}
                Flow::Stop if layer.diff_id.is_none() => return Ok(()),
                Flow::Stop => {}
            }
        }
    }
    let Some(expected) = &layer.diff_id else {
        return Ok(());
    };
    // The rest of the tar stream (end blocks, padding) counts for the diff_id.
    let (d, _) = plain.finish().map_err(corrupt)?;
    digest::check(&format!("{what} diff_id"), expected, &d)
}
