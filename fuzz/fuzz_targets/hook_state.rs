//! Feeds arbitrary bytes to the hook's OCI State reader (what runc writes
//! on a prestart/createRuntime hook's stdin). It must return Ok or Err,
//! never panic, and an Ok state always names a bundle.
#![no_main]

use gpu_guard::oci::state::parse_state;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_state(data) {
        Ok(s) => assert!(!s.bundle.as_os_str().is_empty()),
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
