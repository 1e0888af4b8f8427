//! Streams one layer: raw blob -> (hash) -> gzip / zstd / plain, told by the
//! magic bytes rather than the media type (docker and OCI spell it in
//! several ways) -> byte and time budget (and the diff_id hash) -> a guard
//! on tar extension headers -> the `tar` crate. Memory stays at the
//! decoders' windows plus one 512-byte header.

use super::digest::{self, Digest, HashRead};
use super::error::ImageError;
use super::tree::{normalize, RawEntry, RawKind};
use super::Limits;
use std::cell::{Cell, RefCell};
use std::io::{self, BufRead, BufReader, Read};
use std::time::Instant;

/// Budgets shared by every layer read in one call.
pub(crate) struct Budget {
    limits: Limits,
    deadline: Instant,
    bytes_left: Cell<u64>,
    entries_left: Cell<u64>,
    /// Why a reader stopped, read back after the `tar` crate has wrapped
    /// the io::Error in its own.
    tripped: RefCell<Option<ImageError>>,
}

impl Budget {
    pub fn new(limits: &Limits) -> Budget {
        Budget {
            limits: limits.clone(),
            deadline: Instant::now() + limits.max_time,
            bytes_left: Cell::new(limits.max_uncompressed_bytes),
            entries_left: Cell::new(limits.max_entries),
            tripped: RefCell::new(None),
        }
    }

    fn trip(&self, e: ImageError) -> io::Error {
        let msg = e.to_string();
        self.tripped.borrow_mut().get_or_insert(e);
        io::Error::other(msg)
    }

    fn check_time(&self) -> io::Result<()> {
        if Instant::now() >= self.deadline {
            return Err(self.trip(ImageError::TimeBudget(self.limits.max_time.as_secs())));
        }
        Ok(())
    }

    fn take_entry(&self) -> Result<(), ImageError> {
        let left = self.entries_left.get();
        if left == 0 {
            return Err(ImageError::EntryBudget(self.limits.max_entries));
        }
        self.entries_left.set(left - 1);
        Ok(())
    }

    fn take_tripped(&self) -> Option<ImageError> {
        self.tripped.borrow_mut().take()
    }
}

/// Counts decompressed bytes against the budget and checks the clock.
struct Budgeted<'b, R> {
    inner: R,
    budget: &'b Budget,
}

impl<R: Read> Read for Budgeted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.budget.check_time()?;
        let n = self.inner.read(buf)?;
        let left = self.budget.bytes_left.get();
        if n as u64 > left {
            self.budget.bytes_left.set(0);
            return Err(self.budget.trip(ImageError::ByteBudget(
                self.budget.limits.max_uncompressed_bytes,
            )));
        }
        self.budget.bytes_left.set(left - n as u64);
        Ok(n)
    }
}

/// Follows the tar block structure of the stream and refuses a GNU long
/// name/link or PAX header larger than `limit`: the `tar` crate reads those
/// whole into memory (tar 0.4 `EntryFields::read_all`), so without this a
/// layer could make it allocate gigabytes. A PAX `size` record moves the
/// next header as it does in the `tar` crate. If the guard loses the block
/// structure (bad checksum, old GNU sparse extension blocks) it stops
/// checking; the `tar` crate then fails or the byte budget still holds.
struct TarGuard<'b, R> {
    inner: R,
    budget: &'b Budget,
    what: String,
    pos: u64,
    next_header: u64,
    header: [u8; 512],
    header_len: usize,
    /// Collecting the data of a PAX extended header.
    pax: Option<Vec<u8>>,
    pax_size: Option<u64>,
    lost: bool,
}

fn parse_size(field: &[u8]) -> Option<u64> {
    if field[0] & 0x80 != 0 {
        // GNU base-256.
        let mut v: u64 = 0;
        for (i, b) in field.iter().enumerate() {
            let b = if i == 0 { b & 0x7f } else { *b };
            v = v.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(v);
    }
    let s: String = field
        .iter()
        .map(|&b| b as char)
        .filter(|c| !matches!(c, '\0' | ' '))
        .collect();
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(&s, 8).ok()
}

fn pax_size(data: &[u8]) -> Option<u64> {
    // Records are "LEN key=value\n".
    let mut rest = data;
    while !rest.is_empty() {
        let sp = rest.iter().position(|&b| b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..sp]).ok()?.parse().ok()?;
        let rec = rest.get(sp + 1..len)?;
        if let Some(v) = rec.strip_prefix(b"size=") {
            let v = v.strip_suffix(b"\n").unwrap_or(v);
            return std::str::from_utf8(v).ok()?.parse().ok();
        }
        rest = &rest[len..];
    }
    None
}

impl<R: Read> TarGuard<'_, R> {
    fn on_header(&mut self) -> io::Result<()> {
        let h = self.header;
        if let Some(p) = self.pax.take() {
            self.pax_size = pax_size(&p);
        }
        if h.iter().all(|&b| b == 0) {
            self.next_header = self.pos;
            return Ok(());
        }
        let sum: u64 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u64::from(b)
                }
            })
            .sum();
        let (Some(stored), Some(size)) = (parse_size(&h[148..156]), parse_size(&h[124..136]))
        else {
            self.lost = true;
            return Ok(());
        };
        if stored != sum {
            self.lost = true;
            return Ok(());
        }
        let typ = h[156];
        let ext = matches!(typ, b'L' | b'K' | b'x' | b'g');
        if ext && size > self.budget.limits.max_extension_header {
            return Err(self.budget.trip(ImageError::ExtensionHeader {
                what: self.what.clone(),
                size,
                limit: self.budget.limits.max_extension_header,
            }));
        }
        if typ == b'S' && h[482] != 0 {
            self.lost = true;
            return Ok(());
        }
        let size = if ext {
            size
        } else {
            self.pax_size.take().unwrap_or(size)
        };
        if typ == b'x' {
            self.pax = Some(Vec::with_capacity(size as usize));
        }
        self.next_header = self
            .pos
            .checked_add(size.div_ceil(512) * 512)
            .ok_or_else(|| io::Error::other("tar entry size overflows"))?;
        Ok(())
    }

    fn observe(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() && !self.lost {
            if self.pos < self.next_header {
                let take = data
                    .len()
                    .min(usize::try_from(self.next_header - self.pos).unwrap_or(usize::MAX));
                if let Some(p) = &mut self.pax {
                    p.extend_from_slice(&data[..take]);
                }
                self.pos += take as u64;
                data = &data[take..];
                continue;
            }
            let take = data.len().min(512 - self.header_len);
            self.header[self.header_len..self.header_len + take].copy_from_slice(&data[..take]);
            self.header_len += take;
            self.pos += take as u64;
            data = &data[take..];
            if self.header_len == 512 {
                self.header_len = 0;
                self.on_header()?;
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for TarGuard<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.observe(&buf[..n])?;
        Ok(n)
    }
}

/// gzip (possibly multi-member), zstd (possibly multi-frame, with skippable
/// frames as zstd:chunked writes them) or a plain tar.
enum Decoder<R: BufRead> {
    Plain(R),
    Gzip(flate2::bufread::MultiGzDecoder<R>),
    Zstd {
        src: R,
        dec: Box<ruzstd::decoding::FrameDecoder>,
    },
}

fn zstd_err(e: ruzstd::decoding::errors::FrameDecoderError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("zstd: {e}"))
}

/// Starts a zstd frame at the reader's position, skipping skippable frames.
/// Returns false at the end of the input (after skippable frames only).
fn zstd_frame<R: BufRead>(
    dec: &mut ruzstd::decoding::FrameDecoder,
    src: &mut R,
) -> io::Result<bool> {
    use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
    loop {
        if src.fill_buf()?.is_empty() {
            return Ok(false);
        }
        match dec.reset(&mut *src) {
            Ok(()) => return Ok(true),
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                length,
                ..
            })) => {
                let skipped = io::copy(&mut (&mut *src).take(u64::from(length)), &mut io::sink())?;
                if skipped < u64::from(length) {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            Err(e) => return Err(zstd_err(e)),
        }
    }
}

fn is_zstd(head: &[u8]) -> bool {
    // A zstd frame, or a skippable frame (magic 0x184D2A5?, little-endian).
    head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
        || head.len() >= 4 && head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18]
}

impl<R: BufRead> Decoder<R> {
    fn new(mut src: R) -> io::Result<Decoder<R>> {
        let head = src.fill_buf()?;
        if head.starts_with(&[0x1f, 0x8b]) {
            return Ok(Decoder::Gzip(flate2::bufread::MultiGzDecoder::new(src)));
        }
        if is_zstd(head) {
            let mut dec = Box::new(ruzstd::decoding::FrameDecoder::new());
            zstd_frame(&mut dec, &mut src)?;
            return Ok(Decoder::Zstd { src, dec });
        }
        Ok(Decoder::Plain(src))
    }
}

impl<R: BufRead> Read for Decoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Decoder::Plain(r) => r.read(buf),
            Decoder::Gzip(r) => r.read(buf),
            // As ruzstd's StreamingDecoder::read, plus the next frame.
            Decoder::Zstd { src, dec } => loop {
                if buf.is_empty() {
                    return Ok(0);
                }
                if dec.is_finished() && dec.can_collect() == 0 {
                    if !zstd_frame(dec, src)? {
                        return Ok(0);
                    }
                    continue;
                }
                while dec.can_collect() < buf.len() && !dec.is_finished() {
                    let want = buf.len() - dec.can_collect();
                    dec.decode_blocks(
                        &mut *src,
                        ruzstd::decoding::BlockDecodingStrategy::UptoBytes(want),
                    )
                    .map_err(zstd_err)?;
                }
                let n = dec.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
            },
        }
    }
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

/// One entry's header, normalized (the root entry has the path "").
pub(crate) fn raw_entry<R: Read>(
    e: &tar::Entry<'_, R>,
    index: u64,
    what: &str,
) -> Result<RawEntry, ImageError> {
    let unsafe_entry = |p: &str| ImageError::UnsafeEntry {
        what: what.to_string(),
        path: p.to_string(),
    };
    let raw = String::from_utf8_lossy(&e.path_bytes()).into_owned();
    let path = normalize(&raw).ok_or_else(|| unsafe_entry(&raw))?;
    let link = || {
        e.link_name_bytes()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
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
    let mut rawh = HashRead::new(raw);
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
                msg: format!("{count} bytes, the manifest says {expected}"),
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
    let dec = Decoder::new(BufReader::with_capacity(64 * 1024, raw)).map_err(corrupt)?;
    let mut plain = HashRead::new(Budgeted { inner: dec, budget });
    let mut guard = TarGuard {
        inner: &mut plain,
        budget,
        what: what.to_string(),
        pos: 0,
        next_header: 0,
        header: [0; 512],
        header_len: 0,
        pax: None,
        pax_size: None,
        lost: false,
    };
    {
        let guarded: &mut dyn Read = &mut guard;
        let mut ar = tar::Archive::new(guarded);
        for (index, e) in (0u64..).zip(ar.entries().map_err(corrupt)?) {
            let mut e = e.map_err(corrupt)?;
            budget.take_entry()?;
            match visit(&mut e, index)? {
                Flow::Continue => {}
                Flow::Stop if layer.diff_id.is_none() => return Ok(()),
                Flow::Stop => {}
            }
        }
    }
    // The rest of the tar stream (end blocks, padding) counts for the diff_id.
    let (d, _) = plain.finish().map_err(corrupt)?;
    if let Some(expected) = &layer.diff_id {
        digest::check(&format!("{what} diff_id"), expected, &d)?;
    }
    Ok(())
}
