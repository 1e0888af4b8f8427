//! CUDA toolkit ↔ driver facts, kept as data.
//!
//! Source: CUDA 13.1 Release Notes, "CUDA Toolkit and Corresponding Driver
//! Versions" (Table 3, Linux x86_64, minimum driver for each toolkit GA).
//! 13.2 and 13.3 are second-hand (not yet read in NVIDIA's table) and
//! marked so below.

use crate::core::version::Version;

/// (CUDA toolkit major.minor, minimum Linux driver).
pub(crate) const TOOLKIT_MIN_DRIVER: &[(&str, &str)] = &[
    ("10.0", "410.48"),
    ("10.1", "418.39"),
    ("10.2", "440.33"),
    ("11.0", "450.51.05"),
    ("11.1", "455.23"),
    ("11.2", "460.27.03"),
    ("11.3", "465.19.01"),
    ("11.4", "470.42.01"),
    ("11.5", "495.29.05"),
    ("11.6", "510.39.01"),
    ("11.7", "515.43.04"),
    ("11.8", "520.61.05"),
    ("12.0", "525.60.13"),
    ("12.1", "530.30.02"),
    ("12.2", "535.54.03"),
    ("12.3", "545.23.06"),
    ("12.4", "550.54.14"),
    ("12.5", "555.42.02"),
    ("12.6", "560.28.03"),
    // 12.7 was never released as a toolkit; driver branch 565 reports it.
    ("12.7", "565.57.01"),
    ("12.8", "570.26"),
    ("12.9", "575.51.03"),
    ("13.0", "580.65.06"),
    ("13.1", "590.44.01"),
    // second-hand (cuda-facts.md): not yet checked against NVIDIA's table.
    ("13.2", "595.45.04"),
    ("13.3", "610.43.02"),
];

/// CUDA minor-version compatibility: (CUDA major, the minimum Linux driver
/// of the family). An application built with any toolkit of that major runs
/// on a driver at or above it, within the limits of the rule (no newer-PTX
/// JIT, no APIs that need a newer driver). Source: NVIDIA, "CUDA
/// Compatibility" (docs.nvidia.com/deploy/cuda-compatibility), "Minor
/// Version Compatibility", table "Example CUDA Toolkit and minimum required
/// driver versions" (Linux: CUDA 11.x >= 450.80.02, CUDA 12.x >= 525.60.13).
///
/// CUDA 13.x is left out on purpose: only ">= 580" is known for it, not
/// the exact version NVIDIA's table gives, so a 13.x gap is never admitted
/// until it is checked against that table.
pub(crate) const MINOR_VERSION_FAMILY_MIN_DRIVER: &[(u64, &str)] =
    &[(11, "450.80.02"), (12, "525.60.13")];

/// The family minimum driver for minor-version compatibility within CUDA
/// `major`; None for a major the table does not cover (10 and older had no
/// such rule; 13 is not yet verified).
pub fn minor_version_min_driver(major: u64) -> Option<&'static str> {
    MINOR_VERSION_FAMILY_MIN_DRIVER
        .iter()
        .find(|(m, _)| *m == major)
        .map(|(_, d)| *d)
}

/// The minimum driver for a CUDA version: the first toolkit at or above it
/// (12.4.1 needs what 12.4 needs). None when the table does not reach it.
pub fn min_driver_for_cuda(cuda: &Version) -> Option<&'static str> {
    let want = Version::from_major_minor(cuda.major(), cuda.minor());
    TOOLKIT_MIN_DRIVER
        .iter()
        .find(|(tk, _)| Version::parse(tk).map(|v| v >= want).unwrap_or(false))
        .map(|(_, d)| *d)
}

/// The newest toolkit the table knows and its minimum driver: the best
/// case a node could have (the admission webhook's "no node could run it").
pub fn newest_toolkit() -> (&'static str, &'static str) {
    TOOLKIT_MIN_DRIVER
        .last()
        .copied()
        .unwrap_or(("13.0", "580.65.06"))
}

/// The newest CUDA a driver branch runs, from the same table: the newest
/// toolkit whose minimum driver is not above `driver`.
#[cfg(test)]
fn max_cuda_for_driver(driver: &Version) -> Option<&'static str> {
    TOOLKIT_MIN_DRIVER
        .iter()
        .rev()
        .find(|(_, d)| Version::parse(d).map(|v| v <= *driver).unwrap_or(false))
        .map(|(tk, _)| *tk)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn min_driver() {
        assert_eq!(min_driver_for_cuda(&v("12.4")), Some("550.54.14"));
        assert_eq!(min_driver_for_cuda(&v("12.4.1")), Some("550.54.14"));
        assert_eq!(min_driver_for_cuda(&v("11.8")), Some("520.61.05"));
        assert_eq!(min_driver_for_cuda(&v("13.0")), Some("580.65.06"));
        assert_eq!(min_driver_for_cuda(&v("9.0")), Some("410.48"));
        assert_eq!(min_driver_for_cuda(&v("14.0")), None);
    }

    #[test]
    fn max_cuda() {
        assert_eq!(max_cuda_for_driver(&v("535.104.05")), Some("12.2"));
        assert_eq!(max_cuda_for_driver(&v("545.23.06")), Some("12.3"));
        assert_eq!(max_cuda_for_driver(&v("550.54.15")), Some("12.4"));
        assert_eq!(max_cuda_for_driver(&v("570.26")), Some("12.8"));
        assert_eq!(max_cuda_for_driver(&v("400.1")), None);
    }

    #[test]
    fn minor_version_families() {
        assert_eq!(minor_version_min_driver(12), Some("525.60.13"));
        assert_eq!(minor_version_min_driver(11), Some("450.80.02"));
        assert_eq!(minor_version_min_driver(13), None);
        assert_eq!(minor_version_min_driver(10), None);
        for (_, d) in MINOR_VERSION_FAMILY_MIN_DRIVER {
            v(d);
        }
    }

    #[test]
    fn table_is_sorted_and_parses() {
        let mut prev: Option<(Version, Version)> = None;
        for (tk, d) in TOOLKIT_MIN_DRIVER {
            let (tk, d) = (v(tk), v(d));
            if let Some((ptk, pd)) = &prev {
                assert!(tk > *ptk && d > *pd, "{tk} {d}");
            }
            prev = Some((tk, d));
        }
    }
}
