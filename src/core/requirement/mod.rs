//! NVIDIA's requirement language (`NVIDIA_REQUIRE_*`), parsed into data and
//! evaluated against host facts, one GPU at a time.
//!
//! Semantics follow libnvidia-container src/cli/dsl.c (`dsl_evaluate`), the
//! implementation that enforces these variables for `docker --gpus`:
//! - the value splits on ' ' into alternatives (OR) and each alternative on ','
//!   into factors (AND); empty pieces are skipped;
//! - a factor is `name op value`: the name runs up to the first of `<>=!`, the
//!   operator is the longest run of those characters and must be one of
//!   `= != < <= > >=`; an empty value is invalid;
//! - `cuda`, `driver` and `arch` compare as dotted versions, `brand` as a
//!   case-insensitive string with `=`/`!=` only.
//!
//! Where the two NVIDIA implementations differ we follow the Go toolkit
//! (internal/requirements/constraints/factory.go
//! newConstraintFromRequirement): a factor with an unknown key is dropped
//! rather than failing the whole requirement; an alternative left with no
//! factor is dropped; a variable left with no alternative imposes nothing
//! (an empty OR is no constraint there). So `cuda>=11.6 foo=bar` means
//! `cuda>=11.6`, not "anything": `foo=bar` alone never satisfies it. Each
//! drop is reported as a warning.

//!
//! The data types are here; `parse.rs` reads the text into them and
//! `eval.rs` judges them against host facts.

use crate::core::version::Version;
use std::fmt;

mod eval;
mod parse;

pub use eval::{Context, Judgement, MinorVersion, Outcome, RequirementOutcome, TermResult};
pub use parse::{cuda_version_major_minor, parse_go_bool, SyntaxError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    Cuda,
    Driver,
    Arch,
    Brand,
}

impl Key {
    fn from_name(name: &str) -> Option<Key> {
        match name.to_ascii_lowercase().as_str() {
            "cuda" => Some(Key::Cuda),
            "driver" => Some(Key::Driver),
            "arch" => Some(Key::Arch),
            "brand" => Some(Key::Brand),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "=" => Op::Eq,
            "!=" => Op::Ne,
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            ">=" => Op::Ge,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

/// The value side of a factor, typed by its key.
#[derive(Clone, Debug)]
pub enum Operand {
    Version(Version),
    Brand(String),
    /// An unknown key: kept only to be reported.
    Ignored,
}

#[derive(Clone, Debug)]
pub struct Factor {
    /// None for an unknown key.
    pub key: Option<Key>,
    pub op: Op,
    pub operand: Operand,
    /// The factor as written, for messages.
    pub text: String,
}

/// Comma-separated factors that must all hold.
#[derive(Clone, Debug)]
pub struct AllOf {
    pub factors: Vec<Factor>,
    pub text: String,
}

/// One `NVIDIA_REQUIRE_*` variable: at least one alternative must hold.
#[derive(Clone, Debug)]
pub struct Requirement {
    /// The variable it came from (`NVIDIA_REQUIRE_CUDA`, or `CUDA_VERSION` for
    /// the legacy rule).
    pub source: String,
    pub text: String,
    pub any_of: Vec<AllOf>,
    /// Factors with a key NVIDIA does not define (`cudnn>=8`), dropped.
    pub unknown_keys: Vec<String>,
    /// Alternatives made only of such factors, dropped (they cannot
    /// satisfy the requirement on their own).
    pub dropped_terms: Vec<String>,
}

impl Requirement {
    /// True when unknown keys left the variable with no alternative: it
    /// imposes nothing, as in NVIDIA's Go checker.
    pub fn imposes_nothing(&self) -> bool {
        self.any_of.is_empty() && !self.dropped_terms.is_empty()
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.source, self.text)
    }
}
