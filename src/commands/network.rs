//! What the `gpu-guard` binary hands to `gpu-guard-admission`: the
//! admission webhook (`gpu-guard admission ...`) and images read over the
//! network (`check --image docker://...` or `docker-daemon:...`). The
//! container-start path (hook, runtime wrapper) must not link an HTTP or
//! TLS stack (docs/install.md, "Binaries"), so these run in the binary installed
//! beside this one, exec'd with the same arguments.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

pub const NETWORK_BINARY: &str = "gpu-guard-admission";

/// An `--image` value read over the network rather than from a file.
pub fn is_remote(image: &Path) -> bool {
    // One parse of `--image` for both binaries (image::reference).
    crate::image::reference::parse(image.as_os_str()).is_ok_and(|r| r.is_remote())
}

fn beside_self() -> Option<PathBuf> {
    #[cfg(feature = "test-hooks")]
    if let Some(p) = std::env::var_os("GPU_GUARD_NETWORK_BINARY") {
        return Some(PathBuf::from(p));
    }
    let me = std::env::current_exe().ok()?;
    Some(me.parent()?.join(NETWORK_BINARY))
}

/// Execs `gpu-guard-admission` with `args` (this binary's argv without
/// argv[0]); returns only when that fails, with exit status 2.
pub fn exec(args: &[OsString]) -> i32 {
    let Some(bin) = beside_self() else {
        eprintln!("gpu-guard: error: cannot find this binary's directory to run {NETWORK_BINARY}");
        return 2;
    };
    let err = std::process::Command::new(&bin).args(args).exec();
    eprintln!(
        "gpu-guard: cannot run {} ({err}); it serves registry images and the admission webhook and is installed beside gpu-guard",
        crate::core::sanitize::esc(&bin.display().to_string())
    );
    2
}
