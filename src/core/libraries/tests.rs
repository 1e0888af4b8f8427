use super::*;

fn host(driver: &str, cuda: &str) -> HostFacts {
    HostFacts {
        driver_version: Some(driver.into()),
        cuda_driver_version: Some(cuda.into()),
        gpus: Vec::new(),
        ..Default::default()
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

fn missing(name: &str, by: &str, via: RequestKind) -> Missing {
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
    let f = assess(&scan, Some(&h), &cfg(Enforcement::Refuse));
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].check, Check::CudaRuntime);
    assert_eq!(f[0].severity, Severity::Error);
    assert!(f[0].predicts_failure);
    let m = &f[0].message;
    assert!(m.contains("libcudart.so.13"), "{m}");
    assert!(m.contains("pip nvidia-cuda-runtime 13.5.37"), "{m}");
    assert!(m.contains("580.65.06"), "{m}");
    assert!(m.contains("CUDA driver version is insufficient"), "{m}");
    let fix = f[0].fix.as_deref().unwrap();
    assert!(fix.contains("nvidia-cuda-runtime-cu12"), "{fix}");
    // Warn: the same as a warning, still predicting the failure.
    let f = assess(&scan, Some(&h), &cfg(Enforcement::Warn));
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0].predicts_failure);
    // Off: nothing at all.
    assert!(assess(&scan, Some(&h), &cfg(Enforcement::Off)).is_empty());
}

/// CUDA's rule (CUDA Compatibility, "Minor Version Compatibility"): a
/// 13.5 runtime runs on driver 580.65.06 (CUDA 13.0), the CUDA 13 family
/// minimum; the warning names what needs the newer driver. A newer driver
/// says nothing.
#[test]
fn a_newer_minor_runs_on_a_driver_of_its_family() {
    let scan = LibraryScan {
        cuda_runtimes: vec![runtime("13.5")],
        ..LibraryScan::default()
    };
    let enforce = cfg(Enforcement::Refuse);
    let f = assess(&scan, Some(&host("580.65.06", "13.0")), &enforce);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(!f[0].predicts_failure);
    let m = &f[0].message;
    assert!(!m.contains("insufficient"), "{m}");
    assert!(m.contains("minor-version compatibility"), "{m}");
    assert!(m.contains("PTX built by CUDA 13.5"), "{m}");
    assert!(m.contains("cudaErrorCallRequiresNewerDriver"), "{m}");
    assert!(assess(&scan, Some(&host("610.43.02", "13.5")), &enforce).is_empty());
    assert!(assess(&scan, Some(&host("620.1.2", "14.1")), &enforce).is_empty());
    // 12.8 on 535 (CUDA 12.2): above 525.60.13, the 12.x family minimum.
    let s128 = LibraryScan {
        cuda_runtimes: vec![runtime("12.8")],
        ..LibraryScan::default()
    };
    let f = assess(&s128, Some(&host("535.104.05", "12.2")), &enforce);
    assert_eq!(f[0].severity, Severity::Warning, "{f:?}");
    // A driver reporting 12.0 below the family minimum: insufficient.
    let f = assess(&s128, Some(&host("525.53", "12.0")), &enforce);
    assert_eq!(f[0].severity, Severity::Error, "{f:?}");
    assert!(f[0].predicts_failure);
    assert!(f[0].message.contains("525.60.13"), "{}", f[0].message);
}

#[test]
fn older_runtimes_and_majors_alone() {
    let enforce = cfg(Enforcement::Refuse);
    let h = host("535.104.05", "12.2");
    // A major-only version is judged by its major only.
    let scan_major = LibraryScan {
        cuda_runtimes: vec![runtime("12")],
        ..LibraryScan::default()
    };
    assert!(assess(&scan_major, Some(&h), &enforce).is_empty());
    // CUDA 10 had no minor-version compatibility.
    let s102 = LibraryScan {
        cuda_runtimes: vec![runtime("10.2")],
        ..LibraryScan::default()
    };
    let f = assess(&s102, Some(&host("418.39", "10.1")), &enforce);
    assert_eq!(f[0].severity, Severity::Error, "{f:?}");
    assert!(assess(&s102, Some(&h), &enforce).is_empty());
    // No driver on the host: the host check says so, not this one.
    let none = HostFacts::default();
    let scan = LibraryScan {
        cuda_runtimes: vec![runtime("12.8")],
        ..LibraryScan::default()
    };
    assert!(assess(&scan, Some(&none), &enforce).is_empty());
}

#[test]
fn missing_libraries_grouped_with_chain_and_fix() {
    let ort = "usr/lib/python3/dist-packages/onnxruntime/capi/libonnxruntime_providers_cuda.so";
    let mut dl = missing(
        "libcuda.so.1",
        "usr/lib/libcudart.so.12",
        RequestKind::Dlopen,
    );
    dl.when = Some("at the first CUDA runtime call".into());
    dl.capability = Some("compute".into());
    let scan = LibraryScan {
        missing: vec![
            missing("libcudnn.so.9", ort, RequestKind::Needed),
            missing("libcudnn.so.9", "usr/lib/libother.so", RequestKind::Needed),
            dl,
        ],
        ..LibraryScan::default()
    };
    let f = assess(&scan, None, &cfg(Enforcement::Refuse));
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
    let f = assess(&scan, None, &c);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0].message.contains("lib0.so"), "{}", f[0].message);
    assert!(f[0].message.contains("and 4 more"), "{}", f[0].message);
    c.on_incomplete = Enforcement::Refuse;
    let f = assess(&scan, None, &c);
    assert_eq!(f[0].severity, Severity::Error);
}

/// A scan that could not run at all is judged as an unfinished one: the
/// same severity as a partial scan under every setting.
#[test]
fn a_scan_that_failed_outright_follows_the_incomplete_rule() {
    let failed = LibraryScan {
        error: Some("cannot open the rootfs /x: No such file or directory".into()),
        ..LibraryScan::default()
    };
    let partial = LibraryScan {
        incomplete: Some("the time budget ran out".into()),
        ..LibraryScan::default()
    };
    for (severity, on_incomplete, want) in [
        (
            Enforcement::Warn,
            Enforcement::Warn,
            Some(Severity::Warning),
        ),
        (
            Enforcement::Warn,
            Enforcement::Refuse,
            Some(Severity::Warning),
        ),
        (
            Enforcement::Refuse,
            Enforcement::Warn,
            Some(Severity::Warning),
        ),
        (
            Enforcement::Refuse,
            Enforcement::Refuse,
            Some(Severity::Error),
        ),
        (Enforcement::Off, Enforcement::Refuse, None),
    ] {
        let mut c = cfg(severity);
        c.on_incomplete = on_incomplete;
        for scan in [&failed, &partial] {
            let f = assess(scan, None, &c);
            assert_eq!(
                f.first().map(|f| f.severity),
                want,
                "{severity:?} {on_incomplete:?} {scan:?}"
            );
        }
        let f = assess(&failed, None, &c);
        if let Some(f) = f.first() {
            assert!(f.message.contains("could not run"), "{}", f.message);
            assert!(f.message.contains("/x"), "{}", f.message);
        }
    }
}

#[test]
fn json_shape() {
    let scan = LibraryScan {
        missing: vec![missing(
            "libcudnn.so.9",
            "usr/lib/x.so",
            RequestKind::Needed,
        )],
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
