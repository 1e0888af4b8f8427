//! Host probe: NVML, /proc fallback, cache, deadline (issue 3, in progress).
use crate::cli::HostArgs;
use std::path::Path;
pub fn host_command(_config: Option<&Path>, _args: &HostArgs) -> i32 {
    eprintln!("gpu-guard: host is not built yet");
    2
}
