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
//! [`MAX_TOTAL_BYTES`] and [`MAX_FILES`] in all, [`MAX_LISTED`] names
//! listed per directory; a text that may nest deeper than
//! [`crate::core::cdi::MAX_NESTING`] levels is not parsed (libyaml's
//! scanner is quadratic in the depth, core::cdi::nesting); YAML aliases
//! are bounded by serde_yaml_ng. Symlinks are followed as the kernel
//! follows them. A bound never turns the check off silently: what it left
//! unread is recorded ([`SpecState::OverBound`], [`CdiSpecs::cuts`]), and
//! a GPU container whose CDI device it may define is refused
//! (core::cdi::judge).
//!
//! Trust: a spec decides what is mounted into a container and which hooks
//! run as root on the host, so it is held to the rule of gpu-guard's own
//! config (docs/interfaces.md, "Config file", "Trust"): owned by root (or
//! the user gpu-guard runs as), not writable by group or others, in
//! directories no one else can change. That is checked before a byte of
//! it is parsed: a spec that fails it is recorded as
//! [`SpecState::Untrusted`], never parsed, and a GPU container whose CDI
//! device it may define (CDI would read it) is refused (core::cdi).

use crate::core::cdi::{
    may_nest_deeper, CdiSpecs, Cut, HostPaths, NotChecked, PathState, Spec, SpecEntry, SpecState,
    MAX_NESTING,
};
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
/// Spec file names listed in one directory (they are sorted before any is
/// read, so all must be listed: past this the listing is incomplete).
pub const MAX_LISTED: usize = MAX_FILES * 4;

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
        let (names, complete) = match spec_names(Path::new(dir)) {
            Ok(n) => n,
            Err(e) => {
                out.problems
                    .push(format!("cannot list CDI spec directory {dir}: {e}"));
                continue;
            }
        };
        if !complete {
            cut(
                &mut out,
                priority,
                priority,
                format!("CDI spec directory {dir} holds more than {MAX_LISTED} spec files; gpu-guard did not list them all"),
            );
        }
        for name in names {
            let path = Path::new(dir).join(&name);
            if budget.files == 0 {
                let last = dirs.len().saturating_sub(1);
                cut(
                    &mut out,
                    priority,
                    last,
                    format!(
                        "more than {MAX_FILES} CDI spec files: {} and the files after it were not read",
                        path.display()
                    ),
                );
                return out;
            }
            budget.files -= 1;
            let (untrusted, state) = match &dir_untrusted {
                Some(why) => (Some(why.clone()), SpecState::Untrusted),
                None => read_spec(&path, &mut budget),
            };
            out.entries.push(SpecEntry {
                path: path.to_string_lossy().into_owned(),
                priority,
                untrusted,
                state,
            });
        }
    }
    out
}

/// Records a listing a bound cut short, for `host` and for the judgement.
fn cut(out: &mut CdiSpecs, from: usize, to: usize, message: String) {
    out.problems.push(message.clone());
    out.cuts.push(Cut { from, to, message });
}

struct Budget {
    files: usize,
    bytes: u64,
}

/// The names of the spec files of `dir`, sorted by bytes, and whether the
/// listing is complete (at most [`MAX_LISTED`] names are kept: a directory
/// of a million names is listed, never stored).
fn spec_names(dir: &Path) -> std::io::Result<(Vec<String>, bool)> {
    let mut names = Vec::new();
    let mut complete = true;
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        // filepath.Ext: from the last dot.
        let ext = name.rfind('.').map(|i| &name[i..]);
        if !matches!(ext, Some(".json" | ".yaml")) {
            continue;
        }
        if names.len() == MAX_LISTED {
            complete = false;
            break;
        }
        names.push(name);
    }
    names.sort();
    Ok((names, complete))
}

/// Reads and parses one spec file: why others could have written it (if
/// so: then it is not read), and what it holds.
fn read_spec(path: &Path, budget: &mut Budget) -> (Option<String>, SpecState) {
    match policy_file::resolve_trusted(path) {
        Ok(_) => {}
        Err(PolicyFileError::Untrusted(m)) => return (Some(m), SpecState::Untrusted),
        Err(PolicyFileError::Absent) => {
            return (
                None,
                SpecState::Unreadable("it disappeared while being read".into()),
            )
        }
        Err(PolicyFileError::Unreadable(e)) => return (None, SpecState::Unreadable(e.to_string())),
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) => return (None, SpecState::Unreadable(e.to_string())),
    };
    let m = match file.metadata() {
        Ok(m) => m,
        Err(e) => return (None, SpecState::Unreadable(e.to_string())),
    };
    if !m.is_file() {
        let what = policy_file::kind_of(&m);
        return (
            None,
            SpecState::Unreadable(format!("{what}, not a regular file")),
        );
    }
    // The file opened, as opposed to the path resolved: owner and mode.
    if !policy_file::trusted_owner(m.uid()) || m.mode() & 0o022 != 0 {
        let why = format!("mode {:04o}, owner uid {}", m.mode() & 0o7777, m.uid());
        return (Some(why), SpecState::Untrusted);
    }
    let limit = MAX_SPEC_BYTES.min(budget.bytes);
    if m.len() > limit {
        return (None, SpecState::OverBound(over_size(limit)));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    if let Err(e) = file.take(limit + 1).read_to_end(&mut bytes) {
        return (None, SpecState::Unreadable(e.to_string()));
    }
    if bytes.len() as u64 > limit {
        return (None, SpecState::OverBound(over_size(limit)));
    }
    budget.bytes -= bytes.len() as u64;
    if may_nest_deeper(&bytes, MAX_NESTING) {
        return (
            None,
            SpecState::OverBound(format!(
                "it may nest more than {MAX_NESTING} levels deep, deeper than any CDI spec"
            )),
        );
    }
    (None, parse(&bytes))
}

/// Why a file past the byte bounds was not read.
fn over_size(limit: u64) -> String {
    if limit < MAX_SPEC_BYTES {
        format!("the CDI specs read before it used up the {MAX_TOTAL_BYTES}-byte budget")
    } else {
        format!("larger than {MAX_SPEC_BYTES} bytes")
    }
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
    fn char_numbers(&self, path: &str) -> Option<(u64, u64)> {
        let m = fs::metadata(path).ok()?;
        m.file_type().is_char_device().then(|| {
            let rdev = m.rdev();
            (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev))
        })
    }

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
    use std::time::{Duration, Instant};

    use crate::sys::test_dirs::tempdir;

    const SPEC: &str = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n    deviceNodes:\n    - path: /dev/null\n";

    #[test]
    fn directories_are_read_in_cdi_order() {
        let d = tempdir("cdi-order");
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
        let d = tempdir("cdi-hostile");
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
        // 60,000 nested lists: libyaml's scanner takes seconds on it.
        let deep = format!("{}{}", "[".repeat(60_000), "]".repeat(60_000));
        fs::write(d.join("deep.yaml"), &deep).unwrap();
        // The same from anyone: never parsed, by the trust rule first.
        fs::write(d.join("open.yaml"), &deep).unwrap();
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
            SpecState::OverBound(m) => assert!(m.contains("larger than"), "{m}"),
            o => panic!("{o:?}"),
        }
        match &by("deep.yaml").state {
            SpecState::OverBound(m) => assert!(m.contains("levels deep"), "{m}"),
            o => panic!("{o:?}"),
        }
        assert!(matches!(
            by("bomb.yaml").state,
            SpecState::NotChecked(NotChecked::Invalid(_))
        ));
        let open = by("open.yaml");
        assert_eq!(open.state, SpecState::Untrusted);
        assert!(
            open.untrusted.as_deref().unwrap().contains("mode 0666"),
            "{open:?}"
        );
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_directory_others_can_write_makes_its_specs_untrusted() {
        let d = tempdir("cdi-opendir");
        fs::write(d.join("nvidia.yaml"), SPEC).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        let s = load(&[d.to_string_lossy().into_owned()]);
        assert!(s.entries[0].untrusted.is_some(), "{s:?}");
        assert_eq!(s.entries[0].state, SpecState::Untrusted);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_listing_past_its_bound_is_recorded_never_cut_silently() {
        let d = tempdir("cdi-listing");
        let (a, b) = (d.join("a"), d.join("b"));
        for x in [&a, &b] {
            fs::create_dir(x).unwrap();
            fs::set_permissions(x, fs::Permissions::from_mode(0o755)).unwrap();
        }
        for i in 0..=MAX_LISTED {
            fs::write(a.join(format!("s{i:05}.yaml")), "").unwrap();
        }
        fs::write(b.join("nvidia.yaml"), SPEC).unwrap();
        let dirs: Vec<String> = [&a, &b]
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let s = load(&dirs);
        // The listing of `a` is incomplete; so is everything after the
        // file budget ran out there.
        assert_eq!(s.cuts.len(), 2, "{:?}", s.cuts);
        assert_eq!((s.cuts[0].from, s.cuts[0].to), (0, 0));
        assert!(s.cuts[0].message.contains("did not list them all"));
        assert_eq!((s.cuts[1].from, s.cuts[1].to), (0, 1));
        assert!(s.cuts[1].message.contains("were not read"));
        assert_eq!(s.entries.len(), MAX_FILES);
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
