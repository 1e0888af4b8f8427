//! Compressed clang offload bundles (`CCOB`): the header, and a bounded
//! decoder for the start of the compressed bundle, where its entry table is.
//!
//! Header (llvm/lib/Object/OffloadBundle.cpp, `RawCompressedBundleHeader`;
//! clang/docs/ClangOffloadBundler.rst, "Compression and Decompression"),
//! little-endian, packed: `"CCOB"`, u16 version, u16 method (llvm
//! compression::Format: 0 zlib, 1 zstd), then
//! - v1: u32 uncompressed size, u64 hash (20 bytes); the compressed data
//!   runs to the next `CCOB` or the end of the section (LLVM's
//!   extractOffloadBundle finds the next bundle by its magic);
//! - v2: u32 total size (header included), u32 uncompressed size, u64 hash
//!   (24 bytes);
//! - v3: u64 total size, u64 uncompressed size, u64 hash (32 bytes).
//!
//! The hash is a truncated MD5 LLVM only prints; it is not checked (LLVM
//! does not either). Only as much is decompressed as the entry table needs,
//! and never more than [`PREFIX_MAX`] bytes: a compression bomb costs that
//! much output, whatever sizes the header claims.

use crate::scan::read::{u16_at, u32_at, u64_at};

pub const CCOB_MAGIC: &[u8; 4] = b"CCOB";
/// The most bytes of a compressed bundle decompressed: its entry table
/// must fit (real tables are a few hundred bytes).
pub const PREFIX_MAX: usize = 1 << 20;
/// zstd windows up to 2^27 bytes (clang's highest levels use 2^27). libzstd
/// reserves the window but writes only what is decoded, which stops at
/// [`PREFIX_MAX`].
const ZSTD_WINDOW_LOG_MAX: u32 = 27;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Zlib,
    Zstd,
}

/// A parsed compressed-bundle header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CcobHeader {
    pub version: u16,
    pub method: Method,
    pub header_size: u64,
    /// Header included; None for v1.
    pub total_size: Option<u64>,
    pub uncompressed_size: u64,
}

/// The header at the start of `b` (at least 32 bytes, or all there is).
pub fn parse_header(b: &[u8]) -> Result<CcobHeader, String> {
    if b.len() < 8 || &b[..4] != CCOB_MAGIC {
        return Err("not a compressed offload bundle".into());
    }
    let version = u16_at(b, 4);
    let method = match u16_at(b, 6) {
        0 => Method::Zlib,
        1 => Method::Zstd,
        m => return Err(format!("unknown compression method {m}")),
    };
    let header_size: u64 = match version {
        1 => 20,
        2 => 24,
        3 => 32,
        v => return Err(format!("unknown compressed bundle version {v}")),
    };
    if (b.len() as u64) < header_size {
        return Err("the compressed bundle header is cut short".into());
    }
    let (total_size, uncompressed_size) = match version {
        1 => (None, u32_at(b, 8) as u64),
        2 => (Some(u32_at(b, 8) as u64), u32_at(b, 12) as u64),
        _ => (Some(u64_at(b, 8)), u64_at(b, 16)),
    };
    if let Some(t) = total_size {
        if t < header_size {
            return Err(format!(
                "total size {t} is smaller than its {header_size}-byte header"
            ));
        }
    }
    Ok(CcobHeader {
        version,
        method,
        header_size,
        total_size,
        uncompressed_size,
    })
}

enum Inner {
    Zlib(flate2::Decompress),
    Zstd(Box<zstd::stream::raw::Decoder<'static>>),
}

/// Decompresses the start of a bundle, fed compressed bytes piece by piece
/// (a file's positioned reads, or a layer stream as it passes).
pub struct PrefixDecoder {
    inner: Inner,
    out: Vec<u8>,
    cap: usize,
    finished: bool,
}

impl PrefixDecoder {
    /// A decoder that stops at `min(uncompressed, PREFIX_MAX)` bytes.
    pub fn new(method: Method, uncompressed: u64) -> Result<PrefixDecoder, String> {
        let inner = match method {
            Method::Zlib => Inner::Zlib(flate2::Decompress::new(true)),
            Method::Zstd => {
                use zstd::stream::raw::DParameter;
                let mut d = zstd::stream::raw::Decoder::new().map_err(|e| format!("zstd: {e}"))?;
                d.set_parameter(DParameter::WindowLogMax(ZSTD_WINDOW_LOG_MAX))
                    .map_err(|e| format!("zstd: {e}"))?;
                Inner::Zstd(Box::new(d))
            }
        };
        Ok(PrefixDecoder {
            inner,
            out: Vec::new(),
            cap: (uncompressed.min(PREFIX_MAX as u64)) as usize,
            finished: false,
        })
    }

    /// The decompressed bytes so far.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// No more output will come: the cap is reached or the stream ended.
    pub fn done(&self) -> bool {
        self.finished || self.out.len() >= self.cap
    }

    /// Feeds compressed bytes; returns how many were consumed. Stops
    /// consuming once [`PrefixDecoder::done`].
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, String> {
        let mut used = 0usize;
        let mut scratch = [0u8; 16 << 10];
        while !self.done() {
            let room = (self.cap - self.out.len()).min(scratch.len());
            let (read, written, end) = self.step(&input[used..], &mut scratch[..room])?;
            used += read;
            self.out.extend_from_slice(&scratch[..written]);
            if end {
                self.finished = true;
            }
            if read == 0 && written == 0 {
                break;
            }
        }
        Ok(used)
    }

    fn step(&mut self, input: &[u8], out: &mut [u8]) -> Result<(usize, usize, bool), String> {
        match &mut self.inner {
            Inner::Zlib(d) => {
                let (i0, o0) = (d.total_in(), d.total_out());
                let st = d
                    .decompress(input, out, flate2::FlushDecompress::None)
                    .map_err(|e| format!("zlib: {e}"))?;
                let read = (d.total_in() - i0) as usize;
                let written = (d.total_out() - o0) as usize;
                Ok((read, written, st == flate2::Status::StreamEnd))
            }
            Inner::Zstd(d) => {
                use zstd::stream::raw::Operation;
                let st = d
                    .run_on_buffers(input, out)
                    .map_err(|e| format!("zstd: {e}"))?;
                Ok((
                    st.bytes_read,
                    st.bytes_written,
                    st.remaining == 0 && st.bytes_read > 0,
                ))
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A compressed bundle of `plain` as LLVM writes it (hash left 0).
    pub fn ccob(version: u16, method: Method, plain: &[u8]) -> Vec<u8> {
        let data = match method {
            Method::Zstd => zstd::bulk::compress(plain, 3).unwrap(),
            Method::Zlib => {
                use std::io::Write;
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(plain).unwrap();
                e.finish().unwrap()
            }
        };
        let mut out = CCOB_MAGIC.to_vec();
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&(method as u16).to_le_bytes());
        let hdr = match version {
            1 => 20,
            2 => 24,
            _ => 32,
        };
        let total = (hdr + data.len()) as u64;
        match version {
            1 => out.extend_from_slice(&(plain.len() as u32).to_le_bytes()),
            2 => {
                out.extend_from_slice(&(total as u32).to_le_bytes());
                out.extend_from_slice(&(plain.len() as u32).to_le_bytes());
            }
            _ => {
                out.extend_from_slice(&total.to_le_bytes());
                out.extend_from_slice(&(plain.len() as u64).to_le_bytes());
            }
        }
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&data);
        out
    }

    #[test]
    fn headers_of_every_version() {
        for v in 1..=3u16 {
            for m in [Method::Zlib, Method::Zstd] {
                let c = ccob(v, m, b"hello world");
                let h = parse_header(&c).unwrap();
                assert_eq!((h.version, h.method, h.uncompressed_size), (v, m, 11));
                assert_eq!(h.total_size.is_some(), v > 1);
                let mut d = PrefixDecoder::new(m, h.uncompressed_size).unwrap();
                d.feed(&c[h.header_size as usize..]).unwrap();
                assert_eq!(d.output(), b"hello world");
                assert!(d.done());
            }
        }
        let mut bad = ccob(3, Method::Zstd, b"x");
        bad[6] = 7;
        assert!(parse_header(&bad).unwrap_err().contains("method 7"));
        bad[6] = 1;
        bad[4] = 9;
        assert!(parse_header(&bad).unwrap_err().contains("version 9"));
        let mut small = ccob(2, Method::Zlib, b"x");
        small[8..12].copy_from_slice(&3u32.to_le_bytes());
        assert!(parse_header(&small).unwrap_err().contains("smaller"));
        assert!(parse_header(b"CCOB\x03\x00").is_err());
    }

    #[test]
    fn a_bomb_costs_the_prefix_only() {
        // 8 MiB of zeros claiming a 1 TiB output: at most PREFIX_MAX is made.
        for m in [Method::Zstd, Method::Zlib] {
            let zeros = vec![0u8; 8 << 20];
            let c = ccob(3, m, &zeros);
            let mut d = PrefixDecoder::new(m, 1 << 40).unwrap();
            let mut used = 0;
            for piece in c[32..].chunks(4096) {
                used += d.feed(piece).unwrap();
                if d.done() {
                    break;
                }
            }
            assert_eq!(d.output().len(), PREFIX_MAX);
            assert!(used < c.len());
        }
        // Garbage is an error, not a panic.
        let mut d = PrefixDecoder::new(Method::Zstd, 100).unwrap();
        assert!(d.feed(&[0xff; 64]).is_err());
        let mut d = PrefixDecoder::new(Method::Zlib, 100).unwrap();
        assert!(d.feed(&[0xff; 64]).is_err());
    }
}
