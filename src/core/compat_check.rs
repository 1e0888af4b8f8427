//! The `compat` findings: CUDA forward compatibility wired to the image's
//! compat library ([`crate::core::compat`] judges one GPU), and CUDA
//! minor-version compatibility for `cuda>=X.Y` factors that fail only on
//! the minor version. Pure: the scans are done by the caller.
//!
//! Forward compatibility (docs.nvidia.com/deploy/cuda-compatibility,
//! "Forward Compatibility"). Official images admit older driver branches
//! through alternatives such as `brand=tesla,driver>=535,driver<536` and
//! ship `cuda-compat` (`/usr/local/cuda/compat/libcuda.so.<version>`).
//! NVIDIA's `enable-cuda-compat` hook uses that library when there is
//! exactly one, its note lists the host branch and it is newer than the host
//! driver, and never checks the brand; the driver then refuses brands the
//! note does not list with CUDA error 804 (nvidia-docker#1515). So:
//! - the compat library is read only when it matters
//!   ([`crate::core::decide::forward_compat_need`]): the requirement holds
//!   only through a forward-compatibility alternative
//!   ([`crate::core::requirement::Requirement::forward_compat_only`]), or
//!   the image's `CUDA_VERSION` is newer than the host driver's CUDA;
//! - a GPU whose brand the note leaves out, on a branch it lists: the hook
//!   loads the library and CUDA fails with 804 whatever the requirement
//!   said: refused;
//! - a branch the note leaves out: the hook does not load the library and
//!   the container gets the host's CUDA; refused when the requirement held
//!   only through forward compatibility (the image needs CUDA X natively),
//!   a warning otherwise;
//! - no compat library while the requirement holds only through forward
//!   compatibility: `compat.missing_library` (refused under either setting
//!   when the host's CUDA is a major version behind: nothing bridges that).
//!
//! Minor-version compatibility (same guide, "Minor Version
//! Compatibility"): from CUDA 11 on, code built with CUDA X.Y runs on a
//! driver of the X family at or above the family minimum
//! ([`cuda_tables::minor_version_min_driver`]), except for PTX from the
//! newer toolkit (the older driver cannot JIT it) and APIs that need the
//! newer driver. gpu-guard admits it only on evidence: the scan found CUDA
//! libraries and every one runs on every visible GPU as SASS.

use crate::core::arch::Cc;
use crate::core::compat::{self, CompatScan, CompatVerdict, Incompatibility};
use crate::core::cuda_tables;
use crate::core::decision::{Check, Finding, Severity};
use crate::core::facts::Gpu;
use crate::core::kernel_image::{self, CodeFit, Scanned};
use crate::core::policy::{CompatConfig, Enforcement};
use crate::core::requirement::MinorVersion;
use crate::core::sanitize::{esc, esc_bounded};
use crate::core::version::Version;

/// Most per-GPU findings of one severity; the rest are counted.
const MAX_PER_SEVERITY: usize = 4;
/// Most compat library names quoted.
const MAX_NAMED: usize = 4;

/// Why the compat library is read, and what the host offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FwdNeed {
    /// The requirement (its variable) that holds only through forward
    /// compatibility, and the CUDA it asks for natively.
    pub only_via_fwd: Option<(String, Version)>,
    /// The image's `CUDA_VERSION` (major.minor), when newer than the host
    /// driver's CUDA.
    pub image_cuda: Option<Version>,
}

impl FwdNeed {
    /// The CUDA version the image wants, for messages and fixes.
    fn cuda(&self) -> Option<&Version> {
        self.only_via_fwd
            .as_ref()
            .map(|(_, v)| v)
            .or(self.image_cuda.as_ref())
    }
}

/// The host side of the forward-compatibility judgement.
pub struct FwdHost<'a> {
    pub gpus: &'a [&'a Gpu],
    pub driver: &'a Version,
    pub cuda: Option<&'a Version>,
}

/// "install NVIDIA driver D or newer, which supports CUDA X natively".
fn native_fix(cuda: Option<&Version>) -> String {
    match cuda {
        Some(c) => match cuda_tables::min_driver_for_cuda(c) {
            Some(d) => format!(
                "a driver branch that supports CUDA {c} natively (NVIDIA driver {d} or newer)"
            ),
            None => format!("a driver branch that supports CUDA {c} natively"),
        },
        None => "a driver branch that supports the image's CUDA natively".to_string(),
    }
}

fn host_cuda_text(host: &FwdHost) -> String {
    match host.cuda {
        Some(c) => format!("CUDA {c} (driver {})", host.driver),
        None => format!("the CUDA of driver {}", host.driver),
    }
}

/// The forward-compatibility finding when the image's content was not
/// read (`check --env`, a spec without a rootfs, an image read without its
/// scans): the requirement holds only through forward compatibility, and
/// what decides whether it
/// runs is what was not read: the compat library (`cuda-compat`, loaded by
/// NVIDIA's hook) and whether the GPU may use it (data-center GPUs; the
/// library's note lists the brands). A warning: it never changes the
/// verdict, so fleets and affinities judge as before.
pub fn unread_finding(need: &FwdNeed, host: &FwdHost) -> Option<Finding> {
    let (var, v) = need.only_via_fwd.as_ref()?;
    let why = format!(
        "{} holds only through a forward-compatibility alternative (it needs CUDA {v}; the host has {})",
        esc(var),
        host_cuda_text(host)
    );
    let mut brands: Vec<String> = host.gpus.iter().map(|g| esc(&g.brand)).collect();
    brands.sort();
    brands.dedup();
    let gpus = if brands.is_empty() {
        String::new()
    } else {
        format!(" (this host's GPUs are {})", brands.join(", "))
    };
    let f = Finding::warning(
        Check::Compat,
        format!(
            "{why}; the image's content was not read, so what decides whether it runs is unknown: \
             the image's compat library (/{}/libcuda.so.*, which NVIDIA's hook loads) must list \
             driver branch {} and the GPU must be a data-center GPU{gpus}; on other GPUs CUDA \
             fails with error 804 (forward compatibility was attempted on non supported HW)",
            compat::COMPAT_DIR,
            host.driver.major()
        ),
    )
    .with_fix(format!(
        "check the image itself (`gpu-guard check --image IMAGE` or `--bundle DIR`) so its compat library is read, or install {}",
        native_fix(Some(v))
    ));
    Some(f)
}

/// The `compat` findings for the image's compat libraries on this host.
pub fn forward_findings(
    need: &FwdNeed,
    host: &FwdHost,
    scan: &CompatScan,
    cfg: &CompatConfig,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(e) = &scan.error {
        out.push(
            Finding::warning(
                Check::Compat,
                format!(
                    "cannot read the image's CUDA compat directory ({}): {}",
                    compat::COMPAT_DIR,
                    esc(e)
                ),
            )
            .with_fix(
                "check the image's /usr/local/cuda/compat; forward compatibility was not judged",
            ),
        );
        return out;
    }
    if scan.libs.is_empty() {
        out.extend(missing_library(need, host, cfg, None));
        return out;
    }
    if scan.libs.len() > 1 || scan.truncated {
        let names: Vec<String> = scan
            .libs
            .iter()
            .take(MAX_NAMED)
            .map(|l| esc(&l.path))
            .collect();
        out.push(Finding::warning(
            Check::Compat,
            format!(
                "the image has {}{} CUDA compat libraries ({}{}): NVIDIA's enable-cuda-compat hook uses forward compatibility only with exactly one, so none is used",
                scan.libs.len(),
                if scan.truncated { "+" } else { "" },
                names.join(", "),
                if scan.libs.len() > MAX_NAMED { ", ..." } else { "" },
            ),
        ));
        out.extend(missing_library(need, host, cfg, Some("no usable")));
        return out;
    }
    let lib = &scan.libs[0];
    let path = esc(&lib.path);
    let Ok(lib_version) = Version::parse(&lib.version) else {
        out.push(Finding::warning(
            Check::Compat,
            format!("cannot tell the driver version of the image's compat library {path} from its name: forward compatibility was not judged"),
        ));
        return out;
    };
    let note = match &lib.note {
        Ok(n) => n,
        Err(e) => {
            out.extend(unreadable_note(need, host, &path, &lib_version, e));
            return out;
        }
    };
    let mut per_gpu = Vec::new();
    for gpu in host.gpus {
        let v = compat::judge_gpu(gpu, host.driver, note, &lib_version);
        if let Some(f) = gpu_finding(need, host, note, v) {
            per_gpu.push(f);
        }
    }
    out.extend(bounded(per_gpu));
    out
}

/// One GPU's verdict as a finding (None: nothing worth saying).
fn gpu_finding(
    need: &FwdNeed,
    host: &FwdHost,
    note: &compat::CompatNote,
    v: CompatVerdict,
) -> Option<Finding> {
    let cuda = need.cuda();
    Some(match v {
        CompatVerdict::Works { message } => Finding::info(Check::Compat, message),
        CompatVerdict::Incompatible {
            reason: reason @ Incompatibility::BrandNotListed { .. },
            message,
        } => Finding::error(
            Check::Compat,
            format!("CUDA error {} predicted: {message}", reason.cuda_error()),
        )
        .with_fix(format!(
            "install {}, or run it on a data-center GPU (forward compatibility needs a data-center GPU)",
            native_fix(cuda)
        )),
        CompatVerdict::Incompatible {
            reason: Incompatibility::BranchNotListed { branch },
            message,
        } => {
            let listed = note
                .driver
                .as_ref()
                .map(|d| {
                    d.iter()
                        .map(|b| b.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            match &need.only_via_fwd {
                Some((source, needs)) => Finding::error(
                    Check::Compat,
                    format!(
                        "{} holds only through forward compatibility, which cannot work on driver branch {branch}: {message}; the container gets the host's {} and the image needs CUDA {needs} natively",
                        esc(source),
                        host_cuda_text(host)
                    ),
                )
                .with_fix(format!(
                    "install {}, or a driver branch the compat library lists ({listed})",
                    native_fix(Some(needs))
                )),
                None => Finding::warning(Check::Compat, message).with_fix(format!(
                    "install {}, or a driver branch the compat library lists ({listed})",
                    native_fix(cuda)
                )),
            }
        }
        CompatVerdict::NotApplicable { message } => {
            need.only_via_fwd.as_ref()?;
            Finding::info(Check::Compat, message)
        }
        CompatVerdict::NoDriverList { message } | CompatVerdict::UnknownBrand { message } => {
            Finding::warning(Check::Compat, message)
        }
    })
}

/// The library has no readable note: NVIDIA's hook falls back to comparing
/// driver majors; whether the GPUs are supported cannot be said.
fn unreadable_note(
    need: &FwdNeed,
    host: &FwdHost,
    path: &str,
    lib_version: &Version,
    e: &str,
) -> Vec<Finding> {
    if compat::forward_compat_applies_without_note(host.driver, lib_version) {
        return vec![Finding::warning(
            Check::Compat,
            format!(
                "cannot judge forward compatibility: the image's compat library {path} has no readable {} note ({}); NVIDIA's hook still uses it (driver branch {} is older than {lib_version}), and whether this host's GPUs support it is unknown",
                compat::NOTE_SECTION,
                esc(e),
                host.driver.major()
            ),
        )
        .with_fix(format!(
            "install {}, or use an image whose compat library carries NVIDIA's note",
            native_fix(need.cuda())
        ))];
    }
    match &need.only_via_fwd {
        Some((source, needs)) => vec![Finding::error(
            Check::Compat,
            format!(
                "{} holds only through forward compatibility, but NVIDIA's hook will not use the image's compat library {path} (its version {lib_version} is not newer than driver {}; its note is unreadable: {}): the container gets the host's {} and the image needs CUDA {needs} natively",
                esc(source),
                host.driver,
                esc(e),
                host_cuda_text(host)
            ),
        )
        .with_fix(format!("install {}", native_fix(Some(needs))))],
        None => Vec::new(),
    }
}

/// The finding when the requirement holds only through forward
/// compatibility but no compat library will be used.
fn missing_library(
    need: &FwdNeed,
    host: &FwdHost,
    cfg: &CompatConfig,
    what: Option<&str>,
) -> Option<Finding> {
    let (source, needs) = need.only_via_fwd.as_ref()?;
    let major_gap = host.cuda.is_some_and(|c| c.major() < needs.major());
    let tail = if major_gap {
        ", a whole major version behind: minor-version compatibility cannot bridge it"
    } else {
        " (it may still run through minor-version compatibility, without guarantees)"
    };
    let message = format!(
        "{} holds only through a forward-compatibility alternative (a driver-branch range), but the image ships {} CUDA compat library ({}/libcuda.so.*): the container gets the host's {} and the image asks for CUDA {needs}{tail}",
        esc(source),
        what.unwrap_or("no"),
        compat::COMPAT_DIR,
        host_cuda_text(host),
    );
    let refuse = major_gap || cfg.missing_library == Enforcement::Refuse;
    let f = if refuse {
        Finding::error(Check::Compat, message)
    } else {
        Finding::warning(Check::Compat, message)
    };
    Some(f.with_fix(format!(
        "install {}, or add the cuda-compat-{}-{} package to the image (data-center GPUs only)",
        native_fix(Some(needs)),
        needs.major(),
        needs.minor()
    )))
}

/// At most [`MAX_PER_SEVERITY`] findings of each severity, in order, and a
/// count of the rest (so eight GPUs do not make eight lines).
fn bounded(findings: Vec<Finding>) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut left: Vec<(Severity, usize)> = Vec::new();
    for f in findings {
        let shown = out
            .iter()
            .filter(|x: &&Finding| x.severity == f.severity)
            .count();
        if shown < MAX_PER_SEVERITY {
            out.push(f);
        } else {
            match left.iter_mut().find(|(s, _)| *s == f.severity) {
                Some((_, n)) => *n += 1,
                None => left.push((f.severity, 1)),
            }
        }
    }
    for (s, n) in left {
        out.push(Finding::new(
            Check::Compat,
            s,
            format!("and {n} more GPUs with the same forward-compatibility verdict"),
        ));
    }
    out
}

/// What minor-version compatibility makes of a requirement that failed on
/// the visible GPUs.
pub enum MinorOutcome {
    /// Admitted: the warning that replaces the failure.
    Admitted(Finding),
    /// Not admitted: the reason, for the failure's details.
    NotAdmitted(String),
}

/// The host side of the minor-version judgement.
pub struct MinorHost<'a> {
    pub gpus: &'a [&'a Gpu],
    pub driver: Option<&'a Version>,
    pub driver_text: &'a str,
    pub cuda: Option<&'a Version>,
}

/// Judges minor-version compatibility for the requirement `source`, given
/// [`crate::core::requirement::Requirement::minor_version`] on each GPU it
/// failed on, and the kernel-image scan.
pub fn minor_version(
    source: &str,
    per_gpu: &[MinorVersion],
    host: &MinorHost,
    scanned: Option<&Scanned>,
) -> MinorOutcome {
    let not = MinorOutcome::NotAdmitted;
    let mut needs: Option<&Version> = None;
    for mv in per_gpu {
        match mv {
            MinorVersion::NotCuda => {
                return not("it fails on more than a cuda>= factor's minor version".into())
            }
            MinorVersion::MajorGap { needs } => {
                let have = host
                    .cuda
                    .map_or("an unknown CUDA".to_string(), |c| format!("CUDA {c}"));
                return not(format!(
                    "a major-version gap: it asks for CUDA {needs} and driver {} provides {have}; minor-version compatibility covers only the same major",
                    host.driver_text
                ));
            }
            MinorVersion::Admits { needs: n } => {
                if !needs.is_some_and(|x| n <= x) {
                    needs = Some(n);
                }
            }
        }
    }
    let Some(needs) = needs else {
        return not("nothing to relax".into());
    };
    let Some(min) = cuda_tables::minor_version_min_driver(needs.major()) else {
        return not(format!(
            "gpu-guard knows no verified family minimum driver for CUDA {}.x",
            needs.major()
        ));
    };
    let family_min = Version::parse(min).ok();
    match (host.driver, family_min.as_ref()) {
        (Some(d), Some(m)) if d >= m => {}
        _ => {
            return not(format!(
                "driver {} is below {min}, the CUDA {}.x family minimum",
                host.driver_text,
                needs.major()
            ))
        }
    }
    let cuda = host.cuda.map(|c| (c.major(), c.minor()));
    let libs = match sass_only(scanned, host.gpus, cuda) {
        Ok(n) => n,
        Err(why) => return not(why),
    };
    let have = host
        .cuda
        .map_or(String::new(), |c| format!(" provides CUDA {c}"));
    MinorOutcome::Admitted(
        Finding::warning(
            Check::Compat,
            format!(
                "{}: cuda>={needs} fails only on the minor version (driver {}{have}); admitted through CUDA minor-version compatibility (requirements.minor_version_compatibility = \"allow\"): the driver is at least {min}, the CUDA {}.x family minimum, and all {libs} scanned CUDA libraries carry machine code (SASS) for every visible GPU. Limits: features new in CUDA {needs} fail with cudaErrorCallRequiresNewerDriver, and PTX from the newer toolkit cannot be JIT-compiled by this driver",
                esc(source),
                host.driver_text,
                needs.major()
            ),
        )
        .with_fix(match cuda_tables::min_driver_for_cuda(needs) {
            Some(d) => format!("to run CUDA {needs} fully, install NVIDIA driver {d} or newer"),
            None => format!("to run CUDA {needs} fully, install a driver that supports it"),
        }),
    )
}

/// Checks that the scan found CUDA libraries and that every one runs on
/// every visible GPU as SASS (no PTX JIT). Ok: how many; Err: why not.
fn sass_only(
    scanned: Option<&Scanned>,
    gpus: &[&Gpu],
    driver_cuda: Option<(u64, u64)>,
) -> Result<usize, String> {
    let Some(s) = scanned else {
        return Err("no libraries found: the image's libraries were not scanned (no rootfs, or kernel_image.severity = \"off\")".into());
    };
    if let Some(e) = &s.rootfs_error {
        return Err(format!(
            "no libraries found: the rootfs could not be read ({})",
            esc_bounded(e, 200)
        ));
    }
    if let Some(why) = &s.incomplete {
        return Err(format!(
            "the library scan stopped early ({}), so not every library was checked",
            esc_bounded(why, 200)
        ));
    }
    if gpus.is_empty() {
        return Err("no GPU is visible to judge the image's libraries on".into());
    }
    let mut n = 0usize;
    for lib in &s.libraries {
        let path = esc_bounded(&lib.path, 200);
        let images = match &lib.outcome {
            Ok(i) => i,
            Err(_) => return Err(format!("{path} could not be read")),
        };
        if images.is_empty() {
            continue;
        }
        n += 1;
        for g in gpus {
            let Some(cc) = g.compute_capability.as_deref().and_then(Cc::parse) else {
                return Err(format!(
                    "the compute capability of GPU {} is unknown",
                    g.index
                ));
            };
            match kernel_image::judge(images, cc, driver_cuda) {
                CodeFit::Native(_) => {}
                CodeFit::Jit { ptx, isa } => {
                    return Err(format!(
                        "{path} has no machine code for GPU {} (compute capability {cc}) and needs the driver to JIT-compile PTX {}{}",
                        g.index,
                        ptx.ptx_name(),
                        isa.map(|(a, b)| format!(" (PTX ISA {a}.{b})")).unwrap_or_default()
                    ))
                }
                CodeFit::NoImage {
                    blocked: Some((arch, (a, b))),
                } => {
                    return Err(format!(
                        "{path}'s only code for GPU {} (compute capability {cc}) is PTX {} (ISA {a}.{b}), newer than this driver's PTX ISA",
                        g.index,
                        arch.ptx_name()
                    ))
                }
                CodeFit::NoImage { blocked: None } => {
                    return Err(format!(
                        "{path} has no code for GPU {} (compute capability {cc})",
                        g.index
                    ))
                }
            }
        }
    }
    if n == 0 {
        return Err(
            "no libraries found: the scan found no library with GPU code in the image".into(),
        );
    }
    Ok(n)
}
