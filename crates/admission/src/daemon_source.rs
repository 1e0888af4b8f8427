//! `docker-daemon:NAME[:TAG]`: the image as the local docker exports it
//! (`GET /images/{name}/get`, crates/registry `daemon.rs`), read as a
//! stream and never stored.
//!
//! The export is a tar whose `manifest.json` (the legacy layout of docker
//! 20.10, and beside the OCI layout of Engine 25+) comes last, after the
//! layers (moby `image/tarexport/save.go`). So a first stream records the
//! entry list and keeps the small files (manifest.json, the config); the
//! image reader then reads the config from memory and each layer from a
//! second stream, in order. A layer behind the stream's position (a
//! legacy duplicate-layer symlink, the reader's second pass) opens the
//! export again. The layers' digests are the config's `diff_ids`: docker
//! exports layers uncompressed, so each entry hashes to its diff_id, which
//! the image reader verifies as it would a blob's.

use gpu_guard::image::{BlobSource, Digest, Format, Image, Options};
use gpu_guard_registry::blob::sha256_digest;
use gpu_guard_registry::daemon;
use gpu_guard_registry::document::cause;
use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Files kept from the first stream (manifest.json, configs) are at most this.
const MAX_SMALL: u64 = 4 << 20;
const MAX_KEPT: usize = 64;
const MAX_ENTRIES: usize = 100_000;
/// Exports opened for one image read before giving up.
const MAX_STREAMS: usize = 16;

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// One tar header of the outer export (ustar, GNU long names, PAX paths).
struct Header {
    name: String,
    size: u64,
    kind: u8,
    link: String,
}

fn octal(f: &[u8]) -> Option<u64> {
    if f.first().is_some_and(|b| b & 0x80 != 0) {
        return f[1..]
            .iter()
            .try_fold(0u64, |v, b| v.checked_mul(256)?.checked_add(u64::from(*b)));
    }
    let s: String = f
        .iter()
        .map(|&b| b as char)
        .filter(|c| c.is_ascii_digit())
        .collect();
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(&s, 8).ok()
}

fn cstr(f: &[u8]) -> String {
    let end = f.iter().position(|b| *b == 0).unwrap_or(f.len());
    String::from_utf8_lossy(&f[..end]).into_owned()
}

fn norm(p: &str) -> String {
    p.trim_start_matches("./").trim_end_matches('/').to_string()
}

/// Reads tar headers in sequence from a stream; the data of each entry is
/// read (or skipped) before the next header.
struct Outer {
    r: Box<dyn Read + Send>,
    /// Data bytes of the current entry not yet read, then its padding.
    left: u64,
    pad: u64,
    seen: HashSet<String>,
}

impl Outer {
    fn skip(&mut self, n: u64) -> io::Result<()> {
        let got = io::copy(&mut (&mut self.r).take(n), &mut io::sink())?;
        if got != n {
            return Err(bad("the export ends inside an entry"));
        }
        Ok(())
    }

    fn read_data(&mut self, n: u64) -> io::Result<Vec<u8>> {
        let mut v = Vec::new();
        (&mut self.r).take(n).read_to_end(&mut v)?;
        Ok(v)
    }

    /// The next entry's header (None at the end), the current entry skipped first.
    fn next(&mut self) -> io::Result<Option<Header>> {
        self.skip(self.left + self.pad)?;
        self.left = 0;
        self.pad = 0;
        let mut long_name: Option<String> = None;
        loop {
            let mut h = [0u8; 512];
            let mut got = 0;
            while got < 512 {
                let n = self.r.read(&mut h[got..])?;
                if n == 0 {
                    return if got == 0 {
                        Ok(None)
                    } else {
                        Err(bad("the export ends inside a header"))
                    };
                }
                got += n;
            }
            if h.iter().all(|b| *b == 0) {
                return Ok(None);
            }
            let size = octal(&h[124..136]).ok_or_else(|| bad("a tar header has a bad size"))?;
            let pad = (512 - size % 512) % 512;
            let kind = h[156];
            match kind {
                b'L' | b'x' if size <= 1 << 20 => {
                    let data = self.read_data(size)?;
                    self.skip(pad)?;
                    long_name = match kind {
                        b'L' => Some(cstr(&data)),
                        _ => String::from_utf8_lossy(&data)
                            .lines()
                            .find_map(|l| l.split_once(" path=").map(|(_, p)| p.to_string()))
                            .or(long_name),
                    };
                    continue;
                }
                b'L' | b'x' | b'g' => {
                    self.skip(size + pad)?;
                    continue;
                }
                _ => {}
            }
            let mut name = cstr(&h[0..100]);
            if &h[257..262] == b"ustar" {
                let prefix = cstr(&h[345..500]);
                if !prefix.is_empty() {
                    name = format!("{prefix}/{name}");
                }
            }
            let name = norm(&long_name.take().unwrap_or(name));
            self.left = size;
            self.pad = pad;
            self.seen.insert(name.clone());
            return Ok(Some(Header {
                name,
                size,
                kind,
                link: cstr(&h[157..257]),
            }));
        }
    }
}

/// What the first stream found.
struct Listing {
    sizes: HashMap<String, u64>,
    links: HashMap<String, String>,
    small: HashMap<String, Vec<u8>>,
}

struct Shared {
    socket: PathBuf,
    name: String,
    /// Every read of the export ends by then (the image's time budget).
    deadline: std::time::Instant,
    stream: Option<Outer>,
    streams: usize,
}

impl Shared {
    fn connect(&mut self) -> io::Result<()> {
        if self.streams >= MAX_STREAMS {
            return Err(bad(format!(
                "opened the export {MAX_STREAMS} times; giving up"
            )));
        }
        self.streams += 1;
        let r = daemon::export(&self.socket, &self.name, Some(self.deadline))
            .map_err(|e| io::Error::other(e.to_string()))?;
        self.stream = Some(Outer {
            r,
            left: 0,
            pad: 0,
            seen: HashSet::new(),
        });
        Ok(())
    }

    /// Positions the stream at the data of `target`; returns its size.
    fn seek(&mut self, target: &str) -> io::Result<u64> {
        if self.stream.as_ref().is_none_or(|s| s.seen.contains(target)) {
            self.connect()?;
        }
        let s = self.stream.as_mut().ok_or_else(|| bad("no stream"))?;
        while let Some(h) = s.next()? {
            if h.name == target {
                return Ok(h.size);
            }
        }
        Err(bad(format!("the export has no entry {target}")))
    }
}

/// The data of one entry, read from the shared stream.
struct EntryReader {
    shared: Arc<Mutex<Shared>>,
}

impl Read for EntryReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut g = self
            .shared
            .lock()
            .map_err(|_| bad("the export stream failed"))?;
        let Some(s) = g.stream.as_mut() else {
            return Ok(0);
        };
        let want = buf.len().min(usize::try_from(s.left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = s.r.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the export ends inside a layer",
            ));
        }
        s.left -= n as u64;
        Ok(n)
    }
}

struct DaemonBlobs {
    shared: Arc<Mutex<Shared>>,
    /// digest -> entry path (layers) ...
    layers: HashMap<String, String>,
    /// ... or bytes in memory (the config).
    inline: HashMap<String, Vec<u8>>,
}

impl BlobSource for DaemonBlobs {
    fn open_blob(&self, digest: &Digest) -> io::Result<Box<dyn Read + Send>> {
        let d = digest.to_string();
        if let Some(b) = self.inline.get(&d) {
            return Ok(Box::new(io::Cursor::new(b.clone())));
        }
        let path = self
            .layers
            .get(&d)
            .ok_or_else(|| bad(format!("no layer {d} in the export")))?;
        self.shared
            .lock()
            .map_err(|_| bad("the export stream failed"))?
            .seek(path)?;
        Ok(Box::new(EntryReader {
            shared: self.shared.clone(),
        }))
    }

    fn describe(&self) -> String {
        let g = self.shared.lock();
        g.map(|s| format!("docker daemon {}", s.socket.display()))
            .unwrap_or_default()
    }
}

fn list(shared: &mut Shared) -> io::Result<Listing> {
    shared.connect()?;
    let s = shared.stream.as_mut().ok_or_else(|| bad("no stream"))?;
    let mut l = Listing {
        sizes: HashMap::new(),
        links: HashMap::new(),
        small: HashMap::new(),
    };
    while let Some(h) = s.next()? {
        if l.sizes.len() + l.links.len() >= MAX_ENTRIES {
            return Err(bad(format!(
                "the export has more than {MAX_ENTRIES} entries"
            )));
        }
        match h.kind {
            b'0' | 0 | b'7' => {
                let keep = h.size <= MAX_SMALL
                    && l.small.len() < MAX_KEPT
                    && (h.name == "manifest.json"
                        || h.name.ends_with(".json")
                        || h.name.starts_with("blobs/") && h.size <= 1 << 20);
                if keep {
                    let data = s.read_data(h.size)?;
                    s.left = 0;
                    l.small.insert(h.name.clone(), data);
                }
                l.sizes.insert(h.name, h.size);
            }
            b'1' | b'2' => {
                let target = if h.kind == b'1' {
                    norm(&h.link)
                } else {
                    match h.name.rsplit_once('/') {
                        Some((dir, _)) => norm(&format!("{dir}/{}", h.link)),
                        None => norm(&h.link),
                    }
                };
                l.links.insert(h.name, target);
            }
            _ => {}
        }
    }
    shared.stream = None;
    Ok(l)
}

/// `a/../b/layer.tar` -> `b/layer.tar`; links followed (bounded).
fn resolve(l: &Listing, p: &str) -> Option<String> {
    let mut cur = p.to_string();
    for _ in 0..8 {
        let mut parts: Vec<&str> = Vec::new();
        for c in cur.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    parts.pop()?;
                }
                x => parts.push(x),
            }
        }
        let n = parts.join("/");
        match l.links.get(&n) {
            Some(t) => cur = t.clone(),
            None => return l.sizes.contains_key(&n).then_some(n),
        }
    }
    None
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Entry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

/// The image config (from the first stream), its digest, and its diff_ids
/// (one per layer of the manifest entry).
fn read_config(l: &Listing, e: &Entry) -> Result<(Vec<u8>, String, Vec<String>), String> {
    let cpath = resolve(l, &e.config).ok_or_else(|| format!("no config {}", e.config))?;
    let config = l
        .small
        .get(&cpath)
        .ok_or_else(|| format!("the config {cpath} is too large"))?
        .clone();
    let cdigest = sha256_digest(&config);
    // Legacy names the config <hex>.json; OCI blobs/sha256/<hex>: the name is its digest.
    let named = cpath
        .trim_end_matches(".json")
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    if named.len() == 64 && format!("sha256:{named}") != cdigest {
        return Err(format!(
            "config digest mismatch: named sha256:{named}, got {cdigest}"
        ));
    }
    #[derive(serde::Deserialize)]
    struct Cfg {
        rootfs: Rootfs,
    }
    #[derive(serde::Deserialize)]
    struct Rootfs {
        diff_ids: Vec<String>,
    }
    let c: Cfg = serde_json::from_slice(&config)
        .map_err(|e| format!("config: {}", cause("image config", &e)))?;
    if c.rootfs.diff_ids.len() != e.layers.len() {
        return Err(format!(
            "{} diff_ids for {} layers",
            c.rootfs.diff_ids.len(),
            e.layers.len()
        ));
    }
    Ok((config, cdigest, c.rootfs.diff_ids))
}

/// Opens `docker-daemon:NAME[:TAG]` from the daemon at `socket`.
pub fn open(socket: PathBuf, name: &str, opts: &Options) -> Result<Image, String> {
    let mut shared = Shared {
        socket: socket.clone(),
        name: name.to_string(),
        deadline: std::time::Instant::now() + opts.limits.max_time,
        stream: None,
        streams: 0,
    };
    let l = list(&mut shared).map_err(|e| format!("docker daemon at {}: {e}", socket.display()))?;
    let err = |m: String| format!("docker daemon at {}: image {name}: {m}", socket.display());
    let manifest = l
        .small
        .get("manifest.json")
        .ok_or_else(|| err("the export has no manifest.json".into()))?;
    let entries: Vec<Entry> = serde_json::from_slice(manifest).map_err(|e| {
        err(format!(
            "manifest.json: {}",
            cause("docker-archive manifest", &e)
        ))
    })?;
    let e = match entries.as_slice() {
        [e] => e,
        _ => entries
            .iter()
            .find(|e| {
                e.repo_tags
                    .iter()
                    .flatten()
                    .any(|t| t == name || t.ends_with(&format!("/{name}")))
            })
            .ok_or_else(|| {
                err(format!(
                    "manifest.json lists {} images, none tagged {name}",
                    entries.len()
                ))
            })?,
    };
    let (config, cdigest, diff_ids) = read_config(&l, e).map_err(&err)?;
    let mut layers = HashMap::new();
    let mut descs = Vec::new();
    for (p, d) in e.layers.iter().zip(&diff_ids) {
        let real = resolve(&l, p).ok_or_else(|| err(format!("no layer {p}")))?;
        let size = l.sizes.get(&real).copied().unwrap_or(0);
        descs.push(serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": size}));
        layers.insert(d.clone(), real);
    }
    let m = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdigest, "size": config.len()},
        "layers": descs,
    }))
    .map_err(|e| err(e.to_string()))?;
    let md = sha256_digest(&m);
    let blobs = DaemonBlobs {
        shared: Arc::new(Mutex::new(shared)),
        layers,
        inline: [(cdigest, config)].into(),
    };
    let tag = e.repo_tags.as_ref().and_then(|t| t.first().cloned());
    Image::open_manifest(
        Box::new(blobs),
        Format::DockerDaemon,
        format!("docker-daemon:{name}"),
        tag.or(Some(name.to_string())),
        &m,
        &md,
        false,
        opts,
    )
    .map_err(|e| e.to_string())
}
