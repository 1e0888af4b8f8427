//! What GPU detection needs to know of this host beside the spec
//! (core::device_table, core::device_access): the character-device majors
//! its kernel registered, by name (`/proc/devices`, through procfs; a
//! test-hooks build reads `GPU_GUARD_PROC_DEVICES` instead, as the probe
//! does), and what a bind mount's source is (one stat, following symlinks
//! as mount(2) follows them): a device node by number, or a directory of
//! the host's `/dev`.

use crate::core::container::{Container, MountSource};
use crate::core::device_table::HostMajors;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// The character-device majors of this host's `/proc/devices`; none when
/// it cannot be read (then only fixed majors are known).
pub fn host_majors() -> HostMajors {
    let over = super::ProbePaths::from_env().devices;
    match super::kernel::char_majors(over.as_deref()) {
        Ok(names) => HostMajors::new(names),
        Err(_) => HostMajors::default(),
    }
}

/// Fills `Mount::host` for `c`'s bind mounts with an absolute source.
pub fn inspect_mounts(c: &mut Container) {
    // The host's /dev filesystem, when /dev is one of its own (devtmpfs);
    // looked at only for a container with a bind mount to judge.
    let dev = std::cell::OnceCell::new();
    let host_dev = || match (std::fs::metadata("/dev"), std::fs::metadata("/")) {
        (Ok(d), Ok(r)) if d.dev() != r.dev() => Some(d.dev()),
        _ => None,
    };
    for m in c.mounts.iter_mut().filter(|m| m.is_bind()) {
        if !m.source.starts_with('/') {
            continue;
        }
        let Ok(meta) = std::fs::metadata(Path::new(&m.source)) else {
            continue;
        };
        m.host = if meta.file_type().is_char_device() {
            let rdev = meta.rdev();
            Some(MountSource::CharDevice {
                major: nix::sys::stat::major(rdev) as u32,
                minor: nix::sys::stat::minor(rdev) as u32,
            })
        } else if meta.is_dir() && Some(meta.dev()) == *dev.get_or_init(host_dev) {
            Some(MountSource::DeviceDir)
        } else {
            None
        };
    }
}
