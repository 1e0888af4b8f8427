//! Layer decompression: gzip (RFC 1952, members concatenated as pigz and
//! `docker save` may write them), zstd (RFC 8878, frames concatenated, with
//! skippable frames as zstd:chunked writes them), or a plain tar.

use super::budget::Budget;
use std::io::{self, BufRead, Read};

/// gzip (possibly multi-member), zstd (possibly multi-frame, with skippable
/// frames as zstd:chunked writes them) or a plain tar.
pub(crate) enum Decoder<'b, R: BufRead> {
    Plain(R),
    Gzip(flate2::bufread::MultiGzDecoder<R>),
    Zstd {
        src: R,
        dec: Box<ruzstd::decoding::FrameDecoder>,
        budget: &'b Budget,
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

impl<'b, R: BufRead> Decoder<'b, R> {
    /// Told by the magic bytes rather than the media type (docker and OCI
    /// spell it in several ways).
    pub fn new(mut src: R, budget: &'b Budget) -> io::Result<Decoder<'b, R>> {
        let head = src.fill_buf()?;
        if head.starts_with(&[0x1f, 0x8b]) {
            return Ok(Decoder::Gzip(flate2::bufread::MultiGzDecoder::new(src)));
        }
        if is_zstd(head) {
            let mut dec = Box::new(ruzstd::decoding::FrameDecoder::new());
            zstd_frame(&mut dec, &mut src)?;
            return Ok(Decoder::Zstd { src, dec, budget });
        }
        Ok(Decoder::Plain(src))
    }
}

impl<R: BufRead> Read for Decoder<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Decoder::Plain(r) => r.read(buf),
            Decoder::Gzip(r) => r.read(buf),
            // As ruzstd's StreamingDecoder::read, plus the next frame.
            Decoder::Zstd { src, dec, budget } => loop {
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
                    // Filling a window of up to 100 MiB (ruzstd's bound)
                    // before a byte can be collected: the deadline is
                    // checked between the calls, each of `want` bytes.
                    budget.check_time()?;
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
