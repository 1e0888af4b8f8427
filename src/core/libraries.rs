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
use crate::core::policy::{Enforcement, LibrariesConfig, MinorVersionCompat};
use crate::core::sanitize::esc;
use crate::core::version::Version;
use std::collections::BTreeMap;

pub use crate::core::library_scan::{CudaRuntime, LibraryScan, Missing, Via};

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
/// (only the library findings then); `minor`: the requirements' rule.
pub fn assess(
    scan: &LibraryScan,
    host: Option<&HostFacts>,
    cfg: &LibrariesConfig,
    minor: MinorVersionCompat,
) -> Vec<Finding> {
    if cfg.severity == Enforcement::Off {
        return Vec::new();
    }
    let enforce = cfg.severity == Enforcement::Refuse;
    let mut out = Vec::new();
    if let Some(e) = &scan.error {
        out.push(
            Finding::warning(
                Check::Library,
                format!("cannot read the rootfs for its libraries: {}", esc(e)),
            )
            .with_fix("the libraries the image needs were not judged"),
        );
        return out;
    }
    out.extend(missing_findings(&scan.missing, enforce, image_cuda(scan)));
    if let Some(h) = host {
        for rt in &scan.cuda_runtimes {
            out.extend(runtime_finding(rt, h, enforce, minor));
        }
    }
    if let Some(f) = incomplete_finding(scan, enforce && cfg.on_incomplete == Enforcement::Refuse) {
        out.push(f);
    }
    out
}

fn severity(enforce: bool, m: &Missing) -> Severity {
    if enforce && m.via == Via::Needed && !m.optional {
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
        (Some(w), Via::Dlopen) => format!(" (opened with dlopen {})", esc(w)),
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

fn runtime_finding(
    rt: &CudaRuntime,
    host: &HostFacts,
    enforce: bool,
    rule: MinorVersionCompat,
) -> Option<Finding> {
    let have = host.cuda_driver_version.as_deref()?;
    let have = Version::parse(have).ok()?;
    let want = Version::parse(&rt.version).ok()?;
    let minor_known = rt.version.contains('.');
    let sev = if enforce {
        Severity::Error
    } else {
        Severity::Warning
    };
    let driver = host.driver_version.as_deref().unwrap_or("unknown");
    let what = format!(
        "{}: CUDA runtime {} ({})",
        esc(&rt.path),
        esc(&rt.version),
        esc(&rt.source)
    );
    if have.major() < want.major() {
        let need = rt.min_driver.as_deref().unwrap_or("a newer one");
        return Some(
            Finding::new(
                Check::CudaRuntime,
                sev,
                format!(
                    "{what} needs a driver for CUDA {} (NVIDIA driver {need} or newer); this host's driver {driver} supports CUDA {have}: CUDA driver version is insufficient for CUDA runtime version",
                    want.major()
                ),
            )
            .with_fix(runtime_fix(&want, &have, need)),
        );
    }
    if have.major() > want.major() || !minor_known || have.minor() >= want.minor() {
        return None;
    }
    minor_gap(&what, &want, &have, host, enforce, rule)
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

/// A runtime newer than the host's CUDA within one major: CUDA's
/// minor-version compatibility runs it on a driver of the family minimum
/// or newer, with limits; `requirements.minor_version_compatibility`
/// decides, as for a declared `cuda>=X.Y` (core::compat_check).
fn minor_gap(
    what: &str,
    want: &Version,
    have: &Version,
    host: &HostFacts,
    enforce: bool,
    rule: MinorVersionCompat,
) -> Option<Finding> {
    let family = cuda_tables::minor_version_min_driver(want.major());
    let driver = host
        .driver_version
        .as_deref()
        .and_then(|d| Version::parse(d).ok());
    let in_family = match (family, &driver) {
        (Some(f), Some(d)) => Version::parse(f).is_ok_and(|f| *d >= f),
        _ => false,
    };
    let base = format!(
        "{what} is newer than this host's CUDA {have}: it runs only through CUDA minor-version compatibility (no JIT of newer PTX; newer APIs fail with cudaErrorCallRequiresNewerDriver)"
    );
    let fix = format!(
        "install a driver with CUDA {} natively{}, or set requirements.minor_version_compatibility = \"allow\" to admit it",
        Version::from_major_minor(want.major(), want.minor()),
        cuda_tables::min_driver_for_cuda(want)
            .map(|d| format!(" (NVIDIA driver {d} or newer)"))
            .unwrap_or_default()
    );
    let sev = if enforce {
        Severity::Error
    } else {
        Severity::Warning
    };
    match rule {
        MinorVersionCompat::Allow if in_family => Some(Finding::warning(
            Check::CudaRuntime,
            format!("{base}; admitted (requirements.minor_version_compatibility = \"allow\")"),
        )),
        MinorVersionCompat::Warn if in_family => Some(
            Finding::new(
                Check::CudaRuntime,
                sev,
                format!("{base}; minor_version_compatibility = \"allow\" would admit it"),
            )
            .with_fix(fix),
        ),
        _ => Some(Finding::new(Check::CudaRuntime, sev, base).with_fix(fix)),
    }
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
    let sev = if refuse {
        Severity::Error
    } else {
        Severity::Warning
    };
    Some(
        Finding::new(
            Check::Library,
            sev,
            format!("the libraries scan stopped early: {}{list}", esc(why)),
        )
        .with_fix(
            "raise the [libraries] budgets, or check the image for oversized or hostile files",
        ),
    )
}

#[cfg(test)]
mod tests;
