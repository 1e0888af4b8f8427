//! The streaming fatbin scanner (src/scan/stream_fatbin.rs) against the
//! positioned one (src/scan/fatbin.rs): the same entries, in the same
//! order, on every fixture, on a real NVIDIA library (libcurand), and with
//! the stream cut into reads of every awkward size.

use crate::scan_support::*;
use gpu_guard::scan::fatbin::{entries_of, scan_image, Budget};
use gpu_guard::scan::read::SizedFile;
use gpu_guard::scan::stream_fatbin::scan_stream;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

/// Hands out at most `n` bytes per read.
struct Dribble<R> {
    inner: R,
    n: usize,
}

impl<R: Read> Read for Dribble<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.n);
        self.inner.read(&mut buf[..n])
    }
}

fn streamed(bytes: &[u8], dribble: usize) -> Result<(Vec<String>, bool), String> {
    let mut r = Dribble {
        inner: bytes,
        n: dribble,
    };
    scan_stream(&mut r, bytes.len() as u64, &mut Budget::unlimited())
        .map(|s| {
            (
                s.entries.iter().map(|e| format!("{e:?}")).collect(),
                s.sections_known,
            )
        })
        .map_err(|e| e.to_string())
}

fn positioned(bytes: &[u8]) -> Result<Vec<String>, String> {
    entries_of(bytes)
        .map(|v| v.iter().map(|e| format!("{e:?}")).collect())
        .map_err(|e| e.to_string())
}

#[test]
fn streaming_equals_positioned_on_the_fixtures() {
    let mut n = 0;
    for f in std::fs::read_dir(fixtures()).unwrap() {
        let p = f.unwrap().path();
        let bytes = std::fs::read(&p).unwrap();
        let want = positioned(&bytes);
        for d in [1usize, 7, 64, 4096, usize::MAX] {
            let got = streamed(&bytes, d);
            match (&want, &got) {
                (Ok(w), Ok((g, known))) => {
                    assert_eq!(w, g, "{} (reads of {d})", p.display());
                    assert!(known, "{}: section names were not kept", p.display());
                }
                (Err(w), Err(g)) => assert_eq!(w, g, "{}", p.display()),
                _ => panic!("{}: positioned {want:?}, streamed {got:?}", p.display()),
            }
        }
        n += 1;
    }
    assert!(n >= 16, "only {n} fixtures");
}

#[test]
fn streaming_equals_positioned_on_a_real_library() {
    let Some(lib) = require(real_library(), "libcurand (pip install nvidia-curand)") else {
        return;
    };
    let size = std::fs::metadata(&lib).unwrap().len();
    let t = Instant::now();
    let file = std::fs::File::open(&lib).unwrap();
    let mut want = Vec::new();
    scan_image(
        &SizedFile::new(file, size),
        &mut Budget::unlimited(),
        &mut |e| want.push(e),
    )
    .unwrap();
    let t_pos = t.elapsed();
    let t = Instant::now();
    let mut f = std::io::BufReader::new(std::fs::File::open(&lib).unwrap());
    let got = scan_stream(&mut f, size, &mut Budget::unlimited()).unwrap();
    let t_stream = t.elapsed();
    assert!(got.sections_known);
    assert!(!want.is_empty());
    assert_eq!(want, got.entries, "{}", lib.display());
    eprintln!(
        "{} ({size} bytes, {} entries): positioned {t_pos:?}, streamed {t_stream:?}",
        lib.display(),
        want.len()
    );
}

#[test]
fn damaged_fixtures_fail_alike() {
    // Cut each fixture short, and break a container header in the middle.
    for name in ["multi-arch.so", "concat.so", "renamed-section.so", "rdc.o"] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        let mut cut = bytes.clone();
        let magic = 0xBA55ED50u32.to_le_bytes();
        let at = cut.windows(4).position(|w| w == magic).unwrap();
        cut[at + 4] = 7; // version 7
        assert_eq!(
            positioned(&cut),
            streamed(&cut, 4096).map(|x| x.0),
            "{name}"
        );
        let mut sz = bytes.clone();
        sz[at + 8..at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(positioned(&sz), streamed(&sz, 4096).map(|x| x.0), "{name}");
    }
    let _ = Path::new("");
}
