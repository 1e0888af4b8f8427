//! Follows the tar block structure of a stream and refuses a GNU long
//! name/link or PAX header larger than the limit before the `tar` crate
//! reads it: the crate reads those whole into memory (tar 0.4
//! `archive.rs`, `next_entry`: `EntryFields::read_all`), so without this
//! one header could make it allocate gigabytes. Used for every layer and
//! for the outer docker-archive / OCI-archive tar.
//!
//! The guard must find each header exactly where the `tar` crate will:
//! if it lost its place while the crate kept going, the next gigabyte
//! header would pass unchecked. So it walks the stream as tar 0.4.46 does
//! (`archive.rs`: `next_entry_raw`, `next_entry`, `parse_sparse_header`;
//! `header.rs`: `octal_from`, `num_field_wrapper_from`; `pax.rs`:
//! `pax_extensions_value`): numeric fields end at the first NUL and are
//! trimmed; L, K and x headers count only with a ustar or GNU magic; a
//! PAX `size` record, split at newlines as the crate splits them, moves
//! the next entry's data end, and goes with the next entry the crate
//! returns (a `g` header takes it); GNU sparse extension blocks follow
//! their header when `isextended` is 1. Where the crate fails (a bad
//! checksum or number) the guard stops checking: the crate's error ends
//! the stream anyway.

use super::budget::Budget;
use super::error::ImageError;
use std::io::{self, Read, Seek, SeekFrom};

const BLOCK: u64 = 512;

pub(crate) struct TarGuard<'b, R> {
    inner: R,
    budget: &'b Budget,
    what: String,
    pos: u64,
    next_header: u64,
    header: [u8; 512],
    header_len: usize,
    /// Collecting the data of a PAX extended header, `pax_len` bytes.
    pax: Option<Vec<u8>>,
    pax_len: u64,
    /// A PAX header was read and no entry has taken it yet: its `size`.
    pending: Option<Option<u64>>,
    /// The blocks from `next_header` on are GNU sparse extension headers;
    /// then come `sparse_data` bytes of data.
    sparse_ext: bool,
    sparse_data: u64,
    lost: bool,
}

/// tar 0.4 `octal_from`: up to the first NUL, trimmed, octal.
fn octal(field: &[u8]) -> Option<u64> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    let s = std::str::from_utf8(&field[..end]).ok()?;
    u64::from_str_radix(s.trim(), 8).ok()
}

/// tar 0.4 `num_field_wrapper_from`: GNU base-256 when the high bit is
/// set (the last 8 bytes of the field), else octal.
fn number(field: &[u8]) -> Option<u64> {
    if field[0] & 0x80 == 0 {
        return octal(field);
    }
    let (mut v, skip) = if field.len() == 8 {
        (u64::from(field[0] ^ 0x80), 1)
    } else {
        (0, field.len() - 8)
    };
    for b in &field[skip..] {
        v = (v << 8) | u64::from(*b);
    }
    Some(v)
}

/// tar 0.4 `pax_extensions_value(data, "size")`: records split at
/// newlines, each `LEN key=value` with LEN its length; the first `size`
/// decides, and a malformed record before it means none.
fn pax_size(data: &[u8]) -> Option<u64> {
    for line in data.split(|&b| b == b'\n') {
        if line.is_empty() {
            return None;
        }
        let sp = line.iter().position(|&b| b == b' ')?;
        let len: usize = std::str::from_utf8(&line[..sp]).ok()?.parse().ok()?;
        if line.len() + 1 != len {
            return None;
        }
        let kv = &line[sp + 1..];
        let eq = kv.iter().position(|&b| b == b'=')?;
        if &kv[..eq] != b"size" {
            continue;
        }
        return std::str::from_utf8(&kv[eq + 1..]).ok()?.parse().ok();
    }
    None
}

/// Does the header carry the ustar or GNU magic (tar 0.4 `is_ustar`,
/// `is_gnu`)? Only then are L, K and x headers extensions to the crate.
fn recognized(h: &[u8; 512]) -> bool {
    let (magic, version) = (&h[257..263], &h[263..265]);
    (magic == b"ustar\0" && version == b"00") || (magic == b"ustar " && version == b" \0")
}

fn is_gnu(h: &[u8; 512]) -> bool {
    &h[257..263] == b"ustar " && &h[263..265] == b" \0"
}

fn checksum_ok(h: &[u8; 512]) -> bool {
    let sum: u32 = h[..148]
        .iter()
        .chain(&h[156..])
        .map(|&b| u32::from(b))
        .sum::<u32>()
        + 8 * 32;
    octal(&h[148..156]).is_some_and(|c| c as u32 == sum)
}

impl<'b, R> TarGuard<'b, R> {
    /// `what` names the stream in the error.
    pub fn new(inner: R, budget: &'b Budget, what: &str) -> TarGuard<'b, R> {
        TarGuard {
            inner,
            budget,
            what: what.to_string(),
            pos: 0,
            next_header: 0,
            header: [0; 512],
            header_len: 0,
            pax: None,
            pax_len: 0,
            pending: None,
            sparse_ext: false,
            sparse_data: 0,
            lost: false,
        }
    }

    fn data_until(&mut self, size: u64) -> io::Result<()> {
        self.next_header = size
            .div_ceil(BLOCK)
            .checked_mul(BLOCK)
            .and_then(|s| s.checked_add(self.pos))
            .ok_or_else(|| io::Error::other("tar entry size overflows"))?;
        Ok(())
    }

    fn on_header(&mut self) -> io::Result<()> {
        let h = self.header;
        if let Some(p) = self.pax.take() {
            self.pending = Some(pax_size(&p));
        }
        if self.sparse_ext {
            // tar 0.4 reads extension blocks while `isextended` is 1.
            if h[504] != 1 {
                self.sparse_ext = false;
                return self.data_until(self.sparse_data);
            }
            self.next_header = self.pos;
            return Ok(());
        }
        if h.iter().all(|&b| b == 0) {
            // The end of the archive to the crate; nothing is read after.
            self.next_header = self.pos;
            return Ok(());
        }
        let Some(own) = number(&h[124..136]).filter(|_| checksum_ok(&h)) else {
            self.lost = true;
            return Ok(());
        };
        let typ = h[156];
        let ext_type = matches!(typ, b'L' | b'K' | b'x' | b'g');
        let limit = self.budget.limits().max_extension_header;
        if ext_type && own > limit {
            return Err(self.budget.trip(ImageError::ExtensionHeader {
                what: self.what.clone(),
                size: own,
                limit,
            }));
        }
        let consumed = recognized(&h) && matches!(typ, b'L' | b'K' | b'x');
        let size = match self.pending {
            Some(Some(s)) if !ext_type => s,
            _ => own,
        };
        if !consumed {
            // The crate hands this entry out, with the PAX records if any.
            self.pending = None;
        }
        if typ == b'x' && consumed {
            self.pax = Some(Vec::with_capacity(size as usize));
            self.pax_len = size;
        }
        if typ == b'S' && is_gnu(&h) && h[482] == 1 {
            self.sparse_ext = true;
            self.sparse_data = size;
            self.next_header = self.pos;
            return Ok(());
        }
        self.data_until(size)
    }

    fn observe(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() && !self.lost {
            if self.pos < self.next_header {
                let take = data
                    .len()
                    .min(usize::try_from(self.next_header - self.pos).unwrap_or(usize::MAX));
                if let Some(p) = &mut self.pax {
                    // The records, not the block padding after them.
                    let room = self.pax_len.saturating_sub(p.len() as u64);
                    p.extend_from_slice(
                        &data[..take.min(usize::try_from(room).unwrap_or(usize::MAX))],
                    );
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

/// The `tar` crate seeks (tar 0.4 `entries_with_seek`) only to skip an
/// entry's data to the next header; a seek anywhere else would hide bytes
/// from the guard, so it is refused.
impl<R: Read + Seek> Seek for TarGuard<'_, R> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(_) => None,
        };
        // Skipping nothing the guard still has to see: within the data of
        // the current entry, past what it collects of a PAX header.
        let pax_done = !matches!(&self.pax, Some(p) if (p.len() as u64) < self.pax_len);
        let in_data =
            |t: u64| t >= self.pos && t <= self.next_header && self.header_len == 0 && pax_done;
        match target {
            Some(t) if self.lost || in_data(t) => {
                self.pos = self.inner.seek(SeekFrom::Start(t))?;
                Ok(self.pos)
            }
            _ => Err(io::Error::other("tar seek outside an entry's data")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Limits;

    #[test]
    fn numbers_as_the_tar_crate_reads_them() {
        assert_eq!(octal(b"0000644\0"), Some(0o644));
        assert_eq!(octal(b" 12 \0"), Some(0o12));
        assert_eq!(octal(b"0\x0077777777\0\0"), Some(0));
        assert_eq!(octal(b"1 2\0"), None);
        assert_eq!(octal(b"\0\0\0"), None);
        let mut b256 = [0u8; 12];
        b256[0] = 0x80;
        b256[11] = 5;
        b256[4] = 1;
        assert_eq!(number(&b256), Some((1 << 56) + 5));
    }

    #[test]
    fn pax_size_as_the_tar_crate_reads_it() {
        assert_eq!(pax_size(b"12 size=345\n"), Some(345));
        assert_eq!(pax_size(b"12 path=abc\n12 size=345\n"), Some(345));
        // A newline inside a value: the first line is malformed, no size.
        assert_eq!(pax_size(b"13 path=a\nbc\n12 size=345\n"), None);
        assert_eq!(pax_size(b"12 size=xyz\n12 size=345\n"), None);
        assert_eq!(pax_size(b"12 path=abc\n"), None);
        assert_eq!(pax_size(b"11 size=345\n"), None);
    }

    /// Feeds `stream` through the guard in reads of `step` bytes.
    fn guard(stream: &[u8], step: usize) -> Result<(), String> {
        let b = Budget::new(&Limits::default());
        let mut g = TarGuard::new(stream, &b, "t");
        let mut buf = vec![0u8; step];
        loop {
            match g.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    fn hdr(typ: u8, size: u64) -> [u8; 512] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::new(typ));
        h.set_size(size);
        h.set_cksum();
        *h.as_bytes()
    }

    #[test]
    fn a_huge_long_name_is_refused_after_a_pax_global_pair() {
        let mut s = Vec::new();
        let rec = b"14 size=10240\n";
        s.extend_from_slice(&hdr(b'x', rec.len() as u64));
        s.extend_from_slice(rec);
        s.resize(1024, 0);
        s.extend_from_slice(&hdr(b'g', 0));
        s.extend_from_slice(&hdr(b'0', 0));
        s.extend_from_slice(&hdr(b'L', 1 << 31));
        for step in [1, 7, 512, 4096] {
            let e = guard(&s, step).unwrap_err();
            assert!(e.contains("2147483648 bytes"), "{step}: {e}");
        }
    }

    /// The outer archive is indexed by seeking past entry data: PAX and
    /// GNU long names (read, then their padding skipped) and files (data
    /// skipped) all come out as the tar crate reads them.
    #[test]
    fn seeking_past_data_keeps_the_guard_in_step() {
        let long = "d/".repeat(80) + "file";
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        b.append_data(&mut h, &long, &b"abc"[..]).unwrap();
        let rec = format!("{} path=pax/{long}\n", long.len() + 14);
        assert_eq!(rec.len(), long.len() + 14);
        let mut x = tar::Header::new_ustar();
        x.set_entry_type(tar::EntryType::XHeader);
        x.set_size(rec.len() as u64);
        x.set_cksum();
        b.append(&x, rec.as_bytes()).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_path("short").unwrap();
        h.set_size(1000);
        h.set_cksum();
        b.append(&h, &[7u8; 1000][..]).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        b.append_data(&mut h, "last", &[][..]).unwrap();
        let bytes = b.into_inner().unwrap();
        let budget = Budget::new(&Limits::default());
        let guard = TarGuard::new(std::io::Cursor::new(&bytes), &budget, "t");
        let mut ar = tar::Archive::new(guard);
        let got: Vec<(String, u64)> = ar
            .entries_with_seek()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let p = String::from_utf8_lossy(&e.path_bytes()).into_owned();
                (p, e.size())
            })
            .collect();
        assert_eq!(
            got,
            [
                (long.clone(), 3),
                (format!("pax/{long}"), 1000),
                ("last".to_string(), 0)
            ]
        );
    }
}
