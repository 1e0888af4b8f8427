//! Judges scanned libraries against the visible GPUs, as the CUDA driver
//! would pick code for them, and words the `kernel-image` findings. Pure:
//! no I/O, table-tested.

use crate::core::arch::{
    first_toolkit_for, last_toolkit_for, ptx_isa_needs, ptx_isa_supported, ptx_jits_on,
    sass_runs_on, Arch, Cc, IsaNeed, Kind,
};
use crate::core::decision::{Check, Finding, Severity};
use crate::core::facts::Gpu;
use crate::core::policy::Enforcement;
use crate::core::sanitize::esc_bounded;
use crate::core::version::Version;
use serde::{Deserialize, Serialize};

/// The longest path or error text quoted from an image in a message.
const MAX_QUOTE: usize = 200;
/// The most architectures named in one message.
const MAX_ARCHS_SHOWN: usize = 16;
/// The most unjudged libraries named in the message of an incomplete scan
/// (the finding's details name up to [`MAX_ARCHS_SHOWN`]).
const MAX_UNJUDGED_NAMED: usize = 8;

/// One distinct image kind of a library, what the judgement needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Image {
    pub kind: Kind,
    pub arch: Arch,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ptx_isa: Option<(u16, u16)>,
}

/// What a library holds: its distinct images, or why it could not be read.
pub type Outcome = Result<Vec<Image>, String>;

/// One library found in the rootfs and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Library {
    /// The path inside the rootfs, as matched (e.g. `usr/lib/libfoo.so.1`).
    pub path: String,
    pub outcome: Outcome,
}

/// Everything the I/O side found for one container.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scanned {
    pub libraries: Vec<Library>,
    /// Why the scan stopped early (a budget), if it did.
    pub incomplete: Option<String>,
    /// Libraries matched but not judged because a budget ran out, in scan
    /// order (bounded: see `not_scanned_total`).
    pub not_scanned: Vec<String>,
    /// How many matched libraries were not judged in all (0: as many as
    /// `not_scanned` lists).
    pub not_scanned_total: usize,
    /// Bytes the scan read from the libraries (headers; what `max_bytes`
    /// counts), retried attempts included.
    pub bytes_read: u64,
    /// `kernel_image.on_incomplete` of the config the scan ran under, so
    /// whoever judges this scan applies the same policy to what it left.
    pub on_incomplete: Enforcement,
    /// The rootfs could not be opened at all.
    pub rootfs_error: Option<String>,
}

/// How a library's code runs on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeFit {
    /// Machine code for the device (the best such `sm_XY`).
    Native(Arch),
    /// Only PTX fits: the driver JIT-compiles it at first start.
    Jit { ptx: Arch, isa: Option<(u16, u16)> },
    /// Nothing runs: `no kernel image is available for execution on the
    /// device`. `blocked` is PTX that would fit but whose ISA the driver
    /// is too old for (CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
    NoImage { blocked: Option<(Arch, (u16, u16))> },
}

/// Picks code for a device of capability `cc` from `images`, with the host
/// driver's CUDA version `driver` (`None`: unknown, PTX assumed loadable).
pub fn judge(images: &[Image], cc: Cc, driver: Option<(u64, u64)>) -> CodeFit {
    let best_sass = images
        .iter()
        .filter(|i| i.kind == Kind::Sass && sass_runs_on(i.arch, cc))
        .map(|i| i.arch)
        .max();
    if let Some(a) = best_sass {
        return CodeFit::Native(a);
    }
    let mut best_jit: Option<(Arch, Option<(u16, u16)>)> = None;
    let mut blocked: Option<(Arch, (u16, u16))> = None;
    for i in images
        .iter()
        .filter(|i| i.kind == Kind::Ptx && ptx_jits_on(i.arch, cc))
    {
        let ok = match (i.ptx_isa, driver) {
            (Some(isa), Some(d)) => ptx_isa_supported(isa, d),
            _ => true,
        };
        if ok {
            let better = match best_jit {
                None => true,
                Some((b, _)) => b.number < i.arch.number,
            };
            if better {
                best_jit = Some((i.arch, i.ptx_isa));
            }
        } else if let Some(isa) = i.ptx_isa {
            // Report the PTX needing the least driver: the nearest fix.
            let nearer = match blocked {
                None => true,
                Some((_, b)) => isa < b,
            };
            if nearer {
                blocked = Some((i.arch, isa));
            }
        }
    }
    match best_jit {
        Some((ptx, isa)) => CodeFit::Jit { ptx, isa },
        None => CodeFit::NoImage { blocked },
    }
}

/// `sm_80, sm_90a, compute_90 (PTX ISA 8.4)`, sorted, deduplicated, bounded.
pub fn describe_images(images: &[Image]) -> String {
    let mut sass: Vec<Arch> = images
        .iter()
        .filter(|i| i.kind == Kind::Sass)
        .map(|i| i.arch)
        .collect();
    sass.sort();
    sass.dedup();
    let mut ptx: Vec<(Arch, Option<(u16, u16)>)> = images
        .iter()
        .filter(|i| i.kind == Kind::Ptx)
        .map(|i| (i.arch, i.ptx_isa))
        .collect();
    ptx.sort();
    ptx.dedup();
    let mut names: Vec<String> = sass.iter().map(|a| a.sass_name()).collect();
    names.extend(ptx.iter().map(|(a, isa)| match isa {
        Some((x, y)) => format!("{} (PTX ISA {x}.{y})", a.ptx_name()),
        None => a.ptx_name(),
    }));
    if names.is_empty() {
        return "no GPU code".into();
    }
    let more = names.len().saturating_sub(MAX_ARCHS_SHOWN);
    names.truncate(MAX_ARCHS_SHOWN);
    let mut s = names.join(", ");
    if more > 0 {
        s.push_str(&format!(" and {more} more"));
    }
    s
}

/// GPUs that share a name and compute capability, judged once.
struct GpuGroup<'a> {
    gpus: Vec<&'a Gpu>,
    cc: Option<Cc>,
}

impl GpuGroup<'_> {
    fn describe(&self) -> String {
        let first = self.gpus[0];
        let cc = first.compute_capability.as_deref().unwrap_or("unknown");
        let name = esc_bounded(&first.name, 80);
        let ids = self
            .gpus
            .iter()
            .map(|g| g.index.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let what = if self.gpus.len() == 1 { "GPU" } else { "GPUs" };
        if name.is_empty() {
            format!("{what} {ids} (compute capability {cc})")
        } else {
            format!("{what} {ids} ({name}, compute capability {cc})")
        }
    }
}

fn group_gpus(gpus: &[Gpu]) -> Vec<GpuGroup<'_>> {
    let mut groups: Vec<GpuGroup> = Vec::new();
    for g in gpus {
        match groups.iter_mut().find(|x| {
            x.gpus[0].name == g.name && x.gpus[0].compute_capability == g.compute_capability
        }) {
            Some(x) => x.gpus.push(g),
            None => groups.push(GpuGroup {
                gpus: vec![g],
                cc: g.compute_capability.as_deref().and_then(Cc::parse),
            }),
        }
    }
    groups
}

/// A build hint in the framework's own words, chosen from the library path.
fn build_hint(path: &str, cc: Cc) -> String {
    let p = path.to_ascii_lowercase();
    let n = cc.arch_number();
    if p.contains("torch") {
        format!("e.g. TORCH_CUDA_ARCH_LIST=\"{cc}\"")
    } else if p.contains("tensorflow") {
        format!("e.g. TF_CUDA_COMPUTE_CAPABILITIES={cc}")
    } else if p.contains("cupy") {
        format!("e.g. CUPY_NVCC_GENERATE_CODE=\"arch=compute_{n},code=sm_{n}\"")
    } else {
        format!("e.g. nvcc -gencode arch=compute_{n},code=sm_{n}")
    }
}

fn fix_for_no_image(path: &str, cc: Cc, blocked: Option<(Arch, (u16, u16))>) -> String {
    let sm = cc.sm();
    let hint = build_hint(path, cc);
    if let Some((_, isa)) = blocked {
        let need = match ptx_isa_needs(isa) {
            IsaNeed::Cuda(a, b) => format!("CUDA {a}.{b}"),
            IsaNeed::Unknown => "a CUDA version newer than gpu-guard knows".into(),
        };
        return format!(
            "upgrade the host driver to one that provides {need} or newer (for PTX ISA {}.{}), \
             or use an image or wheel built for {sm} ({hint})",
            isa.0, isa.1
        );
    }
    if let Some(line) = last_toolkit_for(cc) {
        return format!(
            "CUDA toolkits after {line} no longer build for {sm}: use the newest image or wheel \
             line built with CUDA {line} or older that still carries {sm} ({hint}), \
             or run on a newer GPU"
        );
    }
    let since = first_toolkit_for(cc)
        .map(|v| format!(", CUDA {v} or newer"))
        .unwrap_or_default();
    format!(
        "use an image or wheel built for {sm}{since} ({hint}), or one that carries PTX for \
         compute_{} or older",
        cc.arch_number()
    )
}

fn severity_for_no_image(severity: Enforcement) -> Severity {
    match severity {
        Enforcement::Refuse => Severity::Error,
        Enforcement::Warn | Enforcement::Off => Severity::Warning,
    }
}

/// What every per-library judgement in [`assess`] shares: the GPU groups,
/// the host driver's CUDA version and the configured severity. Bundled so
/// the per-library helpers take one argument instead of three.
struct Judging<'a> {
    groups: Vec<GpuGroup<'a>>,
    driver: Option<(u64, u64)>,
    severity: Enforcement,
}

/// The `kernel-image` findings of `scanned` on one host: on the GPUs the
/// container's request makes visible there, with that host driver's CUDA
/// version. Nothing when the check is off or no GPU is visible. Shared by
/// the container-start path (one host) and fleets (the scan done once,
/// judged per host).
pub fn assess_on_host(
    scanned: &Scanned,
    request: &crate::core::detect::Request,
    facts: &crate::core::facts::HostFacts,
    severity: Enforcement,
) -> Vec<Finding> {
    let (idx, _) = crate::core::detect::resolve(request, facts);
    let gpus: Vec<Gpu> = idx.iter().map(|i| facts.gpus[*i].clone()).collect();
    if severity == Enforcement::Off || gpus.is_empty() {
        return Vec::new();
    }
    let cuda = facts
        .cuda_driver_version
        .as_deref()
        .and_then(|v| Version::parse(v).ok());
    assess(scanned, &gpus, cuda.as_ref(), severity)
}

/// The `kernel-image` findings for what was scanned, against the visible
/// GPUs and the host driver's CUDA version.
pub fn assess(
    scanned: &Scanned,
    gpus: &[Gpu],
    cuda_driver_version: Option<&Version>,
    severity: Enforcement,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if severity == Enforcement::Off || gpus.is_empty() {
        return out;
    }
    if let Some(e) = &scanned.rootfs_error {
        out.push(rootfs_error_finding(e));
        return out;
    }
    let judging = Judging {
        groups: group_gpus(gpus),
        driver: cuda_driver_version.map(|v| (v.major(), v.minor())),
        severity,
    };
    out.extend(unknown_cc_findings(&judging.groups));
    for lib in &scanned.libraries {
        out.extend(library_findings(lib, &judging));
    }
    if let Some(reason) = &scanned.incomplete {
        out.push(incomplete_finding(reason, scanned, severity));
    }
    out
}

/// The single finding when the rootfs could not be opened. Split out of
/// [`assess`] because it ends the assessment: nothing else can be judged.
fn rootfs_error_finding(e: &str) -> Finding {
    Finding::warning(
        Check::KernelImage,
        format!(
            "cannot check the GPU code in the image: {}",
            esc_bounded(e, MAX_QUOTE)
        ),
    )
    .with_fix("check the bundle's root.path; gpu-guard could not open it")
}

/// One warning per GPU group whose compute capability is unknown. These
/// groups are skipped by the per-library judgement, so they are reported
/// once here, independent of any library.
fn unknown_cc_findings(groups: &[GpuGroup]) -> Vec<Finding> {
    groups
        .iter()
        .filter(|g| g.cc.is_none())
        .map(|g| {
            Finding::warning(
                Check::KernelImage,
                format!(
                    "cannot judge the image's GPU code for {}: its compute capability is unknown",
                    g.describe()
                ),
            )
            .with_fix("give gpu-guard NVML access (host facts without compute_capability come from /proc)")
        })
        .collect()
}

/// The findings for one scanned library: an unreadable-library warning, or
/// one finding per GPU group that cannot run it natively. The seam is the
/// library: each is judged on its own against every GPU group.
fn library_findings(lib: &Library, judging: &Judging) -> Vec<Finding> {
    let path = esc_bounded(&lib.path, MAX_QUOTE);
    let images = match &lib.outcome {
        Ok(images) => images,
        Err(e) => return vec![unreadable_finding(&path, e)],
    };
    if images.is_empty() {
        return Vec::new();
    }
    let carries = describe_images(images);
    let mut out = Vec::new();
    for g in &judging.groups {
        let Some(cc) = g.cc else { continue };
        let case = LibOnGroup {
            lib,
            path: &path,
            carries: &carries,
            group: g,
            cc,
        };
        match judge(images, cc, judging.driver) {
            CodeFit::Native(_) => {}
            CodeFit::Jit { ptx, isa } => out.push(jit_finding(&case, ptx, isa)),
            CodeFit::NoImage { blocked } => out.push(no_image_finding(&case, blocked, judging)),
        }
    }
    out
}

/// A library whose GPU code could not be read: it cannot be judged, so it
/// gets a warning instead of per-GPU verdicts.
fn unreadable_finding(path: &str, e: &str) -> Finding {
    Finding::warning(
        Check::KernelImage,
        format!(
            "cannot read the GPU code in {path}: {}",
            esc_bounded(e, MAX_QUOTE)
        ),
    )
    .with_fix(format!(
        "check {path} in the image; gpu-guard could not verify that it runs on this host's GPUs"
    ))
}

/// One library judged against one GPU group: what the verdict findings
/// quote. A struct so the per-verdict helpers stay short in arguments.
struct LibOnGroup<'a> {
    lib: &'a Library,
    /// The library path, escaped for quoting.
    path: &'a str,
    /// [`describe_images`] of the library.
    carries: &'a str,
    group: &'a GpuGroup<'a>,
    cc: Cc,
}

/// The warning for [`CodeFit::Jit`]: the library runs, but only after the
/// driver JIT-compiles its PTX. One helper per verdict kind.
fn jit_finding(case: &LibOnGroup, ptx: Arch, isa: Option<(u16, u16)>) -> Finding {
    let LibOnGroup {
        lib,
        path,
        carries,
        group,
        cc,
    } = case;
    let isa = isa
        .map(|(a, b)| format!(" (PTX ISA {a}.{b})"))
        .unwrap_or_default();
    Finding::warning(
        Check::KernelImage,
        format!(
            "{path} has no machine code for {}: the driver will JIT-compile its PTX {}{isa} at first start, which can take minutes (it carries {carries})",
            group.describe(),
            ptx.ptx_name()
        ),
    )
    .with_fix(format!(
        "use an image or wheel built for {} ({}); until then keep CUDA_CACHE_PATH on a persistent volume so the JIT runs once",
        cc.sm(),
        build_hint(&lib.path, *cc)
    ))
}

/// The finding for [`CodeFit::NoImage`]: nothing in the library runs on the
/// group, at the configured severity. One helper per verdict kind.
fn no_image_finding(
    case: &LibOnGroup,
    blocked: Option<(Arch, (u16, u16))>,
    judging: &Judging,
) -> Finding {
    let LibOnGroup {
        lib,
        path,
        carries,
        group,
        cc,
    } = case;
    let why = match (blocked, judging.driver) {
        (Some((a, (x, y))), Some((dm, dn))) => format!(
            "; its PTX {} is PTX ISA {x}.{y}, newer than the host driver (CUDA {dm}.{dn}) can compile",
            a.ptx_name()
        ),
        _ => String::new(),
    };
    Finding::new(
        Check::KernelImage,
        severity_for_no_image(judging.severity),
        format!(
            "{path} has no GPU code that runs on {} (it carries {carries}{why}): CUDA will fail with \"no kernel image is available for execution on the device\"",
            group.describe()
        ),
    )
    .with_fix(fix_for_no_image(&lib.path, *cc, blocked))
}

/// The finding when the scan stopped on a budget, naming (bounded) the
/// libraries left unjudged. Separate because it is about the scan, not
/// about any library or GPU. A warning, unless `on_incomplete = "refuse"`
/// under `severity = "enforce"`: then an error, as a library without code
/// for a visible GPU is, since an unjudged library may be one.
fn incomplete_finding(reason: &str, scanned: &Scanned, severity: Enforcement) -> Finding {
    let listed = &scanned.not_scanned;
    let total = scanned.not_scanned_total.max(listed.len());
    let mut names: Vec<String> = listed
        .iter()
        .take(MAX_UNJUDGED_NAMED)
        .map(|p| esc_bounded(p, MAX_QUOTE))
        .collect();
    let unnamed = total - names.len();
    if unnamed > 0 {
        names.push(format!("{unnamed} more"));
    }
    let which = match names.len() {
        0 => String::new(),
        _ => format!(": {}", names.join(", ")),
    };
    let refuse = scanned.on_incomplete == Enforcement::Refuse && severity == Enforcement::Refuse;
    let (level, fix) = if refuse {
        (
            Severity::Error,
            "kernel_image.on_incomplete = \"refuse\" refuses a container whose libraries were not all judged: raise kernel_image budgets (max_files, max_bytes, max_file_bytes, max_entries, time_budget_ms) or narrow kernel_image.libraries; what was judged is cached, so the next start continues with the rest",
        )
    } else {
        (
            Severity::Warning,
            "raise kernel_image budgets (max_files, max_bytes, max_file_bytes, max_entries, time_budget_ms) or narrow kernel_image.libraries; what was judged is cached, so the next start continues with the rest (kernel_image.on_incomplete = \"refuse\" refuses instead under enforce)",
        )
    };
    let mut f = Finding::new(
        Check::KernelImage,
        level,
        format!(
            "the GPU code check stopped early ({}); {total} matched librar{} not checked{which}",
            esc_bounded(reason, MAX_QUOTE),
            if total == 1 { "y" } else { "ies" }
        ),
    )
    .with_fix(fix);
    f.details = listed
        .iter()
        .take(MAX_ARCHS_SHOWN)
        .map(|p| esc_bounded(p, MAX_QUOTE))
        .collect();
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arch::Variant;

    fn sass(n: u32, v: Variant) -> Image {
        Image {
            kind: Kind::Sass,
            arch: Arch::new(n, v),
            ptx_isa: None,
        }
    }
    fn ptx(n: u32, isa: (u16, u16)) -> Image {
        Image {
            kind: Kind::Ptx,
            arch: Arch::new(n, Variant::Plain),
            ptx_isa: Some(isa),
        }
    }
    fn gpu(index: u32, name: &str, cc: Option<&str>) -> Gpu {
        Gpu {
            index,
            name: name.into(),
            compute_capability: cc.map(|s| s.into()),
            ..Default::default()
        }
    }
    fn cc(s: &str) -> Cc {
        Cc::parse(s).unwrap()
    }
    use Variant::{Arch as A, Family as F, Plain as P};

    #[test]
    fn judge_table() {
        let torch_like = [sass(80, P), sass(86, P), sass(90, P), ptx(90, (8, 4))];
        type Case = (Vec<Image>, &'static str, Option<(u64, u64)>, CodeFit);
        let cases: Vec<Case> = vec![
            (
                torch_like.to_vec(),
                "8.0",
                Some((12, 4)),
                CodeFit::Native(Arch::new(80, P)),
            ),
            (
                torch_like.to_vec(),
                "8.9",
                Some((12, 4)),
                CodeFit::Native(Arch::new(86, P)),
            ),
            (
                torch_like.to_vec(),
                "9.0",
                None,
                CodeFit::Native(Arch::new(90, P)),
            ),
            (
                torch_like.to_vec(),
                "10.0",
                Some((12, 8)),
                CodeFit::Jit {
                    ptx: Arch::new(90, P),
                    isa: Some((8, 4)),
                },
            ),
            // The driver is too old for the PTX: nothing runs.
            (
                torch_like.to_vec(),
                "10.0",
                Some((12, 2)),
                CodeFit::NoImage {
                    blocked: Some((Arch::new(90, P), (8, 4))),
                },
            ),
            (
                torch_like.to_vec(),
                "7.5",
                Some((12, 4)),
                CodeFit::NoImage { blocked: None },
            ),
            (
                torch_like.to_vec(),
                "3.7",
                Some((11, 4)),
                CodeFit::NoImage { blocked: None },
            ),
            // Arch-specific only: H100 yes, B200 and A100 no.
            (
                vec![sass(90, A)],
                "9.0",
                None,
                CodeFit::Native(Arch::new(90, A)),
            ),
            (
                vec![sass(90, A)],
                "10.0",
                None,
                CodeFit::NoImage { blocked: None },
            ),
            // Family: sm_100f on B300 (10.3), not on RTX 50 (12.0).
            (
                vec![sass(100, F)],
                "10.3",
                None,
                CodeFit::Native(Arch::new(100, F)),
            ),
            (
                vec![sass(100, F)],
                "12.0",
                None,
                CodeFit::NoImage { blocked: None },
            ),
            // Unknown driver: PTX assumed loadable.
            (
                vec![ptx(75, (9, 5))],
                "8.0",
                None,
                CodeFit::Jit {
                    ptx: Arch::new(75, P),
                    isa: Some((9, 5)),
                },
            ),
            (vec![], "8.0", None, CodeFit::NoImage { blocked: None }),
        ];
        for (images, dev, drv, want) in cases {
            assert_eq!(
                judge(&images, cc(dev), drv),
                want,
                "{images:?} on {dev} drv {drv:?}"
            );
        }
    }

    fn lib(path: &str, images: Vec<Image>) -> Library {
        Library {
            path: path.into(),
            outcome: Ok(images),
        }
    }

    #[test]
    fn findings_for_each_case() {
        let scanned = Scanned {
            libraries: vec![
                lib(
                    "usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so",
                    vec![sass(80, P), sass(90, P), ptx(90, (8, 4))],
                ),
                lib("usr/lib/libnogpu.so", vec![]),
                Library {
                    path: "usr/lib/libbroken.so\n\u{202e}evil".into(),
                    outcome: Err("fatbin container at offset 0x10 runs past the end".into()),
                },
            ],
            ..Default::default()
        };
        let gpus = [
            gpu(0, "Tesla T4", Some("7.5")),
            gpu(1, "Tesla T4", Some("7.5")),
            gpu(2, "NVIDIA B200", Some("10.0")),
            gpu(3, "NVIDIA A100-SXM4-80GB", Some("8.0")),
            gpu(4, "mystery", None),
        ];
        let v = Version::parse("12.8").unwrap();
        let f = assess(&scanned, &gpus, Some(&v), Enforcement::Refuse);
        let msgs: Vec<&str> = f.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(f.len(), 4, "{msgs:#?}");
        // Unknown CC.
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(f[0].message.contains("GPU 4 (mystery"), "{}", f[0].message);
        // T4s: one grouped error naming both, the archs and the CUDA error.
        assert_eq!(f[1].severity, Severity::Error);
        assert!(f[1]
            .message
            .contains("GPUs 0, 1 (Tesla T4, compute capability 7.5)"));
        assert!(f[1]
            .message
            .contains("sm_80, sm_90, compute_90 (PTX ISA 8.4)"));
        assert!(f[1].message.contains("no kernel image is available"));
        let fix = f[1].fix.as_deref().unwrap();
        assert!(
            fix.contains("sm_75") && fix.contains("TORCH_CUDA_ARCH_LIST=\"7.5\""),
            "{fix}"
        );
        // B200: JIT warning.
        assert_eq!(f[2].severity, Severity::Warning);
        assert!(f[2].message.contains("JIT") && f[2].message.contains("compute_90"));
        // Broken library: warning, escaped.
        assert_eq!(f[3].severity, Severity::Warning);
        assert!(
            f[3].message.contains("libbroken.so\\x0a\\u{202e}evil"),
            "{}",
            f[3].message
        );
        assert!(!f[3].message.contains('\n'));

        // warn severity downgrades the error; off yields nothing.
        let w = assess(&scanned, &gpus, Some(&v), Enforcement::Warn);
        assert!(w.iter().all(|f| f.severity == Severity::Warning));
        assert!(assess(&scanned, &gpus, Some(&v), Enforcement::Off).is_empty());
        assert!(assess(&scanned, &[], Some(&v), Enforcement::Refuse).is_empty());
    }

    #[test]
    fn fixes_name_the_way_out() {
        // Old GPU: the last CUDA line that builds for it.
        let f = fix_for_no_image("usr/lib/libx.so", cc("3.7"), None);
        assert!(f.contains("11.8") && f.contains("sm_37"), "{f}");
        let f = fix_for_no_image(
            "opt/conda/lib/python3.11/site-packages/torch/lib/x.so",
            cc("6.1"),
            None,
        );
        assert!(
            f.contains("12.9") && f.contains("TORCH_CUDA_ARCH_LIST=\"6.1\""),
            "{f}"
        );
        // New GPU: the first CUDA that builds for it.
        let f = fix_for_no_image("usr/lib/libx.so", cc("10.0"), None);
        assert!(f.contains("sm_100") && f.contains("12.8"), "{f}");
        // PTX too new for the driver.
        let f = fix_for_no_image(
            "usr/lib/libx.so",
            cc("9.0"),
            Some((Arch::new(90, P), (8, 7))),
        );
        assert!(f.contains("CUDA 12.8") && f.contains("PTX ISA 8.7"), "{f}");
    }

    #[test]
    fn budget_and_rootfs_findings() {
        let gpus = [gpu(0, "NVIDIA H100", Some("9.0"))];
        let s = Scanned {
            incomplete: Some("time budget of 2000 ms used up".into()),
            not_scanned: vec!["usr/lib/a.so".into(), "usr/lib/b.so".into()],
            ..Default::default()
        };
        let f = assess(&s, &gpus, None, Enforcement::Refuse);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(f[0].message.contains("2 matched libraries not checked"));
        assert_eq!(f[0].details, ["usr/lib/a.so", "usr/lib/b.so"]);
        assert!(
            f[0].message
                .ends_with("not checked: usr/lib/a.so, usr/lib/b.so"),
            "{}",
            f[0].message
        );
        // on_incomplete = "refuse": an error under enforce, a warning under warn.
        let mut r = s.clone();
        r.on_incomplete = Enforcement::Refuse;
        r.not_scanned_total = 12;
        let f = assess(&r, &gpus, None, Enforcement::Refuse);
        assert_eq!(f[0].severity, Severity::Error);
        assert!(
            f[0].message
                .contains("12 matched libraries not checked: usr/lib/a.so, usr/lib/b.so, 10 more"),
            "{}",
            f[0].message
        );
        assert!(f[0].fix.as_deref().unwrap().contains("refuse"));
        let f = assess(&r, &gpus, None, Enforcement::Warn);
        assert_eq!(f[0].severity, Severity::Warning);
        let s = Scanned {
            rootfs_error: Some("cannot open the container rootfs /x: No such file".into()),
            ..Default::default()
        };
        let f = assess(&s, &gpus, None, Enforcement::Refuse);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
    }

    #[test]
    fn describes_bounded() {
        let many: Vec<Image> = (50..90).map(|n| sass(n, P)).collect();
        let d = describe_images(&many);
        assert!(d.ends_with("and 24 more"), "{d}");
        assert_eq!(describe_images(&[]), "no GPU code");
    }
}
