//! The `kernel-image` findings: what a library that does not run (or
//! runs only after a JIT) on a visible GPU means, and the fix in the
//! framework's own words.

use super::fit::{describe_images, judge, CodeFit};
use super::{Library, Scanned, MAX_ARCHS_SHOWN};
use crate::core::arch::{first_toolkit_for, last_toolkit_for, ptx_isa_needs, Arch, Cc, IsaNeed};
use crate::core::decision::{Check, Finding, Severity};
use crate::core::facts::Gpu;
use crate::core::policy::Enforcement;
use crate::core::sanitize::esc_bounded;
use crate::core::version::Version;

/// The longest path or error text quoted from an image in a message.
const MAX_QUOTE: usize = 200;
/// The most unjudged libraries named in the message of an incomplete scan
/// (the finding's details name up to [`MAX_ARCHS_SHOWN`]).
const MAX_UNJUDGED_NAMED: usize = 8;

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
        out.push(rootfs_error_finding(e, scanned, severity));
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
/// A check that could not run judged nothing, so it is an unfinished one:
/// the same severity as [`incomplete_finding`]'s.
fn rootfs_error_finding(e: &str, scanned: &Scanned, severity: Enforcement) -> Finding {
    let refuse = scanned.on_incomplete == Enforcement::Refuse && severity == Enforcement::Refuse;
    let level = if refuse {
        Severity::Error
    } else {
        Severity::Warning
    };
    Finding::new(
        Check::KernelImage,
        level,
        format!(
            "cannot check the GPU code in the image: {}",
            esc_bounded(e, MAX_QUOTE)
        ),
    )
    .with_fix(if refuse {
        "check the bundle's root.path; gpu-guard could not open it (kernel_image.on_incomplete = \"enforce\" refuses a container whose libraries were not checked)"
    } else {
        "check the bundle's root.path; gpu-guard could not open it"
    })
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
    .predicting_failure()
}

/// The finding when the scan stopped on a budget, naming (bounded) the
/// libraries left unjudged. Separate because it is about the scan, not
/// about any library or GPU. A warning, unless `on_incomplete = "enforce"`
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
            "kernel_image.on_incomplete = \"enforce\" refuses a container whose libraries were not all judged: raise kernel_image budgets (max_files, max_bytes, max_file_bytes, max_entries, time_budget_ms) or narrow kernel_image.libraries; what was judged is cached, so the next start continues with the rest",
        )
    } else {
        (
            Severity::Warning,
            "raise kernel_image budgets (max_files, max_bytes, max_file_bytes, max_entries, time_budget_ms) or narrow kernel_image.libraries; what was judged is cached, so the next start continues with the rest (kernel_image.on_incomplete = \"enforce\" refuses instead under enforce)",
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
    use crate::core::kernel_image::test_images::{ptx, sass};
    use crate::core::kernel_image::Image;

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
    use Variant::Plain as P;

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
        // on_incomplete = "enforce": an error under enforce, a warning under warn.
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
        // A check that could not run follows on_incomplete as a partial
        // one does.
        let s = Scanned {
            on_incomplete: Enforcement::Refuse,
            ..s
        };
        let f = assess(&s, &gpus, None, Enforcement::Refuse);
        assert_eq!(f[0].severity, Severity::Error);
        let f = assess(&s, &gpus, None, Enforcement::Warn);
        assert_eq!(f[0].severity, Severity::Warning);
    }
}
