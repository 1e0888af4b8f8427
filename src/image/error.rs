//! One error enum for the image reader. Every hostile input ends in one of
//! these, as one lowercase line.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("cannot read {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{0} is not an OCI image layout, docker-archive or OCI archive")]
    NotAnImage(String),
    #[error("{0} is a compressed archive; decompress it first")]
    CompressedArchive(String),
    #[error("the image has no {0}")]
    Missing(String),
    #[error("{what} is not valid: {msg}")]
    BadJson { what: String, msg: String },
    #[error("{what} is larger than the {limit}-byte limit")]
    TooLarge { what: String, limit: u64 },
    #[error("{what} has an invalid digest {digest:?}")]
    BadDigest { what: String, digest: String },
    #[error("{what} uses the unsupported digest algorithm {algorithm:?}")]
    UnsupportedDigest { what: String, algorithm: String },
    #[error("{what} path {path:?} points outside the image")]
    PathOutside { what: String, path: String },
    #[error("{0} is not a regular file (symlinks and special files are refused)")]
    NotRegular(String),
    #[error("{what} digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{what} is truncated: {got} of {expected} bytes")]
    Truncated {
        what: String,
        got: u64,
        expected: u64,
    },
    #[error("{what} is truncated or corrupt: {source}")]
    Corrupt {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("no image for platform {wanted} (the index has: {available})")]
    Platform { wanted: String, available: String },
    #[error("the image holds several images ({0}); name one")]
    Ambiguous(String),
    #[error("no image named {0:?} in the archive")]
    NoSuchReference(String),
    #[error("the archive holds {count} images; there is no image @{index} (they count from @0)")]
    NoSuchIndex { index: usize, count: usize },
    #[error("{path} is {found}, not {wanted} as its transport says; name it as {hint} or as a plain path")]
    WrongFormat {
        path: String,
        wanted: &'static str,
        found: &'static str,
        hint: &'static str,
    },
    #[error("{what}: entry {path:?} escapes the image root")]
    UnsafeEntry { what: String, path: String },
    #[error("{what}: tar extension header of {size} bytes is over the {limit}-byte limit")]
    ExtensionHeader { what: String, size: u64, limit: u64 },
    #[error("the uncompressed-bytes budget ({0} bytes) ran out")]
    ByteBudget(u64),
    #[error("the entry budget ({0} entries) ran out")]
    EntryBudget(u64),
    #[error("the time budget ({0} s) ran out")]
    TimeBudget(u64),
    #[error("the entry-name budget ({0} bytes of paths and link targets) ran out")]
    PathBudget(u64),
    #[error(
        "the layers decompress to more than {ratio} times their compressed size past the \
         first {allowance} bytes: a compression bomb"
    )]
    Expansion { ratio: u64, allowance: u64 },
    #[error("{what}: {field} of {len} bytes is over the {limit}-byte limit (PATH_MAX)")]
    NameTooLong {
        what: String,
        field: &'static str,
        len: usize,
        limit: usize,
    },
    #[error("too many symlinks resolving {0:?} in the image")]
    SymlinkLoop(String),
    #[error("invalid platform {0:?} (expected os/arch[/variant])")]
    BadPlatform(String),
}

impl ImageError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> ImageError {
        let what = what.into();
        move |source| ImageError::Io { what, source }
    }

    /// A budget ran out (bytes, entries, names, time, the expansion
    /// bound): the caller may report "not judged" rather than "broken image".
    pub fn is_budget(&self) -> bool {
        matches!(
            self,
            ImageError::ByteBudget(_)
                | ImageError::EntryBudget(_)
                | ImageError::TimeBudget(_)
                | ImageError::PathBudget(_)
                | ImageError::Expansion { .. }
        )
    }
}
