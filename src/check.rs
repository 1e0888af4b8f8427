//! `gpu-guard check` (in progress).
use crate::cli::CheckArgs;
use std::path::Path;
pub fn main(_config: Option<&Path>, _args: &CheckArgs) -> i32 {
    eprintln!("gpu-guard: check is not built yet");
    2
}
