//! Env entries and annotations, as an image or a pod author writes them,
//! through detection (classify, device resolution), the requirement
//! language, decide and both human renderings, against multi-GPU, MIG and
//! no-driver hosts. Anything but a decision is a bug: a panic
//! (the `GPUé` byte-slicing class), an overflow, a hang. Every rendering
//! must stay free of raw control characters, whatever the container sent.
#![no_main]

use gpu_guard::core::container::{Container, Env};
use gpu_guard::core::facts::{HostFacts, HostReport};
use gpu_guard::core::policy::Config;
use gpu_guard::core::report;
use gpu_guard::core::security::SpecAccess;
use gpu_guard::pipeline::{Classified, ContainerInput};
use libfuzzer_sys::fuzz_target;

const HOSTS: [&str; 4] = [
    include_str!("../../tests/data/hosts/h100x8.json"),
    include_str!("../../tests/data/hosts/a100-mig.json"),
    include_str!("../../tests/data/hosts/geforce-545.json"),
    include_str!("../../tests/data/hosts/no-driver.json"),
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    // Lines before a NUL line are env entries, after it annotations
    // (`key=value`); a selector bit adds NVIDIA's hook so env requests
    // count, another makes it a `check --env` container.
    let (env_part, ann_part) = text.split_once("\n\0\n").unwrap_or((&text, ""));
    let mut c = if selector & 0x10 != 0 {
        Container::from_env(Env::from_entries(env_part.lines()))
    } else {
        Container {
            env: Env::from_entries(env_part.lines()),
            ..Container::default()
        }
    };
    for line in ann_part.lines() {
        if let Some((k, v)) = line.split_once('=') {
            c.annotations.insert(k.to_string(), v.to_string());
        }
    }
    if selector & 0x20 != 0 {
        c.devices.push("/dev/nvidia0".to_string());
    }
    let facts = HostFacts::from_json(HOSTS[usize::from(selector & 3)]).expect("test profile");
    let host = HostReport::from_facts(facts, "fuzz");
    let mut cfg = Config::default();
    if selector & 0x40 != 0 {
        cfg.detect.env_requests = gpu_guard::core::policy::EnvRequests::Always;
    }
    let stage = if selector & 4 != 0 { SpecAccess::Verify } else { SpecAccess::Edit };
    // Through the decision pipeline, as every entry point decides (no
    // rootfs: nothing is scanned).
    let d = Classified::new(&cfg, ContainerInput::new(c, stage)).on_host(Some(&host));
    for out in [report::human(&d), report::refusal(&d), report::refusal_line(&d)] {
        assert!(
            !out.chars().any(|ch| ch.is_control() && ch != '\n'),
            "raw control character in {out:?}"
        );
    }
    let _ = serde_json::to_string(&d).expect("a decision always serializes");
});
