//! What the `gpu-guard` binary does first, in place of std's own start-up.
//!
//! Engines run the hook once per container start, so its start-up is paid
//! on every container. std's start-up (`std::rt::lang_start`) also finds
//! the main thread's stack guard through glibc's `pthread_getattr_np`,
//! which reads and scans `/proc/self/maps`, and sets up an alternate
//! signal stack for its stack-overflow message: measured with
//! `integration/bench-start.sh`, about 80 µs of a start. The binary
//! therefore has its own C `main` and does here the two parts of std's
//! start-up it relies on (library/std/src/sys/pal/unix/mod.rs, `init`):
//! - file descriptors 0, 1 and 2 are open: one that is closed is opened
//!   on /dev/null, so that no file the process opens later takes its
//!   number and receives what is printed;
//! - SIGPIPE is ignored, so a closed pipe is a write error, not a silent
//!   death (std's child processes still start with the default action:
//!   `std::process::Command` resets it before exec).
//!
//! A stack overflow then ends the process with SIGSEGV instead of std's
//! message; either way the container is not started.

/// Makes fds 0-2 valid and ignores SIGPIPE; aborts when a closed standard
/// descriptor cannot be opened on /dev/null (as std does).
pub fn init() {
    use nix::errno::Errno;
    use nix::fcntl::{fcntl, open, FcntlArg, OFlag};
    use nix::sys::signal::{signal, SigHandler, Signal};
    use std::os::fd::{AsFd, AsRawFd, IntoRawFd};
    let (i, o, e) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    for fd in [i.as_fd(), o.as_fd(), e.as_fd()] {
        if fcntl(fd, FcntlArg::F_GETFD) != Err(Errno::EBADF) {
            continue;
        }
        // The lowest free descriptor is this one, as every lower one is open.
        match open("/dev/null", OFlag::O_RDWR, nix::sys::stat::Mode::empty()) {
            Ok(null) if null.as_raw_fd() == fd.as_raw_fd() => {
                // Kept open for the life of the process.
                let _ = null.into_raw_fd();
            }
            _ => std::process::abort(),
        }
    }
    // SAFETY: SIG_IGN installs no handler, so no code runs in a signal
    // context (nix marks `signal` unsafe for the handlers it can install).
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn sigpipe_is_ignored_after_init() {
        super::init();
        // proc(5): SigIgn, a hex mask of ignored signals, bit N-1 for signal N.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let ignored = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
            .unwrap();
        assert_ne!(ignored & (1 << (libc::SIGPIPE - 1)), 0);
    }
}
