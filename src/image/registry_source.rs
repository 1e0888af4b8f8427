//! The seam for images that are not files: a registry (`docker://...`),
//! whose manifest the caller has already fetched and verified, and whose
//! blobs are fetched by digest as streams. The image reader then reads the
//! config and layers exactly as it reads an OCI layout's, verifying every
//! digest and size itself while the bytes stream, and writes nothing.
//! The HTTP side lives outside this crate (crates/registry), so the hook
//! and the runtime wrapper never link it.

use super::budget::Budget;
use super::digest::{self, Digest};
use super::open::{self, parse_json, Manifestish};
use super::source::{BlobSource, Source};
use super::{Format, Image, ImageError, Options};

impl Image {
    /// An image whose manifest was fetched and verified by the caller (a
    /// registry's); `blobs` gives the config and layers. `by_platform`: the
    /// manifest was picked from an index for `opts.platform` (otherwise the
    /// config's platform must match it). `format` is [`Format::Registry`]
    /// or [`Format::DockerDaemon`]. The budget of `opts.limits` starts here.
    #[allow(clippy::too_many_arguments)]
    pub fn open_manifest(
        blobs: Box<dyn BlobSource>,
        format: Format,
        shown: String,
        reference: Option<String>,
        manifest: &[u8],
        manifest_digest: &str,
        by_platform: bool,
        opts: &Options,
    ) -> Result<Image, ImageError> {
        let d = Digest::parse(manifest_digest, "manifest")?;
        digest::check("manifest", &d, &Digest::of_bytes(manifest))?;
        let m: Manifestish = parse_json(&format!("manifest {d}"), manifest)?;
        if m.manifests.is_some() && m.config.is_none() {
            return Err(ImageError::BadJson {
                what: format!("manifest {d}"),
                msg: "an index, not an image manifest".to_string(),
            });
        }
        let budget = Budget::new(&opts.limits);
        let p = open::from_manifest(
            Source::Remote(blobs),
            shown,
            format,
            reference,
            m,
            d,
            opts,
            by_platform,
        )?;
        Ok(Image {
            source: p.source,
            info: p.info,
            config: p.config,
            layers: p.layers,
            budget,
        })
    }
}
