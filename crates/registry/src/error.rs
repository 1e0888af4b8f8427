//! One error enum for the registry client and the docker daemon client.
//! Every message is one lowercase line that names the registry (or the
//! socket) and the cause, so `check --image docker://...` can print it as is.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid image reference {reference:?}: {msg}")]
    BadReference { reference: String, msg: String },
    #[error("registry {registry}: cannot connect: {msg}")]
    Connect { registry: String, msg: String },
    #[error("registry {registry}: {what}: timed out: {msg}")]
    TimedOut {
        registry: String,
        what: String,
        msg: String,
    },
    #[error("registry {registry}: TLS: {msg}")]
    Tls { registry: String, msg: String },
    #[error("registry {registry}: authentication failed: {msg}")]
    Auth { registry: String, msg: String },
    #[error("registry {registry}: {what} not found")]
    NotFound { registry: String, what: String },
    #[error("registry {registry}: {what}: digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch {
        registry: String,
        what: String,
        expected: String,
        actual: String,
    },
    #[error("registry {registry}: {what} is larger than the {limit}-byte limit")]
    TooLarge {
        registry: String,
        what: String,
        limit: u64,
    },
    #[error("registry {registry}: {what}: HTTP {status}{detail}")]
    Status {
        registry: String,
        what: String,
        status: u16,
        /// `: <the registry's error code and message>`, or empty.
        detail: String,
    },
    #[error("registry {registry}: {what}: {msg}")]
    Protocol {
        registry: String,
        what: String,
        msg: String,
    },
    #[error("registry {registry}: {what}: {source}")]
    Io {
        registry: String,
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("credentials file {path}: {msg}")]
    Credentials { path: String, msg: String },
    #[error("CA file {path}: {msg}")]
    CaFile { path: String, msg: String },
    #[error("docker daemon at {socket}: {msg}")]
    Daemon { socket: String, msg: String },
}

impl RegistryError {
    /// Authentication or authorization failed (wrong or missing credentials).
    pub fn is_auth(&self) -> bool {
        matches!(self, RegistryError::Auth { .. })
    }

    /// A timeout or the read's deadline.
    pub fn is_timeout(&self) -> bool {
        matches!(self, RegistryError::TimedOut { .. })
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, RegistryError::NotFound { .. })
    }
}
