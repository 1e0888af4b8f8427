//! Feeds arbitrary bytes to the Go-compatible spec reader:
//! config.json and exec process files are parsed, viewed as runc's decoder
//! sees them and, when readable, patched with a full set of policy edits.
//! Anything but a clean Ok/Err is a bug: a panic, a stack overflow (the
//! reader and writer keep their own stacks), a hang. A patched file must
//! read back with the edits in force; a file whose process runc refuses
//! is left as it is.
#![no_main]

use gpu_guard::core::decision::Edits;
use gpu_guard::oci::spec_file::{LoadedProcess, LoadedSpec};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let mut edits = Edits::default();
    edits
        .env
        .insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
    edits.capabilities_dropped = vec!["CAP_SYS_ADMIN".into()];
    edits.no_new_privileges = true;

    if let Ok(spec) = LoadedSpec::from_bytes(Path::new("config.json"), data.to_vec(), None) {
        // What runc's decoder refuses is never rewritten.
        if spec.runc_type_error().is_some() {
            assert!(matches!(spec.patched(&edits), Ok(None)));
        }
        if let Ok(Some(out)) = spec.patched(&edits) {
            let again = LoadedSpec::from_bytes(Path::new("config.json"), out, None)
                .expect("a patched config.json reads back");
            let c = &again.container;
            assert!(c.no_new_privileges);
            assert_eq!(c.env.get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
            assert!(!c.capabilities.union().contains(&"CAP_SYS_ADMIN"));
        }
    }
    if let Ok(p) = LoadedProcess::from_bytes(data.to_vec()) {
        if let Ok(Some(out)) = p.patched(&edits) {
            let again = LoadedProcess::from_bytes(out).expect("a patched process file reads back");
            assert!(again.view.no_new_privileges);
        }
    }
    let _ = gpu_guard::oci::spec_file::mentions_gpu(data);
});
