//! The image's ROCm user space against the host's amdgpu driver, by AMD's
//! published support window.
//!
//! Sources:
//! - rocm.docs.amd.com, install-on-linux, "User and AMD GPU Driver (amdgpu)
//!   support matrix" (2025-09-17; earlier "User and kernel-space support
//!   matrix"): for each kernel driver release, the ROCm user space versions
//!   supported. From ROCm 6.4 on the window is "up to a year apart", before
//!   it is +/- 2 releases; the table below is what the matrix lists, not a
//!   rule computed from either sentence.
//! - ROCm/amdgpu-docs docs/compatibility/compatibility-matrix.rst (PR #97):
//!   "The AMD GPU Driver (amdgpu) 30.30.x is compatible with ROCm 7.2.x,
//!   7.1.x, 7.0.x, 6.4.x, and 6.3.x".
//!
//! The host reports its driver as the amdgpu-dkms module version
//! (`/sys/module/amdgpu/version`, e.g. `6.14.14`): a kernel-like number,
//! not the release the matrix is keyed by. Only module versions AMD's own
//! pages pair with a release are mapped ([`DKMS_RELEASE`]); any other is
//! reported as unknown, never guessed (the numbers are close to, but not,
//! ROCm's: DKMS 6.12.12 belongs to ROCm 6.4, not to a "6.12").

use super::code::RocmUserSpace;
use crate::core::decision::{Check, Finding, Severity};
use crate::core::policy::Enforcement;
use crate::core::sanitize::esc_bounded;

/// A ROCm release as `(major, minor)`.
pub type Release = (u64, u64);

/// (driver release as the matrix names it, oldest and newest ROCm
/// `(major, minor)` it supports).
pub const SUPPORT_MATRIX: &[(&str, Release, Release)] = &[
    ("30.30", (6, 3), (7, 2)),
    ("30.10", (6, 2), (7, 0)),
    ("6.4", (6, 1), (7, 0)),
    ("6.3", (6, 1), (7, 0)),
    ("6.2", (6, 0), (7, 0)),
    ("6.1", (5, 7), (6, 4)),
    ("6.0", (5, 6), (6, 2)),
    ("5.7", (5, 5), (6, 1)),
    ("5.6", (5, 4), (6, 0)),
    ("5.5", (5, 3), (5, 7)),
    ("5.4", (5, 2), (5, 6)),
    ("5.3", (5, 1), (5, 5)),
];

/// amdgpu-dkms module versions AMD's pages pair with a driver release:
/// - 6.14.14: ROCm/amdgpu-docs docs/install/detailed-install/post-install.rst
///   at the 30.10 release ("amdgpu/6.14.14-2204008.24.04 ... 6.14.14: amdgpu
///   driver version").
/// - 6.12.12: ROCm/amdgpu-docs docs/gpu-partitioning/mi300x/requirements.rst
///   (ROCm 6.4: "amdgpu version: 6.12.12").
pub const DKMS_RELEASE: &[(&str, &str)] = &[("6.14.14", "30.10"), ("6.12.12", "6.4")];

/// What the host's driver supports, as far as the table knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverWindow {
    /// The driver's release and the ROCm window it supports.
    Known {
        release: &'static str,
        oldest: (u64, u64),
        newest: (u64, u64),
    },
    /// The driver version maps to no release the table has; says why.
    Unknown(String),
}

/// The support window of the host's `amdgpu_driver_version`.
pub fn driver_window(driver: &str) -> DriverWindow {
    let d = driver.trim();
    // The module version may carry the build (`6.14.14-2204008.24.04`).
    let base = d.split(['-', '+', ' ']).next().unwrap_or("");
    let release = DKMS_RELEASE
        .iter()
        .find(|(v, _)| *v == base)
        .map(|(_, r)| *r)
        .or_else(|| {
            // An installer release named directly (`30.10.1`).
            SUPPORT_MATRIX.iter().map(|(r, _, _)| *r).find(|r| {
                r.starts_with("30.") && (base == *r || base.starts_with(&format!("{r}.")))
            })
        });
    match release.and_then(|r| SUPPORT_MATRIX.iter().find(|(x, _, _)| *x == r)) {
        Some((release, oldest, newest)) => DriverWindow::Known {
            release,
            oldest: *oldest,
            newest: *newest,
        },
        None => DriverWindow::Unknown(format!(
            "amdgpu driver {} is not a version gpu-guard can map to a release of AMD's support matrix \
             (the matrix is keyed by driver release; /sys/module/amdgpu/version gives the amdgpu-dkms module version)",
            esc_bounded(d, 64)
        )),
    }
}

/// The image's ROCm against the host's driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RocmFit {
    Supported,
    /// Outside the window: the driver's release and its window.
    Outside {
        release: &'static str,
        oldest: (u64, u64),
        newest: (u64, u64),
    },
    /// Cannot be judged; says why.
    Unknown(String),
    /// The host has no amdgpu driver.
    NoDriver,
}

/// `major.minor` of a version string.
fn major_minor(v: &str) -> Option<(u64, u64)> {
    let mut p = v.split('.');
    Some((p.next()?.parse().ok()?, p.next()?.parse().ok()?))
}

pub fn judge(image: &RocmUserSpace, amdgpu_driver_version: Option<&str>) -> RocmFit {
    let Some(driver) = amdgpu_driver_version else {
        return RocmFit::NoDriver;
    };
    let Some(mm) = major_minor(&image.version) else {
        return RocmFit::Unknown(format!(
            "the image's ROCm version {} cannot be read",
            esc_bounded(&image.version, 64)
        ));
    };
    match driver_window(driver) {
        DriverWindow::Unknown(why) => RocmFit::Unknown(why),
        DriverWindow::Known { oldest, newest, .. } if (oldest..=newest).contains(&mm) => {
            RocmFit::Supported
        }
        DriverWindow::Known {
            release,
            oldest,
            newest,
        } => RocmFit::Outside {
            release,
            oldest,
            newest,
        },
    }
}

fn mm((a, b): (u64, u64)) -> String {
    format!("{a}.{b}")
}

/// The `rocm` finding for a fit: an error (enforce) or warning (warn)
/// outside the window, an info finding when it cannot be judged, nothing
/// when supported or without a driver (another check says that).
pub fn finding(
    image: &RocmUserSpace,
    driver: Option<&str>,
    fit: &RocmFit,
    severity: Enforcement,
) -> Option<Finding> {
    let what = format!(
        "the image's ROCm {} ({})",
        esc_bounded(&image.version, 32),
        esc_bounded(&image.path, 200)
    );
    let driver = esc_bounded(driver.unwrap_or(""), 64);
    match fit {
        RocmFit::Supported | RocmFit::NoDriver => None,
        RocmFit::Unknown(why) => Some(Finding::info(
            Check::Rocm,
            format!("cannot judge {what} against the host's amdgpu driver: {why}"),
        )),
        RocmFit::Outside {
            release,
            oldest,
            newest,
        } => {
            let sev = match severity {
                Enforcement::Refuse => Severity::Error,
                Enforcement::Warn | Enforcement::Off => Severity::Warning,
            };
            Some(
                Finding::new(
                    Check::Rocm,
                    sev,
                    format!(
                        "{what} is outside what the host's amdgpu driver {driver} (AMD GPU driver release {release}) supports: ROCm {} to {} (AMD's user and kernel-space support matrix)",
                        mm(*oldest),
                        mm(*newest)
                    ),
                )
                .with_fix(format!(
                    "use an image built on ROCm {} to {}, or install an amdgpu driver release whose support matrix lists ROCm {}",
                    mm(*oldest),
                    mm(*newest),
                    esc_bounded(&image.version, 32)
                )),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::amd::code::RocmSource;

    fn image(v: &str) -> RocmUserSpace {
        RocmUserSpace {
            version: v.into(),
            source: RocmSource::InfoVersion,
            path: "opt/rocm/.info/version".into(),
        }
    }

    #[test]
    fn the_matrix_table() {
        // (image ROCm, host driver, expected)
        let known = |r: &'static str, o: (u64, u64), n: (u64, u64)| RocmFit::Outside {
            release: r,
            oldest: o,
            newest: n,
        };
        let cases: &[(&str, Option<&str>, Option<RocmFit>)] = &[
            ("6.4.0", Some("6.12.12"), Some(RocmFit::Supported)),
            ("7.0.1", Some("6.12.12"), Some(RocmFit::Supported)),
            ("7.1.0", Some("6.12.12"), Some(known("6.4", (6, 1), (7, 0)))),
            ("6.0.2", Some("6.12.12"), Some(known("6.4", (6, 1), (7, 0)))),
            ("6.2.4", Some("6.14.14"), Some(RocmFit::Supported)),
            (
                "6.1.0",
                Some("6.14.14-2204008.24.04"),
                Some(known("30.10", (6, 2), (7, 0))),
            ),
            ("7.2.0", Some("30.30.3"), Some(RocmFit::Supported)),
            (
                "6.2.0",
                Some("30.30.3"),
                Some(known("30.30", (6, 3), (7, 2))),
            ),
            ("6.4.0", None, Some(RocmFit::NoDriver)),
            ("6.4.0", Some("6.16.6"), None),
            ("6.4.0", Some("6.8.0-45-generic"), None),
        ];
        for (img, drv, want) in cases {
            let got = judge(&image(img), *drv);
            match want {
                Some(w) => assert_eq!(&got, w, "{img} on {drv:?}"),
                None => assert!(
                    matches!(got, RocmFit::Unknown(_)),
                    "{img} on {drv:?}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn findings_say_what_the_window_is_or_that_it_is_unknown() {
        let img = image("5.2.3");
        let fit = judge(&img, Some("6.14.14"));
        let f = finding(&img, Some("6.14.14"), &fit, Enforcement::Refuse).unwrap();
        assert_eq!(f.severity, Severity::Error);
        assert!(f.message.contains("ROCm 6.2 to 7.0"), "{}", f.message);
        assert!(f.message.contains("release 30.10"), "{}", f.message);
        assert!(f.fix.unwrap().contains("ROCm 6.2 to 7.0"));
        let fit = judge(&img, Some("6.16.6"));
        let f = finding(&img, Some("6.16.6"), &fit, Enforcement::Refuse).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert!(
            f.message
                .contains("6.16.6 is not a version gpu-guard can map"),
            "{}",
            f.message
        );
        assert!(finding(
            &image("6.4"),
            Some("6.12.12"),
            &RocmFit::Supported,
            Enforcement::Warn
        )
        .is_none());
    }
}
