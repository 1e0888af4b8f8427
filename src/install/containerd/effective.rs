//! Whether containerd's merged configuration runs gpu-guard: the pure half
//! of the drift check (`install --check`, `gpu-guard host`) and of the
//! check install makes on its own result before writing it.

use std::path::{Path, PathBuf};

use super::merge::{effective, Effective, Rules, Source};
use crate::install::RUNTIME_NAME;

/// What install registered, and so what the merged configuration must say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    /// `options.BinaryName` of the gpu-guard runtime (host path).
    pub binary: String,
    /// `options.Root` of the gpu-guard runtime; `""`: not checked.
    pub root: String,
    /// gpu-guard must be `default_runtime_name`.
    pub default: bool,
}

/// Why the merged configuration does not run gpu-guard as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file responsible: the one whose setting wins (under 1.x the
    /// file whose CRI section replaced everyone else's); `None` when no
    /// file is (containerd's built-in defaults).
    pub file: Option<PathBuf>,
    pub message: String,
}

/// The merge rules a configuration of merged `version` may be read under:
/// version 3 and later only by containerd 2.x; 1 and 2 by either.
pub fn rules_for(version: i64) -> &'static [Rules] {
    if version >= 3 {
        &[Rules::Deep]
    } else {
        &[Rules::Replace, Rules::Deep]
    }
}

/// Judges `files` (containerd's load order, gpu-guard's drop-in included)
/// against `expect` under every rule set their version allows; the first
/// problem found, `None` when gpu-guard is what containerd runs.
pub fn judge(files: &[Source], expect: &Expect) -> Option<Problem> {
    let version = effective(files, Rules::Deep).version;
    rules_for(version)
        .iter()
        .find_map(|r| judge_one(&effective(files, *r), expect))
}

fn judge_one(eff: &Effective, expect: &Expect) -> Option<Problem> {
    let who = eff.rules.describe();
    let problem = |key: &str, message: String| Problem {
        file: eff.source_of(key).map(Path::to_path_buf),
        message,
    };
    let ours = format!("containerd.runtimes.{RUNTIME_NAME}");
    if eff.runtime(RUNTIME_NAME).is_none() {
        let by = eff
            .source_of(&ours)
            .map(|p| format!(": the CRI settings come from {}", p.display()))
            .unwrap_or_default();
        return Some(problem(
            &ours,
            format!("{who} reads no `{RUNTIME_NAME}` runtime from its merged configuration{by}"),
        ));
    }
    let binary = eff.option(RUNTIME_NAME, "BinaryName").unwrap_or_default();
    if binary != expect.binary {
        return Some(problem(
            &format!("{ours}.options.BinaryName"),
            format!(
                "{who} runs `{binary}` for the `{RUNTIME_NAME}` runtime, not the wrapper {}",
                expect.binary
            ),
        ));
    }
    let root = eff.option(RUNTIME_NAME, "Root").unwrap_or_default();
    if !expect.root.is_empty() && root != expect.root {
        return Some(problem(
            &format!("{ours}.options.Root"),
            format!(
                "{who} gives the `{RUNTIME_NAME}` runtime the root `{root}`, not {} (the wrapper cannot tell containerd invoked it)",
                expect.root
            ),
        ));
    }
    let default = eff.default_runtime();
    if expect.default && default != RUNTIME_NAME {
        return Some(problem(
            "containerd.default_runtime_name",
            format!("{who}'s default runtime is `{default}`, not `{RUNTIME_NAME}`: containers without a runtime class bypass gpu-guard"),
        ));
    }
    None
}
