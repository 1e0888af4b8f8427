//! The `kernel-image` finding for an AMD GPU: a library without a code
//! object the HIP runtime loads on it ("hipErrorNoBinaryForGpu: Unable to
//! find code object for all current devices"), or a rocBLAS/hipBLASLt
//! without Tensile files for its processor ("Cannot read
//! TensileLibrary.dat: Illegal seek for GPU arch : gfx1103"). It names the
//! GPU, its target ID, the library, the targets the library has, and the
//! fix.

use super::code::AmdLibrary;
use super::fit::{near_misses, pick, Effective};
use super::target::{Feature, TargetId};
use crate::core::decision::{Check, Finding, Severity};
use crate::core::policy::Enforcement;
use crate::core::sanitize::esc_bounded;

/// The most targets named in one message.
const MAX_TARGETS_SHOWN: usize = 16;
const MAX_QUOTE: usize = 200;

/// The GPU as a finding names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmdGpuRef<'a> {
    pub index: u32,
    pub name: &'a str,
    pub pci_bus_id: Option<&'a str>,
    /// XNACK switches per process on this GPU.
    pub xnack_per_process: bool,
}

impl AmdGpuRef<'_> {
    fn describe(&self, eff: &Effective) -> String {
        let mut parts = Vec::new();
        if !self.name.is_empty() {
            parts.push(esc_bounded(self.name, 80));
        }
        if let Some(b) = self.pci_bus_id {
            parts.push(format!("bus {}", esc_bounded(b, 32)));
        }
        let target = match &eff.overridden_from {
            Some(from) => format!(
                "{} through HSA_OVERRIDE_GFX_VERSION (the GPU is {})",
                eff.target,
                esc_bounded(from, 32)
            ),
            None => eff.target.to_string(),
        };
        parts.push(target);
        format!("AMD GPU {} ({})", self.index, parts.join(", "))
    }
}

fn list(targets: &[TargetId]) -> String {
    let mut names: Vec<String> = targets.iter().map(|t| t.to_string()).collect();
    names.dedup();
    let more = names.len().saturating_sub(MAX_TARGETS_SHOWN);
    names.truncate(MAX_TARGETS_SHOWN);
    let mut s = names.join(", ");
    if more > 0 {
        s.push_str(&format!(" and {more} more"));
    }
    s
}

fn severity_of(enforcement: Enforcement, eff: &Effective) -> Severity {
    match (enforcement, &eff.uncertain) {
        (Enforcement::Refuse, None) => Severity::Error,
        _ => Severity::Warning,
    }
}

/// A build hint in the framework's words, from the library path.
fn build_hint(path: &str, processor: &str) -> String {
    let p = path.to_ascii_lowercase();
    if p.contains("torch") {
        format!("PYTORCH_ROCM_ARCH={processor}")
    } else if p.contains("tensorflow") {
        format!("TF_ROCM_AMDGPU_TARGETS={processor}")
    } else if p.contains("rocblas") || p.contains("hipblaslt") {
        format!("AMDGPU_TARGETS={processor}")
    } else {
        format!("hipcc --offload-arch={processor}")
    }
}

/// The fix when only the feature settings differ.
fn feature_fix(misses: &[&TargetId], eff: &Effective, gpu: &AmdGpuRef) -> Option<String> {
    let want_xnack = misses
        .iter()
        .find(|c| c.xnack != Feature::Any && c.xnack != eff.target.xnack)?;
    let on = want_xnack.xnack == Feature::On;
    Some(if gpu.xnack_per_process {
        format!(
            "the library has {} only: set HSA_XNACK={} in the container (this GPU switches XNACK per process), or use a build for {}",
            want_xnack,
            if on { 1 } else { 0 },
            eff.target.processor
        )
    } else {
        format!(
            "the library has {} only, which needs XNACK {}: boot the host with amdgpu.noretry={} or use a build for {} (or {}:xnack{})",
            want_xnack,
            if on { "on" } else { "off" },
            if on { 0 } else { 1 },
            eff.target.processor,
            eff.target.processor,
            if eff.target.xnack == Feature::On { "+" } else { "-" }
        )
    })
}

/// The finding for `lib` on one GPU, or None when the runtime loads code
/// for it (or the library holds no AMD code at all).
pub fn kernel_image_finding(
    lib: &AmdLibrary,
    gpu: &AmdGpuRef,
    eff: &Effective,
    enforcement: Enforcement,
) -> Option<Finding> {
    if enforcement == Enforcement::Off {
        return None;
    }
    let path = esc_bounded(&lib.path, MAX_QUOTE);
    let targets = lib.targets();
    let code_ok = lib.code.is_empty() || pick(&targets, &eff.target).is_some();
    let tensile = lib.tensile_targets();
    let tensile_ok = lib.tensile.is_none() || pick(&tensile, &eff.target).is_some();
    if code_ok && tensile_ok {
        return None;
    }
    let who = gpu.describe(eff);
    let processor = &eff.target.processor;
    let hint = build_hint(&lib.path, processor);
    let (message, mut fix) = if !code_ok {
        let misses = near_misses(&targets, &eff.target);
        let fix = feature_fix(&misses, eff, gpu).unwrap_or_else(|| {
            format!(
                "use an image built for --offload-arch={processor} (e.g. {hint}), or one of a ROCm release whose libraries are built for {processor}"
            )
        });
        (
            format!(
                "{who} has no code object in {path}: it has {} (the HIP runtime fails with hipErrorNoBinaryForGpu)",
                if targets.is_empty() { "none the runtime can parse".to_string() } else { list(&targets) }
            ),
            fix,
        )
    } else {
        let dir = lib
            .tensile
            .as_ref()
            .map(|t| esc_bounded(&t.dir, MAX_QUOTE))
            .unwrap_or_default();
        (
            format!(
                "{who} has no Tensile kernels for {processor} in {dir} (for {path}): it has {} (the library fails with \"Cannot read TensileLibrary.dat: Illegal seek for GPU arch : {processor}\")",
                list(&tensile)
            ),
            format!(
                "use an image whose rocBLAS/hipBLASLt is built for {processor} (e.g. {hint}), or one of a ROCm release that ships Tensile files for {processor}"
            ),
        )
    };
    if let Some(why) = &eff.uncertain {
        fix.push_str(&format!(" (not refused: {why})"));
    }
    let f = Finding::new(Check::KernelImage, severity_of(enforcement, eff), message).with_fix(fix);
    // The HIP runtime fails whatever the severity lets start
    // (hipErrorNoBinaryForGpu): a prediction placement must not ignore,
    // unless the target itself is uncertain.
    Some(if eff.uncertain.is_none() {
        f.predicting_failure()
    } else {
        f
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::amd::code::{AmdCode, Tensile};

    fn lib(path: &str, archs: &[&str], tensile: Option<&[&str]>) -> AmdLibrary {
        AmdLibrary {
            path: path.into(),
            code: archs
                .iter()
                .map(|a| AmdCode {
                    arch: a.to_string(),
                    compressed: false,
                    code_object_version: Some(4),
                })
                .collect(),
            tensile: tensile.map(|p| Tensile {
                dir: "opt/rocm/lib/rocblas/library".into(),
                processors: p.iter().map(|s| s.to_string()).collect(),
            }),
        }
    }

    fn eff(t: &str, from: Option<&str>) -> Effective {
        Effective {
            target: TargetId::parse(t).unwrap(),
            overridden_from: from.map(str::to_string),
            uncertain: None,
        }
    }

    const GPU: AmdGpuRef<'static> = AmdGpuRef {
        index: 0,
        name: "AMD Instinct MI210",
        pci_bus_id: Some("0000:c1:00.0"),
        xnack_per_process: true,
    };

    #[test]
    fn no_code_object_names_gpu_target_library_targets_and_fix() {
        let l = lib(
            "usr/lib/x86_64-linux-gnu/librocsparse.so.0.1",
            &["gfx1030", "gfx803", "gfx906:xnack-"],
            None,
        );
        let f = kernel_image_finding(
            &l,
            &GPU,
            &eff("gfx90a:sramecc+:xnack-", None),
            Enforcement::Refuse,
        )
        .unwrap();
        assert_eq!(f.severity, Severity::Error);
        assert_eq!(f.check, Check::KernelImage);
        for want in [
            "AMD GPU 0 (AMD Instinct MI210, bus 0000:c1:00.0, gfx90a:sramecc+:xnack-)",
            "librocsparse.so.0.1",
            "gfx1030, gfx803, gfx906:xnack-",
            "hipErrorNoBinaryForGpu",
        ] {
            assert!(f.message.contains(want), "{want}: {}", f.message);
        }
        assert!(f.fix.unwrap().contains("--offload-arch=gfx90a"));
    }

    #[test]
    fn verdicts_table() {
        // (library targets, tensile, GPU target, override, finding expected)
        type Case<'a> = (
            &'a [&'a str],
            Option<&'a [&'a str]>,
            &'a str,
            Option<&'a str>,
            bool,
        );
        let cases: &[Case] = &[
            (
                &["gfx90a:xnack-"],
                None,
                "gfx90a:sramecc+:xnack-",
                None,
                false,
            ),
            (
                &["gfx90a:xnack+"],
                None,
                "gfx90a:sramecc+:xnack-",
                None,
                true,
            ),
            (&["gfx90a"], None, "gfx90a:sramecc-:xnack+", None, false),
            (&["gfx1030"], None, "gfx1030", Some("gfx1031"), false),
            (&["gfx11-generic"], None, "gfx1103", None, false),
            (&[], Some(&["gfx90a", "gfx942"]), "gfx1103", None, true),
            (
                &[],
                Some(&["gfx90a", "gfx942"]),
                "gfx942:sramecc+:xnack-",
                None,
                false,
            ),
            (&[], None, "gfx942:sramecc+:xnack-", None, false),
        ];
        for (archs, tensile, gpu, from, want) in cases {
            let l = lib("opt/rocm/lib/librocblas.so.4", archs, *tensile);
            let got = kernel_image_finding(&l, &GPU, &eff(gpu, *from), Enforcement::Warn);
            assert_eq!(
                got.is_some(),
                *want,
                "{archs:?} {tensile:?} on {gpu}: {got:?}"
            );
            if let Some(f) = got {
                assert_eq!(f.severity, Severity::Warning);
            }
        }
    }

    #[test]
    fn xnack_and_override_and_tensile_wording() {
        let l = lib(
            "usr/lib/python3/dist-packages/torch/lib/libtorch_hip.so",
            &["gfx90a:xnack+"],
            None,
        );
        let f = kernel_image_finding(
            &l,
            &GPU,
            &eff("gfx90a:sramecc+:xnack-", None),
            Enforcement::Refuse,
        )
        .unwrap();
        assert!(
            f.fix.as_deref().unwrap().contains("HSA_XNACK=1"),
            "{:?}",
            f.fix
        );
        let l = lib(
            "usr/lib/python3/dist-packages/torch/lib/libtorch_hip.so",
            &["gfx1030"],
            None,
        );
        let f = kernel_image_finding(
            &l,
            &GPU,
            &eff("gfx1100", Some("gfx1101")),
            Enforcement::Refuse,
        )
        .unwrap();
        assert!(
            f.message
                .contains("gfx1100 through HSA_OVERRIDE_GFX_VERSION (the GPU is gfx1101)"),
            "{}",
            f.message
        );
        assert!(f.fix.unwrap().contains("PYTORCH_ROCM_ARCH=gfx1100"));
        let l = lib(
            "opt/rocm/lib/librocblas.so.4",
            &[],
            Some(&["gfx90a", "gfx942"]),
        );
        let f = kernel_image_finding(&l, &GPU, &eff("gfx1103", None), Enforcement::Refuse).unwrap();
        assert!(
            f.message.contains("Illegal seek for GPU arch : gfx1103"),
            "{}",
            f.message
        );
        assert!(f.message.contains("it has gfx90a, gfx942"), "{}", f.message);
        let mut e = eff("gfx1103", None);
        e.uncertain = Some("HSA_OVERRIDE_GFX_VERSION_1 set".into());
        let f = kernel_image_finding(&l, &GPU, &e, Enforcement::Refuse).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(kernel_image_finding(&l, &GPU, &eff("gfx1103", None), Enforcement::Off).is_none());
    }
}
