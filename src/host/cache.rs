//! The host facts cache: one JSON file (config `host.cache_file`) so that a
//! container start with a warm cache makes no NVML call at all.
//!
//! Valid while the key matches (the full text of /proc/driver/nvidia/version,
//! which changes with any driver load; the boot id; the configured NVML
//! library) and while younger than `host.cache_ttl_s`. Written with
//! [`crate::sys::fsutil::write_with_mode`] (0600; temp file + rename in the same
//! directory; no fsync: the cache lives in /run), so concurrent readers see the old file or the new one, never
//! half of one; concurrent writers each rename a whole file and the last one
//! wins. Anything unexpected (truncated, foreign, another owner, writable by
//! others, a key from another driver) is a miss, and the probe rewrites it.

use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use serde::{Deserialize, Serialize};

use crate::core::facts::HostFacts;

/// Tags our files; anything else at the path is foreign and ignored.
///
/// v2: facts carry each GPU's health and topology; a v1 file (without) is a
/// miss, so an upgrade reads NVML once instead of serving unknown health.
pub const FORMAT: &str = "gpu-guard host facts cache v2";
/// A cache file is a few KiB even for 8 GPUs with MIG devices.
const MAX_CACHE_FILE: u64 = 1 << 20;

/// What the cached facts depend on: a change in any of them is a miss.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKey {
    /// The whole /proc/driver/nvidia/version text (version, build, date), or
    /// "none" without the kernel module.
    pub driver: String,
    /// /proc/sys/kernel/random/boot_id: a cache never survives a reboot, even
    /// when the cache file is on persistent storage.
    pub boot_id: String,
    /// `host.nvml_library` as configured.
    pub nvml_library: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheFile {
    format: String,
    key: CacheKey,
    created_unix_ms: u64,
    /// Where the facts came from ("NVML (libnvidia-ml.so.1)").
    source: String,
    facts: HostFacts,
}

/// A cache hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub facts: HostFacts,
    pub source: String,
    pub age_ms: u64,
}

/// Why the cache was not used (for debug logs and tests).
#[derive(Debug, thiserror::Error)]
pub enum Miss {
    #[error("no cache file at {}", .0.display())]
    Absent(PathBuf),
    #[error("cannot read cache file {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cache file {} is not ours to trust (owner uid {uid}, mode {mode:o})", path.display())]
    Untrusted { path: PathBuf, uid: u32, mode: u32 },
    #[error("cache file {} is not a gpu-guard cache: {source}", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cache file {} has format {found:?}, not {FORMAT:?}", path.display())]
    Foreign { path: PathBuf, found: String },
    #[error("cache file {} was made for another driver, boot or NVML library", path.display())]
    KeyChanged { path: PathBuf },
    #[error("cache file {} is {age_ms} ms old (ttl {ttl_ms} ms)", path.display())]
    Expired {
        path: PathBuf,
        age_ms: u64,
        ttl_ms: u64,
    },
    #[error("cache file {} was created in the future", path.display())]
    FromFuture { path: PathBuf },
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot create cache directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write cache file {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot encode the cache: {0}")]
    Encode(#[source] serde_json::Error),
    /// The directory is not root's alone (see
    /// [`crate::sys::fsutil::check_private_dir`]); the message is the fix.
    #[error("{0}")]
    UnsafeDir(#[source] io::Error),
}

/// Milliseconds since the epoch (0 if the clock is before 1970).
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Clock steps (NTP at boot) smaller than this do not void a fresh cache.
const FUTURE_SLACK_MS: u64 = 5_000;

/// Reads the cache file: regular, owned by us (or root), not writable by
/// group or others, and opened without following a symlink, since a
/// planted file would otherwise decide which containers may start.
fn read_trusted(path: &Path) -> Result<Vec<u8>, Miss> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)
        .map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => Miss::Absent(path.to_path_buf()),
            _ => Miss::Unreadable {
                path: path.to_path_buf(),
                source,
            },
        })?;
    let meta = file.metadata().map_err(|source| Miss::Unreadable {
        path: path.to_path_buf(),
        source,
    })?;
    let euid = nix::unistd::geteuid().as_raw();
    if !meta.is_file() || (meta.uid() != euid && meta.uid() != 0) || meta.mode() & 0o022 != 0 {
        return Err(Miss::Untrusted {
            path: path.to_path_buf(),
            uid: meta.uid(),
            mode: meta.mode() & 0o7777,
        });
    }
    let mut buf = Vec::with_capacity(meta.len().min(MAX_CACHE_FILE) as usize);
    file.take(MAX_CACHE_FILE + 1)
        .read_to_end(&mut buf)
        .map_err(|source| Miss::Unreadable {
            path: path.to_path_buf(),
            source,
        })?;
    if buf.len() as u64 > MAX_CACHE_FILE {
        return Err(Miss::Unreadable {
            path: path.to_path_buf(),
            source: io::Error::new(io::ErrorKind::InvalidData, "file is too large"),
        });
    }
    Ok(buf)
}

/// Looks the facts up. `now_ms` is passed in so tests can move the clock.
pub fn load(path: &Path, key: &CacheKey, ttl_s: u64, now_ms: u64) -> Result<Hit, Miss> {
    let bytes = read_trusted(path)?;
    // Read the format tag first, so a foreign JSON file is named as such.
    let tag: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|source| Miss::Corrupt {
            path: path.to_path_buf(),
            source,
        })?;
    let found = tag.get("format").and_then(|f| f.as_str()).unwrap_or("");
    if found != FORMAT {
        return Err(Miss::Foreign {
            path: path.to_path_buf(),
            found: found.chars().take(80).collect(),
        });
    }
    let file: CacheFile = serde_json::from_value(tag).map_err(|source| Miss::Corrupt {
        path: path.to_path_buf(),
        source,
    })?;
    if file.key != *key {
        return Err(Miss::KeyChanged {
            path: path.to_path_buf(),
        });
    }
    if file.created_unix_ms > now_ms.saturating_add(FUTURE_SLACK_MS) {
        return Err(Miss::FromFuture {
            path: path.to_path_buf(),
        });
    }
    let age_ms = now_ms.saturating_sub(file.created_unix_ms);
    let ttl_ms = ttl_s.saturating_mul(1000);
    if age_ms >= ttl_ms {
        return Err(Miss::Expired {
            path: path.to_path_buf(),
            age_ms,
            ttl_ms,
        });
    }
    Ok(Hit {
        facts: file.facts,
        source: file.source,
        age_ms,
    })
}

/// Writes the facts atomically (mode 0600), creating the directory (0755)
/// if needed; refuses a directory others can write.
pub fn store(
    path: &Path,
    key: &CacheKey,
    facts: &HostFacts,
    source: &str,
    now_ms: u64,
) -> Result<(), CacheError> {
    let file = CacheFile {
        format: FORMAT.to_string(),
        key: key.clone(),
        created_unix_ms: now_ms,
        source: source.to_string(),
        facts: facts.clone(),
    };
    let data = serde_json::to_vec_pretty(&file).map_err(CacheError::Encode)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|source| CacheError::CreateDir {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    crate::sys::fsutil::check_private_dir(dir.unwrap_or(Path::new(".")))
        .map_err(CacheError::UnsafeDir)?;
    // Always 0600, never the old file's mode: a file found group- or
    // world-writable fails read_trusted, and copying its mode forward would
    // keep it untrusted (and every start on NVML) forever. This heals it.
    crate::sys::fsutil::write_with_mode(path, &data, 0o600, false).map_err(|source| {
        CacheError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::facts::Gpu;
    use std::os::unix::fs::PermissionsExt;

    use crate::sys::test_dirs::tempdir;

    fn key() -> CacheKey {
        CacheKey {
            driver: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14\n".into(),
            boot_id: "b-1".into(),
            nvml_library: String::new(),
        }
    }

    fn facts() -> HostFacts {
        HostFacts {
            driver_version: Some("550.54.14".into()),
            cuda_driver_version: Some("12.4".into()),
            gpus: vec![Gpu {
                index: 0,
                uuid: "GPU-1".into(),
                name: "NVIDIA A10".into(),
                brand: "nvidia".into(),
                compute_capability: Some("8.6".into()),
                memory_mib: Some(23028),
                pci_bus_id: Some("00000000:AF:00.0".into()),
                mig_devices: vec![],
                minor_number: Some(0),
                ..Gpu::default()
            }],
            ..Default::default()
        }
    }

    /// Facts with AMD GPUs (a facts file or a cache written by another
    /// probe) survive the cache as they are.
    #[test]
    fn amd_facts_round_trip() {
        let d = tempdir("cache-amd");
        let p = d.join("host-facts.json");
        let mut f = facts();
        f.amdgpu_driver_version = Some("6.16.6".into());
        f.gpus.push(Gpu {
            index: 0,
            vendor: crate::core::facts::Vendor::Amd,
            name: "AMD Instinct MI300X OAM".into(),
            target_id: Some("gfx942:sramecc+:xnack-".into()),
            render_node: Some("/dev/dri/renderD128".into()),
            compute_units: Some(304),
            xnack_per_process: true,
            kfd_node: Some(2),
            ..Default::default()
        });
        store(&p, &key(), &f, "NVML (x)", 1_000_000).unwrap();
        assert_eq!(load(&p, &key(), 300, 1_000_001).unwrap().facts, f);
    }

    #[test]
    fn round_trip_then_expiry_and_key_changes() {
        let d = tempdir("cache-rt");
        let p = d.join("sub/dir/host-facts.json");
        store(&p, &key(), &facts(), "NVML (x)", 1_000_000).unwrap();
        let mode = std::fs::metadata(d.join("sub/dir"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        let hit = load(&p, &key(), 300, 1_010_000).unwrap();
        assert_eq!(hit.facts, facts());
        assert_eq!(hit.source, "NVML (x)");
        assert_eq!(hit.age_ms, 10_000);
        assert!(matches!(
            load(&p, &key(), 300, 1_000_000 + 300_000),
            Err(Miss::Expired { .. })
        ));
        assert!(matches!(
            load(&p, &key(), 300, 1_000_000 - 60_000),
            Err(Miss::FromFuture { .. })
        ));
        let mut k = key();
        k.driver = k.driver.replace("550.54.14", "550.90.07");
        assert!(matches!(
            load(&p, &k, 300, 1_010_000),
            Err(Miss::KeyChanged { .. })
        ));
        let mut k = key();
        k.boot_id = "b-2".into();
        assert!(matches!(
            load(&p, &k, 300, 1_010_000),
            Err(Miss::KeyChanged { .. })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn damaged_foreign_and_untrusted_files_are_misses() {
        let d = tempdir("cache-bad");
        let p = d.join("c.json");
        assert!(matches!(load(&p, &key(), 300, 0), Err(Miss::Absent(_))));
        store(&p, &key(), &facts(), "NVML", 1000).unwrap();
        let full = std::fs::read(&p).unwrap();
        for cut in [0, 1, full.len() / 2, full.len() - 2] {
            std::fs::write(&p, &full[..cut]).unwrap();
            assert!(
                matches!(load(&p, &key(), 300, 2000), Err(Miss::Corrupt { .. })),
                "cut at {cut}"
            );
        }
        std::fs::write(&p, br#"{"format":"something else","facts":{}}"#).unwrap();
        assert!(matches!(
            load(&p, &key(), 300, 2000),
            Err(Miss::Foreign { .. })
        ));
        std::fs::write(&p, br#"[1,2,3]"#).unwrap();
        assert!(matches!(
            load(&p, &key(), 300, 2000),
            Err(Miss::Foreign { .. })
        ));
        // Right tag, wrong shape.
        std::fs::write(&p, format!(r#"{{"format":"{FORMAT}","facts":7}}"#)).unwrap();
        assert!(matches!(
            load(&p, &key(), 300, 2000),
            Err(Miss::Corrupt { .. })
        ));
        // World-writable: anyone could have written it.
        store(&p, &key(), &facts(), "NVML", 1000).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            load(&p, &key(), 300, 2000),
            Err(Miss::Untrusted { .. })
        ));
        // A symlink is not followed.
        let real = d.join("real.json");
        store(&real, &key(), &facts(), "NVML", 1000).unwrap();
        let link = d.join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(load(&real, &key(), 300, 2000).is_ok());
        assert!(matches!(
            load(&link, &key(), 300, 2000),
            Err(Miss::Unreadable { .. })
        ));
        // A directory or FIFO at the path does not block or pass.
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(load(&fifo, &key(), 300, 2000).is_err());
        assert!(load(&d, &key(), 300, 2000).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn overwrite_replaces_whole_file() {
        let d = tempdir("cache-ow");
        let p = d.join("c.json");
        std::fs::write(&p, b"garbage").unwrap();
        store(&p, &key(), &facts(), "NVML", 1000).unwrap();
        assert!(load(&p, &key(), 300, 1500).is_ok());
        // No temp files left behind.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
