//! Host facts from a file (`check --host FILE`, config `host.facts_file`):
//! the design's host facts JSON, read with a size bound.

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
