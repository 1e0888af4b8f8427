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

use super::state::State;
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

/// Counts the pending lines into `state` (the caller holds the state
/// lock): a folding file an earlier holder left, then the pending file.
pub fn fold(pending: &Path, folding: &Path, state: &mut State) -> io::Result<()> {
    for _ in 0..2 {
        match fs::symlink_metadata(folding) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::rename(pending, folding) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        }
        if !fold_one(folding, state)? {
            return Ok(());
        }
    }
    Ok(())
}

/// Reads and removes the folding file once no appender holds it; false
/// when one still does past [`LOCK_WAIT`] (it is left for the next holder).
fn fold_one(folding: &Path, state: &mut State) -> io::Result<bool> {
    let mut f = open(folding, false)?;
    let deadline = Instant::now() + LOCK_WAIT;
    let held = loop {
        match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(l) => break l,
            Err((back, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                f = back;
                std::thread::sleep(LOCK_RETRY);
            }
            Err((_, Errno::EWOULDBLOCK)) => return Ok(false),
            Err((_, e)) => return Err(e.into()),
        }
    };
    let mut bytes = Vec::new();
    (&*held).take(MAX_PENDING_BYTES).read_to_end(&mut bytes)?;
    fs::remove_file(folding)?;
    for line in String::from_utf8_lossy(&bytes).lines() {
        state.add_line(line);
    }
    Ok(true)
}
