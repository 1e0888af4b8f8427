//! Runs the probe under a deadline.
//!
//! NVML calls cannot be cancelled: a GPU that stopped answering can hold
//! nvmlInit in the kernel for minutes. The probe runs on a helper thread and
//! the caller waits at most the deadline. On timeout the thread is left
//! behind; gpu-guard's entry points are short-lived processes (a hook, the
//! runtime wrapper before exec), so it ends with them.

use std::sync::mpsc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum DeadlineError {
    #[error("did not answer within {0} ms")]
    TimedOut(u64),
    #[error("stopped unexpectedly (the probe thread panicked)")]
    Panicked,
    #[error("cannot start the probe thread: {0}")]
    Spawn(#[source] std::io::Error),
}

/// Runs `f` on a new thread and returns its result, or an error once
/// `timeout_ms` has passed.
pub fn run<T, F>(timeout_ms: u64, f: F) -> Result<T, DeadlineError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("gpu-guard-probe".into())
        .spawn(move || {
            // The receiver may be gone after a timeout; nothing to do then.
            let _ = tx.send(f());
        })
        .map_err(DeadlineError::Spawn)?;
    // recv_timeout falls back to a plain recv when now + timeout overflows,
    // so a huge configured timeout cannot panic here.
    match rx.recv_timeout(Duration::from_millis(timeout_ms)) {
        Ok(v) => Ok(v),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(DeadlineError::TimedOut(timeout_ms)),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(DeadlineError::Panicked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn returns_value_in_time() {
        assert_eq!(run(1000, || 42).unwrap(), 42);
    }

    #[test]
    fn cuts_a_hung_call_at_the_deadline() {
        let start = Instant::now();
        let r = run(100, || std::thread::sleep(Duration::from_secs(30)));
        let took = start.elapsed();
        assert!(matches!(r, Err(DeadlineError::TimedOut(100))), "{r:?}");
        assert!(took >= Duration::from_millis(100), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
    }

    #[test]
    fn a_panic_is_an_error_not_a_panic() {
        let r: Result<(), _> = run(5000, || panic!("probe exploded"));
        assert!(matches!(r, Err(DeadlineError::Panicked)), "{r:?}");
    }
}
