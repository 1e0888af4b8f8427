//! `gpu-guard check --image docker://...` (exec'd here by `gpu-guard`,
//! see its `commands/network.rs`): the image is read from the registry,
//! its attestation first unless `--attest` asks for a fresh read, and
//! judged exactly as `check --image` judges a file
//! (`gpu_guard::commands::image_check::judge`). With `--attest`, what was
//! found is pushed as an attestation once the read succeeded.
//!
//! Exit status as `check`: 0, 1, and 2 for bad usage or an image that
//! cannot be read (one line naming the registry and the cause).

use crate::needs::{self, Needs};
use crate::remote::{self, Access, NeverStop, Origin};
use gpu_guard::commands::cli::CheckArgs;
use gpu_guard::commands::fleet_report::ImageReport;
use gpu_guard::commands::image_check;
use gpu_guard::commands::output::usage;
use gpu_guard::core::policy::{Config, Enforcement};
use gpu_guard::core::sanitize::esc_bounded as escape;
use gpu_guard::image::scan::ImageScan;
use gpu_guard_registry::{Reference, Resolved};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The `image` object of the report, for an image known by its needs.
fn report_from_needs(
    r: &Reference,
    n: &Needs,
    origin: &Origin,
    env_used: &gpu_guard::core::container::Container,
) -> ImageReport {
    let mut json = serde_json::Map::new();
    json.insert("path".into(), format!("docker://{r}").into());
    json.insert("reference".into(), r.to_string().into());
    json.insert("digest".into(), n.manifest_digest.clone().into());
    json.insert("format".into(), "registry".into());
    json.insert("manifest_digest".into(), n.manifest_digest.clone().into());
    json.insert("config_digest".into(), n.config_digest.clone().into());
    json.insert("platform".into(), n.platform.clone().into());
    if let Origin::Attestation(a) = origin {
        json.insert("attestation".into(), a.clone().into());
    }
    json.insert(
        "env_used".into(),
        serde_json::to_value(env_used.env.vars()).unwrap_or_default(),
    );
    let libs: Vec<&str> = n.libraries.iter().map(|l| l.path.as_str()).collect();
    json.insert(
        "libraries".into(),
        serde_json::to_value(libs).unwrap_or_default(),
    );
    let via = match origin {
        Origin::Attestation(a) => format!(", attested {a}"),
        Origin::Layers => String::new(),
    };
    let line = format!(
        "Image: docker://{} ({}, {}{via})",
        escape(&r.to_string(), 200),
        n.manifest_digest,
        n.platform
    );
    ImageReport { json, line }
}

fn scan_from_needs(n: &Needs) -> ImageScan {
    let (scanned, compat) = n.scanned();
    ImageScan {
        scanned,
        compat,
        notes: n.notes.clone(),
        ..ImageScan::default()
    }
}

/// Reads the layers, and pushes the attestation when asked.
fn read_layers(
    cfg: &Config,
    args: &CheckArgs,
    (c, r, res): (&Arc<gpu_guard_registry::Client>, &Reference, &Resolved),
    platform: &str,
    (limits, deadline): (gpu_guard::image::Limits, Instant),
) -> Result<
    (
        Needs,
        ImageReport,
        image_check::ImageScans,
        gpu_guard::core::container::Container,
    ),
    String,
> {
    // Image reader errors name the layer; say which registry too.
    let named = |e: String| {
        if e.contains(&format!("registry {}", c.name())) {
            e
        } else {
            format!("registry {}: {e}", c.name())
        }
    };
    let img = remote::open_image(
        c,
        r,
        res,
        platform,
        limits,
        (Some(deadline), Arc::new(NeverStop)),
    )
    .map_err(named)?;
    let env = image_check::parse_env(args)?;
    let container = image_check::image_container(&img, &env);
    let (scan, libraries) =
        image_check::image_scans(&img, &container, cfg).map_err(|e| named(e.to_string()))?;
    let info = img.info();
    let none = ImageScan::default();
    let s = scan.as_ref().unwrap_or(&none);
    let needs = Needs::from_scan(
        info.manifest_digest.as_deref().unwrap_or(""),
        &info.config_digest,
        &info.platform,
        img.env(),
        &s.scanned,
        &s.compat,
        &s.notes,
    )
    .with_library_scan(libraries.clone());
    let report = image_check::report(&img, &container, scan.as_ref());
    Ok((needs, report, (scan, libraries), container))
}

pub fn main(config: Option<&Path>, args: &CheckArgs) -> i32 {
    let Some(image) = args
        .image
        .as_deref()
        .map(|p| p.to_string_lossy().to_string())
    else {
        return usage("--image is missing");
    };
    if !gpu_guard::commands::network::is_remote(Path::new(&image)) {
        // A file: the same code as `gpu-guard check`.
        return gpu_guard::commands::check::main(config, args);
    }
    if let Some(name) = image.strip_prefix("docker-daemon:") {
        return daemon_check(config, args, name);
    }
    let cfg = match gpu_guard::config::load(config) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };
    registry_check(&cfg, args, &image)
}

/// The image reader's limits, with `--read-timeout` as its time budget.
fn read_limits(args: &CheckArgs) -> gpu_guard::image::Limits {
    let mut l = image_check::limits();
    if let Some(s) = args.read_timeout {
        l.max_time = std::time::Duration::from_secs(s);
    }
    l
}

/// `--image docker://...`.
fn registry_check(cfg: &Config, args: &CheckArgs, image: &str) -> i32 {
    let platform = args
        .platform
        .clone()
        .unwrap_or_else(|| "linux/amd64".to_string());
    let plat = match remote::parse_platform(&platform) {
        Ok(p) => p,
        Err(e) => return usage(e),
    };
    let env = match image_check::parse_env(args) {
        Ok(e) => e,
        Err(e) => return usage(e),
    };
    let access = Access {
        plain_http: Vec::new(),
        all_plain_http: args.plain_http,
        ca_files: args.registry_ca.iter().cloned().collect(),
        cred_files: gpu_guard_registry::credentials::default_files(&|k| std::env::var(k).ok()),
    };
    let r = match Reference::parse(image) {
        Ok(r) => r,
        Err(e) => return usage(e),
    };
    // One deadline for the whole read: every request, token and layer.
    let limits = read_limits(args);
    let deadline = Instant::now() + limits.max_time;
    let c = match access.client(&r, Some(deadline)) {
        Ok(c) => Arc::new(c),
        Err(e) => return usage(e),
    };
    let res = match c.resolve(&r, &plat) {
        Ok(x) => x,
        Err(e) => return usage(e),
    };
    if !args.attest {
        let (found, skipped) = remote::attested(&c, &r, &res, cfg);
        // Each line is built from text escaped where it was read (the
        // registry's errors, `esc` of the reasons): `clean` escapes what
        // was missed without doubling the backslashes of those escapes.
        for s in &skipped {
            eprintln!(
                "gpu-guard check: warning: {}",
                gpu_guard::core::sanitize::clean(s.clone())
            );
        }
        if let Some((n, at)) = found {
            let origin = Origin::Attestation(at);
            let container = image_check::container_for(&n.env, &env);
            let report = report_from_needs(&r, &n, &origin, &container);
            let scan = (cfg.kernel_image.severity != Enforcement::Off).then(|| scan_from_needs(&n));
            let libraries = n.library_scan.clone();
            return image_check::judge(cfg.clone(), args, container, (scan, libraries), &report);
        }
    }
    let (needs, report, scan, container) =
        match read_layers(cfg, args, (&c, &r, &res), &platform, (limits, deadline)) {
            Ok(x) => x,
            Err(e) => return usage(e),
        };
    if args.attest {
        if let Err(e) = push_attestation(&c, &r, &res, &needs) {
            return usage(format!("the attestation could not be pushed: {e}"));
        }
    }
    image_check::judge(cfg.clone(), args, container, scan, &report)
}

/// `--image docker-daemon:NAME[:TAG]`.
fn daemon_check(config: Option<&Path>, args: &CheckArgs, name: &str) -> i32 {
    if args.attest || args.plain_http || args.registry_ca.is_some() {
        return usage("--attest, --plain-http and --registry-ca are for docker:// images");
    }
    let cfg = match gpu_guard::config::load(config) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };
    let env = match image_check::parse_env(args) {
        Ok(e) => e,
        Err(e) => return usage(e),
    };
    let platform = match gpu_guard::image::Platform::parse(
        args.platform.as_deref().unwrap_or("linux/amd64"),
    ) {
        Ok(p) => p,
        Err(e) => return usage(e),
    };
    let socket =
        match gpu_guard_registry::daemon::socket_path(std::env::var("DOCKER_HOST").ok().as_deref())
        {
            Ok(s) => s,
            Err(e) => return usage(e),
        };
    let opts = gpu_guard::image::Options {
        platform,
        reference: None,
        limits: read_limits(args),
        ..Default::default()
    };
    let img = match crate::daemon_source::open(socket, name, &opts) {
        Ok(i) => i,
        Err(e) => return usage(e),
    };
    let container = image_check::image_container(&img, &env);
    let scans = match image_check::image_scans(&img, &container, &cfg) {
        Ok(s) => s,
        Err(e) => return usage(e),
    };
    let report = image_check::report(&img, &container, scans.0.as_ref());
    image_check::judge(cfg, args, container, scans, &report)
}

/// Pushes `needs` as the attestation of `res`'s manifest and says so on stderr.
fn push_attestation(
    c: &gpu_guard_registry::Client,
    r: &Reference,
    res: &Resolved,
    needs: &Needs,
) -> Result<(), gpu_guard_registry::RegistryError> {
    let created = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let media = if res.manifest.media_type.is_empty() {
        gpu_guard_registry::manifest::OCI_MANIFEST
    } else {
        res.manifest.media_type.as_str()
    };
    let subject = (
        media,
        res.manifest.digest.as_str(),
        res.manifest.bytes.len() as u64,
    );
    let (d, via) = c.attach(
        &r.repository,
        subject,
        needs::MEDIA_TYPE,
        &needs.to_json(),
        &created,
    )?;
    let via = match via {
        gpu_guard_registry::ReferrersSource::ReferrersApi => "Referrers API",
        gpu_guard_registry::ReferrersSource::TagSchema => "tag schema",
    };
    eprintln!(
        "gpu-guard check: attestation {d} pushed for {} ({via})",
        res.manifest.digest
    );
    Ok(())
}
