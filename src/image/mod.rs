//! Reads a container image without running it or unpacking it to disk
//! (`gpu-guard check --image`, docs/before-scheduling.md):
//! an OCI image layout directory, a docker-archive tar (`docker save`) or
//! an OCI archive tar.
//!
//! - [`Image::open`] finds the manifest (picking a platform from an index),
//!   reads and verifies the config: env, labels, digests.
//! - [`Image::index`] is the header pass: every layer is streamed once,
//!   entry headers only (contents skipped), and the whiteouts applied in
//!   layer order give the final [`Tree`]: which layer's entry each path
//!   comes from, and symlinks to resolve ([`Tree::resolve`]).
//! - [`Image::read_files`] is the content pass: for the final paths a
//!   matcher picks, only the layers holding a winner are streamed again,
//!   each up to its last winner, and each winner's bytes are handed to the
//!   caller as a stream.
//!
//! Why two passes: a layer is a compressed stream, so a later layer can
//! replace or delete a file only after the earlier one has streamed by.
//! Delivering contents in the first pass would hand over files that a
//! later layer deletes, and a hard link's content comes earlier in its
//! layer than the link. The second pass costs a second decompression of
//! only the layers that hold matched files, and only up to the last match;
//! the blob's tail is hashed (to verify its digest) without being
//! decompressed.
//! Measured (debug build, one 32 MiB gzip layer; integration/bench-image.sh
//! times whole reads): header pass 0.85 s; content pass 0.02 s for a
//! library at the start of the layer, 0.99 s for one at its end. So the
//! worst case is about twice a single pass, only for layers that hold a
//! matched file.
//!
//! Every blob is checked against its digest while it streams (manifest and
//! config before they are parsed; layers at the end of each stream, so a
//! caller must discard what it computed when a call returns an error).
//! One budget ([`Limits`], `budget.rs`), from `open` to the last pass,
//! bounds decompressed bytes and their ratio to the compressed ones,
//! entries, entry-name bytes (each name also at most PATH_MAX), time, JSON
//! sizes and tar extension headers (of the layers and of the outer
//! archive); memory is the decoders' windows plus the tree's metadata.

pub mod amd;
mod budget;
mod decoder;
mod digest;
mod error;
mod layer;
pub mod libraries;
mod open;
mod platform;
mod readat;
pub mod reference;
pub mod registry_source;
pub mod scan;
mod source;
pub mod stream_elf;
mod tar_guard;
mod tree;

pub use digest::Digest;
pub use error::ImageError;
pub use platform::Platform;
pub use readat::{scan_fatbin, FatbinScan};
pub(crate) use readat::{ReadAtBuf, MAX_READAT_BYTES};
pub use source::BlobSource;
pub use tree::{normalize, ContentRef, Kind, Node, Tree};

use budget::Budget;
use layer::{Flow, LayerRef};
use oci_spec::image::ImageConfiguration;
use serde::Serialize;
use source::Source;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::path::Path;
use std::time::Duration;

/// Bounds on what reading one image may cost: one budget from
/// [`Image::open`] on, shared by every pass over the image (`index`,
/// `index_with`, `read_files`), so the whole check stays within them.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Uncompressed layer bytes streamed, all layers and passes together.
    pub max_uncompressed_bytes: u64,
    /// Past this many decompressed bytes, the layers may decompress to at
    /// most `max_expansion` times the compressed bytes read (a bomb stops
    /// here rather than at `max_uncompressed_bytes`).
    pub expansion_allowance: u64,
    pub max_expansion: u64,
    /// Tar entries of the tree, all layers together.
    pub max_entries: u64,
    /// Bytes of entry paths and link targets kept, the outer archive's and
    /// all layers' together (each one also at most PATH_MAX).
    pub max_path_bytes: u64,
    /// Wall-clock time, from `open` to the end of the last pass.
    pub max_time: Duration,
    /// index.json, manifest.json, a manifest or the config.
    pub max_json_bytes: u64,
    /// A GNU long name/link or PAX header inside a layer.
    pub max_extension_header: u64,
    /// Entries of a docker-archive or OCI archive tar (the outer tar).
    pub max_archive_entries: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            // The largest CUDA images (cudnn devel) are about 20 GB unpacked.
            max_uncompressed_bytes: 64 << 30,
            expansion_allowance: 1 << 30,
            max_expansion: 100,
            max_entries: 2_000_000,
            // Real images keep tens of MB of names (500k paths of ~100
            // bytes); each is held about twice while a layer is applied.
            max_path_bytes: 128 << 20,
            max_time: Duration::from_secs(600),
            // Real configs are a few KiB; 4 MiB allows long histories.
            max_json_bytes: 4 << 20,
            max_extension_header: 1 << 20,
            max_archive_entries: 100_000,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Picked from a multi-platform index; default linux/amd64.
    pub platform: Platform,
    /// Which image of an archive or layout holding several: a RepoTag
    /// (docker-archive) or a `org.opencontainers.image.ref.name` /
    /// `io.containerd.image.name` annotation (OCI).
    pub reference: Option<String>,
    /// docker-archive `@N` (containers-transports(5)): the N-th image of
    /// `manifest.json`, from 0.
    pub source_index: Option<usize>,
    /// The format the caller named (a transport, [`reference::ImageRef`]);
    /// None: told from the content.
    pub format: Option<Format>,
    pub limits: Limits,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    OciLayout,
    OciArchive,
    DockerArchive,
    /// An OCI distribution registry (`docker://...`).
    Registry,
    /// The docker daemon's image export (`docker-daemon:...`).
    DockerDaemon,
}

/// What was read, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct ImageInfo {
    pub path: String,
    pub format: Format,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The manifest's digest (OCI formats; docker-archive has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest_digest: Option<String>,
    pub config_digest: String,
    /// `os/arch[/variant]` from the config.
    pub platform: String,
    pub layers: usize,
}

/// A file handed to [`Image::read_files`]' visitor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageFile {
    /// The final path of the regular file (normalized, `usr/lib/x.so`).
    pub path: String,
    /// Other matched paths with the same content: hard links, and
    /// symlinks that resolve to this file.
    pub aliases: Vec<String>,
    pub size: u64,
    pub mode: u32,
    /// The layer the content is read from (0 = bottom).
    pub layer: usize,
}

/// What [`Image::read_files`] did, to measure the content pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    pub files: usize,
    /// Layers streamed a second time (those holding a winner).
    pub layers_read: usize,
}

/// An opened image: the config read and verified, the layers listed.
pub struct Image {
    source: Source,
    info: ImageInfo,
    config: ImageConfiguration,
    layers: Vec<LayerRef>,
    /// Spent by every pass from `open` on.
    budget: Budget,
}

impl Image {
    /// Opens `path`, telling the format from what it holds. The budget of
    /// `opts.limits` starts here and covers every pass after.
    pub fn open(path: &Path, opts: &Options) -> Result<Image, ImageError> {
        let budget = Budget::new(&opts.limits);
        let p = open::open(path, opts, &budget)?;
        Ok(Image {
            source: p.source,
            info: p.info,
            config: p.config,
            layers: p.layers,
            budget,
        })
    }

    /// The image's deadline, for work on what it gave (a tree's paths).
    pub(crate) fn check_time(&self) -> Result<(), ImageError> {
        self.budget.deadline().check()
    }

    pub fn info(&self) -> &ImageInfo {
        &self.info
    }

    pub fn config(&self) -> &ImageConfiguration {
        &self.config
    }

    /// The config's Env (`KEY=value` strings), empty when it has none.
    pub fn env(&self) -> Vec<String> {
        self.config
            .config()
            .as_ref()
            .and_then(|c| c.env().clone())
            .unwrap_or_default()
    }

    /// The config's Labels.
    pub fn labels(&self) -> HashMap<String, String> {
        self.config
            .config()
            .as_ref()
            .and_then(|c| c.labels().clone())
            .unwrap_or_default()
    }

    /// The header pass: the final file tree, every layer streamed once.
    pub fn index(&self) -> Result<Tree, ImageError> {
        self.index_with(&|_| false, &mut |_, _, _| Ok(()))
    }

    /// The header pass that also hands over, as they stream by, the regular
    /// files whose own entry path `matcher` accepts, keyed by where their
    /// content is ([`ContentRef`]). Speculative: a later layer may delete
    /// or replace such a file, so the caller keeps only what the final
    /// tree still points at, and reads the rest (hard links, files matched
    /// only through a symlink) with [`Image::read_files`]. One
    /// decompression of every layer instead of two for the layers holding
    /// libraries.
    pub fn index_with(
        &self,
        matcher: &dyn Fn(&str) -> bool,
        visit: &mut dyn FnMut(ContentRef, &ImageFile, &mut dyn Read) -> io::Result<()>,
    ) -> Result<Tree, ImageError> {
        let budget = &self.budget;
        let mut tree = Tree::with_deadline(budget.deadline());
        for (n, l) in self.layers.iter().enumerate() {
            let what = format!("layer {n} ({})", l.path);
            let raw = self.source.open(&l.path)?;
            let mut entries = Vec::new();
            layer::stream(n, l, raw.reader, budget, &mut |e, i| {
                budget.take_entry()?;
                let r = layer::raw_entry(e, i, &what, budget)?;
                if matches!(r.kind, tree::RawKind::File) && !r.path.is_empty() && matcher(&r.path) {
                    let f = ImageFile {
                        path: r.path.clone(),
                        aliases: Vec::new(),
                        size: r.size,
                        mode: r.mode,
                        layer: n,
                    };
                    let c = ContentRef { layer: n, entry: i };
                    visit(c, &f, e).map_err(|source| ImageError::Corrupt {
                        what: format!("{what}: {}", f.path),
                        source,
                    })?;
                }
                entries.push(r);
                Ok(Flow::Continue)
            })?;
            tree.apply(n, &entries)?;
        }
        Ok(tree)
    }

    /// The content pass: for every final path `matcher` accepts (a regular
    /// file, or a symlink resolving to one), calls `visit` once per distinct
    /// file with a stream of its bytes. `tree` must come from
    /// [`Image::index`] on this image. An error `visit` returns ends the call.
    pub fn read_files(
        &self,
        tree: &Tree,
        matcher: &dyn Fn(&str) -> bool,
        visit: &mut dyn FnMut(&ImageFile, &mut dyn Read) -> io::Result<()>,
    ) -> Result<ReadStats, ImageError> {
        let mut wanted: BTreeMap<ContentRef, ImageFile> = BTreeMap::new();
        for (k, (p, node)) in tree.iter().enumerate() {
            if k % 1024 == 0 {
                self.check_time()?;
            }
            if !matcher(p) {
                continue;
            }
            let (real, node) = match node.kind {
                Kind::File => (p.to_string(), node),
                Kind::Symlink(_) => {
                    let r = match tree.resolve(p) {
                        Ok(r) => r,
                        Err(e) if e.is_budget() => return Err(e),
                        // A loop: nothing to read there.
                        Err(_) => continue,
                    };
                    match tree.get(&r) {
                        Some(n) if n.kind == Kind::File => (r, n),
                        _ => continue,
                    }
                }
                _ => continue,
            };
            let Some(c) = node.content else { continue };
            let f = wanted.entry(c).or_insert_with(|| ImageFile {
                path: real.clone(),
                aliases: Vec::new(),
                size: node.size,
                mode: node.mode,
                layer: c.layer,
            });
            // Each final path comes once: no alias repeats.
            if f.path != p {
                f.aliases.push(p.to_string());
            }
        }
        let mut by_layer: BTreeMap<usize, BTreeMap<u64, ImageFile>> = BTreeMap::new();
        for (c, f) in wanted {
            by_layer.entry(c.layer).or_default().insert(c.entry, f);
        }
        let budget = &self.budget;
        let mut stats = ReadStats::default();
        for (n, mut files) in by_layer {
            let l = &self.layers[n];
            let raw = self.source.open(&l.path)?;
            stats.layers_read += 1;
            let what = format!("layer {n} ({})", l.path);
            layer::stream(n, l, raw.reader, budget, &mut |e, i| {
                if let Some(f) = files.remove(&i) {
                    stats.files += 1;
                    visit(&f, e).map_err(|source| ImageError::Corrupt {
                        what: format!("{what}: {}", f.path),
                        source,
                    })?;
                }
                Ok(if files.is_empty() {
                    Flow::Stop
                } else {
                    Flow::Continue
                })
            })?;
        }
        Ok(stats)
    }
}
