use super::*;

fn host(driver: &str, cuda: &str) -> HostFacts {
    HostFacts {
        driver_version: Some(driver.into()),
        cuda_driver_version: Some(cuda.into()),
        gpus: Vec::new(),
    }
}

fn cfg(severity: Enforcement) -> LibrariesConfig {
    LibrariesConfig {
        severity,
        ..LibrariesConfig::default()
    }
}

fn runtime(version: &str) -> CudaRuntime {
    let v = Version::parse(version).unwrap();
    CudaRuntime {
        path: "usr/local/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13".into(),
        version: version.into(),
        min_driver: major_min_driver(v.major(), Some(v.minor())),
        toolkit_driver: None,
        source: "pip nvidia-cuda-runtime 13.5.37".into(),
    }
}

fn missing(name: &str, by: &str, via: Via) -> Missing {
    Missing {
        name: name.into(),
        needed_by: by.into(),
        via,
        chain: vec![by.into()],
        error: None,
        optional: false,
        when: None,
        capability: None,
        elsewhere: None,
    }
}

#[test]
fn gpu_names() {
    for n in [
        "libcudart.so.12",
        "libcudnn_ops.so.9",
        "libnvidia-ml.so.1",
        "libnccl.so.2",
        "libnppif.so.12",
        "libnvinfer.so.10",
        "libnvJitLink.so.12",
    ] {
        assert!(is_gpu_name(n), "{n}");
    }
    for n in [
        "libcurl.so.4",
        "libcups.so.2",
        "libc.so.6",
        "libm.so.6",
        "libstdc++.so.6",
    ] {
        assert!(!is_gpu_name(n), "{n}");
    }
}

#[test]
fn a_cuda_13_runtime_on_a_cuda_12_host_is_refused_under_enforce() {
    let scan = LibraryScan {
        cuda_runtimes: vec![runtime("13.5")],
        ..LibraryScan::default()
    };
    let h = host("570.86.15", "12.8");
    let f = assess(
        &scan,
        Some(&h),
        &cfg(Enforcement::Refuse),
        MinorVersionCompat::Off,
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].check, Check::CudaRuntime);
    assert_eq!(f[0].severity, Severity::Error);
    let m = &f[0].message;
    assert!(m.contains("libcudart.so.13"), "{m}");
    assert!(m.contains("pip nvidia-cuda-runtime 13.5.37"), "{m}");
    assert!(m.contains("580.65.06"), "{m}");
    assert!(m.contains("CUDA driver version is insufficient"), "{m}");
    let fix = f[0].fix.as_deref().unwrap();
    assert!(fix.contains("nvidia-cuda-runtime-cu12"), "{fix}");
    // Warn: the same as a warning; a CUDA 13 host: nothing.
    let f = assess(
        &scan,
        Some(&h),
        &cfg(Enforcement::Warn),
        MinorVersionCompat::Off,
    );
    assert_eq!(f[0].severity, Severity::Warning);
    let f = assess(
        &scan,
        Some(&host("580.65.06", "13.0")),
        &cfg(Enforcement::Refuse),
        MinorVersionCompat::Allow,
    );
    // 13.5 on 13.0 is a minor gap; CUDA 13's family minimum is not in
    // the checked table (core::cuda_tables), so even allow does not admit.
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Error);
    assert!(
        f[0].message.contains("minor-version compatibility"),
        "{}",
        f[0].message
    );
    let f = assess(
        &scan,
        Some(&host("610.43.02", "13.5")),
        &cfg(Enforcement::Refuse),
        MinorVersionCompat::Off,
    );
    assert!(f.is_empty(), "{f:?}");
    // Off: nothing at all.
    assert!(assess(
        &scan,
        Some(&h),
        &cfg(Enforcement::Off),
        MinorVersionCompat::Off
    )
    .is_empty());
}

#[test]
fn minor_gaps_follow_the_requirement_rule() {
    let scan = LibraryScan {
        cuda_runtimes: vec![runtime("12.8")],
        ..LibraryScan::default()
    };
    let h = host("535.104.05", "12.2");
    let enforce = cfg(Enforcement::Refuse);
    let off = assess(&scan, Some(&h), &enforce, MinorVersionCompat::Off);
    assert_eq!(off[0].severity, Severity::Error);
    let warn = assess(&scan, Some(&h), &enforce, MinorVersionCompat::Warn);
    assert_eq!(warn[0].severity, Severity::Error);
    assert!(
        warn[0].message.contains("would admit"),
        "{}",
        warn[0].message
    );
    let allow = assess(&scan, Some(&h), &enforce, MinorVersionCompat::Allow);
    assert_eq!(allow[0].severity, Severity::Warning);
    // Below the family minimum, allow does not admit.
    let old = host("520.61.05", "11.8");
    let scan12 = LibraryScan {
        cuda_runtimes: vec![runtime("12.1")],
        ..LibraryScan::default()
    };
    let f = assess(&scan12, Some(&old), &enforce, MinorVersionCompat::Allow);
    assert_eq!(f[0].severity, Severity::Error, "{f:?}");
    // A major-only version is judged by its major only.
    let scan_major = LibraryScan {
        cuda_runtimes: vec![runtime("12")],
        ..LibraryScan::default()
    };
    assert!(assess(&scan_major, Some(&h), &enforce, MinorVersionCompat::Off).is_empty());
    // No driver on the host: the host check says so, not this one.
    let none = HostFacts::default();
    assert!(assess(&scan, Some(&none), &enforce, MinorVersionCompat::Off).is_empty());
}

#[test]
fn missing_libraries_grouped_with_chain_and_fix() {
    let ort = "usr/lib/python3/dist-packages/onnxruntime/capi/libonnxruntime_providers_cuda.so";
    let mut dl = missing("libcuda.so.1", "usr/lib/libcudart.so.12", Via::Dlopen);
    dl.when = Some("at the first CUDA runtime call".into());
    dl.capability = Some("compute".into());
    let scan = LibraryScan {
        missing: vec![
            missing("libcudnn.so.9", ort, Via::Needed),
            missing("libcudnn.so.9", "usr/lib/libother.so", Via::Needed),
            dl,
        ],
        ..LibraryScan::default()
    };
    let f = assess(
        &scan,
        None,
        &cfg(Enforcement::Refuse),
        MinorVersionCompat::Off,
    );
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0].severity, Severity::Error);
    let t = f[0].title();
    assert!(
        t.starts_with(&format!(
            "{ort} → libcudnn.so.9: cannot open shared object file"
        )),
        "{t}"
    );
    assert_eq!(f[0].details.len(), 1);
    assert!(f[0].fix.as_deref().unwrap().contains("nvidia-cudnn-cu12"));
    // dlopen: at most a warning, even under enforce; the capability fix.
    assert_eq!(f[1].severity, Severity::Warning);
    assert!(
        f[1].message.contains("compute driver capability"),
        "{}",
        f[1].message
    );
    assert!(f[1]
        .fix
        .as_deref()
        .unwrap()
        .contains("NVIDIA_DRIVER_CAPABILITIES"));
}

#[test]
fn incomplete_scans_name_what_was_not_judged() {
    let scan = LibraryScan {
        incomplete: Some("time budget of 2000 ms used up".into()),
        not_judged: (0..7).map(|i| format!("usr/lib/lib{i}.so")).collect(),
        not_judged_total: 9,
        ..LibraryScan::default()
    };
    let mut c = cfg(Enforcement::Refuse);
    let f = assess(&scan, None, &c, MinorVersionCompat::Off);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0].message.contains("lib0.so"), "{}", f[0].message);
    assert!(f[0].message.contains("and 4 more"), "{}", f[0].message);
    c.on_incomplete = Enforcement::Refuse;
    let f = assess(&scan, None, &c, MinorVersionCompat::Off);
    assert_eq!(f[0].severity, Severity::Error);
}

#[test]
fn json_shape() {
    let scan = LibraryScan {
        missing: vec![missing("libcudnn.so.9", "usr/lib/x.so", Via::Needed)],
        cuda_runtimes: vec![runtime("13.5")],
        ..LibraryScan::default()
    };
    let v = serde_json::to_value(&scan).unwrap();
    assert_eq!(v["missing"][0]["via"], "DT_NEEDED");
    assert_eq!(v["missing"][0]["needed_by"], "usr/lib/x.so");
    assert_eq!(v["cuda_runtimes"][0]["version"], "13.5");
    assert_eq!(v["cuda_runtimes"][0]["min_driver"], "580.65.06");
    let back: LibraryScan = serde_json::from_value(v).unwrap();
    assert_eq!(back, scan);
}
