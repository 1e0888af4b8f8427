//! Parsing `NVIDIA_REQUIRE_*` text into a [`Requirement`] (the syntax of
//! libnvidia-container src/cli/dsl.c, unknown keys dropped as NVIDIA's Go
//! toolkit drops them), and the two other variables NVIDIA reads as text.

use super::{AllOf, Factor, Key, Op, Operand, Requirement};
use crate::core::version::Version;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    #[error("`{0}` has no operator (expected one of = != < <= > >=)")]
    MissingOperator(String),
    #[error("`{factor}` uses operator `{op}`, which is not one of = != < <= > >=")]
    BadOperator { factor: String, op: String },
    #[error("`{0}` has no key before its operator")]
    MissingKey(String),
    #[error("`{0}` has an empty value")]
    EmptyValue(String),
    #[error("`{factor}`: {reason}")]
    BadVersion { factor: String, reason: String },
    #[error("`{0}`: brand takes only = or !=")]
    BrandOperator(String),
}

const OP_CHARS: &[char] = &['<', '>', '=', '!'];

fn parse_factor(text: &str) -> Result<Factor, SyntaxError> {
    let start = text
        .find(OP_CHARS)
        .ok_or_else(|| SyntaxError::MissingOperator(text.to_string()))?;
    // `start` is the byte offset of an ASCII operator, a char boundary.
    let (name, rest) = text.split_at(start);
    let op_len = rest
        .find(|c: char| !OP_CHARS.contains(&c))
        .unwrap_or(rest.len());
    let (op_text, value) = rest.split_at(op_len);
    let op = Op::parse(op_text).ok_or_else(|| SyntaxError::BadOperator {
        factor: text.to_string(),
        op: op_text.to_string(),
    })?;
    if name.is_empty() {
        return Err(SyntaxError::MissingKey(text.to_string()));
    }
    if value.is_empty() {
        return Err(SyntaxError::EmptyValue(text.to_string()));
    }
    let key = Key::from_name(name);
    let operand = match key {
        Some(Key::Brand) => {
            if !matches!(op, Op::Eq | Op::Ne) {
                return Err(SyntaxError::BrandOperator(text.to_string()));
            }
            Operand::Brand(value.to_ascii_lowercase())
        }
        Some(_) => {
            Operand::Version(Version::parse(value).map_err(|e| SyntaxError::BadVersion {
                factor: text.to_string(),
                reason: e.to_string(),
            })?)
        }
        None => Operand::Ignored,
    };
    Ok(Factor {
        key,
        op,
        operand,
        text: text.to_string(),
    })
}

impl Requirement {
    /// Parses a whole requirement. Unlike dsl.c, which stops at the first
    /// alternative that holds, every factor is checked, so a typo in a later
    /// alternative is reported on every host, not only where it is reached.
    pub fn parse(source: &str, text: &str) -> Result<Requirement, SyntaxError> {
        let mut any_of = Vec::new();
        let mut unknown_keys = Vec::new();
        let mut dropped_terms = Vec::new();
        for term in text.split(' ').filter(|t| !t.is_empty()) {
            let mut factors = Vec::new();
            let mut dropped = false;
            for f in term.split(',').filter(|f| !f.is_empty()) {
                let factor = parse_factor(f)?;
                if factor.key.is_none() {
                    unknown_keys.push(factor.text);
                    dropped = true;
                } else {
                    factors.push(factor);
                }
            }
            if !factors.is_empty() {
                any_of.push(AllOf {
                    factors,
                    text: term.to_string(),
                });
            } else if dropped {
                dropped_terms.push(term.to_string());
            }
        }
        Ok(Requirement {
            source: source.to_string(),
            text: text.to_string(),
            any_of,
            unknown_keys,
            dropped_terms,
        })
    }
}

/// Go's strconv.ParseBool, which NVIDIA uses for NVIDIA_DISABLE_REQUIRE
/// (internal/config/image/cuda_image.go HasDisableRequire): anything else is
/// false there, and so here.
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `CUDA_VERSION` of a legacy image → `MAJOR.MINOR`, as NVIDIA's
/// parseMajorMinorVersion does with Go's semver: an optional `v`, one to three
/// numeric parts (missing ones are 0), and an optional `-pre`/`+build` suffix.
pub fn cuda_version_major_minor(s: &str) -> Option<Version> {
    let s = s.strip_prefix('v').unwrap_or(s);
    let core = s.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let mut nums = Vec::with_capacity(3);
    for p in &parts {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // 32-bit components, as Version holds them: wider is invalid.
        nums.push(u64::from(p.parse::<u32>().ok()?));
    }
    Some(Version::from_major_minor(
        nums[0],
        nums.get(1).copied().unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_table() {
        let bad = [
            ("cuda==12.4", "not one of"),
            ("cuda12.4", "no operator"),
            ("cuda>=", "empty value"),
            (">=12.4", "no key"),
            ("cuda=>12.4", "not one of"),
            ("cuda>=12.x", "digits and dots"),
            ("brand>=tesla", "brand takes only"),
            ("cuda>=12.4 driver<<5", "not one of"),
            ("arch>=8.0,cuda=!12", "not one of"),
        ];
        for (text, want) in bad {
            let e = Requirement::parse("NVIDIA_REQUIRE_CUDA", text).unwrap_err();
            assert!(e.to_string().contains(want), "{text}: {e}");
        }
        let ok = [
            "cuda>=12.4",
            "CUDA>=12.4",
            "  cuda>=12.4   ",
            "cuda>=12.4,,driver>=535",
            "",
            "brand=Tesla",
            "driver!=535.54.03",
            "cudnn>=8",
        ];
        for text in ok {
            Requirement::parse("NVIDIA_REQUIRE_CUDA", text)
                .unwrap_or_else(|e| panic!("{text}: {e}"));
        }
    }

    #[test]
    fn go_parse_bool() {
        for t in ["1", "t", "T", "true", "TRUE", "True"] {
            assert_eq!(parse_go_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "false", "FALSE", "False"] {
            assert_eq!(parse_go_bool(f), Some(false), "{f}");
        }
        for n in ["yes", "on", "", "tRUE", " true"] {
            assert_eq!(parse_go_bool(n), None, "{n}");
        }
    }

    #[test]
    fn legacy_cuda_version() {
        let mm = |s: &str| cuda_version_major_minor(s).map(|v| v.to_string());
        assert_eq!(mm("12.4.1").as_deref(), Some("12.4"));
        assert_eq!(mm("10.0.130").as_deref(), Some("10.0"));
        assert_eq!(mm("11").as_deref(), Some("11.0"));
        assert_eq!(mm("v9.2").as_deref(), Some("9.2"));
        assert_eq!(mm("12.4.1-1").as_deref(), Some("12.4"));
        assert_eq!(mm("abc"), None);
        assert_eq!(mm("12.4.1.2"), None);
        assert_eq!(mm(""), None);
        assert_eq!(mm("12..1"), None);
    }
}
