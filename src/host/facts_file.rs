//! Host facts from a file (`check --host FILE`, config `host.facts_file`):
//! the design's host facts JSON, read with a size bound.
//!
//! `host.facts_file` decides what starts on this host, as the config does,
//! so it is read under the config's trust rules
//! ([`crate::sys::policy_file`]: owned by root or the effective uid, not
//! writable by group or others, a regular file, bounded;
//! docs/configuration.md): [`ConfiguredFactsFile`]. A file named on `check`'s
//! command line is the caller's own input: [`FactsFile`].

use crate::core::facts::{HostFacts, HostProblem, HostProblemKind, HostReport, HostSource};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum FactsFileError {
    #[error("cannot read host facts file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("host facts file {path} is not valid host facts JSON: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// The largest facts file we read; a real one is a few KiB even with 8 GPUs
/// and their MIG devices.
const MAX_FACTS_FILE: u64 = 4 << 20;

/// Reads a host facts file (`check --host FILE`, config `host.facts_file`).
pub fn read_facts_file(path: &Path) -> Result<HostFacts, FactsFileError> {
    let text =
        crate::sys::fsutil::read_to_string_limited(path, MAX_FACTS_FILE).map_err(|source| {
            FactsFileError::Read {
                path: path.to_path_buf(),
                source,
            }
        })?;
    HostFacts::from_json(&text).map_err(|source| FactsFileError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// `host.facts_file` as a host source: read as policy. One that others
/// could have written is an `Untrusted` host problem (GPU containers are
/// refused, naming the file and the fix); one that cannot be read is a
/// probe failure, as for [`FactsFile`].
pub struct ConfiguredFactsFile(pub PathBuf);

impl HostSource for ConfiguredFactsFile {
    fn report(&self) -> HostReport {
        use crate::sys::policy_file::{read_policy_file, PolicyFileError};
        let source = format!("facts file {}", self.0.display());
        let problem = |kind, message: String| {
            HostReport::failed(
                source.clone(),
                HostProblem {
                    kind,
                    message,
                    fix: Some(format!(
                        "fix or remove host.facts_file in the gpu-guard config (it points at {})",
                        self.0.display()
                    )),
                },
            )
        };
        let text = match read_policy_file(&self.0, MAX_FACTS_FILE) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(PolicyFileError::Untrusted(m)) => {
                return problem(
                    HostProblemKind::Untrusted,
                    format!("host facts file (host.facts_file) not trusted: {m}"),
                )
            }
            Err(e) => {
                return problem(
                    HostProblemKind::ProbeFailed,
                    format!("cannot read host facts file {}: {e}", self.0.display()),
                )
            }
        };
        match HostFacts::from_json(&text) {
            Ok(facts) => HostReport::from_facts(facts, source),
            Err(e) => problem(
                HostProblemKind::ProbeFailed,
                format!(
                    "host facts file {} is not valid host facts JSON: {e}",
                    self.0.display()
                ),
            ),
        }
    }
}

/// A facts file as a host source: an unreadable file is a probe failure, so
/// the policy decides as it would for a broken NVML.
pub struct FactsFile(pub PathBuf);

impl HostSource for FactsFile {
    fn report(&self) -> HostReport {
        let source = format!("facts file {}", self.0.display());
        match read_facts_file(&self.0) {
            Ok(facts) => HostReport::from_facts(facts, source),
            Err(e) => HostReport::failed(
                source,
                HostProblem {
                    kind: HostProblemKind::ProbeFailed,
                    message: e.to_string(),
                    fix: Some(format!(
                        "fix or remove host.facts_file in the gpu-guard config (it points at {})",
                        self.0.display()
                    )),
                },
            ),
        }
    }
}
