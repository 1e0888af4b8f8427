//! NVIDIA's requirement language: arbitrary text through the parser and,
//! when it parses, evaluation against every GPU of a few hosts.
//! A syntax error is a value; a panic, an overflow or a hang is a bug.
#![no_main]

use gpu_guard::core::facts::HostFacts;
use gpu_guard::core::requirement::{Context, Requirement};
use gpu_guard::core::version::Version;
use libfuzzer_sys::fuzz_target;

const HOSTS: [&str; 3] = [
    include_str!("../../tests/data/hosts/h100x8.json"),
    include_str!("../../tests/data/hosts/t4-a10.json"),
    include_str!("../../tests/data/hosts/no-driver.json"),
];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match Requirement::parse("NVIDIA_REQUIRE_FUZZ", &text) {
        Ok(r) => {
            for h in HOSTS {
                let facts = HostFacts::from_json(h).expect("test profile");
                let driver = facts.driver_version.as_deref().and_then(|v| Version::parse(v).ok());
                let cuda = facts.cuda_driver_version.as_deref().and_then(|v| Version::parse(v).ok());
                let ctx = |gpu| Context {
                    driver: driver.as_ref(),
                    driver_text: facts.driver_version.as_deref(),
                    cuda: cuda.as_ref(),
                    gpu,
                };
                let _ = r.judge(&ctx(None));
                for g in &facts.gpus {
                    let _ = r.judge(&ctx(Some(g)));
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
