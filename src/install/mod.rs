//! Engine setup (issue 5, in progress).
use crate::cli::InstallArgs;
use std::path::Path;
pub fn command(_config: Option<&Path>, _args: &InstallArgs, _uninstall: bool) -> i32 {
    eprintln!("gpu-guard: install is not built yet");
    2
}
