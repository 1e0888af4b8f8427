//! Which code of a library a device runs: the driver's choice between
//! machine code (SASS) and PTX it JIT-compiles.

use super::{Image, MAX_ARCHS_SHOWN};
use crate::core::arch::{ptx_isa_supported, ptx_jits_on, sass_runs_on, Arch, Cc, Kind};

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
pub(super) fn describe_images(images: &[Image]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arch::Variant;
    use crate::core::kernel_image::test_images::{ptx, sass};

    fn cc(s: &str) -> Cc {
        Cc::parse(s).unwrap()
    }
    use Variant::{Arch as A, Family as F, Plain as P};

    #[test]
    fn judge_table_plain_architectures() {
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
        ];
        for (images, dev, drv, want) in cases {
            assert_eq!(
                judge(&images, cc(dev), drv),
                want,
                "{images:?} on {dev} drv {drv:?}"
            );
        }
    }

    #[test]
    fn judge_table_arch_and_family_variants() {
        type Case = (Vec<Image>, &'static str, Option<(u64, u64)>, CodeFit);
        let cases: Vec<Case> = vec![
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

    #[test]
    fn describes_bounded() {
        let many: Vec<Image> = (50..90).map(|n| sass(n, P)).collect();
        let d = describe_images(&many);
        assert!(d.ends_with("and 24 more"), "{d}");
        assert_eq!(describe_images(&[]), "no GPU code");
    }
}
