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
    for fd in 0..3 {
        // SAFETY: F_GETFD only reads the descriptor's flags.
        let closed = unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF);
        // SAFETY: a NUL-terminated path; the lowest free descriptor is
        // `fd`, as every lower one is open.
        if closed && unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } != fd {
            std::process::abort();
        }
    }
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn sigpipe_is_ignored_after_init() {
        super::init();
        // SAFETY: reads the current disposition without changing it.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) };
        assert_eq!(rc, 0);
        assert_eq!(old.sa_sigaction, libc::SIG_IGN);
    }
}
