//! Reading files whose content is policy (gpu-guard's config and its
//! drop-ins): only when no one but root, or the effective uid running
//! gpu-guard, can have written them or can change where their path leads.
//! The rules are stated in docs/interfaces.md ("Config file", "Trust") and
//! docs/configuration.md ("Who may change the policy").

use nix::fcntl::OFlag;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a file whose content is policy (gpu-guard's config and its
/// drop-ins) was not read: see [`read_policy_file`].
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    /// Nothing at the path, and no symlink on the way pointed to nothing.
    #[error("no such file")]
    Absent,
    /// The file (or a directory on the way) could not be read as a config:
    /// a dangling symlink, not a regular file, too large, an I/O error.
    #[error("{0}")]
    Unreadable(#[source] io::Error),
    /// It is there but others could have written it; the message names the
    /// path, its mode and owner, and the fix.
    #[error("{0}")]
    Untrusted(String),
}

/// The kernel gives up on a path after 40 symlinks (path_resolution(7)).
const MAX_SYMLINKS: usize = 40;

/// Whether `uid` may own what gpu-guard trusts as policy: root, or the
/// effective uid running gpu-guard (a rootless user's own files, tests).
pub(crate) fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

fn owner_fix(path: &Path) -> String {
    match nix::unistd::geteuid().as_raw() {
        0 => format!("chown root {}", path.display()),
        me => format!("chown root (or {me}) {}", path.display()),
    }
}

fn mode_owner(m: &fs::Metadata) -> String {
    format!("mode {:04o}, owner uid {}", m.mode() & 0o7777, m.uid())
}

/// Whether the directory `dir` (with metadata `dm`) lets only trusted
/// users change its entry `entry` (metadata `em`): not writable by group
/// or others, or sticky (as /tmp is: others may add entries but not rename
/// or remove one they do not own) with the entry owned by a trusted user.
fn entry_guarded(
    dir: &Path,
    dm: &fs::Metadata,
    entry: &Path,
    em: &fs::Metadata,
) -> Result<(), PolicyFileError> {
    if dm.mode() & 0o022 == 0 {
        return Ok(());
    }
    if dm.mode() & 0o1000 != 0 {
        if trusted_owner(em.uid()) {
            return Ok(());
        }
        return Err(PolicyFileError::Untrusted(format!(
            "refusing {} ({}): it sits in the sticky, world-writable directory {} and is not owned by root, so another user put it there; fix: remove it, or keep gpu-guard's config in a directory only root can write",
            entry.display(),
            mode_owner(em),
            dir.display()
        )));
    }
    Err(PolicyFileError::Untrusted(format!(
        "refusing {}: its directory {} ({}) is writable by group or others, so anyone could replace it; fix: chmod go-w {}",
        entry.display(),
        dir.display(),
        mode_owner(dm),
        dir.display()
    )))
}

fn lstat(p: &Path) -> Result<fs::Metadata, PolicyFileError> {
    fs::symlink_metadata(p).map_err(PolicyFileError::Unreadable)
}

/// Resolves `path` the way the kernel would (symlinks followed, `..`
/// taken physically), checking on the way that no one but root or the
/// effective uid can change where it leads: every directory walked
/// through (also those of intermediate symlinks) is owned by a trusted
/// user, and each entry followed is guarded by its directory
/// ([`entry_guarded`]). The result has no symlink in it; what it names is
/// for the caller to check. `Absent` only when a name of `path` itself is
/// missing, never for a symlink that points to nothing.
///
/// Checking the directories makes the later open safe without openat2:
/// once every directory on the way is writable only by trusted users, no
/// one else can swap an entry between this walk and the open.
pub(crate) fn resolve_trusted(path: &Path) -> Result<PathBuf, PolicyFileError> {
    resolve_trusted_in(path, &mut TrustedDirs::default())
}

/// The directories one reading of the policy (a config and its drop-ins)
/// has already walked through and judged trusted, each real (no symlink in
/// its path) with its metadata: the next path under one of them starts its
/// walk there instead of at `/`. Kept for one reading only, so a long-lived
/// process sees a directory that has since become writable by others.
#[derive(Default)]
pub struct TrustedDirs(Vec<(PathBuf, fs::Metadata)>);

impl TrustedDirs {
    /// The deepest remembered directory `abs` lies under.
    fn deepest_under(&self, abs: &Path) -> Option<&(PathBuf, fs::Metadata)> {
        self.0
            .iter()
            .filter(|(d, _)| abs.starts_with(d))
            .max_by_key(|(d, _)| d.as_os_str().len())
    }
}

/// [`resolve_trusted`], starting below the directories `known` already
/// judged, and remembering those it judges.
fn resolve_trusted_in(path: &Path, known: &mut TrustedDirs) -> Result<PathBuf, PolicyFileError> {
    let abs = std::path::absolute(path).map_err(PolicyFileError::Unreadable)?;
    let mut walk = Walk::start(path, &abs, known)?;
    while let Some((name, from_link)) = walk.pending.pop_front() {
        if name == ".." {
            walk.cur.pop();
            walk.cur_meta = lstat(&walk.cur)?;
            continue;
        }
        let next = walk.cur.join(&name);
        let m = walk.entry(&next, from_link)?;
        if m.file_type().is_symlink() {
            walk.follow(&next)?;
            continue;
        }
        if walk.pending.is_empty() {
            return Ok(next);
        }
        walk.enter(next, m)?;
        if !known.0.iter().any(|(d, _)| *d == walk.cur) {
            known.0.push((walk.cur.clone(), walk.cur_meta.clone()));
        }
    }
    Ok(walk.cur)
}

/// The state of [`resolve_trusted`]: where it is (a real directory, already
/// judged trusted), and the names still to walk, each with whether it came
/// from a symlink's target (a missing one of those is a dangling link, not
/// an absent file).
struct Walk<'a> {
    path: &'a Path,
    cur: PathBuf,
    cur_meta: fs::Metadata,
    pending: std::collections::VecDeque<(std::ffi::OsString, bool)>,
    links: usize,
}

impl<'a> Walk<'a> {
    /// Starts at `/`, or at the deepest directory of `known` that `abs`
    /// (the absolute `path`) lies under, with the rest of `abs` to walk.
    fn start(
        path: &'a Path,
        abs: &Path,
        known: &mut TrustedDirs,
    ) -> Result<Walk<'a>, PolicyFileError> {
        let (cur, cur_meta, rest) = match known.deepest_under(abs) {
            Some((dir, meta)) => (
                dir.clone(),
                meta.clone(),
                abs.strip_prefix(dir).unwrap_or(abs),
            ),
            None => {
                let root = PathBuf::from("/");
                let meta = lstat(&root)?;
                if !trusted_owner(meta.uid()) {
                    return Err(PolicyFileError::Untrusted(format!(
                        "refusing {}: / ({}) is owned by another user",
                        path.display(),
                        mode_owner(&meta)
                    )));
                }
                known.0.push((root.clone(), meta.clone()));
                (root, meta, abs)
            }
        };
        let mut walk = Walk {
            path,
            cur,
            cur_meta,
            pending: Default::default(),
            links: 0,
        };
        walk.push_front(rest, false);
        Ok(walk)
    }

    /// Puts the names of `p` before what is still to walk.
    fn push_front(&mut self, p: &Path, from_link: bool) {
        use std::path::Component;
        let names: Vec<std::ffi::OsString> = p
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect();
        for n in names.into_iter().rev() {
            self.pending.push_front((n, from_link));
        }
    }

    /// The entry `next` of the current directory, which must guard it.
    fn entry(&self, next: &Path, from_link: bool) -> Result<fs::Metadata, PolicyFileError> {
        let m = match fs::symlink_metadata(next) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !from_link => {
                return Err(PolicyFileError::Absent)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(PolicyFileError::Unreadable(io::Error::new(
                    e.kind(),
                    format!(
                        "a symlink on the way to {} points to nothing ({} is missing)",
                        self.path.display(),
                        next.display()
                    ),
                )))
            }
            Err(e) => return Err(PolicyFileError::Unreadable(e)),
        };
        entry_guarded(&self.cur, &self.cur_meta, next, &m)?;
        Ok(m)
    }

    /// Continues with the target of the symlink `link`.
    fn follow(&mut self, link: &Path) -> Result<(), PolicyFileError> {
        self.links += 1;
        if self.links > MAX_SYMLINKS {
            return Err(PolicyFileError::Unreadable(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("too many symlinks on the way to {}", self.path.display()),
            )));
        }
        let target = fs::read_link(link).map_err(PolicyFileError::Unreadable)?;
        if target.is_absolute() {
            self.cur = PathBuf::from("/");
            self.cur_meta = lstat(&self.cur)?;
        }
        self.push_front(&target, true);
        Ok(())
    }

    /// Steps into the directory `next` (metadata `m`), owned by a trusted user.
    fn enter(&mut self, next: PathBuf, m: fs::Metadata) -> Result<(), PolicyFileError> {
        if !m.is_dir() {
            return Err(PolicyFileError::Unreadable(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", next.display()),
            )));
        }
        if !trusted_owner(m.uid()) {
            return Err(PolicyFileError::Untrusted(format!(
                "refusing {}: the directory {} ({}) is owned by another user, who could replace what is in it; fix: {}",
                self.path.display(),
                next.display(),
                mode_owner(&m),
                owner_fix(&next)
            )));
        }
        self.cur = next;
        self.cur_meta = m;
        Ok(())
    }
}

/// The file type in words, for "not a regular file" messages.
pub(crate) fn kind_of(m: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Reads a file whose content is policy (gpu-guard's config, a drop-in):
/// resolved through `resolve_trusted`, opened without following a
/// symlink and without blocking (a FIFO with no writer), then checked on
/// the open file (fstat, so nothing can be swapped in between): a regular
/// file of at most `limit` bytes, owned by root or the effective uid and
/// not writable by group or others. Anything else is an error naming the
/// path, never a file skipped.
pub fn read_policy_file(path: &Path, limit: u64) -> Result<Vec<u8>, PolicyFileError> {
    read_policy_file_in(path, limit, &mut TrustedDirs::default())
}

/// [`read_policy_file`] as one of several reads of the same policy, which
/// share the directories judged on the way (`known`).
pub fn read_policy_file_in(
    path: &Path,
    limit: u64,
    known: &mut TrustedDirs,
) -> Result<Vec<u8>, PolicyFileError> {
    let real = resolve_trusted_in(path, known)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(&real)
        .map_err(PolicyFileError::Unreadable)?;
    let m = file.metadata().map_err(PolicyFileError::Unreadable)?;
    if !m.is_file() {
        return Err(PolicyFileError::Unreadable(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", kind_of(&m)),
        )));
    }
    let shown = if real == path {
        path.display().to_string()
    } else {
        format!("{} (resolved to {})", path.display(), real.display())
    };
    if !trusted_owner(m.uid()) {
        return Err(PolicyFileError::Untrusted(format!(
            "refusing {shown} ({}): it is owned by another user, who could change the policy; fix: {}",
            mode_owner(&m),
            owner_fix(&real)
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(PolicyFileError::Untrusted(format!(
            "refusing {shown} ({}): it is writable by group or others, so anyone could change the policy; fix: chmod go-w {}",
            mode_owner(&m),
            real.display()
        )));
    }
    if m.len() > limit {
        return Err(PolicyFileError::Unreadable(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file is larger than {limit} bytes"),
        )));
    }
    crate::sys::fsutil::read_open_file(&file, m.len(), limit).map_err(PolicyFileError::Unreadable)
}

/// Checks a directory whose entries are policy (`config.d`): resolved
/// through `resolve_trusted`, a directory owned by root or the effective
/// uid, and not writable by group or others, sticky or not: anyone who
/// may add a file there could add a drop-in. Returns the resolved path to
/// list.
pub fn check_policy_dir(dir: &Path) -> Result<PathBuf, PolicyFileError> {
    check_policy_dir_in(dir, &mut TrustedDirs::default())
}

/// [`check_policy_dir`], sharing the directories judged with other reads
/// of the same policy (`known`).
pub fn check_policy_dir_in(
    dir: &Path,
    known: &mut TrustedDirs,
) -> Result<PathBuf, PolicyFileError> {
    let real = resolve_trusted_in(dir, known)?;
    let m = lstat(&real)?;
    if !m.is_dir() {
        return Err(PolicyFileError::Unreadable(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory ({})", dir.display(), kind_of(&m)),
        )));
    }
    if !trusted_owner(m.uid()) {
        return Err(PolicyFileError::Untrusted(format!(
            "refusing directory {} ({}): it is owned by another user, who could add or change drop-ins; fix: {}",
            dir.display(),
            mode_owner(&m),
            owner_fix(&real)
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(PolicyFileError::Untrusted(format!(
            "refusing directory {} ({}): it is writable by group or others, so anyone could add a drop-in; fix: chmod 0755 {}",
            dir.display(),
            mode_owner(&m),
            real.display()
        )));
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    use crate::sys::test_dirs::tempdir;

    fn set_mode(p: &Path, mode: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn policy_paths_resolve_like_the_kernel() {
        use std::os::unix::fs::symlink;
        let d = tempdir("policy-file");
        set_mode(&d, 0o755);
        fs::create_dir_all(d.join("a/b")).unwrap();
        fs::write(d.join("a/b/f.toml"), b"x = 1").unwrap();
        set_mode(&d.join("a/b/f.toml"), 0o644);
        // A relative link with `..`, and a link to a directory on the way.
        symlink("../a/b/f.toml", d.join("a/rel.toml")).unwrap();
        symlink(d.join("a/b"), d.join("dir")).unwrap();
        let real = d.join("a/b/f.toml");
        assert_eq!(resolve_trusted(&d.join("a/rel.toml")).unwrap(), real);
        assert_eq!(resolve_trusted(&d.join("dir/f.toml")).unwrap(), real);
        assert_eq!(resolve_trusted(&d.join("a/b/../b/./f.toml")).unwrap(), real);
        assert_eq!(
            read_policy_file(&d.join("dir/f.toml"), 100).unwrap(),
            b"x = 1"
        );
        // Absent only for a missing name of the path itself.
        assert!(matches!(
            resolve_trusted(&d.join("dir/none.toml")),
            Err(PolicyFileError::Absent)
        ));
        assert!(matches!(
            resolve_trusted(&d.join("nodir/none.toml")),
            Err(PolicyFileError::Absent)
        ));
        symlink(d.join("gone"), d.join("dangling.toml")).unwrap();
        assert!(matches!(
            resolve_trusted(&d.join("dangling.toml")),
            Err(PolicyFileError::Unreadable(_))
        ));
        // A loop ends with an error, not a hang.
        symlink(d.join("loop2"), d.join("loop1")).unwrap();
        symlink(d.join("loop1"), d.join("loop2")).unwrap();
        let e = resolve_trusted(&d.join("loop1")).unwrap_err().to_string();
        assert!(e.contains("too many symlinks"), "{e}");
        // A file where a directory is needed.
        let e = resolve_trusted(&d.join("a/b/f.toml/x"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a directory"), "{e}");
        // config.d rules: strict, sticky or not.
        assert_eq!(check_policy_dir(&d.join("dir")).unwrap(), d.join("a/b"));
        set_mode(&d.join("a/b"), 0o1777);
        assert!(matches!(
            check_policy_dir(&d.join("a/b")),
            Err(PolicyFileError::Untrusted(_))
        ));
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn reads_sharing_judged_directories_resolve_as_fresh_ones() {
        use std::os::unix::fs::symlink;
        let d = tempdir("policy-shared");
        set_mode(&d, 0o755);
        fs::create_dir_all(d.join("etc/config.d")).unwrap();
        fs::create_dir_all(d.join("open")).unwrap();
        set_mode(&d.join("open"), 0o777);
        fs::write(d.join("etc/config.toml"), b"x = 1").unwrap();
        fs::write(d.join("open/f.toml"), b"x = 2").unwrap();
        symlink("../open/f.toml", d.join("etc/up.toml")).unwrap();
        let mut known = TrustedDirs::default();
        let paths = [
            d.join("etc/config.toml"),
            d.join("etc/config.d"),
            d.join("etc/config.d/../config.toml"),
            d.join("etc/up.toml"),
            d.join("open/f.toml"),
            d.join("etc/none.toml"),
        ];
        for p in &paths {
            let shared = resolve_trusted_in(p, &mut known).map_err(|e| e.to_string());
            let fresh = resolve_trusted(p).map_err(|e| e.to_string());
            assert_eq!(shared, fresh, "{}", p.display());
        }
        // The directory others can write is judged under a known parent too.
        assert!(matches!(
            read_policy_file_in(&d.join("etc/up.toml"), 100, &mut known),
            Err(PolicyFileError::Untrusted(_))
        ));
        assert!(known.0.iter().any(|(k, _)| k == &d.join("etc")));
        fs::remove_dir_all(d).unwrap();
    }
}
