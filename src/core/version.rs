//! Dotted numeric versions as NVIDIA compares them.
//!
//! libnvidia-container (src/cli/dsl.c) accepts digits and dots only, compares
//! component by component as numbers and treats missing trailing components as
//! zero: `12.2 == 12.2.0`, `12.2 < 12.2.1`, `535.104.05 > 535.54.03` (05 is 5).

use std::cmp::Ordering;
use std::fmt;

/// The most components we keep; real versions have at most four.
const MAX_COMPONENTS: usize = 8;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VersionError {
    #[error("empty version")]
    Empty,
    #[error("version `{0}` may hold only digits and dots")]
    BadChar(String),
    #[error("version `{0}` has an empty component")]
    EmptyComponent(String),
    #[error("version `{0}` has a component too large to compare")]
    TooLarge(String),
    #[error("version `{0}` has too many components")]
    TooLong(String),
}

/// A parsed version. Equality and order ignore trailing zero components.
#[derive(Clone, Debug)]
pub struct Version {
    parts: Vec<u64>,
    text: String,
}

impl Version {
    /// Parses `digits(.digits)*`, the only form NVIDIA's DSL accepts.
    pub fn parse(s: &str) -> Result<Version, VersionError> {
        if s.is_empty() {
            return Err(VersionError::Empty);
        }
        if !s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(VersionError::BadChar(s.to_string()));
        }
        let mut parts = Vec::new();
        for piece in s.split('.') {
            if piece.is_empty() {
                return Err(VersionError::EmptyComponent(s.to_string()));
            }
            if parts.len() == MAX_COMPONENTS {
                return Err(VersionError::TooLong(s.to_string()));
            }
            // NVIDIA's parsers hold each component in a 32-bit integer
            // (the toolkit reads CUDA_VERSION's major/minor as uint32 in
            // internal/config/image/cuda_image.go): `9.4294967296` is an
            // invalid version there, not a huge one, and so it is here.
            let n: u32 = piece
                .parse()
                .map_err(|_| VersionError::TooLarge(s.to_string()))?;
            parts.push(u64::from(n));
        }
        Ok(Version {
            parts,
            text: s.to_string(),
        })
    }

    /// Builds `major.minor`.
    pub fn from_major_minor(major: u64, minor: u64) -> Version {
        Version {
            parts: vec![major, minor],
            text: format!("{major}.{minor}"),
        }
    }

    /// Component `i`, zero when absent.
    pub fn part(&self, i: usize) -> u64 {
        self.parts.get(i).copied().unwrap_or(0)
    }

    pub fn major(&self) -> u64 {
        self.part(0)
    }

    pub fn minor(&self) -> u64 {
        self.part(1)
    }

    /// The text as it was written (`535.104.05` keeps its leading zero).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let n = self.parts.len().max(other.parts.len());
        (0..n)
            .map(|i| self.part(i).cmp(&other.part(i)))
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

impl std::str::FromStr for Version {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Version::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn components_over_32_bits_are_invalid() {
        for s in [
            "9.4294967296",
            "4294967296",
            "12.4.18446744073709551616",
            "1.99999999999",
        ] {
            assert!(
                matches!(Version::parse(s), Err(VersionError::TooLarge(_))),
                "{s}"
            );
        }
        assert_eq!(v("4294967295.0").major(), 4294967295);
    }

    #[test]
    fn compares_numerically_with_zero_padding() {
        let cases = [
            ("12.2", "12.2.0", Ordering::Equal),
            ("12.2", "12.2.1", Ordering::Less),
            ("535.104.05", "535.54.03", Ordering::Greater),
            ("535.104.05", "535.104.5", Ordering::Equal),
            ("12.10", "12.9", Ordering::Greater),
            ("9", "10", Ordering::Less),
            ("8.0", "8", Ordering::Equal),
            ("570.26", "570.26.0.0", Ordering::Equal),
        ];
        for (a, b, want) in cases {
            assert_eq!(v(a).cmp(&v(b)), want, "{a} vs {b}");
            assert_eq!(v(b).cmp(&v(a)), want.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn rejects_what_nvidia_rejects() {
        for bad in [
            "",
            "12.x",
            "v12.4",
            "12..2",
            ".12",
            "12.",
            "12.4-1",
            " 12",
            "99999999999999999999999",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn keeps_original_text() {
        assert_eq!(v("535.104.05").to_string(), "535.104.05");
        assert_eq!(v("535.104.05").part(2), 5);
        assert_eq!(v("12").minor(), 0);
    }
}
