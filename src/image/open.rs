//! Finds what an image holds before any layer is read: the format (an OCI
//! layout directory, an OCI archive or a docker-archive tar), the manifest
//! (an index's entry for the platform and reference), the config, checked
//! against its digest, and the layers listed (OCI image-spec
//! image-layout.md, image-index.md, manifest.md; docker's `docker save`
//! format, moby image/tarexport).

use super::budget::Budget;
use super::digest::{self, Digest};
use super::layer::LayerRef;
use super::reference::normalize_docker;
use super::source::Source;
use super::tree::normalize;
use super::{Format, ImageError, ImageInfo, Options};
use oci_spec::image::ImageConfiguration;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// An opened image: where its files are, what it is, its config and layers.
pub(super) struct Parts {
    pub source: Source,
    pub info: ImageInfo,
    pub config: ImageConfiguration,
    pub layers: Vec<LayerRef>,
}

/// What a format's reader found, before the platform is checked.
struct Found {
    source: Source,
    path: String,
    format: Format,
    reference: Option<String>,
    manifest_digest: Option<String>,
    config_digest: Digest,
    config: ImageConfiguration,
    layers: Vec<LayerRef>,
}

/// Opens `path`, telling the format from what it holds.
pub(super) fn open(path: &Path, opts: &Options, budget: &Budget) -> Result<Parts, ImageError> {
    let shown = path.display().to_string();
    let md = std::fs::metadata(path).map_err(ImageError::io(&shown))?;
    let (source, format) = if md.is_dir() {
        (Source::dir(path), Format::OciLayout)
    } else {
        let s = Source::archive(path, budget)?;
        if s.has("index.json") && s.has("oci-layout") {
            (s, Format::OciArchive)
        } else {
            (s, Format::DockerArchive)
        }
    };
    let recognised = match format {
        Format::DockerArchive => source.has("manifest.json"),
        _ => source.has("index.json") && source.has("oci-layout"),
    };
    if let Some(wanted) = opts.format.filter(|w| *w != format && recognised) {
        return Err(wrong_format(shown, wanted, format));
    }
    match format {
        Format::DockerArchive if source.has("manifest.json") => open_docker(source, shown, opts),
        Format::DockerArchive => Err(ImageError::NotAnImage(shown)),
        _ if !source.has("index.json") || !source.has("oci-layout") => {
            Err(ImageError::NotAnImage(shown))
        }
        _ => open_oci(source, shown, format, opts),
    }
}

fn open_oci(
    source: Source,
    shown: String,
    format: Format,
    opts: &Options,
) -> Result<Parts, ImageError> {
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
    from_manifest(
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

/// The config and layers of a chosen image manifest (an OCI layout's, or
/// one a registry served: `registry_source`).
#[allow(clippy::too_many_arguments)]
pub(super) fn from_manifest(
    source: Source,
    shown: String,
    format: Format,
    reference: Option<String>,
    manifest: Manifestish,
    manifest_digest: Digest,
    opts: &Options,
    by_platform: bool,
) -> Result<Parts, ImageError> {
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
    finish(
        Found {
            source,
            path: shown,
            format,
            reference,
            manifest_digest: Some(manifest_digest.to_string()),
            config_digest: cdigest,
            config,
            layers,
        },
        opts,
        by_platform,
    )
}

fn open_docker(source: Source, shown: String, opts: &Options) -> Result<Parts, ImageError> {
    let max = opts.limits.max_json_bytes;
    let list: Vec<DockerManifest> =
        parse_json("manifest.json", &source.read_small("manifest.json", max)?)?;
    let m = choose_docker(&list, opts)?;
    let tags = |m: &DockerManifest| m.repo_tags.clone().unwrap_or_default();
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
    finish(
        Found {
            source,
            path: shown,
            format: Format::DockerArchive,
            reference,
            manifest_digest: None,
            config_digest: cdigest,
            config,
            layers,
        },
        opts,
        false,
    )
}

/// The image of a docker-archive's `manifest.json` that `opts` names.
fn choose_docker<'a>(
    list: &'a [DockerManifest],
    opts: &Options,
) -> Result<&'a DockerManifest, ImageError> {
    let tags = |m: &DockerManifest| m.repo_tags.clone().unwrap_or_default();
    // A tag is compared as docker normalizes both (`busybox` is
    // `docker.io/library/busybox:latest`), as containers/image's
    // docker-archive reader does.
    let chosen: Vec<&DockerManifest> = match (&opts.reference, opts.source_index) {
        (_, Some(index)) => match list.get(index) {
            Some(m) => vec![m],
            None => {
                return Err(ImageError::NoSuchIndex {
                    index,
                    count: list.len(),
                })
            }
        },
        (Some(r), None) => {
            let want = normalize_docker(r);
            list.iter()
                .filter(|m| {
                    tags(m)
                        .iter()
                        .any(|t| t == r || normalize_docker(t) == want)
                })
                .collect()
        }
        (None, None) => list.iter().collect(),
    };
    let m: &DockerManifest = match chosen.as_slice() {
        [] if opts.reference.is_some() => {
            return Err(ImageError::NoSuchReference(
                opts.reference.clone().unwrap_or_default(),
            ))
        }
        [] => return Err(ImageError::Missing("image in manifest.json".to_string())),
        [m] => m,
        many => {
            let names: Vec<String> = many.iter().map(|m| tags(m).join(" ")).collect();
            return Err(ImageError::Ambiguous(names.join(", ")));
        }
    };
    Ok(m)
}

/// Checks the platform of what was found and describes it.
fn finish(f: Found, opts: &Options, by_platform: bool) -> Result<Parts, ImageError> {
    let config = f.config;
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
    Ok(Parts {
        info: ImageInfo {
            path: f.path,
            format: f.format,
            reference: f.reference,
            manifest_digest: f.manifest_digest,
            config_digest: f.config_digest.to_string(),
            platform,
            layers: f.layers.len(),
        },
        source: f.source,
        config,
        layers: f.layers,
    })
}

// index.json and manifests (OCI and Docker media types share these
// fields). Own types rather than oci-spec's, so a bad digest gets our
// error, naming the referrer, before it becomes a path.
#[derive(Deserialize)]
pub(super) struct Manifestish {
    #[serde(default)]
    pub manifests: Option<Vec<Desc>>,
    #[serde(default)]
    pub config: Option<Desc>,
    #[serde(default)]
    layers: Option<Vec<Desc>>,
}

#[derive(Clone, Deserialize)]
pub(super) struct Desc {
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

pub(super) fn parse_json<T: for<'de> Deserialize<'de>>(
    what: &str,
    b: &[u8],
) -> Result<T, ImageError> {
    serde_json::from_slice(b).map_err(|e| ImageError::BadJson {
        what: what.to_string(),
        msg: e.to_string(),
    })
}

/// The transport named one format, the content is another.
fn wrong_format(path: String, wanted: Format, found: Format) -> ImageError {
    let name = |f: Format| match f {
        Format::OciLayout => "an OCI image layout directory",
        Format::OciArchive => "an OCI archive",
        Format::DockerArchive => "a docker-archive",
        Format::Registry => "a registry image",
        Format::DockerDaemon => "a docker daemon's image",
    };
    let hint = match found {
        Format::OciLayout => "oci:PATH",
        Format::OciArchive => "oci-archive:PATH",
        Format::DockerArchive => "docker-archive:PATH",
        Format::Registry => "docker://NAME",
        Format::DockerDaemon => "docker-daemon:NAME",
    };
    ImageError::WrongFormat {
        path,
        wanted: name(wanted),
        found: name(found),
        hint,
    }
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

/// The image config through serde_json directly: oci-spec's `from_reader`
/// wraps every decode error as `serde failed`, which says nothing a person
/// can act on; serde_json's names the field and the position.
fn parse_config(b: &[u8]) -> Result<ImageConfiguration, ImageError> {
    parse_json("image config", b)
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
