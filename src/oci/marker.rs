//! What the runtime wrapper learnt about a container at create, for its
//! execs: whether it is a GPU container and where its bundle is.
//!
//! Without it every `exec` asked the real runtime (`runc state ID`, 4-5 ms)
//! for the bundle, GPU container or not. The wrapper writes one small file
//! per container it lets start, keyed by the runtime's `--root` and the
//! container id, under a root-only directory on tmpfs (`/run/gpu-guard/
//! containers`, gone at reboot, as the containers are); an exec opens it
//! once. A marker is trusted only when it is a regular file owned by us and
//! writable by no one else; `delete` removes it. No marker (a container
//! created before gpu-guard was installed, or by another path) means
//! "unknown": the wrapper falls back to asking the runtime.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

/// Where markers live (root; a rootless runtime's markers go under
/// `$XDG_RUNTIME_DIR/gpu-guard/containers`).
const DEFAULT_DIR: &str = "/run/gpu-guard/containers";

/// TEST ONLY: a build with the `test-hooks` feature reads the marker
/// directory from this variable.
#[cfg(feature = "test-hooks")]
const ENV_DIR: &str = "GPU_GUARD_MARKER_DIR";

fn dir() -> PathBuf {
    #[cfg(feature = "test-hooks")]
    if let Some(d) = std::env::var_os(ENV_DIR) {
        return PathBuf::from(d);
    }
    // Rootless runtimes: the user's runtime directory (runc's own default
    // root there is $XDG_RUNTIME_DIR/runc).
    if !nix::unistd::geteuid().is_root() {
        if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
            return PathBuf::from(x).join("gpu-guard/containers");
        }
    }
    PathBuf::from(DEFAULT_DIR)
}

/// What a marker says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    pub gpu: bool,
    pub bundle: PathBuf,
}

/// The marker's file name: FNV-1a of the runtime root, then the id (runc's
/// ids are `[\w+-.]+`; any other id gets no marker).
fn name(root: Option<&OsStr>, id: &str) -> Option<String> {
    let ok = !id.is_empty()
        && id != "."
        && id != ".."
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_+-.".contains(c));
    if !ok {
        return None;
    }
    let mut h: u64 = 0xcbf29ce484222325;
    for b in root.map(|r| r.as_bytes()).unwrap_or_default() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    Some(format!("{h:016x}-{id}"))
}

fn path(root: Option<&OsStr>, id: &str) -> Option<PathBuf> {
    Some(dir().join(name(root, id)?))
}

/// Records a container at create. Errors are returned for logging only: a
/// missing marker makes exec ask the runtime, as before.
pub fn write(root: Option<&OsStr>, id: &str, m: &Marker) -> std::io::Result<()> {
    let Some(p) = path(root, id) else {
        return Ok(());
    };
    let d = dir();
    if !d.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&d)?;
    }
    let mut data = if m.gpu {
        b"gpu\n".to_vec()
    } else {
        b"cpu\n".to_vec()
    };
    data.extend_from_slice(m.bundle.as_os_str().as_bytes());
    crate::sys::fsutil::write_with_mode(&p, &data, 0o600, false)
}

/// The marker of a container, when there is a trustworthy one.
pub fn read(root: Option<&OsStr>, id: &str) -> Option<Marker> {
    let p = path(root, id)?;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(p)
        .ok()?;
    let meta = f.metadata().ok()?;
    let euid = nix::unistd::geteuid().as_raw();
    if !meta.is_file() || meta.uid() != euid || meta.mode() & 0o022 != 0 || meta.len() > 8192 {
        return None;
    }
    let mut data = Vec::new();
    f.read_to_end(&mut data).ok()?;
    let (kind, bundle) = data.split_at(data.iter().position(|b| *b == b'\n')?);
    let gpu = match kind {
        b"gpu" => true,
        b"cpu" => false,
        _ => return None,
    };
    let bundle = PathBuf::from(OsString::from_vec(bundle[1..].to_vec()));
    Some(Marker { gpu, bundle })
}

/// Forgets a container (`delete`); a missing marker is fine.
pub fn remove(root: Option<&OsStr>, id: &str) {
    if let Some(p) = path(root, id) {
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_keyed_by_root_and_safe() {
        let a = name(Some(OsStr::new("/run/runc")), "abc").unwrap();
        let b = name(Some(OsStr::new("/run/containerd/runc/k8s.io")), "abc").unwrap();
        assert_ne!(a, b);
        assert!(a.ends_with("-abc"));
        assert_eq!(name(None, "../x"), None);
        assert_eq!(name(None, ".."), None);
        assert_eq!(name(None, ""), None);
        assert!(name(None, "a_b+c-d.e").is_some());
    }

    #[test]
    fn round_trip() {
        let d = std::env::temp_dir().join(format!("gg-marker-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("m");
        let m = Marker {
            gpu: true,
            bundle: PathBuf::from("/b\nc"),
        };
        let mut data = b"gpu\n".to_vec();
        data.extend_from_slice(m.bundle.as_os_str().as_bytes());
        crate::sys::fsutil::write_with_mode(&p, &data, 0o600, false).unwrap();
        let text = std::fs::read(&p).unwrap();
        assert_eq!(text, data);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
