//! `gpu-guard check --image PATH`: judges a container image before it is
//! scheduled (docs/interfaces.md, "`gpu-guard check`"). The image
//! is read without unpacking ([`crate::image`]); the container is built
//! from its config and judged as `docker run --gpus all` would start it;
//! its libraries are scanned once and judged on every host given.
//!
//! The container:
//! - env: the image config's `Env`, then each `--env` (adds or overrides);
//! - GPUs: `--gpus all`, which for the NVIDIA stack means
//!   `NVIDIA_VISIBLE_DEVICES=all` and NVIDIA's hook in the spec. So the
//!   variable is set to `all` when neither the image nor `--env` sets it,
//!   except for a legacy CUDA image (`CUDA_VERSION` without
//!   `NVIDIA_REQUIRE_CUDA`), which already means all GPUs and keeps its own
//!   wording; an image or `--env` value (`void`, `none`, a list) is kept.
//!   The hook path marks the GPUs as attached (an env request alone need
//!   not be one).
//!
//! Exit status as `check`: 0 allowed (on every host), 1 refused, 2 bad
//! usage or an image that cannot be read (one line on stderr, nothing
//! written anywhere).

use crate::commands::cli::CheckArgs;
use crate::commands::fleet_report::{self, ImageReport};
use crate::commands::output::{print_decision_strict, usage};
use crate::config;
use crate::core::container::Container;
use crate::core::decision::{Check, Finding};
use crate::core::libraries::LibraryScan;
use crate::core::policy::{Config, Enforcement};
use crate::core::sanitize::esc_bounded;
use crate::image::scan::ImageScan;
use crate::image::{Image, Limits, Options, Platform};
use crate::pipeline::{self, ContainerInput, HostChoice, Policy, Scans};
use std::path::Path;

/// The container `docker run --gpus all IMAGE` with `env` (`KEY=VALUE`,
/// applied after the image's) would be.
pub fn container_for(image_env: &[String], env: &[(String, String)]) -> Container {
    let mut c = Container::default();
    for e in image_env {
        c.env.push_entry(e);
    }
    for (k, v) in env {
        c.env.set(k, v);
    }
    crate::fleet::attached::as_run_with_all_gpus(&mut c);
    c
}

pub fn parse_env(args: &CheckArgs) -> Result<Vec<(String, String)>, String> {
    args.env
        .iter()
        .map(|raw| {
            let entry = raw.to_string_lossy();
            match entry.split_once('=') {
                Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                _ => Err(format!(
                    "--env wants KEY=VALUE, got `{}`",
                    crate::core::sanitize::esc(&entry)
                )),
            }
        })
        .collect()
}

/// The `image` object of the fleet JSON and a line for people.
pub fn report(img: &Image, container: &Container, scan: Option<&ImageScan>) -> ImageReport {
    let info = img.info();
    let mut json = serde_json::Map::new();
    let digest = info
        .manifest_digest
        .clone()
        .unwrap_or_else(|| info.config_digest.clone());
    json.insert("path".into(), info.path.clone().into());
    if let Some(r) = &info.reference {
        json.insert("reference".into(), r.clone().into());
    }
    json.insert("digest".into(), digest.clone().into());
    if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(info) {
        for (k, v) in m {
            json.entry(k).or_insert(v);
        }
    }
    let labels: std::collections::BTreeMap<String, String> = img.labels().into_iter().collect();
    json.insert(
        "labels".into(),
        serde_json::to_value(labels).unwrap_or_default(),
    );
    json.insert(
        "env_used".into(),
        serde_json::to_value(container.env.vars()).unwrap_or_default(),
    );
    if let Some(s) = scan {
        let libs: Vec<&str> = s
            .scanned
            .libraries
            .iter()
            .map(|l| l.path.as_str())
            .collect();
        json.insert(
            "libraries".into(),
            serde_json::to_value(libs).unwrap_or_default(),
        );
        let compat: Vec<serde_json::Value> = s
            .compat
            .libs
            .iter()
            .map(|l| serde_json::json!({ "path": l.path, "version": l.version, "note_readable": l.note.is_ok() }))
            .collect();
        json.insert("compat_libraries".into(), compat.into());
        if !s.notes.is_empty() {
            json.insert(
                "notes".into(),
                serde_json::to_value(&s.notes).unwrap_or_default(),
            );
        }
    }
    let line = format!(
        "Image: {} ({}{}, {})",
        esc_bounded(&info.path, 200),
        info.reference
            .as_deref()
            .map(|r| format!("{}, ", esc_bounded(r, 200)))
            .unwrap_or_default(),
        digest,
        info.platform
    );
    ImageReport { json, line }
}

/// The image reader's budgets. TEST ONLY (feature test-hooks):
/// GPU_GUARD_IMAGE_MAX_BYTES and GPU_GUARD_IMAGE_MAX_SECS lower them, so
/// the hostile-input tests run in seconds.
pub fn limits() -> Limits {
    #[allow(unused_mut)]
    let mut l = Limits::default();
    #[cfg(feature = "test-hooks")]
    {
        let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        if let Some(b) = num("GPU_GUARD_IMAGE_MAX_BYTES") {
            l.max_uncompressed_bytes = b;
        }
        if let Some(s) = num("GPU_GUARD_IMAGE_MAX_SECS") {
            l.max_time = std::time::Duration::from_secs(s);
        }
    }
    l
}

/// The container `img` runs as, with `env` added: its config's env, and
/// its WorkingDir as the process's cwd (image-spec config.md).
pub fn image_container(img: &Image, env: &[(String, String)]) -> Container {
    let mut container = container_for(&img.env(), env);
    container.cwd = img
        .config()
        .config()
        .as_ref()
        .and_then(|c| c.working_dir().clone())
        .filter(|w| w.starts_with('/'));
    container
}

/// What the kernel-image and libraries scans read from the image's layers
/// (`[kernel_image]`, `[libraries]`): one header pass serves both.
pub type ImageScans = (
    Option<crate::image::scan::ImageScan>,
    Option<crate::core::libraries::LibraryScan>,
);

/// Both scans of an image (a file, a registry's or the docker daemon's),
/// each `None` when its severity is `off`.
pub fn image_scans(
    img: &Image,
    container: &Container,
    cfg: &crate::core::policy::Config,
) -> Result<ImageScans, crate::image::ImageError> {
    let kernel = cfg.kernel_image.severity != Enforcement::Off;
    let libs = cfg.libraries.severity != Enforcement::Off;
    let start = start_env(img, container);
    match (kernel, libs) {
        (true, true) => {
            let mut tap = crate::image::libraries::LibraryTap::with_limits(&cfg.libraries);
            let (scan, tree) =
                crate::image::scan::scan_with(img, &cfg.kernel_image, Some(&mut tap))?;
            let l = crate::image::libraries::scan_from(img, &tree, tap, &start, &cfg.libraries)?;
            Ok((Some(scan), Some(l.scan)))
        }
        (true, false) => Ok((
            Some(crate::image::scan::scan(img, &cfg.kernel_image)?),
            None,
        )),
        (false, true) => Ok((
            None,
            Some(crate::image::libraries::scan(img, &start, false, &cfg.libraries)?.scan),
        )),
        (false, false) => Ok((None, None)),
    }
}

/// How `container` starts from `img` for the libraries scan: with GPUs,
/// its env and working directory, on the image's machine.
pub fn start_env(img: &Image, container: &Container) -> crate::scan::ldso::resolve::StartEnv {
    let mut start = crate::scan::ldso::resolve::StartEnv::from_env(
        &container.env,
        container.cwd.as_deref(),
        true,
    );
    start.machine = img_machine(img);
    start
}

/// The ELF machine of the image's platform (its config's architecture).
fn img_machine(img: &Image) -> Option<u16> {
    match img.info().platform.split('/').nth(1) {
        Some("arm64") => Some(crate::scan::elf_dynamic::EM_AARCH64),
        Some("amd64") => Some(crate::scan::elf_dynamic::EM_X86_64),
        _ => None,
    }
}

pub fn main(config_flag: Option<&Path>, args: &CheckArgs) -> i32 {
    let Some(arg) = &args.image else {
        return usage("--image PATH is missing");
    };
    let image_ref = match crate::image::reference::parse(arg.as_os_str()) {
        Ok(r) => r,
        Err(e) => return usage(format!("--image: {e}")),
    };
    let Some(file) = image_ref.path() else {
        // main hands these to gpu-guard-admission before they get here.
        return usage("--image: registry and docker-daemon images are read by gpu-guard-admission, installed beside gpu-guard");
    };
    let platform = match args.platform.as_deref().map(Platform::parse).transpose() {
        Ok(p) => p.unwrap_or_default(),
        Err(e) => return usage(e),
    };
    let env = match parse_env(args) {
        Ok(e) => e,
        Err(e) => return usage(e),
    };
    if let (Some(host), false) = (args.host.first(), fleet_report::wanted(args)) {
        if let Err(e) = crate::host::facts_file::read_facts_file(host) {
            return usage(e);
        }
    }
    let cfg = match config::load(config_flag) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };
    let (reference, source_index) = image_ref.selection();
    let opts = Options {
        platform,
        reference,
        source_index,
        format: image_ref.format(),
        limits: limits(),
    };
    if let crate::image::reference::ImageRef::Path(p) = &image_ref {
        if std::fs::symlink_metadata(p).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            return usage(no_such_image(p));
        }
    }
    let img = match Image::open(file, &opts) {
        Ok(i) => i,
        Err(e) => return usage(e),
    };
    let container = image_container(&img, &env);
    let (scan, libraries) = match image_scans(&img, &container, &cfg) {
        Ok(s) => s,
        Err(e) => return usage(e),
    };
    let image = report(&img, &container, scan.as_ref());
    judge(cfg, args, container, (scan, libraries), &image)
}

/// The forms `--image` takes, for a value that names nothing.
const IMAGE_FORMS: &str = "a path to an OCI layout directory, a docker-archive or an OCI archive tar; \
oci:DIR[:REF], oci-archive:FILE[:REF], docker-archive:FILE[:REF|:@N]; \
docker://HOST[:PORT]/REPO[:TAG|@DIGEST] (a registry) or docker-daemon:NAME[:TAG] (the local docker's store)";

/// A bare `--image` that names no file: when it reads as a docker
/// reference, the spellings that read it from a registry or the daemon,
/// as skopeo spells them (containers-transports(5)): a bare name is a
/// path there too.
fn no_such_image(p: &Path) -> String {
    let shown = crate::core::sanitize::esc(&p.display().to_string());
    let hint = match p.to_str() {
        Some(r) if crate::image::reference::is_docker_reference(r) => format!(
            "; a registry image is named docker://{shown}, one in the local docker's store docker-daemon:{shown}"
        ),
        _ => String::new(),
    };
    format!("--image {shown}: no such file or directory{hint} (--image takes {IMAGE_FORMS})")
}

/// Judges an image already read (from a file here, or from a registry or
/// the docker daemon by gpu-guard-admission) on the hosts `args` names,
/// through the pipeline; prints, and returns the exit status.
pub fn judge(
    cfg: Config,
    args: &CheckArgs,
    container: Container,
    (scan, libraries): (Option<ImageScan>, Option<LibraryScan>),
    image: &ImageReport,
) -> i32 {
    let notes = scan.as_ref().map(|s| s.notes.clone()).unwrap_or_default();
    let scans = match scan {
        Some(s) => Scans::made(Some(s.scanned), Some(s.compat)),
        None => Scans::made(None, None),
    }
    .with_libraries(libraries);
    // Judged as `docker run --gpus all` starts it: GPUs attached whatever
    // runtime is chained, so no chained runtime is asked for.
    let case = ContainerInput::new(container, args.stage.stage()).with_scans(scans);
    if fleet_report::wanted(args) {
        return fleet_report::main_with(&cfg, case, args, Some(image));
    }
    let host = match args.host.first() {
        Some(p) => HostChoice::File(p),
        None => HostChoice::FromConfig,
    };
    let mut d = pipeline::decide_container(&Policy::valid(cfg), case, host);
    // The scan's notes become info findings.
    if d.gpu_container {
        for n in notes {
            d.findings.push(Finding::info(Check::KernelImage, n));
        }
    }
    if !args.json {
        println!("{}", image.line);
    }
    print_decision_strict(&d, args.json, args.strict)
}
