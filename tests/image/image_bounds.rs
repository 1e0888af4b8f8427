//! `gpu-guard check --image` on hostile images built here:
//! each must end in one clear line on stderr, exit 2, within hard limits
//! on memory (the binary runs under `prlimit --as`) and time (it is killed
//! after a generous timeout). These are bounds that prove the work is
//! bounded, not performance targets (integration/bench-image.sh measures
//! those). Sparse files stand in for gigabytes: a header may announce them,
//! the disk never holds them.

use crate::image_support::*;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The address-space limit every hostile check runs under. A legitimate
/// image is checked under it too (`a_real_image_fits_the_limits`), so a
/// failure means the hostile input, not the limit.
const AS_LIMIT: u64 = 768 << 20;
/// Killed after this long: hostile inputs must end well before.
const TIMEOUT: Duration = Duration::from_secs(90);

fn bin() -> PathBuf {
    PathBuf::from(crate::support::gpu_guard())
}

fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(p)
}

/// `prlimit` from util-linux; without it the memory bound cannot be held.
fn prlimit() -> Option<&'static str> {
    crate::support::have_tool("prlimit").then_some("prlimit")
}

/// Runs `gpu-guard check --image IMG --host a100 --json` under the memory
/// limit; kills it (and fails) after [`TIMEOUT`].
fn check_limited(img: &Path) -> Option<(Output, Duration)> {
    let prl = prlimit()?;
    let dir = img.parent().unwrap();
    let cfg = dir.join("config.toml");
    std::fs::write(
        &cfg,
        "mode = \"enforce\"\n[kernel_image]\nseverity = \"enforce\"\ncache_dir = \"\"\n",
    )
    .unwrap();
    let mut child = Command::new(prl)
        .arg(format!("--as={AS_LIMIT}"))
        .arg("--")
        .arg(bin())
        .arg("--config")
        .arg(&cfg)
        .args(["check", "--image"])
        .arg(img)
        .arg("--host")
        .arg(data("hosts/a100.json"))
        .arg("--json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return Some((child.wait_with_output().unwrap(), start.elapsed()));
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("check --image {} ran past {TIMEOUT:?}", img.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Exit 2 with exactly one line on stderr that contains every `want`.
fn refused(img: &Path, want: &[&str]) {
    let Some((o, took)) = check_limited(img) else {
        return;
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{} ({took:?}, {}): {err}",
        img.display(),
        o.status
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    for w in want {
        assert!(err.contains(w), "{err:?} lacks {w:?}");
    }
    assert!(!err.contains("is not an OCI image layout"), "{err}");
    assert!(o.stdout.is_empty());
    // Sparse files cost little disk, the gzip bomb 64 MB: not left behind.
    let dir = if img.is_dir() {
        img
    } else {
        img.parent().unwrap()
    };
    let _ = std::fs::remove_dir_all(dir);
}

/// A file written with holes: what is skipped is never on disk.
struct Sparse {
    file: File,
}

impl Sparse {
    fn create(p: &Path) -> Sparse {
        Sparse {
            file: File::create(p).unwrap(),
        }
    }
    fn put(&mut self, b: &[u8]) -> &mut Self {
        self.file.write_all(b).unwrap();
        self
    }
    fn skip(&mut self, n: u64) -> &mut Self {
        self.file.seek(SeekFrom::Current(n as i64)).unwrap();
        self
    }
    /// Pads to a 512-byte block.
    fn pad(&mut self) -> &mut Self {
        let at = self.file.stream_position().unwrap();
        self.skip(at.next_multiple_of(512) - at)
    }
    /// Ends with two zero blocks (the tar end) and returns the length.
    fn finish(&mut self) -> u64 {
        self.pad();
        let end = self.file.stream_position().unwrap() + 1024;
        self.file.set_len(end).unwrap();
        end
    }
}

/// A tar header with raw fields: `magic` 0 = v7 (none), 1 = GNU, 2 = ustar.
/// `size` is written as octal digits, or as given when `raw_size` is set.
fn header(name: &str, typ: u8, size: u64, magic: u8, raw_size: Option<&[u8; 12]>) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    match raw_size {
        Some(r) => h[124..136].copy_from_slice(r),
        None => h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes()),
    }
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = typ;
    match magic {
        1 => h[257..265].copy_from_slice(b"ustar  \0"),
        2 => h[257..265].copy_from_slice(b"ustar\x0000"),
        _ => {}
    }
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// A PAX record `LEN key=value\n`.
fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body = key.len() + value.len() + 3;
    let mut len = body + body.to_string().len();
    if len.to_string().len() != body.to_string().len() {
        len += 1;
    }
    let mut r = format!("{len} {key}=").into_bytes();
    r.extend_from_slice(value);
    r.push(b'\n');
    assert_eq!(r.len(), len);
    r
}

/// An OCI layout of these (compressed) layer blobs, without diff_ids.
fn layout_with_layers(name: &str, layers: &[Vec<u8>]) -> PathBuf {
    let dir = tmp(name);
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let blob = |b: &[u8]| {
        let h = sha(b);
        std::fs::write(dir.join("blobs/sha256").join(&h), b).unwrap();
        serde_json::json!({ "mediaType": "application/octet-stream", "digest": format!("sha256:{h}"), "size": b.len() })
    };
    let env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_string()];
    let cfg = blob(&config_json(&env, &[]));
    let ls: Vec<_> = layers.iter().map(|l| blob(l)).collect();
    let m = serde_json::json!({ "schemaVersion": 2, "config": cfg, "layers": ls });
    let md = blob(&serde_json::to_vec(&m).unwrap());
    let i = serde_json::json!({ "schemaVersion": 2, "manifests": [md] });
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&i).unwrap()).unwrap();
    dir
}

/// An OCI layout whose single layer is the (plain tar) file `layer`, with
/// the digest and size written as they are (the digest need not match:
/// every hostile case must be refused before the layer's end).
fn layout_with_layer(name: &str, write_layer: impl FnOnce(&Path)) -> PathBuf {
    let dir = tmp(name);
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let fake = "0".repeat(64);
    let lpath = dir.join("blobs/sha256").join(&fake);
    write_layer(&lpath);
    let lsize = std::fs::metadata(&lpath).unwrap().len();
    let blob = |b: &[u8]| {
        let h = sha(b);
        std::fs::write(dir.join("blobs/sha256").join(&h), b).unwrap();
        serde_json::json!({ "mediaType": "application/octet-stream", "digest": format!("sha256:{h}"), "size": b.len() })
    };
    let env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_string()];
    let cfg = blob(&config_json(&env, &[]));
    let m = serde_json::json!({ "schemaVersion": 2, "config": cfg, "layers": [
        { "mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": format!("sha256:{fake}"), "size": lsize } ] });
    let md = blob(&serde_json::to_vec(&m).unwrap());
    let i = serde_json::json!({ "schemaVersion": 2, "manifests": [md] });
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&i).unwrap()).unwrap();
    dir
}

#[test]
fn a_real_image_fits_the_limits() {
    let env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_string()];
    let lib = std::fs::read(data("fatbin/multi-arch.so")).unwrap();
    let l = gz(&tar_of(&[E::File(
        "usr/lib/x86_64-linux-gnu/libcublas.so.12",
        &lib,
    )]));
    let img = oci_layout("bounds-real", &env, &[l]);
    let Some((o, _)) = check_limited(&img) else {
        return;
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
}

/// The outer tar of a docker-archive announcing a GNU long name or a
/// PAX header of gigabytes (an 8 KiB sparse file) is refused by the same
/// guard as the layers, naming the archive, before anything is allocated.
#[test]
fn the_outer_archive_has_the_layers_header_guard() {
    for (case, typ, size) in [
        ("longname", b'L', 4u64 << 30),
        ("longlink", b'K', 1 << 30),
        ("pax", b'x', 2 << 30),
    ] {
        let dir = tmp(&format!("outer-{case}"));
        let p = dir.join("img.tar");
        let mut s = Sparse::create(&p);
        s.put(&header("././@LongLink", typ, size, 1, None))
            .skip(size)
            .finish();
        refused(
            &p,
            &[
                &p.display().to_string(),
                &format!("tar extension header of {size} bytes is over the 1048576-byte limit"),
            ],
        );
    }
    // After a valid entry too.
    let dir = tmp("outer-second");
    let p = dir.join("img.tar");
    let mut s = Sparse::create(&p);
    s.put(&header("manifest.json", b'0', 2, 1, None))
        .put(b"[]")
        .pad()
        .put(&header("././@LongLink", b'L', 3 << 30, 1, None))
        .skip(3 << 30)
        .finish();
    refused(&p, &["tar extension header of 3221225472 bytes"]);
}

/// Tricks that can make a header guard lose its place in the stream
/// while the `tar` crate keeps it, so that a gigabyte long name after
/// them goes unchecked. Each is followed, where the `tar` crate
/// looks for the next header, by a GNU long name announcing 2 GiB.
#[test]
fn the_header_guard_keeps_its_place_in_the_stream() {
    let huge = 2u64 << 30;
    let long = header("././@LongLink", b'L', huge, 1, None);
    type Trick = fn(&mut Sparse);
    let tricks: [(&str, Trick); 6] = [
        // Size "0", NUL, then digits: the tar crate stops at the NUL.
        ("nul-in-size", |s| {
            s.put(&header("a", b'0', 0, 1, Some(b"0\x0077777777\0\0")));
        }),
        // A PAX record whose value holds a newline: the tar crate splits
        // records at newlines, finds it malformed, and ignores `size`.
        ("pax-newline", |s| {
            let mut d = pax_record("path", b"x\ny");
            d.extend(pax_record("size", b"7340032"));
            s.put(&header("pax", b'x', d.len() as u64, 1, None))
                .put(&d)
                .pad()
                .put(&header("a", b'0', 0, 1, None));
        }),
        // A PAX header without a ustar or GNU magic is no PAX header to
        // the tar crate: an ordinary entry, its `size` record ignored.
        ("v7-pax", |s| {
            let d = pax_record("size", b"7340032");
            s.put(&header("pax", b'x', d.len() as u64, 0, None))
                .put(&d)
                .pad()
                .put(&header("a", b'0', 0, 1, None));
        }),
        // A global header after a PAX header takes the PAX records with
        // it: the next entry has its own size.
        ("pax-then-global", |s| {
            let d = pax_record("size", b"7340032");
            s.put(&header("pax", b'x', d.len() as u64, 1, None))
                .put(&d)
                .pad()
                .put(&header("g", b'g', 0, 1, None))
                .put(&header("a", b'0', 0, 1, None));
        }),
        // A GNU sparse file with an extension block.
        ("sparse-extended", |s| {
            let mut h = header("sp", b'S', 512, 1, None);
            h[386..398].copy_from_slice(b"00000000000\0"); // offset 0
            h[398..410].copy_from_slice(b"00000001000\0"); // 512 bytes
            h[482] = 1;
            h[483..495].copy_from_slice(b"00000001000\0"); // real size
            reseal(&mut h);
            let ext = [0u8; 512];
            s.put(&h).put(&ext).put(&[b'd'; 512]);
        }),
        // `isextended` other than 1 is not extended to the tar crate.
        ("sparse-flag-2", |s| {
            let mut h = header("sp", b'S', 0, 1, None);
            h[482] = 2;
            h[483..495].copy_from_slice(b"00000000000\0"); // real size
            reseal(&mut h);
            s.put(&h);
        }),
    ];
    for (name, trick) in tricks {
        let img = layout_with_layer(&format!("guard-{name}"), |p| {
            let mut s = Sparse::create(p);
            trick(&mut s);
            s.put(&long).skip(huge).finish();
        });
        refused(
            &img,
            &["layer 0", "tar extension header of 2147483648 bytes"],
        );
    }
}

/// Recomputes a header's checksum after an edit.
fn reseal(h: &mut [u8; 512]) {
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

/// 500 entries whose PAX paths are about 1 MB each (under the 1 MiB
/// extension-header bound): kept twice each, that is about 1 GB in all.
/// A path longer than PATH_MAX is refused at the first.
#[test]
fn entry_paths_over_path_max_are_refused() {
    let img = layout_with_layer("paths-long", |p| {
        let mut s = Sparse::create(p);
        for i in 0..500 {
            let value_len = 1_000_000usize;
            let prefix = format!("d{i}/");
            let rec_len = {
                let body = "path".len() + value_len + 3;
                body + body.to_string().len()
            };
            let head = format!("{rec_len} path={prefix}");
            s.put(&header("pax", b'x', rec_len as u64, 1, None))
                .put(head.as_bytes())
                .skip((rec_len - head.len() - 1) as u64)
                .put(b"\n")
                .pad()
                .put(&header("f", b'0', 0, 1, None));
        }
        s.finish();
    });
    refused(
        &img,
        &["layer 0", "entry path of 1000000 bytes", "4095-byte limit"],
    );
    // A symlink target over PATH_MAX, through a GNU long link.
    let img = layout_with_layer("paths-longlink", |p| {
        let mut s = Sparse::create(p);
        let target = vec![b'a'; 5000];
        s.put(&header("././@LongLink", b'K', 5001, 1, None))
            .put(&target)
            .put(b"\0")
            .pad()
            .put(&header("l", b'2', 0, 1, None));
        s.finish();
    });
    refused(&img, &["link target of 5000 bytes", "4095-byte limit"]);
}

/// One entry of 520k components (a 1 MiB PAX path, 32 KB of gzip):
/// resolving it was quadratic (20 minutes, then allowed). It is over
/// PATH_MAX, so refused at once.
#[test]
fn a_path_of_half_a_million_components_ends_at_once() {
    let env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_string()];
    let deep = "a/".repeat(520_000) + "f";
    let mut pax = tar::Header::new_ustar();
    let rec = pax_record("path", deep.as_bytes());
    pax.set_entry_type(tar::EntryType::XHeader);
    pax.set_size(rec.len() as u64);
    pax.set_cksum();
    let mut f = tar::Header::new_ustar();
    f.set_path("f").unwrap();
    f.set_size(0);
    f.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&pax, &rec[..]).unwrap();
    b.append(&f, &[][..]).unwrap();
    let layer = gz(&b.into_inner().unwrap());
    assert!(layer.len() < 64 << 10, "{}", layer.len());
    let img = oci_layout("deep-path", &env, &[layer]);
    refused(&img, &["entry path of 1040001 bytes", "4095-byte limit"]);
}

/// A zstd frame of `n` RLE blocks of 128 KiB zeros each, after a raw
/// block holding `head` (RFC 8878: frame header with a 1 MiB window and no
/// content size; block header = 3 bytes, last flag, type, size).
fn zstd_rle(head: &[u8], n: u64) -> Vec<u8> {
    let mut v = vec![0x28, 0xb5, 0x2f, 0xfd];
    v.push(0x00); // frame header descriptor: no checksum, no FCS, window byte follows
    v.push(0x50); // window descriptor: 2^(10+10) = 1 MiB
    let block = |last: bool, typ: u32, size: u32| {
        let h = u32::from(last) | (typ << 1) | (size << 3);
        h.to_le_bytes()[..3].to_vec()
    };
    v.extend(block(n == 0, 0, head.len() as u32));
    v.extend_from_slice(head);
    for i in 0..n {
        v.extend(block(i + 1 == n, 1, 128 << 10));
        v.push(0);
    }
    v
}

/// Nine zstd layers of 8 GiB of zeros each, 2.6 MB in all, stop long
/// before the 64 GiB byte budget: no real layer decompresses to hundreds
/// of times its size past the first GiB.
#[test]
fn zstd_bombs_stop_early() {
    let size = 8u64 << 30;
    let mut h = tar::Header::new_gnu();
    h.set_path("usr/lib/x86_64-linux-gnu/libcublas.so.12")
        .unwrap();
    h.set_size(size);
    h.set_cksum();
    let blocks = (size + 1024) / (128 << 10) + 1;
    let layer = zstd_rle(h.as_bytes(), blocks);
    assert!(9 * layer.len() < 3 << 20);
    let img = layout_with_layers("zstd-bomb", &vec![layer; 9]);
    refused(&img, &["compression bomb"]);
}

/// Gzip too: members of 8 MiB of zeros each, 64 GiB in all.
#[test]
fn gzip_bombs_stop_early() {
    let mut h = tar::Header::new_gnu();
    h.set_path("usr/lib/x86_64-linux-gnu/libcublas.so.12")
        .unwrap();
    h.set_size(64 << 30);
    h.set_cksum();
    let head = gz(h.as_bytes());
    let zeros = gz(&vec![0u8; 8 << 20]);
    let img = layout_with_layer("gzip-bomb", |p| {
        let mut f = std::io::BufWriter::new(File::create(p).unwrap());
        f.write_all(&head).unwrap();
        for _ in 0..8200 {
            f.write_all(&zeros).unwrap();
        }
    });
    refused(&img, &["compression bomb"]);
}

// The reader's budgets, driven through the library with small limits.

use gpu_guard::image::{Image, ImageError, Limits, Options};

fn opts(f: impl FnOnce(&mut Limits)) -> Options {
    let mut limits = Limits::default();
    f(&mut limits);
    Options {
        limits,
        ..Options::default()
    }
}

/// Runs `f` on another thread and fails when it has not returned after
/// `limit` (the thread is left behind; the test binary exits anyway).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("did not return within {limit:?}"))
}

/// One wall-clock deadline for the whole check, from `Image::open`:
/// the passes after it do not start a fresh one.
#[test]
fn one_deadline_for_the_whole_check() {
    let env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_string()];
    let img = oci_layout(
        "one-deadline",
        &env,
        &[gz(&tar_of(&[E::File("usr/lib/libx.so.1", b"x")]))],
    );
    let o = opts(|l| l.max_time = Duration::from_secs(2));
    let image = Image::open(&img, &o).unwrap();
    std::thread::sleep(Duration::from_millis(2100));
    let e = image.index().expect_err("the deadline passed");
    assert!(matches!(e, ImageError::TimeBudget(2)), "{e}");
}

/// One byte budget for every pass: a content pass after the header
/// pass spends what is left, not a fresh budget.
#[test]
fn one_byte_budget_for_every_pass() {
    let env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_string()];
    let body: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let layer = tar_of(&[E::File("usr/lib/libx.so.1", &body)]);
    let plain = layer.len() as u64;
    let img = oci_layout("one-bytes", &env, &[gz(&layer)]);
    let o = opts(|l| l.max_uncompressed_bytes = plain * 3 / 2);
    let image = Image::open(&img, &o).unwrap();
    let tree = image.index().unwrap();
    let e = image
        .read_files(&tree, &|p| p.ends_with(".so.1"), &mut |_, r| {
            std::io::copy(r, &mut std::io::sink()).map(|_| ())
        })
        .expect_err("the second pass has half a layer left");
    assert!(matches!(e, ImageError::ByteBudget(_)), "{e}");
}

/// A chain of 30 symlinks, each a 4 KB `b/b/.../../..` target (within
/// PATH_MAX), under 3,000 entries: rebuilding the joined path at every
/// component would be quadratic; resolving is linear in what it walks and stops at the
/// deadline, inside the header pass.
#[test]
fn path_resolution_stops_at_the_deadline() {
    let env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_string()];
    let mut b = tar::Builder::new(Vec::new());
    let hops = 30;
    for i in 0..hops {
        let next = if i + 1 == hops {
            "d".to_string()
        } else {
            format!("s{}", i + 1)
        };
        let target = "b/".repeat(800) + &"../".repeat(800) + &next;
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, format!("s{i}"), &target).unwrap();
    }
    for i in 0..3000 {
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        b.append_data(&mut h, format!("s0/f{i}"), &[][..]).unwrap();
    }
    let img = oci_layout("resolve-deadline", &env, &[gz(&b.into_inner().unwrap())]);
    let o = opts(|l| l.max_time = Duration::from_secs(1));
    let r = within(Duration::from_secs(60), move || {
        let image = Image::open(&img, &o)?;
        image.index().map(|t| t.len())
    });
    match r {
        // Fast enough to finish within the second: every entry resolved
        // through the chain into `d`.
        Ok(n) => assert!(n >= 3000, "{n}"),
        Err(e) => assert!(matches!(e, ImageError::TimeBudget(1)), "{e}"),
    }
}

/// The outer archive is indexed by seeking past entry data through the
/// guard: an OCI archive whose every entry is named by a PAX header (as
/// tar --format=pax writes them) reads as the layout it holds.
#[test]
fn an_oci_archive_named_by_pax_headers_reads_as_its_layout() {
    let env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_string()];
    let layer = gz(&tar_of(&[E::File("usr/lib/libx.so.1", b"x")]));
    let dir = oci_layout("pax-archive", &env, &[layer]);
    let mut files = vec!["oci-layout".to_string(), "index.json".to_string()];
    for e in std::fs::read_dir(dir.join("blobs/sha256")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        files.push(format!("blobs/sha256/{name}"));
    }
    let mut b = tar::Builder::new(Vec::new());
    for (i, f) in files.iter().enumerate() {
        let rec = pax_record("path", format!("./{f}").as_bytes());
        let mut x = tar::Header::new_ustar();
        x.set_path(format!("PaxHeaders/{i}")).unwrap();
        x.set_entry_type(tar::EntryType::XHeader);
        x.set_size(rec.len() as u64);
        x.set_cksum();
        b.append(&x, &rec[..]).unwrap();
        let data = std::fs::read(dir.join(f)).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_path(format!("short{i}")).unwrap();
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, &data[..]).unwrap();
    }
    let archive = dir.parent().unwrap().join("gg-bounds-pax-archive.tar");
    std::fs::write(&archive, b.into_inner().unwrap()).unwrap();
    let image = Image::open(&archive, &Options::default()).unwrap();
    assert_eq!(
        serde_json::to_value(image.info().format).unwrap(),
        "oci-archive"
    );
    let tree = image.index().unwrap();
    assert_eq!(tree.files().collect::<Vec<_>>(), ["usr/lib/libx.so.1"]);
    let _ = std::fs::remove_file(&archive);
    let _ = std::fs::remove_dir_all(&dir);
}
