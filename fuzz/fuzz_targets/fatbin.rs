//! Feeds arbitrary bytes through the ELF section reader and the fatbin
//! container/entry walker, from memory (the same code paths as a file:
//! both go through `ReadAt`). Anything but a clean Ok/Err is a bug: a
//! panic, an overflow, a hang (libFuzzer's -timeout catches it) or a
//! runaway allocation (-rss_limit_mb).
#![no_main]

use gpu_guard::scan::fatbin::{scan_image, Budget};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Unlimited: walking must terminate on its own (every entry advances
    // at least 64 bytes, every size is checked against its container).
    let mut budget = Budget::unlimited();
    let mut n = 0u64;
    let r = scan_image(data, &mut budget, &mut |e| {
        n += 1;
        // Naming must never panic, whatever the numbers.
        let _ = e.arch.name(e.kind);
    });
    // An entry header is at least 64 bytes; a concatenated group lists its
    // cubins inside its header, so no more than one entry per 64 bytes.
    assert!(
        n <= (data.len() as u64 / 64) + 1,
        "{n} entries from {} bytes",
        data.len()
    );
    if let Err(e) = r {
        let _ = e.to_string();
    }
});
