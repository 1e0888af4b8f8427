//! Reads a container image without running it or unpacking it to disk
//! (docs/interfaces.md, "`gpu-guard check`"): an OCI image layout
//! directory, a docker-archive tar (`docker save`) or an OCI archive tar.
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
//! Measured (tests/image_reader.rs `measure_passes`, debug build, one
//! 32 MiB gzip layer): header pass 0.85 s; content pass 0.02 s for a
//! library at the start of the layer, 0.99 s for one at its end. So the
//! worst case is about twice a single pass, only for layers that hold a
//! matched file.
//!
//! Every blob is checked against its digest while it streams (manifest and
//! config before they are parsed; layers at the end of each stream, so a
//! caller must discard what it computed when a call returns an error).
//! Budgets ([`Limits`]) bound uncompressed bytes, entries, time, JSON
//! sizes and tar extension headers; memory is the decoders' windows plus
//! the tree's metadata.

mod digest;
mod error;
mod layer;
mod readat;
pub mod registry_source;
pub mod scan;
mod source;
mod tree;

pub use digest::Digest;
pub use error::ImageError;
pub use readat::{scan_fatbin, FatbinScan, ReadAtBuf, MAX_READAT_BYTES};
pub use registry_source::BlobSource;
pub use tree::{normalize, ContentRef, Kind, Node, Tree};

use layer::{Budget, Flow, LayerRef};
use oci_spec::image::ImageConfiguration;
use serde::{Deserialize, Serialize};
use source::Source;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::path::Path;
use std::time::Duration;

/// Bounds on what reading one image may cost. Each call (`open`, `index`,
/// `read_files`) gets the full budget.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Uncompressed layer bytes streamed, all layers together.
    pub max_uncompressed_bytes: u64,
    /// Tar entries, all layers together.
    pub max_entries: u64,
    /// Wall-clock time.
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
            max_entries: 2_000_000,
            max_time: Duration::from_secs(600),
            // Real configs are a few KiB; 4 MiB allows long histories.
            max_json_bytes: 4 << 20,
            max_extension_header: 1 << 20,
            max_archive_entries: 100_000,
        }
    }
}

/// `os/arch[/variant]`, as `--platform` takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    pub fn parse(s: &str) -> Result<Platform, ImageError> {
        let parts: Vec<&str> = s.split('/').collect();
        if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
            return Err(ImageError::BadPlatform(s.to_string()));
        }
        Ok(Platform {
            os: parts[0].to_string(),
            architecture: parts[1].to_string(),
            variant: parts.get(2).map(|v| v.to_string()),
        })
    }

    fn matches(&self, os: &str, arch: &str, variant: Option<&str>) -> bool {
        self.os == os
            && self.architecture == arch
            && (self.variant.is_none() || variant.is_none() || self.variant.as_deref() == variant)
    }
}

impl Default for Platform {
    fn default() -> Platform {
        Platform {
            os: "linux".to_string(),
            architecture: "amd64".to_string(),
            variant: None,
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
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

// index.json and manifests (OCI and Docker media types share these
// fields). Own types rather than oci-spec's, so a bad digest gets our
// error, naming the referrer, before it becomes a path.
#[derive(Deserialize)]
pub(crate) struct Manifestish {
    #[serde(default)]
    manifests: Option<Vec<Desc>>,
    #[serde(default)]
    config: Option<Desc>,
    #[serde(default)]
    layers: Option<Vec<Desc>>,
}

#[derive(Clone, Deserialize)]
struct Desc {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default)]
    platform: Option<DescPlatform>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Clone, Deserialize)]
struct DescPlatform {
    os: String,
    architecture: String,
    #[serde(default)]
    variant: Option<String>,
}

impl Desc {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }

    fn names(&self) -> Vec<&str> {
        [
            "io.containerd.image.name",
            "org.opencontainers.image.ref.name",
        ]
        .iter()
        .filter_map(|k| self.annotation(k))
        .collect()
    }

    fn platform_string(&self) -> String {
        match &self.platform {
            Some(p) => match &p.variant {
                Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
                None => format!("{}/{}", p.os, p.architecture),
            },
            None => "unknown".to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

pub(crate) fn parse_json<T: for<'de> Deserialize<'de>>(
    what: &str,
    b: &[u8],
) -> Result<T, ImageError> {
    serde_json::from_slice(b).map_err(|e| ImageError::BadJson {
        what: what.to_string(),
        msg: e.to_string(),
    })
}

/// A normalized layout path, or the error naming who pointed outside.
fn layout_path(what: &str, p: &str) -> Result<String, ImageError> {
    match normalize(p) {
        Some(n) if !n.is_empty() => Ok(n),
        _ => Err(ImageError::PathOutside {
            what: what.to_string(),
            path: p.to_string(),
        }),
    }
}

/// An opened image: the config read and verified, the layers listed.
pub struct Image {
    source: Source,
    info: ImageInfo,
    config: ImageConfiguration,
    layers: Vec<LayerRef>,
    limits: Limits,
}

impl Image {
    /// Opens `path`, telling the format from what it holds.
    pub fn open(path: &Path, opts: &Options) -> Result<Image, ImageError> {
        let shown = path.display().to_string();
        let md = std::fs::metadata(path).map_err(ImageError::io(&shown))?;
        let (source, format) = if md.is_dir() {
            (Source::dir(path), Format::OciLayout)
        } else {
            let s = Source::archive(path, opts.limits.max_archive_entries)?;
            if s.has("index.json") && s.has("oci-layout") {
                (s, Format::OciArchive)
            } else {
                (s, Format::DockerArchive)
            }
        };
        match format {
            Format::DockerArchive if source.has("manifest.json") => {
                Image::open_docker(source, shown, opts)
            }
            Format::DockerArchive => Err(ImageError::NotAnImage(shown)),
            _ if !source.has("index.json") || !source.has("oci-layout") => {
                Err(ImageError::NotAnImage(shown))
            }
            _ => Image::open_oci(source, shown, format, opts),
        }
    }

    fn open_oci(
        source: Source,
        shown: String,
        format: Format,
        opts: &Options,
    ) -> Result<Image, ImageError> {
        let max = opts.limits.max_json_bytes;
        let layout = source.read_small("oci-layout", max)?;
        #[derive(Deserialize)]
        struct OciLayout {
            #[serde(rename = "imageLayoutVersion")]
            _version: String,
        }
        parse_json::<OciLayout>("oci-layout", &layout)?;
        let index: Manifestish = parse_json("index.json", &source.read_small("index.json", max)?)?;
        let mut manifests = index.manifests.unwrap_or_default();
        let mut reference = None;
        let mut depth = 0;
        let mut by_platform = false;
        let (manifest, manifest_digest) = loop {
            let what = if depth == 0 {
                "index.json"
            } else {
                "nested index"
            };
            let chosen = choose(what, &manifests, opts, depth == 0, &mut by_platform)?;
            if depth == 0 {
                reference = chosen.names().first().map(|s| s.to_string());
            }
            let (bytes, d) = read_desc(&source, &format!("{what} manifest"), &chosen, max)?;
            let m: Manifestish = parse_json(&format!("manifest {d}"), &bytes)?;
            match m.manifests {
                Some(inner) if m.config.is_none() => {
                    depth += 1;
                    if depth > 4 {
                        return Err(ImageError::BadJson {
                            what: "index.json".to_string(),
                            msg: "indexes nested more than 4 deep".to_string(),
                        });
                    }
                    manifests = inner;
                }
                _ => break (m, d),
            }
        };
        Image::from_manifest(
            source,
            shown,
            format,
            reference,
            manifest,
            manifest_digest,
            opts,
            by_platform,
        )
    }

    /// The config and layers of a chosen image manifest.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_manifest(
        source: Source,
        shown: String,
        format: Format,
        reference: Option<String>,
        manifest: Manifestish,
        manifest_digest: Digest,
        opts: &Options,
        by_platform: bool,
    ) -> Result<Image, ImageError> {
        let max = opts.limits.max_json_bytes;
        let mwhat = format!("manifest {manifest_digest}");
        let cdesc = manifest.config.ok_or_else(|| ImageError::BadJson {
            what: mwhat.clone(),
            msg: "no config".to_string(),
        })?;
        let (cbytes, cdigest) = read_desc(&source, "image config", &cdesc, max)?;
        let config = parse_config(&cbytes)?;
        let mut layers = Vec::new();
        for (i, l) in manifest.layers.unwrap_or_default().iter().enumerate() {
            let d = Digest::parse(&l.digest, &format!("{mwhat} layer {i}"))?;
            layers.push(LayerRef {
                path: d.blob_path(),
                digest: Some(d),
                size: Some(l.size),
                diff_id: None,
            });
        }
        Image::finish(
            source,
            shown,
            format,
            reference,
            Some(manifest_digest.to_string()),
            cdigest,
            config,
            layers,
            opts,
            by_platform,
        )
    }

    fn open_docker(source: Source, shown: String, opts: &Options) -> Result<Image, ImageError> {
        let max = opts.limits.max_json_bytes;
        let list: Vec<DockerManifest> =
            parse_json("manifest.json", &source.read_small("manifest.json", max)?)?;
        let tags = |m: &DockerManifest| m.repo_tags.clone().unwrap_or_default();
        let chosen: Vec<&DockerManifest> = match &opts.reference {
            Some(r) => list
                .iter()
                .filter(|m| tags(m).iter().any(|t| t == r))
                .collect(),
            None => list.iter().collect(),
        };
        let m = match chosen.as_slice() {
            [] if opts.reference.is_some() => {
                return Err(ImageError::NoSuchReference(
                    opts.reference.clone().unwrap_or_default(),
                ))
            }
            [] => return Err(ImageError::Missing("image in manifest.json".to_string())),
            [m] => *m,
            many => {
                let names: Vec<String> = many.iter().map(|m| tags(m).join(" ")).collect();
                return Err(ImageError::Ambiguous(names.join(", ")));
            }
        };
        let cpath = layout_path("manifest.json config", &m.config)?;
        let cbytes = source.read_small(&cpath, max)?;
        let cdigest = Digest::of_bytes(&cbytes);
        if let Some(expected) = Digest::from_path(&cpath) {
            digest::check("image config", &expected, &cdigest)?;
        }
        let config = parse_config(&cbytes)?;
        let diff_ids = config.rootfs().diff_ids();
        if diff_ids.len() != m.layers.len() {
            return Err(ImageError::BadJson {
                what: "image config".to_string(),
                msg: format!("{} diff_ids for {} layers", diff_ids.len(), m.layers.len()),
            });
        }
        let mut layers = Vec::new();
        for (i, (l, id)) in m.layers.iter().zip(diff_ids).enumerate() {
            let path = layout_path(&format!("manifest.json layer {i}"), l)?;
            layers.push(LayerRef {
                digest: Digest::from_path(&path),
                path,
                size: None,
                diff_id: Some(Digest::parse(id, &format!("image config diff_id {i}"))?),
            });
        }
        let reference = tags(m).first().cloned();
        Image::finish(
            source,
            shown,
            Format::DockerArchive,
            reference,
            None,
            cdigest,
            config,
            layers,
            opts,
            false,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        source: Source,
        path: String,
        format: Format,
        reference: Option<String>,
        manifest_digest: Option<String>,
        config_digest: Digest,
        config: ImageConfiguration,
        layers: Vec<LayerRef>,
        opts: &Options,
        by_platform: bool,
    ) -> Result<Image, ImageError> {
        let os = config.os().to_string();
        let arch = config.architecture().to_string();
        let variant = config.variant().clone();
        let mut platform = format!("{os}/{arch}");
        if let Some(v) = &variant {
            platform = format!("{platform}/{v}");
        }
        // A single-platform image is still refused for another platform.
        if !by_platform && !opts.platform.matches(&os, &arch, variant.as_deref()) {
            return Err(ImageError::Platform {
                wanted: opts.platform.to_string(),
                available: platform,
            });
        }
        Ok(Image {
            info: ImageInfo {
                path,
                format,
                reference,
                manifest_digest,
                config_digest: config_digest.to_string(),
                platform,
                layers: layers.len(),
            },
            source,
            config,
            layers,
            limits: opts.limits.clone(),
        })
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
        let budget = Budget::new(&self.limits);
        let mut tree = Tree::default();
        for (n, l) in self.layers.iter().enumerate() {
            let what = format!("layer {n} ({})", l.path);
            let raw = self.source.open(&l.path)?;
            let mut entries = Vec::new();
            layer::stream(n, l, raw.reader, &budget, &mut |e, i| {
                entries.push(layer::raw_entry(e, i, &what)?);
                Ok(Flow::Continue)
            })?;
            tree.apply(n, &entries)?;
        }
        Ok(tree)
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
        let budget = Budget::new(&self.limits);
        let mut tree = Tree::default();
        for (n, l) in self.layers.iter().enumerate() {
            let what = format!("layer {n} ({})", l.path);
            let raw = self.source.open(&l.path)?;
            let mut entries = Vec::new();
            layer::stream(n, l, raw.reader, &budget, &mut |e, i| {
                let r = layer::raw_entry(e, i, &what)?;
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
        for (p, node) in tree.iter() {
            if !matcher(p) {
                continue;
            }
            let (real, node) = match node.kind {
                Kind::File => (p.to_string(), node),
                Kind::Symlink(_) => {
                    let Ok(r) = tree.resolve(p) else { continue };
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
            if f.path != p && !f.aliases.iter().any(|a| a == p) {
                f.aliases.push(p.to_string());
            }
        }
        let mut by_layer: BTreeMap<usize, BTreeMap<u64, ImageFile>> = BTreeMap::new();
        for (c, f) in wanted {
            by_layer.entry(c.layer).or_default().insert(c.entry, f);
        }
        let budget = Budget::new(&self.limits);
        let mut stats = ReadStats::default();
        for (n, mut files) in by_layer {
            let l = &self.layers[n];
            let raw = self.source.open(&l.path)?;
            stats.layers_read += 1;
            let what = format!("layer {n} ({})", l.path);
            layer::stream(n, l, raw.reader, &budget, &mut |e, i| {
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

    /// Both passes: the tree, and `visit` called for the matched files.
    pub fn visit_files(
        &self,
        matcher: &dyn Fn(&str) -> bool,
        visit: &mut dyn FnMut(&ImageFile, &mut dyn Read) -> io::Result<()>,
    ) -> Result<(Tree, ReadStats), ImageError> {
        let tree = self.index()?;
        let stats = self.read_files(&tree, matcher, visit)?;
        Ok((tree, stats))
    }
}

fn parse_config(b: &[u8]) -> Result<ImageConfiguration, ImageError> {
    ImageConfiguration::from_reader(b).map_err(|e| ImageError::BadJson {
        what: "image config".to_string(),
        msg: e.to_string(),
    })
}

/// Reads a descriptor's blob, bounded, and checks its size and digest.
fn read_desc(
    source: &Source,
    what: &str,
    d: &Desc,
    max: u64,
) -> Result<(Vec<u8>, Digest), ImageError> {
    let digest = Digest::parse(&d.digest, what)?;
    if d.size > max {
        return Err(ImageError::TooLarge {
            what: what.to_string(),
            limit: max,
        });
    }
    let bytes = source.read_small(&digest.blob_path(), max)?;
    let got = Digest::of_bytes(&bytes);
    if bytes.len() as u64 != d.size && got == digest {
        // Right bytes, wrong size in the descriptor: still refused.
        return Err(ImageError::BadJson {
            what: what.to_string(),
            msg: format!("{} bytes, the descriptor says {}", bytes.len(), d.size),
        });
    }
    digest::check(what, &digest, &got)?;
    Ok((bytes, digest))
}

/// Picks one descriptor of an index for the platform (and reference).
fn choose(
    what: &str,
    all: &[Desc],
    opts: &Options,
    top: bool,
    by_platform: &mut bool,
) -> Result<Desc, ImageError> {
    // Build attestations (buildx) sit in the index as unknown/unknown images.
    let mut cands: Vec<&Desc> = all
        .iter()
        .filter(|d| d.annotation("vnd.docker.reference.type") != Some("attestation-manifest"))
        .collect();
    if top {
        if let Some(r) = &opts.reference {
            cands.retain(|d| d.names().contains(&r.as_str()));
            if cands.is_empty() {
                return Err(ImageError::NoSuchReference(r.clone()));
            }
        }
    }
    let p = &opts.platform;
    let matching: Vec<&Desc> = cands
        .iter()
        .copied()
        .filter(|d| {
            d.platform
                .as_ref()
                .is_some_and(|x| p.matches(&x.os, &x.architecture, x.variant.as_deref()))
        })
        .collect();
    let (pick, by_plat) = if !matching.is_empty() {
        (matching, true)
    } else {
        let unplatformed: Vec<&Desc> = cands
            .iter()
            .copied()
            .filter(|d| d.platform.is_none())
            .collect();
        if unplatformed.is_empty() {
            let available: Vec<String> = cands.iter().map(|d| d.platform_string()).collect();
            if available.is_empty() {
                return Err(ImageError::Missing(format!("manifest in {what}")));
            }
            return Err(ImageError::Platform {
                wanted: p.to_string(),
                available: available.join(", "),
            });
        }
        (unplatformed, false)
    };
    if top && opts.reference.is_none() {
        let mut names: Vec<&str> = pick
            .iter()
            .filter_map(|d| d.names().first().copied())
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.len() > 1 {
            return Err(ImageError::Ambiguous(names.join(", ")));
        }
    }
    *by_platform = *by_platform || by_plat;
    // The media type says index or manifest; the blob's content decides.
    let _ = &pick[0].media_type;
    Ok(pick[0].clone())
}
