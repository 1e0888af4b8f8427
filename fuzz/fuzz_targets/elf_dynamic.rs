//! The loader's view of an ELF file (scan::elf_dynamic) on arbitrary
//! bytes, read positioned and, as an image layer streams a file, through
//! the sparse stream reader (image::libraries): a result or an error,
//! never a panic, a hang or unbounded memory; both readers agree when the
//! stream reader gets a result.
#![no_main]

use gpu_guard::image::stream_elf::dyn_info_from_stream;
use gpu_guard::scan::elf_dynamic::read;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let positioned = read(data);
    if let Ok(streamed) = dyn_info_from_stream(&mut &data[..], data.len() as u64) {
        let p = positioned
            .as_ref()
            .expect("the positioned reader reads what the stream reader did");
        assert_eq!(*p, streamed);
    }
    if let Ok(info) = positioned {
        for class in [1, 2] {
            for machine in [3, 62, 183] {
                let _ = info.fit(class, machine, false);
                let _ = info.ldconfig_accepts(class, machine);
            }
        }
    }
});
