//! What the image's libraries need at start, judged (pure): the `library`
//! findings ("cannot open shared object file" predicted before start) and
//! the `cuda-runtime` findings (a CUDA runtime the image ships that the
//! host's driver is too old for, whatever the image declares). The scan
//! that resolves the libraries as ld.so will is `scan::ldso`; it hands
//! over a [`LibraryScan`] (core::library_scan), which is also the
//! Decision JSON's `libraries` object (docs/interfaces.md).

use crate::core::cuda_tables;
use crate::core::decision::{Check, Finding, Severity};
use crate::core::facts::HostFacts;
use crate::core::library_fixes;
use crate::core::policy::{Enforcement, LibrariesConfig};
use crate::core::sanitize::esc;
use crate::core::version::Version;
use std::collections::BTreeMap;

pub use crate::core::library_scan::{CudaRuntime, LibraryScan, Missing, RequestKind};

/// Missing libraries named in one finding's details before "and N more".
const MAX_NEEDERS: usize = 3;
/// Findings about missing libraries, one per library name, before the rest
/// are counted in one more.
const MAX_MISSING_FINDINGS: usize = 12;
/// Files not judged named in the incomplete-scan finding.
const MAX_NOT_JUDGED_NAMED: usize = 5;

/// A shared-object name of the GPU stack (design: `libcu`, `libnv`,
/// `libnccl`, `libnpp`). `libcurl` and `libcups`, which begin like CUDA's
/// names and are not GPU libraries, are left out.
pub fn is_gpu_name(name: &str) -> bool {
    let gpu = ["libcu", "libnv", "libnccl", "libnpp"]
        .iter()
        .any(|p| name.starts_with(p));
    gpu && !name.starts_with("libcurl") && !name.starts_with("libcups")
}

/// The findings for one host. `host`: None when no facts were gathered
/// (only the library findings then).
pub fn assess(scan: &LibraryScan, host: Option<&HostFacts>, cfg: &LibrariesConfig) -> Vec<Finding> {
    if cfg.severity == Enforcement::Off {
        return Vec::new();
    }
    let enforce = cfg.severity == Enforcement::Refuse;
    // A scan that could not run judged nothing: it is the most incomplete
    // of scans, and `on_incomplete` decides for both alike.
    let refuse_unfinished = enforce && cfg.on_incomplete == Enforcement::Refuse;
    let mut out = Vec::new();
    if let Some(e) = &scan.error {
        out.push(
            Finding::new(
                Check::Library,
                unfinished_severity(refuse_unfinished),
                format!(
                    "the libraries scan could not run: cannot read the rootfs for its libraries ({}); nothing was judged",
                    esc(e)
                ),
            )
            .with_fix(unfinished_fix(
                refuse_unfinished,
                "check the container's root.path: gpu-guard could not open it",
            )),
        );
        return out;
    }
    out.extend(missing_findings(&scan.missing, enforce, image_cuda(scan)));
    if let Some(h) = host {
        for rt in &scan.cuda_runtimes {
            out.extend(runtime_finding(rt, h, enforce));
        }
    }
    if let Some(f) = incomplete_finding(scan, refuse_unfinished) {
        out.push(f);
    }
    out
}

/// A scan that did not finish: an error under `severity = "enforce"` with
/// `on_incomplete = "enforce"`, else a warning (the container starts, and
/// the log says what was not judged).
fn unfinished_severity(refuse: bool) -> Severity {
    if refuse {
        Severity::Error
    } else {
        Severity::Warning
    }
}

fn unfinished_fix(refuse: bool, what: &str) -> String {
    if refuse {
        format!("{what}; libraries.on_incomplete = \"enforce\" refuses a GPU container whose libraries were not all judged")
    } else {
        format!("{what} (libraries.on_incomplete = \"enforce\" refuses such a container under severity = \"enforce\")")
    }
}

fn severity(enforce: bool, m: &Missing) -> Severity {
    if enforce && m.via == RequestKind::Needed && !m.optional {
        Severity::Error
    } else {
        Severity::Warning
    }
}

/// The image's CUDA major, for the fixes: its CUDA runtime's, else the one
/// its missing CUDA runtime or cuBLAS names.
fn image_cuda(scan: &LibraryScan) -> Option<u64> {
    let from_runtime = scan
        .cuda_runtimes
        .iter()
        .filter_map(|r| r.version.split('.').next()?.parse().ok())
        .max();
    from_runtime.or_else(|| {
        scan.missing
            .iter()
            .filter_map(|m| {
                let v = m
                    .name
                    .strip_prefix("libcudart.so.")
                    .or_else(|| m.name.strip_prefix("libcublas.so."))?;
                v.split('.').next()?.parse().ok()
            })
            .max()
    })
}

/// One finding per missing name and kind (not found / refused), the
/// objects that need it in the details.
fn missing_findings(missing: &[Missing], enforce: bool, cuda: Option<u64>) -> Vec<Finding> {
    let mut groups: BTreeMap<(Severity, &str, Option<&str>), Vec<&Missing>> = BTreeMap::new();
    for m in missing {
        let sev = severity(enforce, m);
        groups
            .entry((sev, m.name.as_str(), m.error.as_deref()))
            .or_default()
            .push(m);
    }
    // Errors first, then by name.
    let mut ordered: Vec<_> = groups.into_iter().collect();
    ordered.sort_by(|a, b| b.0 .0.cmp(&a.0 .0).then(a.0 .1.cmp(b.0 .1)));
    let total = ordered.len();
    let mut out: Vec<Finding> = ordered
        .into_iter()
        .take(MAX_MISSING_FINDINGS)
        .map(|((sev, _, _), ms)| missing_finding(sev, &ms, cuda))
        .collect();
    if total > MAX_MISSING_FINDINGS {
        out.push(Finding::warning(
            Check::Library,
            format!(
                "{} more missing libraries (see the decision's libraries.missing)",
                total - MAX_MISSING_FINDINGS
            ),
        ));
    }
    out
}

fn chain_text(m: &Missing) -> String {
    let mut parts: Vec<String> = m.chain.iter().map(|c| esc(c)).collect();
    if parts.last().map(String::as_str) != Some(esc(&m.needed_by).as_str()) {
        parts.push(esc(&m.needed_by));
    }
    parts.push(esc(&m.name));
    parts.join(" → ")
}

fn missing_finding(sev: Severity, ms: &[&Missing], cuda: Option<u64>) -> Finding {
    let m = ms[0];
    let what = match &m.error {
        Some(e) => esc(e),
        None => "cannot open shared object file".to_string(),
    };
    let why = match (&m.error, &m.capability, m.via) {
        (Some(_), _, _) => String::new(),
        (None, Some(cap), _) => format!(
            ": NVIDIA's runtime injects it only with the {cap} driver capability, which NVIDIA_DRIVER_CAPABILITIES does not ask for"
        ),
        (None, None, _) if m.elsewhere.is_some() => {
            ": the image has it, but not where the loader looks".to_string()
        }
        (None, None, _) => ": not in the image and not injected by NVIDIA's runtime".to_string(),
    };
    let when = match (&m.when, m.via) {
        (Some(w), RequestKind::Dlopen) => format!(" (opened with dlopen {})", esc(w)),
        (_, _) if m.optional => " (needed only by an optional plugin)".to_string(),
        _ => String::new(),
    };
    let headline = format!("{}: {what}{why}{when}", chain_text(m));
    let mut details: Vec<String> = ms
        .iter()
        .skip(1)
        .take(MAX_NEEDERS)
        .map(|o| format!("also needed by {}", chain_text(o)))
        .collect();
    if ms.len() > 1 + MAX_NEEDERS {
        details.push(format!("and {} more", ms.len() - 1 - MAX_NEEDERS));
    }
    let mut f = Finding::new(Check::Library, sev, headline.clone());
    if !details.is_empty() {
        let msg = format!("{headline}; {}", details.join("; "));
        f = Finding::new(Check::Library, sev, msg)
            .with_headline(headline)
            .with_details(details);
    }
    // The loader stops the program at a DT_NEEDED it cannot load; a
    // dlopen miss or an optional plugin's is the program's to handle. The
    // prediction is made for the GPU stack's libraries, the class this
    // check is for (design: "a GPU library that will not resolve"); the
    // rest of the image's libraries are its build's business, and an
    // image read as a fragment (a layer of libraries alone) misses them
    // all.
    if m.via == RequestKind::Needed && !m.optional && is_gpu_name(&m.name) {
        f = f.predicting_failure();
    }
    match fix_text(m, cuda) {
        Some(fix) => f.with_fix(fix),
        None => f,
    }
}

fn fix_text(m: &Missing, cuda: Option<u64>) -> Option<String> {
    if let Some(cap) = &m.capability {
        return Some(format!(
            "add {cap} to the container's NVIDIA_DRIVER_CAPABILITIES (e.g. NVIDIA_DRIVER_CAPABILITIES=compute,utility, or all)"
        ));
    }
    if let Some(at) = &m.elsewhere {
        let dir = at.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        return Some(format!(
            "the image has /{} where the loader does not look: add /{} to the container's LD_LIBRARY_PATH or to /etc/ld.so.conf.d (or have the program load it first, e.g. onnxruntime.preload_dlls())",
            esc(at),
            esc(dir)
        ));
    }
    if m.error.is_some() {
        return Some(format!(
            "replace the file the loader finds for {} with a library for this platform, or remove it",
            esc(&m.name)
        ));
    }
    library_fixes::fix_for(&m.name, cuda)
        .and_then(|f| f.text())
        .or_else(|| Some(format!("install the package that ships {}", esc(&m.name))))
}

/// The driver a CUDA runtime's major needs.
pub fn major_min_driver(major: u64, minor: Option<u64>) -> Option<String> {
    if let Some(d) = cuda_tables::minor_version_min_driver(major) {
        return Some(d.to_string());
    }
    let first = if major <= 10 {
        Version::from_major_minor(major, minor.unwrap_or(0))
    } else {
        Version::from_major_minor(major, 0)
    };
    cuda_tables::min_driver_for_cuda(&first).map(str::to_string)
}

/// A shipped runtime judged by CUDA's own rule (NVIDIA, "CUDA
/// Compatibility", "Minor Version Compatibility"): from CUDA 11 on, a
/// runtime of CUDA X.Y runs on any driver of the X family at or above the
/// family minimum ([`major_min_driver`]), newer minor or not; only PTX the
/// X.Y toolkit built (the driver cannot JIT it: the kernel-image check
/// judges that) and APIs new in X.Y (cudaErrorCallRequiresNewerDriver)
/// need the X.Y driver. `requirements.minor_version_compatibility` governs
/// declared requirements (NVIDIA's string check), not this. CUDA 10 and
/// older had no such rule: the runtime needs its own release's driver.
fn runtime_finding(rt: &CudaRuntime, host: &HostFacts, enforce: bool) -> Option<Finding> {
    let have = host.cuda_driver_version.as_deref()?;
    let have = Version::parse(have).ok()?;
    let want = Version::parse(&rt.version).ok()?;
    let minor_known = rt.version.contains('.');
    let driver_text = host.driver_version.as_deref().unwrap_or("unknown");
    let what = format!(
        "{}: CUDA runtime {} ({})",
        esc(&rt.path),
        esc(&rt.version),
        esc(&rt.source)
    );
    if have.major() > want.major() {
        return None;
    }
    let same_major_newer_minor =
        have.major() == want.major() && minor_known && have.minor() < want.minor();
    if have.major() == want.major() && !same_major_newer_minor {
        return None;
    }
    let family_min = rt
        .min_driver
        .as_deref()
        .and_then(|d| Version::parse(d).ok());
    let driver = host
        .driver_version
        .as_deref()
        .and_then(|d| Version::parse(d).ok());
    let in_family = same_major_newer_minor
        && want.major() >= 11
        && matches!((&driver, &family_min), (Some(d), Some(m)) if d >= m);
    if in_family {
        return Some(minor_gap_note(&what, rt, &want, &have, driver_text));
    }
    let need = rt.min_driver.as_deref().unwrap_or("a newer one");
    let (needs, reason) = if have.major() < want.major() {
        (format!("a driver for CUDA {}", want.major()), String::new())
    } else if want.major() >= 11 {
        (
            format!("a driver of the CUDA {}.x family", want.major()),
            format!(
                " (CUDA minor-version compatibility starts at the family minimum, driver {need})"
            ),
        )
    } else {
        (format!("a driver for CUDA {want}"), String::new())
    };
    let sev = if enforce {
        Severity::Error
    } else {
        Severity::Warning
    };
    Some(
        Finding::new(
            Check::CudaRuntime,
            sev,
            format!(
                "{what} needs {needs} (NVIDIA driver {need} or newer){reason}; this host's driver {driver_text} supports CUDA {have}: CUDA driver version is insufficient for CUDA runtime version"
            ),
        )
        .with_fix(runtime_fix(&want, &have, need))
        .predicting_failure(),
    )
}

fn runtime_fix(want: &Version, have: &Version, need: &str) -> String {
    let pip = library_fixes::fix_for(&format!("libcudart.so.{}", have.major()), None)
        .and_then(|f| f.pip)
        .map(|p| format!(" ({p} for pip)"))
        .unwrap_or_default();
    format!(
        "install NVIDIA driver {need} or newer (a branch with CUDA {}), or use a build of the image or wheels for CUDA {}{pip}",
        want.major(),
        have.major()
    )
}

/// A runtime newer than the host's CUDA within one major, on a driver at
/// or above the family minimum: it runs (minor-version compatibility), and
/// the warning names what needs the newer driver.
fn minor_gap_note(
    what: &str,
    rt: &CudaRuntime,
    want: &Version,
    have: &Version,
    driver: &str,
) -> Finding {
    let full = Version::from_major_minor(want.major(), want.minor());
    let newer = rt
        .toolkit_driver
        .clone()
        .or_else(|| cuda_tables::min_driver_for_cuda(want).map(str::to_string))
        .map(|d| format!("driver {d} or newer"))
        .unwrap_or_else(|| format!("a driver with CUDA {full}"));
    Finding::warning(
        Check::CudaRuntime,
        format!(
            "{what} is newer than this host's CUDA {have} (driver {driver}): it runs through CUDA minor-version compatibility (the driver is at least {}, the CUDA {}.x family minimum); PTX built by CUDA {full} cannot be JIT-compiled by this driver and APIs new in CUDA {full} fail with cudaErrorCallRequiresNewerDriver: those need {newer}",
            rt.min_driver.as_deref().unwrap_or("the family minimum"),
            want.major()
        ),
    )
    .with_fix(format!(
        "to run everything CUDA {full} offers, install {newer}; the image's GPU code is judged apart (kernel-image)"
    ))
}

fn incomplete_finding(scan: &LibraryScan, refuse: bool) -> Option<Finding> {
    let why = scan.incomplete.as_ref()?;
    let named: Vec<String> = scan
        .not_judged
        .iter()
        .take(MAX_NOT_JUDGED_NAMED)
        .map(|p| esc(p))
        .collect();
    let more = scan.not_judged_total.saturating_sub(named.len() as u64);
    let list = match (named.is_empty(), more) {
        (true, _) => String::new(),
        (false, 0) => format!("; not judged: {}", named.join(", ")),
        (false, n) => format!("; not judged: {} and {n} more", named.join(", ")),
    };
    Some(
        Finding::new(
            Check::Library,
            unfinished_severity(refuse),
            format!("the libraries scan stopped early: {}{list}", esc(why)),
        )
        .with_fix(unfinished_fix(
            refuse,
            "raise the [libraries] budgets, or check the image for oversized or hostile files",
        )),
    )
}

#[cfg(test)]
mod tests;
