//! Reading what a registry image needs: its attestation when the registry
//! has one for exactly that manifest digest (no layer read), else the
//! config and layers, streamed through gpu-guard's image reader
//! ([`gpu_guard::image::Image::open_manifest`]) and never written to disk.

use crate::needs::{self, Needs};
use gpu_guard::core::policy::{Config, Enforcement};
use gpu_guard::image::{BlobSource, Digest, Image, Limits, Options};
use gpu_guard_registry::{Client, Options as ClientOptions, Platform, Reference, Resolved};
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// How to reach registries.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// `HOST[:PORT]` read over plain HTTP.
    pub plain_http: Vec<String>,
    /// Every registry over plain HTTP (`check --plain-http`).
    pub all_plain_http: bool,
    pub ca_files: Vec<PathBuf>,
    /// Credentials files searched in order.
    pub cred_files: Vec<PathBuf>,
}

impl Access {
    /// A client for the reference's registry; every request ends by
    /// `deadline` (one image read), on top of the client's own timeouts.
    pub fn client(
        &self,
        r: &Reference,
        deadline: Option<Instant>,
    ) -> Result<Client, gpu_guard_registry::RegistryError> {
        let opts = ClientOptions {
            plain_http: self.all_plain_http || self.plain_http.iter().any(|h| h == &r.registry),
            ca_files: self.ca_files.clone(),
            deadline,
            ..ClientOptions::default()
        };
        gpu_guard_registry::client_for(r, opts, &self.cred_files)
    }
}

/// Stops a read from another thread (the webhook's reads, when their
/// review is answered and they may not go on in the background).
pub trait Stop: Send + Sync {
    fn stopped(&self) -> bool;
}

/// A read nobody stops (`check`).
pub struct NeverStop;

impl Stop for NeverStop {
    fn stopped(&self) -> bool {
        false
    }
}

/// A blob stream that ends with an error once its read is stopped or its
/// deadline passed (a socket read in progress is interrupted by the
/// client's [`gpu_guard_registry::Cancel`]; this catches the next one).
struct Guarded {
    inner: Box<dyn Read + Send>,
    stop: Arc<dyn Stop>,
    deadline: Option<Instant>,
}

impl Read for Guarded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.stop.stopped() {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the read was stopped",
            ));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the read's deadline passed",
            ));
        }
        self.inner.read(buf)
    }
}

/// Layers and config of one repository, unverified here: the image reader
/// checks every digest and size as it reads.
struct RegistryBlobs {
    client: Arc<Client>,
    repo: String,
    /// The reader's own deadline also bounds a stalled registry.
    deadline: Option<Instant>,
    stop: Arc<dyn Stop>,
}

impl BlobSource for RegistryBlobs {
    fn open_blob(&self, digest: &Digest) -> io::Result<Box<dyn Read + Send>> {
        if self.stop.stopped() {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the read was stopped",
            ));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the deadline passed",
            ));
        }
        let inner = self
            .client
            .blob(&self.repo, &digest.to_string(), None, false)
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Box::new(Guarded {
            inner,
            stop: self.stop.clone(),
            deadline: self.deadline,
        }))
    }

    fn describe(&self) -> String {
        format!("registry {}", self.client.name())
    }
}

/// Where the needs came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The attestation at this artifact manifest digest.
    Attestation(String),
    /// The config and layers, read now.
    Layers,
}

/// Opens the resolved image for reading its config and layers.
pub fn open_image(
    client: &Arc<Client>,
    r: &Reference,
    res: &Resolved,
    platform: &str,
    limits: Limits,
    (deadline, stop): (Option<Instant>, Arc<dyn Stop>),
) -> Result<Image, String> {
    let blobs = RegistryBlobs {
        client: client.clone(),
        repo: r.repository.clone(),
        deadline,
        stop,
    };
    let opts = Options {
        platform: gpu_guard::image::Platform::parse(platform).map_err(|e| e.to_string())?,
        reference: None,
        limits,
        ..Default::default()
    };
    let by_platform = res.top_digest != res.manifest.digest;
    Image::open_manifest(
        Box::new(blobs),
        gpu_guard::image::Format::Registry,
        format!("docker://{r}"),
        Some(r.to_string()),
        &res.manifest.bytes,
        &res.manifest.digest,
        by_platform,
        &opts,
    )
    .map_err(|e| e.to_string())
}

/// The image's needs from its layers (the scans `check --image` runs, in
/// one pass over the layers; the kernel-image scan even when `off`, as the
/// needs hold what it found).
pub fn needs_from_image(img: &Image, cfg: &Config) -> Result<Needs, String> {
    let (scan, libraries) = if cfg.libraries.severity == Enforcement::Off {
        let scan =
            gpu_guard::image::scan::scan(img, &cfg.kernel_image).map_err(|e| e.to_string())?;
        (scan, None)
    } else {
        let container = gpu_guard::commands::image_check::image_container(img, &[]);
        let start = gpu_guard::commands::image_check::start_env(img, &container);
        let mut tap = gpu_guard::image::libraries::LibraryTap::with_limits(&cfg.libraries);
        let (scan, tree) =
            gpu_guard::image::scan::scan_with(img, &cfg.kernel_image, Some(&mut tap))
                .map_err(|e| e.to_string())?;
        let l = gpu_guard::image::libraries::scan_from(img, &tree, tap, &start, &cfg.libraries)
            .map_err(|e| e.to_string())?;
        (scan, Some(l.scan))
    };
    let info = img.info();
    Ok(Needs::from_scan(
        info.manifest_digest.as_deref().unwrap_or(""),
        &info.config_digest,
        &info.platform,
        img.env(),
        &scan.scanned,
        &scan.compat,
        &scan.notes,
    )
    .with_library_scan(libraries))
}

/// The attestation of exactly `res`'s manifest, when there is a usable
/// one under `cfg` (newest first; one that does not parse, is about another
/// image or lacks what `cfg` needs is skipped); with a line for each
/// referrer skipped. Never an error: without one, the layers are read.
pub fn attested(
    client: &Client,
    r: &Reference,
    res: &Resolved,
    cfg: &Config,
) -> (Option<(Needs, String)>, Vec<String>) {
    let subject = res.manifest.digest.as_str();
    let accept = |b: &[u8]| -> Result<(), String> {
        let n = Needs::parse(b, subject).map_err(|e| e.to_string())?;
        if !n.usable(cfg) {
            return Err("written without the libraries scan, which [libraries] asks for".into());
        }
        Ok(())
    };
    let found = client.find_artifact(
        &r.repository,
        subject,
        needs::MEDIA_TYPE,
        needs::MAX_BYTES,
        &accept,
    );
    let skipped = found
        .skipped
        .iter()
        .map(|s| format!("attestation: {s}"))
        .collect();
    let n = found.artifact.and_then(|a| {
        Needs::parse(&a.layer, subject)
            .ok()
            .map(|n| (n, a.manifest_digest))
    });
    (n, skipped)
}

/// What one read found: the needs, where they came from, and lines about
/// how (attestations skipped).
pub struct ReadOutcome {
    pub needs: Needs,
    pub origin: Origin,
    pub notes: Vec<String>,
}

/// Attestation first, then the layers.
pub fn read_needs(
    client: &Arc<Client>,
    r: &Reference,
    res: &Resolved,
    cfg: &Config,
    platform: &str,
    limits: Limits,
    bound: (Option<Instant>, Arc<dyn Stop>),
) -> Result<ReadOutcome, String> {
    let (found, notes) = attested(client, r, res, cfg);
    if let Some((needs, at)) = found {
        return Ok(ReadOutcome {
            needs,
            origin: Origin::Attestation(at),
            notes,
        });
    }
    let img = open_image(client, r, res, platform, limits, bound)?;
    Ok(ReadOutcome {
        needs: needs_from_image(&img, cfg)?,
        origin: Origin::Layers,
        notes,
    })
}

pub fn parse_platform(p: &str) -> Result<Platform, String> {
    let parts: Vec<&str> = p.split('/').collect();
    match parts.as_slice() {
        [os, arch] if !os.is_empty() && !arch.is_empty() => Ok(Platform {
            os: os.to_string(),
            architecture: arch.to_string(),
            variant: None,
        }),
        [os, arch, v] if !os.is_empty() && !arch.is_empty() && !v.is_empty() => Ok(Platform {
            os: os.to_string(),
            architecture: arch.to_string(),
            variant: Some(v.to_string()),
        }),
        _ => Err(format!(
            "invalid platform {p:?} (expected os/arch[/variant])"
        )),
    }
}
