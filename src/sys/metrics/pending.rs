//! Decisions that could not wait for the state lock, kept until a holder of
//! the lock counts them: `.NAME.pending` (mod.rs).
//!
//! An appender writes one line with one write(2) to the file opened with
//! O_APPEND, holding a shared flock(2) on it. The holder of the state lock
//! renames the file away (`.NAME.folding`) before it reads it under an
//! exclusive flock, so a line is counted once, and none is lost:
//! - an appender that locked the file before the rename is waited for (its
//!   one write is quick; past [`LOCK_WAIT`] the folding file is left for the
//!   next holder);
//! - one that locks it after the rename sees that the name now leads to
//!   another file (or none), and appends to that;
//! - one that finds it locked exclusively knows it is being folded, and
//!   opens the name again.
//!
//! The folding file is removed only after the state that counts its lines
//! is written (mod.rs `update`), so a failed write loses no line; the state
//! names the folding file it counted ([`Folded`]), so a holder that finds
//! that file still there (the writer died before removing it) removes it
//! without counting it twice.

use super::state::{Folded, State};
use super::{LOCK_RETRY, LOCK_WAIT};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

/// A pending file this large is not being folded (a holder keeps failing):
/// past it, decisions are counted as dropped rather than grow it further.
pub const MAX_PENDING_BYTES: u64 = 1 << 20;
/// Opens of the pending name an appender tries before giving up.
const APPEND_TRIES: usize = 16;

fn open(path: &Path, append: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(!append)
        .append(append)
        .create(append)
        .mode(0o600)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)
}

/// Whether the name leads to the file `m` describes.
fn still_named(path: &Path, m: &fs::Metadata) -> bool {
    fs::symlink_metadata(path).is_ok_and(|now| now.ino() == m.ino() && now.dev() == m.dev())
}

/// Appends `line` (one sample, newline-terminated) to the pending file.
pub fn append(path: &Path, line: &str) -> io::Result<()> {
    for _ in 0..APPEND_TRIES {
        let f = open(path, true)?;
        let m = f.metadata()?;
        if !m.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        if m.len() >= MAX_PENDING_BYTES {
            return Err(io::Error::other("the pending file is full"));
        }
        let mut held = match Flock::lock(f, FlockArg::LockSharedNonblock) {
            Ok(l) => l,
            // Being folded: the name leads to a new file by now.
            Err((_, Errno::EWOULDBLOCK)) => continue,
            Err((_, e)) => return Err(e.into()),
        };
        if !still_named(path, &m) {
            continue;
        }
        return held.write_all(line.as_bytes());
    }
    Err(io::Error::new(
        io::ErrorKind::WouldBlock,
        "the pending file kept changing",
    ))
}

/// Whether there are lines to count.
pub fn waiting(pending: &Path, folding: &Path) -> bool {
    fs::symlink_metadata(pending).is_ok() || fs::symlink_metadata(folding).is_ok()
}

fn identity(m: &fs::Metadata, bytes: &[u8]) -> Folded {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    let digest = u64::from_le_bytes(first);
    (m.dev(), m.ino(), m.ctime(), m.ctime_nsec(), m.len(), digest)
}

/// Counts pending lines into `state` (the caller holds the state lock):
/// a folding file an earlier holder left, else the pending file (renamed
/// to the folding name first). Returns the folding file counted, which
/// the caller removes with [`done`] once the state is written; the state
/// records it (`state.folded`) so it is never counted twice.
pub fn take(pending: &Path, folding: &Path, state: &mut State) -> io::Result<Option<Folded>> {
    for _ in 0..2 {
        match fs::symlink_metadata(folding) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Whatever the state counted is gone: its record is stale.
                state.folded = None;
                match fs::rename(pending, folding) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
        match fold_one(folding, state)? {
            Fold::Counted(id) => return Ok(Some(id)),
            Fold::Busy => return Ok(None),
            // Counted by the state already: removed, then the pending file.
            Fold::Stale => continue,
        }
    }
    Ok(None)
}

/// Removes the folding file `id` once the state that counts it is written
/// (not another file that has the name by now: only a holder of the state
/// lock, as the caller is, renames a file to it).
pub fn done(folding: &Path, id: Folded) -> io::Result<()> {
    match fs::symlink_metadata(folding) {
        Ok(m) if (m.dev(), m.ino(), m.len()) == (id.0, id.1, id.4) => fs::remove_file(folding),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

enum Fold {
    /// Its lines were added to the state.
    Counted(Folded),
    /// An appender still holds it past [`LOCK_WAIT`]: left for the next holder.
    Busy,
    /// The state counted it already: removed.
    Stale,
}

/// Reads the folding file once no appender holds it and adds its lines
/// to `state` (a line that is not a sample, or not UTF-8, is dropped
/// alone).
fn fold_one(folding: &Path, state: &mut State) -> io::Result<Fold> {
    let mut f = open(folding, false)?;
    let deadline = Instant::now() + LOCK_WAIT;
    let held = loop {
        match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(l) => break l,
            Err((back, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                f = back;
                std::thread::sleep(LOCK_RETRY);
            }
            Err((_, Errno::EWOULDBLOCK)) => return Ok(Fold::Busy),
            Err((_, e)) => return Err(e.into()),
        }
    };
    let mut bytes = Vec::new();
    (&*held).take(MAX_PENDING_BYTES).read_to_end(&mut bytes)?;
    let id = identity(&held.metadata()?, &bytes);
    if state.folded == Some(id) {
        fs::remove_file(folding)?;
        return Ok(Fold::Stale);
    }
    for line in bytes.split(|&b| b == b'\n') {
        if let Ok(line) = std::str::from_utf8(line) {
            if !line.is_empty() {
                state.add_line(line);
            }
        }
    }
    state.folded = Some(id);
    Ok(Fold::Counted(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(s: &State) -> u64 {
        s.decisions.values().sum()
    }

    /// A holder whose state write fails leaves the lines for the next one;
    /// one that wrote the state and died before removing the folding file
    /// leaves a file the next holder removes without counting it again.
    #[test]
    fn lines_are_removed_only_once_counted_and_never_counted_twice() {
        let d = std::env::temp_dir().join(format!("gg-pending-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        let (pending, folding) = (d.join("p"), d.join("f"));
        let line = "s2 refuse library runtime enforce 0.1 - -\n";
        append(&pending, line).unwrap();
        append(&pending, line).unwrap();
        // The first holder counts them, then its state write fails: nothing
        // of it was kept, and the lines are still there.
        let mut lost = State::default();
        let id = take(&pending, &folding, &mut lost).unwrap().unwrap();
        assert_eq!(counted(&lost), 2);
        assert!(folding.exists());
        // The next holder counts them from its own (older) state, writes
        // the state, and dies before removing the file.
        let mut written = State::default();
        assert_eq!(take(&pending, &folding, &mut written).unwrap(), Some(id));
        assert_eq!(counted(&written), 2);
        let kept = written.to_text();
        // The one after: the file is the one its state counted.
        let mut next = State::from_text(&kept);
        append(&pending, line).unwrap();
        let id2 = take(&pending, &folding, &mut next).unwrap().unwrap();
        assert_ne!(id2, id);
        assert_eq!(counted(&next), 3, "the old lines once, the new line once");
        done(&folding, id2).unwrap();
        assert!(!folding.exists() && !pending.exists());
        // A damaged line in the pending file costs that line alone.
        fs::write(
            &pending,
            b"s2 allow none runtime enforce 0.1 - -\n\xff\xfe\n",
        )
        .unwrap();
        let mut s = State::default();
        take(&pending, &folding, &mut s).unwrap();
        assert_eq!(counted(&s), 1);
        fs::remove_dir_all(&d).unwrap();
    }
}
