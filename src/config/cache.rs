//! The parsed config, kept between container starts.
//!
//! Engines run the hook at every container start, and parsing the TOML of
//! the shipped config was about 0.2 ms of each start, non-GPU ones too
//! (integration/bench-start.sh). So a config, once parsed and validated,
//! is kept as JSON in a private directory on tmpfs, and used again only
//! for the same bytes: the key is a hash of this binary, the config path,
//! and the path and text of every file read. The files are still found,
//! trust-checked and read at every start ([`super::load_detailed`]); only
//! their parse is skipped. A config that fails is never kept, so an error
//! is found again at every start. The entry also keeps what NVIDIA's
//! toolkit config gave, by the hash of its path and text: that file too is
//! read at every start, and parsed only when it changed.
//!
//! Nothing here can let a container through that the files would not: an
//! entry is read only from a directory that only root (or the caller) can
//! write ([`crate::scan::cache::private_cache_dir`]), any entry that
//! cannot be read or parsed, or whose key differs, is ignored and
//! rewritten, and the directory holds at most [`MAX_ENTRIES`] entries.

use super::Loaded;
use crate::core::policy::NvidiaDeviceSettings;
use crate::sys::word_hash::WordHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// Where entries are kept: tmpfs, so none outlives a reboot.
const DIR: &str = "/run/gpu-guard/config-cache";
/// Names another directory; empty keeps no entries.
const DIR_ENV: &str = "GPU_GUARD_CONFIG_CACHE";
/// The shipped config's entry is under 4 KiB.
const MAX_ENTRY_BYTES: u64 = 1 << 20;
/// One entry per config path; a host uses one or two.
pub const MAX_ENTRIES: usize = 16;

/// What NVIDIA's toolkit config gave, with the hash of its path and text
/// ([`super::nvidia_settings`]): the file is read at every start, and only
/// its parse is kept, for the same bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NvidiaKept {
    pub text: u64,
    pub settings: NvidiaDeviceSettings,
}

/// What an entry holds.
#[derive(Debug, PartialEq, serde::Deserialize)]
pub struct Kept {
    pub loaded: Loaded,
    pub nvidia: NvidiaKept,
}

/// [`Kept`] as written, borrowing the config.
#[derive(serde::Serialize)]
struct KeptRef<'a> {
    loaded: &'a Loaded,
    nvidia: NvidiaKept,
}

/// The entry for one set of config files.
pub struct Parsed {
    /// None: no usable directory, nothing is kept.
    file: Option<PathBuf>,
    key: String,
}

impl Parsed {
    /// The entry for `files` (path and bytes, in the order merged), read
    /// for the config at `config`.
    pub fn for_files<T: AsRef<[u8]>>(config: &Path, files: &[(PathBuf, T)]) -> Parsed {
        let mut h = WordHasher::default();
        hash_binary(&mut h);
        config.hash(&mut h);
        for (path, text) in files {
            path.hash(&mut h);
            text.as_ref().hash(&mut h);
        }
        let bytes: usize = files.iter().map(|(_, t)| t.as_ref().len()).sum();
        let key = format!("{:016x}-{}-{bytes}", h.finish(), files.len());
        let mut name = WordHasher::default();
        config.hash(&mut name);
        let file = dir().map(|d| d.join(format!("{:016x}.json", name.finish())));
        Parsed { file, key }
    }

    /// The config kept for these files, if there is one. An entry is its
    /// key on the first line, then the JSON: another key is told without
    /// reading the rest.
    pub fn get(&self) -> Option<Kept> {
        let bytes = crate::sys::fsutil::read_limited(self.file.as_ref()?, MAX_ENTRY_BYTES).ok()?;
        let json = bytes
            .strip_prefix(self.key.as_bytes())?
            .strip_prefix(b"\n")?;
        serde_json::from_slice(json).ok()
    }

    /// Keeps `loaded` (and what NVIDIA's config gave) for these files; a
    /// failure only means the next start parses again.
    pub fn put(&self, loaded: &Loaded, nvidia: NvidiaKept) {
        let Some(file) = &self.file else {
            return;
        };
        let mut entry = format!("{}\n", self.key).into_bytes();
        if serde_json::to_writer(&mut entry, &KeptRef { loaded, nvidia }).is_err() {
            return;
        }
        if crate::sys::fsutil::write_with_mode(file, &entry, 0o600, false).is_ok() {
            prune(file);
        }
    }
}

/// The entry directory, checked private; None when there is none to use
/// (and in unit tests, which keep nothing on the host).
fn dir() -> Option<PathBuf> {
    if cfg!(test) {
        return None;
    }
    let dir = std::env::var_os(DIR_ENV).unwrap_or_else(|| DIR.into());
    crate::scan::cache::private_cache_dir(dir.to_str()?, "config cache")
}

/// Hashes what makes this binary's parse what it is: its version line
/// (version, commit, build date) and the file itself, so that an entry
/// another build wrote, whose types may read the same JSON otherwise, is
/// not used.
fn hash_binary(h: &mut impl Hasher) {
    use std::os::unix::fs::MetadataExt;
    env!("GPU_GUARD_VERSION_LINE").hash(h);
    if let Ok(m) = std::fs::metadata("/proc/self/exe") {
        (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()).hash(h);
    }
}

/// Removes the oldest entries beside `kept` past [`MAX_ENTRIES`]: tests
/// and `check --config` runs each leave one.
fn prune(kept: &Path) {
    let Some(dir) = kept.parent() else {
        return;
    };
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<(std::time::SystemTime, PathBuf)> = read
        .flatten()
        .filter(|e| e.path() != kept && e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if entries.len() < MAX_ENTRIES {
        return;
    }
    entries.sort();
    for (_, old) in &entries[..entries.len() + 1 - MAX_ENTRIES] {
        let _ = std::fs::remove_file(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::test_dirs::tempdir;

    fn loaded(text: &str) -> Loaded {
        Loaded {
            config: crate::config::parse(text).unwrap(),
            main: Some("/etc/gpu-guard/config.toml".into()),
            drop_ins: vec!["/etc/gpu-guard/config.d/50-x.toml".into()],
            runtime_path_from: None,
            deprecated: vec!["a warning".into()],
        }
    }

    fn nvidia_defaults() -> NvidiaKept {
        NvidiaKept {
            text: 0,
            settings: NvidiaDeviceSettings::default(),
        }
    }

    fn entry(dir: &Path, files: &[(PathBuf, String)]) -> Parsed {
        let mut p = Parsed::for_files(Path::new("/etc/gpu-guard/config.toml"), files);
        p.file = Some(dir.join("c.json"));
        p
    }

    const RICH: &str = "mode = \"audit\"\n[security]\ncapabilities = [\"CAP_CHOWN\"]\n\
        [security.profiles.trainer]\ncapabilities = [\"CAP_SYS_NICE\"]\nno_new_privileges = true\n\
        [[security.exceptions]]\nnamespace = \"kube-system\"\nallow_privileged = true\n\
        [tuning]\nshm_size = \"1g\"\nstack = \"unlimited\"\n[compat]\nmissing_library = \"refuse\"\n\
        [kernel_image]\nlibraries = [\"opt/{a,b}/lib*.so\"]\n";

    #[test]
    fn what_is_kept_reads_back_the_same() {
        let d = tempdir("config-cache");
        let shipped = include_str!("../../config/config.toml");
        for text in [shipped, RICH, ""] {
            let files = [(
                PathBuf::from("/etc/gpu-guard/config.toml"),
                text.to_string(),
            )];
            let p = entry(&d, &files);
            assert!(p.get().is_none());
            let l = loaded(text);
            let nvidia = NvidiaKept {
                text: 7,
                settings: NvidiaDeviceSettings {
                    accept_volume_mounts: true,
                    accept_envvar_unprivileged: false,
                },
            };
            p.put(&l, nvidia);
            let kept = Kept { loaded: l, nvidia };
            assert_eq!(p.get(), Some(kept), "{text}");
        }
    }

    #[test]
    fn other_bytes_another_file_or_a_bad_entry_are_not_used() {
        let d = tempdir("config-cache");
        let main = PathBuf::from("/etc/gpu-guard/config.toml");
        let files = vec![(main.clone(), "mode = \"warn\"\n".to_string())];
        let p = entry(&d, &files);
        p.put(&loaded("mode = \"warn\"\n"), nvidia_defaults());
        assert!(p.get().is_some());
        let mut edited = files.clone();
        edited[0].1 = "mode = \"warm\"\n".into();
        assert!(entry(&d, &edited).get().is_none());
        let mut more = files.clone();
        more.push((
            "/etc/gpu-guard/config.d/90-off.toml".into(),
            "mode = \"off\"\n".into(),
        ));
        assert!(entry(&d, &more).get().is_none());
        let elsewhere = Parsed::for_files(Path::new("/other.toml"), &files);
        assert_ne!(elsewhere.key, p.key);
        std::fs::write(d.join("c.json"), format!("{}\n{{\"config\":", p.key)).unwrap();
        assert!(p.get().is_none());
    }

    #[test]
    fn at_most_max_entries_are_kept() {
        let d = tempdir("config-cache");
        for i in 0..MAX_ENTRIES + 5 {
            std::fs::write(d.join(format!("{i:02}.json")), b"{}").unwrap();
        }
        let p = entry(&d, &[]);
        p.put(&loaded(""), nvidia_defaults());
        let left = std::fs::read_dir(&d).unwrap().count();
        assert_eq!(left, MAX_ENTRIES);
        assert!(p.get().is_some());
    }
}
