//! The label grid ([`super::label_grid`]) of an image whose GPU code was
//! scanned, judged in two parts: the same masks as judging every cell
//! whole ([`super::label_grid::judge_cells`]), with far fewer judgements.
//!
//! Why it is needed: the scan cuts the compute-capability axis at every
//! architecture the image has code for and at every major's `.0` and `.10`,
//! and the CUDA axis at what its PTX needs, so the grid has ten to twenty
//! times the cells of the requirements' alone; judging each cell whole (a
//! full decision, with its findings worded, per brand class at both ends)
//! took seconds (BENCHMARKS.md, "label_terms").
//!
//! Why it is exact: `core::decide` adds the kernel-image findings to the
//! others and reads them nowhere else, and its verdict depends on findings
//! only through whether one is an error, which refuses only under a mode
//! whose verdict is enforce's (`enforce` and `audit`: core::policy
//! `Mode::refuses`; decide.rs `finish`; fleet::unknown's refusal of
//! unknown facts does not read them). So a node is allowed exactly when
//!  - the decision without them allows it
//!    ([`super::Subject::judge_host_without_kernel_image`]), and
//!  - under a mode that refuses, none of them is an error
//!    ([`super::Subject::kernel_image_findings`]).
//!
//! The first part reads the scan only through minor-version compatibility
//! "allow" (core::compat_check `sass_only`; under "warn" it only words a
//! note), so without "allow" it compares the facts only with the constants
//! of the grid cut without the scan's architectures ([`axes_with`]
//! `images = false`), whose every cut is one of the full grid's: it is
//! judged once per cell of that coarse grid. The second part reads only
//! the visible GPUs (their count and compute capability) and the driver's
//! CUDA version (core::kernel_image `assess_on_host`), never the driver
//! version or the brand: it is judged once per cell of the full grid's
//! CUDA x compute capability (x count) axes. Each part is judged at both
//! ends of its cells, as a whole cell is, and the two are combined per
//! cell of the full grid as judging the whole cell at its ends would
//! combine them. Under "allow" the grid is judged whole.

use super::label_exprs::Point;
use super::label_grid::{axes_with, coord_in, ends, host_for, index_in, Grid, Judged};
use super::Subject;
use crate::core::decision::{Severity, Verdict};
use crate::core::policy::MinorVersionCompat;

/// One cell's judgement per brand class: the classes allowed (at both ends)
/// and the classes whose ends agree; None where no label holds a point.
type Rest = Option<(u32, u32)>;
/// One cell's kernel-image judgement: no error at both ends, and the ends
/// agree; None where no label holds a point.
type Kernel = Option<(bool, bool)>;

/// The masks of `fine` judged in two parts, or None where that is not
/// exact or gains nothing (the caller then judges every cell whole).
pub(super) fn judge(subject: &Subject, fine: &Grid, classes: &[u32]) -> Option<Judged> {
    let minor = subject.config().requirements.minor_version_compatibility;
    if subject.scanned().is_none() || minor == MinorVersionCompat::Allow {
        return None;
    }
    let coarse = Grid::new(axes_with(subject, false));
    if coarse.cells() >= fine.cells() {
        return None;
    }
    let to_coarse: Vec<Vec<usize>> = coarse
        .axes
        .iter()
        .zip(&fine.axes)
        .map(|(c, f)| c.project(f))
        .collect::<Option<_>>()?;
    let rest = judge_rest(subject, &coarse, classes);
    let kernel = subject
        .config()
        .mode
        .refuses()
        .then(|| judge_kernel(subject, fine));
    let parts = Parts {
        coarse_sizes: &coarse.sizes,
        to_coarse: &to_coarse,
        rest: &rest,
        kernel: kernel.as_deref(),
    };
    combine(fine, &parts, classes)
}

/// The decision without its kernel-image findings on every cell of the
/// coarse grid, at both ends, for each brand class.
fn judge_rest(subject: &Subject, coarse: &Grid, classes: &[u32]) -> Vec<Rest> {
    let rest_allows = |p: &[Option<Point>], v: usize| {
        host_for(p, v)
            .is_some_and(|h| subject.judge_host_without_kernel_image(&h).verdict == Verdict::Allow)
    };
    (0..coarse.cells())
        .map(|i| {
            let ends = coarse.ends(&coarse.coord(i))?;
            let (mut ok, mut agree) = (0u32, 0u32);
            for &class in classes {
                let v = class.trailing_zeros() as usize;
                let (o, a) = ends.judge(|p| rest_allows(p, v));
                ok |= if o { class } else { 0 };
                agree |= if a { class } else { 0 };
            }
            Some((ok, agree))
        })
        .collect()
}

/// The kernel-image findings on every cell of the full grid's CUDA,
/// compute capability (and count) axes, at both ends: on a node with the
/// lowest driver and no brand label, which they do not read.
fn judge_kernel(subject: &Subject, fine: &Grid) -> Vec<Kernel> {
    let sizes = &fine.sizes[1..];
    let driver = Some(fine.axes[0].lo(0));
    let no_error = |p: &[Option<Point>]| {
        host_for(p, 0).is_some_and(|h| {
            let found = subject.kernel_image_findings(&h);
            !found.iter().any(|f| f.severity == Severity::Error)
        })
    };
    (0..sizes.iter().product())
        .map(|i| {
            let slots = coord_in(sizes, i);
            let mut e = ends(fine.axes[1..].iter().zip(slots))?;
            e.low.insert(0, driver.clone());
            e.high.insert(0, driver.clone());
            Some(e.judge(no_error))
        })
        .collect()
}

/// What [`combine`] reads: both parts and where each full cell lies in them.
struct Parts<'a> {
    coarse_sizes: &'a [usize],
    /// Per axis, each full slot's coarse slot.
    to_coarse: &'a [Vec<usize>],
    rest: &'a [Rest],
    /// None: the kernel-image findings cannot refuse (`mode = "warn"`).
    kernel: Option<&'a [Kernel]>,
}

/// Every full cell's mask from the two parts. Judged whole at its ends, a
/// cell on which the rest allows class c (alike at both ends) is allowed
/// for c exactly when the kernel-image findings hold no error at both
/// ends, and its ends agree for c exactly when those findings agree or the
/// rest refuses c. The rest is judged at its coarse cell's ends: where
/// they disagree (a constant missed) every full cell inside is refused for
/// c and the grid marked not exact, stricter, never looser, than judging
/// the full cells whole. None when a full cell holds a label point but its
/// coarse cell has none (parts too large for labels): judge it whole.
fn combine(fine: &Grid, parts: &Parts, classes: &[u32]) -> Option<Judged> {
    let has_points: Vec<Vec<bool>> = fine
        .axes
        .iter()
        .map(|a| (0..a.slots()).map(|s| !a.samples(s).is_empty()).collect())
        .collect();
    let mut out = Judged {
        masks: Vec::with_capacity(fine.cells()),
        consistent: true,
    };
    for i in 0..fine.cells() {
        let coord = fine.coord(i);
        if coord.iter().zip(&has_points).any(|(&s, h)| !h[s]) {
            out.masks.push(0);
            continue;
        }
        let c: Vec<usize> = coord
            .iter()
            .zip(parts.to_coarse)
            .map(|(&s, m)| m[s])
            .collect();
        let (mut ok, mut agree) = parts.rest[index_in(parts.coarse_sizes, &c)]?;
        if let Some(kernel) = parts.kernel {
            let (k_ok, k_agree) = kernel[index_in(&fine.sizes[1..], &coord[1..])]?;
            if !k_agree {
                agree &= !ok;
            }
            if !k_ok {
                ok = 0;
            }
        }
        out.consistent &= classes.iter().all(|&k| agree & k == k);
        out.masks.push(ok);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    //! The two-part judgement against judging every cell whole
    //! ([`judge_cells`], what the grid did before): the same masks and the
    //! same consistency, on scanned images whose code decides somewhere.
    use super::*;
    use crate::core::arch::{Arch, Kind, Variant};
    use crate::core::container::{Container, Env};
    use crate::core::kernel_image::{Image, Library, Scanned};
    use crate::core::policy::{Config, Enforcement, Mode};
    use crate::core::security::Stage;
    use crate::fleet::label_grid::{axes, brand_classes, judge_cells};
    use crate::pipeline::{Case, Scans};

    const TESLA_535: &str = "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=535,driver<536";

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

    fn scan(libs: Vec<Vec<Image>>) -> Scanned {
        Scanned {
            libraries: libs
                .into_iter()
                .enumerate()
                .map(|(i, images)| Library {
                    path: format!("usr/local/cuda/lib64/libcublas.so.{i}"),
                    outcome: Ok(images),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Like the cuBLAS of NVIDIA's images: SASS for 7.5, 8.0, 9.0a, PTX 9.0.
    fn cublas() -> Scanned {
        scan(vec![vec![
            sass(75, Variant::Plain),
            sass(80, Variant::Plain),
            sass(90, Variant::Arch),
            ptx(90, (8, 4)),
        ]])
    }

    /// Both ways agree on the grid of `env` with `scanned` under `cfg`;
    /// returns how many cells of the CUDA x compute capability (x count)
    /// axes hold a kernel-image error (so the scan decides somewhere) and
    /// how many cells of the grid allow some brand.
    fn agree(cfg: &Config, env: &[&str], scanned: Scanned) -> (usize, usize) {
        let mut c = Container::from_env(Env::from_entries(env.iter().copied()));
        crate::fleet::attached::as_run_with_all_gpus(&mut c);
        let case = Case::new(c, Stage::Edit).with_scans(Scans::made(Some(scanned), None));
        let subject = Subject::new(cfg, case);
        let fine = Grid::new(axes(&subject));
        let classes = brand_classes(&subject);
        let apart = judge(&subject, &fine, &classes).expect("judged apart");
        let whole = judge_cells(&subject, &fine, &classes);
        assert_eq!(apart.consistent, whole.consistent, "{env:?}");
        assert_eq!(apart.masks, whole.masks, "{env:?}");
        let errors = judge_kernel(&subject, &fine)
            .iter()
            .filter(|k| matches!(k, Some((false, _))))
            .count();
        (errors, whole.masks.iter().filter(|&&m| m != 0).count())
    }

    /// [`agree`], on a grid the scan decides somewhere and that allows
    /// some cells.
    fn agree_decided(cfg: &Config, env: &[&str], scanned: Scanned) {
        let (errors, allowed) = agree(cfg, env, scanned);
        assert!(errors > 0, "{env:?}: the scan decides nowhere");
        assert!(allowed > 0, "{env:?}: allows none");
    }

    fn enforcing() -> Config {
        let mut cfg = Config::default();
        cfg.kernel_image.severity = Enforcement::Refuse;
        cfg
    }

    #[test]
    fn scanned_images_judged_apart_are_judged_alike() {
        let cfg = enforcing();
        let env = [TESLA_535, "CUDA_VERSION=12.4.1"];
        agree_decided(&cfg, &env, cublas());
        // PTX only, with an ISA a 12.4 driver cannot load: CUDA decides too.
        agree_decided(&cfg, &[TESLA_535], scan(vec![vec![ptx(80, (8, 7))]]));
        // Tegra and family code, two libraries, an arch requirement.
        let tegra = scan(vec![
            vec![sass(87, Variant::Plain), sass(100, Variant::Family)],
            vec![sass(52, Variant::Plain), ptx(52, (8, 8))],
        ]);
        let arch = "NVIDIA_REQUIRE_CUDA=cuda>=12.2,arch>=8.0";
        agree_decided(&cfg, &[arch], tegra);
        // GPUs by index: the count decides the visible GPUs.
        let by_index = [
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
            "NVIDIA_VISIBLE_DEVICES=0,5",
        ];
        agree_decided(&cfg, &by_index, cublas());
    }

    #[test]
    fn other_configs_judged_apart_are_judged_alike() {
        let mut warn = enforcing();
        warn.mode = Mode::Warn;
        // Under "warn" the kernel-image errors refuse nowhere.
        let (errors, allowed) = agree(&warn, &[TESLA_535], cublas());
        assert!(errors > 0 && allowed > 0);
        let mut kernel_warn = enforcing();
        kernel_warn.kernel_image.severity = Enforcement::Warn;
        let (errors, allowed) = agree(&kernel_warn, &[TESLA_535], cublas());
        assert_eq!(errors, 0);
        assert!(allowed > 0);
        let mut audit = enforcing();
        audit.mode = Mode::Audit;
        let env = [TESLA_535, "CUDA_VERSION=12.4.1"];
        agree_decided(&audit, &env, cublas());
        let mut minor = enforcing();
        minor.requirements.minor_version_compatibility = MinorVersionCompat::Warn;
        agree_decided(&minor, &env, cublas());
        // A scan that stopped early refuses wherever a GPU is visible: on
        // every labelled node.
        let mut stopped = cublas();
        stopped.incomplete = Some("the byte budget ran out".into());
        stopped.on_incomplete = Enforcement::Refuse;
        let (errors, allowed) = agree(&enforcing(), &[TESLA_535], stopped);
        assert!(errors > 0);
        assert_eq!(allowed, 0);
    }

    #[test]
    fn not_judged_apart_where_that_is_not_exact() {
        let mut allow = enforcing();
        allow.requirements.minor_version_compatibility = MinorVersionCompat::Allow;
        let mut c = Container::from_env(Env::from_entries([TESLA_535]));
        crate::fleet::attached::as_run_with_all_gpus(&mut c);
        let scans = Scans::made(Some(cublas()), None);
        let subject = Subject::new(&allow, Case::new(c.clone(), Stage::Edit).with_scans(scans));
        let fine = Grid::new(axes(&subject));
        assert!(judge(&subject, &fine, &brand_classes(&subject)).is_none());
        // Nothing scanned: nothing to judge apart.
        let cfg = enforcing();
        let subject = Subject::new(
            &cfg,
            Case::new(c, Stage::Edit).with_scans(Scans::made(None, None)),
        );
        let fine = Grid::new(axes(&subject));
        assert!(judge(&subject, &fine, &brand_classes(&subject)).is_none());
    }
}
