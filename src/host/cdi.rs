//! Reads the CDI spec directories (`host.cdi_spec_dirs`) for
//! [`crate::core::cdi`], in CDI's order, in bounded time and memory.
//!
//! As container-device-interface pkg/cdi/spec-dirs.go `scanSpecDirs` reads
//! them: each directory in turn (a missing one is skipped), the files
//! directly in it whose name ends in `.json` or `.yaml`, in name order
//! (Go's os.ReadDir sorts by name), subdirectories skipped. Both formats
//! are read as YAML, as CDI's `ParseSpec` does (sigs.k8s.io/yaml reads
//! JSON too).
//!
//! Bounds and hostile files: a file is opened without blocking and must
//! be a regular file (a FIFO is reported at once, never waited on; CDI's
//! own reader would block on it); at most [`MAX_SPEC_BYTES`] per file,
//! [`MAX_TOTAL_BYTES`] and [`MAX_FILES`] in all; YAML aliases and nesting
//! are bounded by serde_yaml_ng. Symlinks are followed as the kernel
//! follows them.
//!
//! Trust: a spec decides what is mounted into a container and which hooks
//! run as root on the host, so it is held to the rule of gpu-guard's own
//! config (docs/interfaces.md, "Config file", "Trust"): owned by root (or
//! the user gpu-guard runs as), not writable by group or others, in
//! directories no one else can change. A spec that fails it is still
//! read, so that resolution matches CDI's, and marked untrusted: a
//! container whose device comes from it is refused (core::cdi).

use crate::core::cdi::{CdiSpecs, HostPaths, NotChecked, PathState, Spec, SpecEntry, SpecState};
use crate::core::sanitize::one_line;
use crate::sys::policy_file::{self, PolicyFileError};
use nix::fcntl::OFlag;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// The largest spec file read. NVIDIA's spec for an 8-GPU host is tens
/// of KiB.
pub const MAX_SPEC_BYTES: u64 = 4 << 20;
/// Bytes read from all spec files of one decision.
pub const MAX_TOTAL_BYTES: u64 = 16 << 20;
/// Spec files read in all directories.
pub const MAX_FILES: usize = 256;

/// Where NVIDIA's refresh unit is installed (the toolkit's
/// deployments/systemd/nvidia-cdi-refresh.service).
const REFRESH_UNITS: &[&str] = &[
    "/etc/systemd/system/nvidia-cdi-refresh.service",
    "/lib/systemd/system/nvidia-cdi-refresh.service",
    "/usr/lib/systemd/system/nvidia-cdi-refresh.service",
];

/// Reads every spec of `dirs`.
pub fn load(dirs: &[String]) -> CdiSpecs {
    let mut out = CdiSpecs {
        dirs: dirs.to_vec(),
        refresh_unit: REFRESH_UNITS.iter().any(|p| Path::new(p).exists()),
        ..Default::default()
    };
    let mut budget = Budget {
        files: MAX_FILES,
        bytes: MAX_TOTAL_BYTES,
    };
    for (priority, dir) in dirs.iter().enumerate() {
        let dir_untrusted = match policy_file::check_policy_dir(Path::new(dir)) {
            Ok(_) => None,
            Err(PolicyFileError::Absent) => continue,
            Err(PolicyFileError::Untrusted(m)) => Some(m),
            Err(PolicyFileError::Unreadable(e)) => {
                out.problems
                    .push(format!("cannot read CDI spec directory {dir}: {e}"));
                continue;
            }
        };
        let names = match spec_names(Path::new(dir)) {
            Ok(n) => n,
            Err(e) => {
                out.problems
                    .push(format!("cannot list CDI spec directory {dir}: {e}"));
                continue;
            }
        };
        for name in names {
            let path = Path::new(dir).join(&name);
            if budget.files == 0 {
                out.problems.push(format!(
                    "more than {MAX_FILES} CDI spec files: {} and the files after it were not read",
                    path.display()
                ));
                return out;
            }
            budget.files -= 1;
            let (untrusted, state) = read_spec(&path, &mut budget);
            out.entries.push(SpecEntry {
                path: path.to_string_lossy().into_owned(),
                priority,
                untrusted: untrusted.or_else(|| dir_untrusted.clone()),
                state,
            });
        }
    }
    out
}

struct Budget {
    files: usize,
    bytes: u64,
}

/// The names of the spec files of `dir`, sorted by bytes.
fn spec_names(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        // filepath.Ext: from the last dot.
        let ext = name.rfind('.').map(|i| &name[i..]);
        if matches!(ext, Some(".json" | ".yaml")) {
            names.push(name);
        }
        // A directory of a million names is listed, never read: bound it.
        if names.len() > MAX_FILES * 4 {
            break;
        }
    }
    names.sort();
    Ok(names)
}

/// Reads and parses one spec file: why others could have written it (if
/// so), and what it holds.
fn read_spec(path: &Path, budget: &mut Budget) -> (Option<String>, SpecState) {
    let mut untrusted = match policy_file::resolve_trusted(path) {
        Ok(_) => None,
        Err(PolicyFileError::Untrusted(m)) => Some(m),
        Err(PolicyFileError::Absent) => {
            return (
                None,
                SpecState::Unreadable("it disappeared while being read".into()),
            )
        }
        Err(PolicyFileError::Unreadable(e)) => return (None, SpecState::Unreadable(e.to_string())),
    };
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) => return (untrusted, SpecState::Unreadable(e.to_string())),
    };
    let m = match file.metadata() {
        Ok(m) => m,
        Err(e) => return (untrusted, SpecState::Unreadable(e.to_string())),
    };
    if !m.is_file() {
        let what = policy_file::kind_of(&m);
        return (
            untrusted,
            SpecState::Unreadable(format!("{what}, not a regular file")),
        );
    }
    if untrusted.is_none() && (!policy_file::trusted_owner(m.uid()) || m.mode() & 0o022 != 0) {
        untrusted = Some(format!(
            "mode {:04o}, owner uid {}",
            m.mode() & 0o7777,
            m.uid()
        ));
    }
    let limit = MAX_SPEC_BYTES.min(budget.bytes);
    if m.len() > limit {
        let why = if limit < MAX_SPEC_BYTES {
            format!("the CDI specs read before it used up the {MAX_TOTAL_BYTES}-byte budget")
        } else {
            format!("larger than {MAX_SPEC_BYTES} bytes")
        };
        return (untrusted, SpecState::Unreadable(why));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    if let Err(e) = file.take(limit + 1).read_to_end(&mut bytes) {
        return (untrusted, SpecState::Unreadable(e.to_string()));
    }
    if bytes.len() as u64 > limit {
        return (
            untrusted,
            SpecState::Unreadable(format!("larger than {limit} bytes")),
        );
    }
    budget.bytes -= bytes.len() as u64;
    (untrusted, parse(&bytes))
}

/// A spec file's content as CDI would take it.
pub fn parse(bytes: &[u8]) -> SpecState {
    match serde_yaml_ng::from_slice(bytes) {
        Ok(f) => match Spec::from_file(f) {
            Ok(s) => SpecState::Read(s),
            Err(n) => SpecState::NotChecked(n),
        },
        Err(e) => SpecState::NotChecked(NotChecked::Invalid(one_line(&e.to_string()))),
    }
}

/// The host's filesystem, as [`crate::core::cdi::judge`] asks about it.
pub struct RealPaths;

impl HostPaths for RealPaths {
    fn state(&self, path: &str, nofollow: bool) -> PathState {
        let m = if nofollow {
            fs::symlink_metadata(path)
        } else {
            fs::metadata(path)
        };
        match m {
            Ok(m) => {
                let t = m.file_type();
                if t.is_char_device() || t.is_block_device() || t.is_fifo() {
                    PathState::Device
                } else {
                    PathState::Other
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => PathState::Missing,
            // ENOTDIR: a file where a directory of the path should be.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => PathState::Missing,
            Err(e) => PathState::Unknown(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gg-cdi-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    const SPEC: &str = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n    deviceNodes:\n    - path: /dev/null\n";

    #[test]
    fn directories_are_read_in_cdi_order() {
        let d = tempdir("order");
        let (a, b) = (d.join("a"), d.join("b"));
        for x in [&a, &b] {
            fs::create_dir(x).unwrap();
            fs::set_permissions(x, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::write(b.join("z.yaml"), SPEC).unwrap();
        fs::write(b.join("a.json"), SPEC).unwrap();
        fs::write(b.join("ignored.yml"), SPEC).unwrap();
        fs::write(b.join("ignored.txt"), SPEC).unwrap();
        fs::create_dir(b.join("sub.yaml")).unwrap();
        fs::write(a.join("n.yaml"), SPEC).unwrap();
        let dirs: Vec<String> = [&a, &d.join("missing"), &b]
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let s = load(&dirs);
        let got: Vec<(String, usize)> = s
            .entries
            .iter()
            .map(|e| (e.path.rsplit('/').next().unwrap().to_string(), e.priority))
            .collect();
        assert_eq!(
            got,
            vec![
                ("n.yaml".into(), 0),
                ("a.json".into(), 2),
                ("z.yaml".into(), 2)
            ]
        );
        assert!(s
            .entries
            .iter()
            .all(|e| matches!(e.state, SpecState::Read(_)) && e.untrusted.is_none()));
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn hostile_files_take_bounded_time_and_say_why() {
        let d = tempdir("hostile");
        fs::write(d.join("bad.yaml"), "cdiVersion: [unclosed\n").unwrap();
        nix::unistd::mkfifo(
            &d.join("fifo.yaml"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        std::os::unix::fs::symlink(d.join("gone"), d.join("dangling.yaml")).unwrap();
        let big = format!(
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n{}",
            (0..10_000)
                .map(|i| format!("- name: d{i}\n"))
                .collect::<String>()
        );
        fs::write(d.join("many.yaml"), big).unwrap();
        let huge = fs::File::create(d.join("huge.json")).unwrap();
        huge.set_len(MAX_SPEC_BYTES + 1).unwrap();
        // A billion-laughs alias bomb.
        let mut bomb =
            String::from("a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n");
        for i in 1..12 {
            let prev = (b'a' + i - 1) as char;
            let cur = (b'a' + i) as char;
            bomb.push_str(&format!("{cur}: &{cur} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
        }
        fs::write(d.join("bomb.yaml"), bomb).unwrap();
        fs::write(d.join("open.yaml"), SPEC).unwrap();
        fs::set_permissions(d.join("open.yaml"), fs::Permissions::from_mode(0o666)).unwrap();
        let t = Instant::now();
        let s = load(&[d.to_string_lossy().into_owned()]);
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        let by = |name: &str| {
            s.entries
                .iter()
                .find(|e| e.path.ends_with(name))
                .unwrap_or_else(|| panic!("{name}: {:?}", s.entries))
        };
        match &by("bad.yaml").state {
            SpecState::NotChecked(NotChecked::Invalid(m)) => assert!(!m.contains('\n'), "{m}"),
            o => panic!("{o:?}"),
        }
        assert_eq!(
            by("fifo.yaml").state,
            SpecState::Unreadable("a FIFO, not a regular file".into())
        );
        assert!(matches!(
            by("dangling.yaml").state,
            SpecState::Unreadable(_)
        ));
        assert_eq!(
            by("many.yaml").state,
            SpecState::NotChecked(NotChecked::TooMany {
                kind: "nvidia.com/gpu".into(),
                devices: 10_000
            })
        );
        match &by("huge.json").state {
            SpecState::Unreadable(m) => assert!(m.contains("larger than"), "{m}"),
            o => panic!("{o:?}"),
        }
        assert!(matches!(
            by("bomb.yaml").state,
            SpecState::NotChecked(NotChecked::Invalid(_))
        ));
        let open = by("open.yaml");
        assert!(matches!(open.state, SpecState::Read(_)));
        assert!(
            open.untrusted.as_deref().unwrap().contains("mode 0666"),
            "{open:?}"
        );
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_directory_others_can_write_makes_its_specs_untrusted() {
        let d = tempdir("opendir");
        fs::write(d.join("nvidia.yaml"), SPEC).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        let s = load(&[d.to_string_lossy().into_owned()]);
        assert!(s.entries[0].untrusted.is_some(), "{s:?}");
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn real_paths() {
        assert_eq!(RealPaths.state("/dev/null", true), PathState::Device);
        assert_eq!(RealPaths.state("/", false), PathState::Other);
        assert_eq!(RealPaths.state("/nonexistent/x", false), PathState::Missing);
        assert_eq!(RealPaths.state("/dev/null/x", false), PathState::Missing);
    }
}
