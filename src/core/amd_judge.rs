//! The AMD findings of one GPU container on one host (apart from
//! core::amd, which the scan's types in core::kernel_image use): code objects and
//! Tensile files per visible AMD GPU (with the container's HSA_* env), the
//! image's ROCm against the host's amdgpu driver, and an image built for
//! one vendor given GPUs of the other (`vendor`).

use crate::core::amd::code::AmdLibrary;
use crate::core::amd::findings::{kernel_image_finding, AmdGpuRef};
use crate::core::amd::fit::{effective_target, AmdEnv, EnvError, HostTarget};
use crate::core::amd::rocm;
use crate::core::amd::target::TargetId;
use crate::core::container::Container;
use crate::core::decision::{Check, Finding};
use crate::core::facts::{Gpu, HostFacts};
use crate::core::kernel_image::Scanned;
use crate::core::policy::{Config, Enforcement};
use crate::core::sanitize::esc_bounded;

/// The most libraries or GPUs named in one `vendor` message.
const MAX_NAMED: usize = 4;

/// The `kernel-image` findings of the AMD code in `scanned` on each of
/// `gpus`, and the `rocm` finding of the image's ROCm. GPUs of one
/// effective target are judged once, the others named in the finding.
pub fn findings(
    c: &Container,
    gpus: &[&Gpu],
    facts: &HostFacts,
    scanned: Option<&Scanned>,
    cfg: &Config,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let severity = cfg.kernel_image.severity;
    if gpus.is_empty() || severity == Enforcement::Off {
        return out;
    }
    let Some(scanned) = scanned else {
        return out;
    };
    let env = AmdEnv::from_env(&c.env);
    let mut seen: Vec<(TargetId, Vec<u32>, usize)> = Vec::new();
    for g in gpus {
        let Some(target) = g.target_id.as_deref().and_then(TargetId::parse) else {
            out.push(Finding::warning(
                Check::KernelImage,
                format!(
                    "{}: no target ID in the host facts, its code objects cannot be judged",
                    g.describe()
                ),
            ));
            continue;
        };
        let host = HostTarget {
            target,
            xnack_per_process: g.xnack_per_process,
        };
        let eff = match effective_target(&host, &env) {
            Ok(e) => e,
            Err(EnvError::InvalidOverride(v)) => {
                out.push(invalid_override(&v));
                return out;
            }
        };
        if let Some((_, more, _)) = seen.iter_mut().find(|(t, _, _)| *t == eff.target) {
            more.push(g.index);
            continue;
        }
        let first = out.len();
        let gref = AmdGpuRef {
            index: g.index,
            name: &g.name,
            pci_bus_id: g.pci_bus_id.as_deref(),
            xnack_per_process: g.xnack_per_process,
        };
        out.extend(
            scanned
                .amd
                .iter()
                .filter_map(|lib: &AmdLibrary| kernel_image_finding(lib, &gref, &eff, severity)),
        );
        seen.push((eff.target, Vec::new(), first));
    }
    name_alike(&mut out, &seen);
    if let Some(r) = &scanned.rocm {
        let driver = facts.amdgpu_driver_version.as_deref();
        let fit = rocm::judge(r, driver);
        out.extend(rocm::finding(r, driver, &fit, severity));
    }
    out
}

/// Adds to each GPU's findings the other GPUs of the same target.
fn name_alike(out: &mut [Finding], seen: &[(TargetId, Vec<u32>, usize)]) {
    for (k, (_, more, first)) in seen.iter().enumerate() {
        if more.is_empty() {
            continue;
        }
        let end = seen.get(k + 1).map(|s| s.2).unwrap_or(out.len());
        let list: Vec<String> = more.iter().map(u32::to_string).collect();
        for f in &mut out[*first..end] {
            f.message.push_str(&format!(
                " (also AMD GPUs {}, the same target)",
                list.join(", ")
            ));
        }
    }
}

fn invalid_override(v: &str) -> Finding {
    Finding::error(
        Check::KernelImage,
        format!(
            "HSA_OVERRIDE_GFX_VERSION={} is not a GFX version the HIP runtime reads (major.minor.stepping, e.g. 11.0.0)",
            esc_bounded(v, 64)
        ),
    )
    .with_fix("set HSA_OVERRIDE_GFX_VERSION to major.minor.stepping of a processor (10.3.0 is gfx1030), or unset it")
}

/// What the image shows it was built for.
struct Built {
    /// NVIDIA: the CUDA requirement or version its env declares.
    cuda_env: Option<String>,
    /// Libraries with NVIDIA GPU code (SASS/PTX), and with AMD code objects.
    nvidia_libs: Vec<String>,
    amd_libs: Vec<String>,
}

fn built(c: &Container, scanned: Option<&Scanned>) -> Built {
    let cuda_env = ["NVIDIA_REQUIRE_CUDA", "CUDA_VERSION"]
        .iter()
        .find_map(|k| {
            let v = c.env.get(k)?.trim();
            (!v.is_empty()).then(|| format!("{k}={}", esc_bounded(v, 80)))
        });
    let mut b = Built {
        cuda_env,
        nvidia_libs: Vec::new(),
        amd_libs: Vec::new(),
    };
    if let Some(s) = scanned {
        b.nvidia_libs = s
            .libraries
            .iter()
            .filter(|l| l.outcome.as_ref().is_ok_and(|i| !i.is_empty()))
            .map(|l| l.path.clone())
            .collect();
        b.amd_libs = s
            .amd
            .iter()
            .filter(|l| !l.code.is_empty() || l.tensile.is_some())
            .map(|l| l.path.clone())
            .collect();
    }
    b
}

fn named(items: &[String]) -> String {
    let mut v: Vec<String> = items
        .iter()
        .take(MAX_NAMED)
        .map(|p| esc_bounded(p, 120))
        .collect();
    if items.len() > MAX_NAMED {
        v.push(format!("{} more", items.len() - MAX_NAMED));
    }
    v.join(", ")
}

fn gpus_named(gpus: &[&Gpu]) -> String {
    let v: Vec<String> = gpus.iter().take(MAX_NAMED).map(|g| g.describe()).collect();
    let more = gpus.len().saturating_sub(MAX_NAMED);
    if more > 0 {
        format!("{} and {more} more", v.join(", "))
    } else {
        v.join(", ")
    }
}

/// An image built for one vendor's GPUs given only the other's: a CUDA
/// requirement or only NVIDIA code with AMD GPUs, only AMD code (or a ROCm
/// user space and no NVIDIA code) with NVIDIA GPUs.
pub fn vendor_findings(
    c: &Container,
    nvidia: &[&Gpu],
    amd: &[&Gpu],
    scanned: Option<&Scanned>,
) -> Vec<Finding> {
    let b = built(c, scanned);
    let rocm = scanned.and_then(|s| s.rocm.as_ref());
    let mut out = Vec::new();
    if !amd.is_empty() && nvidia.is_empty() {
        let why = match (
            &b.cuda_env,
            b.amd_libs.is_empty() && !b.nvidia_libs.is_empty(),
        ) {
            (Some(env), _) if b.amd_libs.is_empty() && rocm.is_none() => {
                Some(format!("CUDA ({env})"))
            }
            (_, true) => Some(format!(
                "NVIDIA GPUs only: {} hold NVIDIA GPU code and none has AMD code objects",
                named(&b.nvidia_libs)
            )),
            _ => None,
        };
        if let Some(why) = why {
            out.push(
                Finding::error(
                    Check::Vendor,
                    format!("the image is built for {why}, but the container gets AMD GPUs: {}", gpus_named(amd)),
                )
                .with_fix("run a ROCm build of the image on AMD GPUs, or schedule this image on a node with NVIDIA GPUs (gpu-guard.io/vendor=nvidia)"),
            );
        }
    }
    if !nvidia.is_empty() && amd.is_empty() && b.nvidia_libs.is_empty() && b.cuda_env.is_none() {
        let why = if !b.amd_libs.is_empty() {
            Some(format!(
                "AMD GPUs only: {} hold AMD code objects and none has NVIDIA GPU code",
                named(&b.amd_libs)
            ))
        } else {
            rocm.map(|r| {
                format!(
                    "AMD GPUs (ROCm {} in {}) and has no NVIDIA GPU code",
                    esc_bounded(&r.version, 32),
                    esc_bounded(&r.path, 120)
                )
            })
        };
        if let Some(why) = why {
            out.push(
                Finding::error(
                    Check::Vendor,
                    format!("the image is built for {why}, but the container gets NVIDIA GPUs: {}", gpus_named(nvidia)),
                )
                .with_fix("run a CUDA build of the image on NVIDIA GPUs, or schedule this image on a node with AMD GPUs (gpu-guard.io/vendor=amd)"),
            );
        }
    }
    out
}
