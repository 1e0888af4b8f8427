//! Table-driven tests of the requirement language and the decision, against
//! the environments of official nvidia/cuda images (tests/data/images) and
//! host profiles (tests/data/hosts).

use gpu_guard::core::container::{Container, Env};
use gpu_guard::core::decision::{Check, Decision, Severity, Verdict};
use gpu_guard::core::policy::{Config, Mode};
use gpu_guard::core::security::SpecAccess;
use gpu_guard::pipeline::{self, ContainerInput, HostChoice, Policy};
use std::path::PathBuf;

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn image(name: &str) -> Vec<String> {
    std::fs::read_to_string(data(&format!("images/{name}.env")))
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

fn decide_with(cfg: &Config, profile: &str, env: &[String]) -> Decision {
    let c = Container::from_env(Env::from_entries(env));
    let host = data(&format!("hosts/{profile}.json"));
    pipeline::decide_container(
        &Policy::valid(cfg.clone()),
        ContainerInput::new(c, SpecAccess::Edit),
        HostChoice::File(&host),
    )
}

fn decide(profile: &str, env: &[String]) -> Decision {
    decide_with(&Config::default(), profile, env)
}

fn with(mut base: Vec<String>, extra: &[&str]) -> Vec<String> {
    base.extend(extra.iter().map(|s| s.to_string()));
    base
}

fn envs(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn errors(d: &Decision) -> Vec<String> {
    d.errors().map(|f| f.message.clone()).collect()
}

fn has(d: &Decision, check: Check, severity: Severity, needle: &str) -> bool {
    d.findings
        .iter()
        .any(|f| f.check == check && f.severity == severity && f.message.contains(needle))
}

#[test]
fn official_images_against_hosts() {
    // (image, host profile, expected verdict)
    let table = [
        ("cuda-12.4.1-base-ubuntu2204", "h100x8", Verdict::Allow),
        (
            "cuda-12.4.1-base-ubuntu2204",
            "geforce-545",
            Verdict::Refuse,
        ),
        // forward compatibility: brand=tesla,driver>=535,driver<536 admits a 12.4 image on 535
        ("cuda-12.4.1-base-ubuntu2204", "tesla-535", Verdict::Allow),
        ("cuda-12.4.1-base-ubuntu2204", "a100", Verdict::Allow),
        ("cuda-12.8.0-base-ubuntu2404", "tesla-535", Verdict::Allow),
        (
            "cuda-12.8.0-base-ubuntu2404",
            "geforce-545",
            Verdict::Refuse,
        ),
        // 550.54.15 is branch 550, listed for nvidia-brand GPUs in 12.8's alternatives
        ("cuda-12.8.0-base-ubuntu2404", "h100x8", Verdict::Allow),
        ("cuda-12.2.2-base-ubuntu2204", "geforce-545", Verdict::Allow),
        ("cuda-12.2.2-base-ubuntu2204", "t4-a10", Verdict::Allow),
        ("cuda-11.8.0-base-ubuntu2204", "a100", Verdict::Allow),
        ("cuda-11.8.0-base-ubuntu2204", "no-driver", Verdict::Refuse),
        ("cuda-8.0-legacy", "a100-mig", Verdict::Allow),
    ];
    for (img, host, want) in table {
        let d = decide(host, &image(img));
        assert_eq!(d.verdict, want, "{img} on {host}: {:#?}", d.findings);
        assert!(d.gpu_container, "{img} is a GPU container");
    }
}

#[test]
fn refusal_names_the_real_cause_not_the_first_alternative() {
    let d = decide("geforce-545", &image("cuda-12.4.1-base-ubuntu2204"));
    let f = d.errors().next().expect("an error");
    assert_eq!(f.check, Check::Requirement);
    assert!(
        f.message
            .contains("cuda>=12.4: driver 545.23.06 provides CUDA 12.3"),
        "{}",
        f.message
    );
    assert!(
        f.message.contains("3 forward-compatibility alternatives for geforce need driver branch 470, 525 or 535: driver is 545.23.06"),
        "{}",
        f.message
    );
    assert!(
        f.message
            .contains("GPU 0 (NVIDIA GeForce RTX 4090, compute capability 8.9)"),
        "{}",
        f.message
    );
    let fix = f.fix.as_deref().unwrap();
    assert!(fix.contains("550.54.14"), "{fix}");
    assert!(fix.contains("CUDA 12.3 or older"), "{fix}");

    // 12.8 on GeForce 545: no geforce alternatives at all; every brand term fails on brand.
    let d = decide("geforce-545", &image("cuda-12.8.0-base-ubuntu2404"));
    let m = &errors(&d)[0];
    assert!(
        m.contains("cuda>=12.8: driver 545.23.06 provides CUDA 12.3"),
        "{m}"
    );
    assert!(m.contains("60 alternatives for other GPU brands"), "{m}");
    assert!(m.contains("GPU 0 is geforce"), "{m}");
    assert!(d
        .errors()
        .next()
        .unwrap()
        .fix
        .as_deref()
        .unwrap()
        .contains("570.26"));
}

#[test]
fn forward_compat_tesla_535_admits_newer_cuda_but_not_on_545_geforce() {
    let req = "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=535,driver<536";
    let base = envs(&["NVIDIA_VISIBLE_DEVICES=all", req]);
    assert_eq!(decide("tesla-535", &base).verdict, Verdict::Allow);
    let d = decide("geforce-545", &base);
    assert_eq!(d.verdict, Verdict::Refuse);
    let m = &errors(&d)[0];
    assert!(
        m.contains("brand=tesla,driver>=535,driver<536: GPU 0 is geforce"),
        "{m}"
    );
}

#[test]
fn multi_gpu_every_visible_gpu_must_satisfy() {
    let req = "NVIDIA_REQUIRE_ARCH=arch>=8.0";
    let d = decide("t4-a10", &envs(&["NVIDIA_VISIBLE_DEVICES=all", req]));
    assert_eq!(d.verdict, Verdict::Refuse);
    let m = &errors(&d)[0];
    assert!(
        m.contains("GPU 0 (Tesla T4, compute capability 7.5)"),
        "{m}"
    );
    assert!(!m.contains("GPU 1"), "only the failing GPU is named: {m}");
    // Only the A10 visible: fine.
    assert_eq!(
        decide("t4-a10", &envs(&["NVIDIA_VISIBLE_DEVICES=1", req])).verdict,
        Verdict::Allow
    );
    // By UUID
    assert_eq!(
        decide(
            "t4-a10",
            &envs(&[
                "NVIDIA_VISIBLE_DEVICES=GPU-00000001-1c6e-4d64-9e0a-3c1f2a7b9ea1",
                req
            ])
        )
        .verdict,
        Verdict::Allow
    );
    // 8 identical GPUs, all failing: one finding naming them together.
    let d = decide(
        "h100x8",
        &envs(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_ARCH=arch>=10.0",
        ]),
    );
    let m = &errors(&d)[0];
    assert!(
        m.contains("GPUs 0, 1, 2, 3, 4, 5, 6, 7 (NVIDIA H100 80GB HBM3, compute capability 9.0)"),
        "{m}"
    );
    assert_eq!(
        d.visible_gpus.as_deref(),
        Some(&[0, 1, 2, 3, 4, 5, 6, 7][..])
    );
}

#[test]
fn mig_devices_count_as_their_parent_gpu() {
    let mig = "NVIDIA_VISIBLE_DEVICES=MIG-1c8d5f63-2b44-5e8f-9a32-7bad1e5f4c23";
    let d = decide("a100-mig", &envs(&[mig, "NVIDIA_REQUIRE_ARCH=arch>=8.0"]));
    assert_eq!(d.verdict, Verdict::Allow);
    assert_eq!(d.visible_gpus.as_deref(), Some(&[0][..]));
    let d = decide(
        "a100-mig",
        &envs(&[mig, "NVIDIA_REQUIRE_BRAND=brand=tesla"]),
    );
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(errors(&d)[0].contains("GPU 0 is nvidia"));
    // gpu:mig index form
    let d = decide("a100-mig", &envs(&["NVIDIA_VISIBLE_DEVICES=0:1"]));
    assert_eq!(d.verdict, Verdict::Allow);
    // a MIG UUID the host does not have
    let d = decide(
        "a100-mig",
        &envs(&["NVIDIA_VISIBLE_DEVICES=MIG-ffffffff-0000-0000-0000-000000000000"]),
    );
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(has(&d, Check::Device, Severity::Error, "MIG-ffffffff"));
}

#[test]
fn unknown_devices_are_refused_with_the_host_gpu_list() {
    let d = decide("t4-a10", &envs(&["NVIDIA_VISIBLE_DEVICES=5"]));
    assert_eq!(d.verdict, Verdict::Refuse);
    let m = &errors(&d)[0];
    assert!(
        m.contains("asks for GPU 5, which this host does not have"),
        "{m}"
    );
    assert!(
        m.contains("0 Tesla T4") && m.contains("1 NVIDIA A10"),
        "{m}"
    );
    let d = decide("t4-a10", &envs(&["NVIDIA_VISIBLE_DEVICES=GPU-deadbeef"]));
    assert!(has(&d, Check::Device, Severity::Error, "GPU-deadbeef"));
}

#[test]
fn legacy_images() {
    // CUDA_VERSION alone: GPU container, all GPUs, cuda>=MAJOR.MINOR.
    let d = decide("a100", &envs(&["CUDA_VERSION=12.6.0"]));
    assert!(d.gpu_container);
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(
        errors(&d)[0].starts_with("CUDA_VERSION is not satisfied"),
        "{:?}",
        errors(&d)
    );
    assert!(errors(&d)[0].contains("cuda>=12.6: driver 535.104.05 provides CUDA 12.2"));
    assert_eq!(
        decide("a100", &envs(&["CUDA_VERSION=12.2.140"])).verdict,
        Verdict::Allow
    );
    // NVIDIA_REQUIRE_CUDA present: no legacy rule.
    assert_eq!(
        decide(
            "a100",
            &envs(&[
                "NVIDIA_VISIBLE_DEVICES=all",
                "CUDA_VERSION=12.6.0",
                "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
            ])
        )
        .verdict,
        Verdict::Allow
    );
    // unparseable CUDA_VERSION: refused, as NVIDIA's hook does
    let d = decide("a100", &envs(&["CUDA_VERSION=twelve"]));
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(errors(&d)[0].contains("CUDA_VERSION=twelve is not a version"));
}

#[test]
fn disable_require() {
    let failing = &[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=13.0",
    ];
    for v in ["1", "t", "true", "TRUE", "True"] {
        let d = decide(
            "a100",
            &with(envs(failing), &[&format!("NVIDIA_DISABLE_REQUIRE={v}")]),
        );
        assert_eq!(d.verdict, Verdict::Allow, "{v}");
        assert!(has(
            &d,
            Check::Requirement,
            Severity::Info,
            "requirement checks are skipped"
        ));
    }
    for v in ["0", "false", "yes", ""] {
        let d = decide(
            "a100",
            &with(envs(failing), &[&format!("NVIDIA_DISABLE_REQUIRE={v}")]),
        );
        assert_eq!(d.verdict, Verdict::Refuse, "{v}");
    }
    let mut cfg = Config::default();
    cfg.requirements.honor_disable_require = false;
    let d = decide_with(
        &cfg,
        "a100",
        &with(envs(failing), &["NVIDIA_DISABLE_REQUIRE=true"]),
    );
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(has(
        &d,
        Check::Requirement,
        Severity::Warning,
        "host policy ignores it"
    ));
    assert!(d
        .errors()
        .next()
        .unwrap()
        .fix
        .as_deref()
        .unwrap()
        .contains("honor_disable_require = false"));
}

#[test]
fn bad_syntax_and_unknown_keys() {
    let cases = [
        ("cuda==12.4", "operator `==`"),
        ("cuda12.4", "no operator"),
        ("cuda>=", "empty value"),
        ("brand>tesla", "brand takes only = or !="),
        ("cuda>=12.4 driver>=abc", "digits and dots"),
    ];
    for (req, needle) in cases {
        let d = decide(
            "h100x8",
            &envs(&[
                "NVIDIA_VISIBLE_DEVICES=all",
                &format!("NVIDIA_REQUIRE_CUDA={req}"),
            ]),
        );
        assert_eq!(d.verdict, Verdict::Refuse, "{req}");
        let m = &errors(&d)[0];
        assert!(
            m.contains("is not a valid requirement") && m.contains(needle),
            "{req}: {m}"
        );
        assert!(!m.contains('\n'));
    }
    let d = decide(
        "h100x8",
        &envs(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDNN=cudnn>=9",
        ]),
    );
    assert_eq!(d.verdict, Verdict::Allow);
    assert!(has(&d, Check::Requirement, Severity::Warning, "cudnn>=9"));
    // JETPACK variables are not requirements
    let d = decide(
        "h100x8",
        &envs(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_JETPACK=csv-mounts=all",
        ]),
    );
    assert_eq!(d.verdict, Verdict::Allow);
    assert!(d.findings.is_empty(), "{:?}", d.findings);
}

#[test]
fn odd_version_formats() {
    let cases = [
        ("driver>=550.54.9", Verdict::Allow), // 15 > 9, numerically
        ("driver>550.54.15", Verdict::Refuse),
        ("driver=550.54.15.0", Verdict::Allow), // missing components are 0
        ("driver<550.100", Verdict::Allow),
        ("cuda=12.4.0", Verdict::Allow),
        ("cuda>12.4", Verdict::Refuse),
        ("cuda!=12.4", Verdict::Refuse),
        ("CUDA>=12", Verdict::Allow),
        ("arch=9", Verdict::Allow),
        ("arch<9.0.1", Verdict::Allow),
    ];
    for (req, want) in cases {
        let d = decide(
            "h100x8",
            &envs(&[
                "NVIDIA_VISIBLE_DEVICES=all",
                &format!("NVIDIA_REQUIRE_X={req}"),
            ]),
        );
        assert_eq!(d.verdict, want, "{req}: {:?}", d.findings);
    }
    // leading zeros in the host driver (535.104.05) compare as numbers
    let d = decide(
        "a100",
        &envs(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_X=driver>=535.104.5",
        ]),
    );
    assert_eq!(d.verdict, Verdict::Allow);
}

#[test]
fn none_and_no_gpus() {
    // none: GPU container without devices, arch/brand pass, cuda still checked
    let d = decide(
        "t4-a10",
        &envs(&[
            "NVIDIA_VISIBLE_DEVICES=none",
            "NVIDIA_REQUIRE_ARCH=arch>=9.0",
        ]),
    );
    assert!(d.gpu_container);
    assert_eq!(d.verdict, Verdict::Allow);
    assert_eq!(d.visible_gpus.as_deref(), Some(&[][..]));
    let d = decide(
        "t4-a10",
        &envs(&[
            "NVIDIA_VISIBLE_DEVICES=none",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        ]),
    );
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(errors(&d)[0].contains("on this host"));
    // driver without GPUs
    let d = decide(
        "driver-no-gpu",
        &envs(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        ]),
    );
    assert_eq!(d.verdict, Verdict::Allow);
    assert!(has(&d, Check::Device, Severity::Warning, "reports none"));
    // no driver
    let d = decide("no-driver", &envs(&["NVIDIA_VISIBLE_DEVICES=all"]));
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(has(
        &d,
        Check::Host,
        Severity::Error,
        "no NVIDIA driver on this host"
    ));
}

#[test]
fn non_gpu_containers_are_skipped_untouched() {
    for env in [
        envs(&[]),
        envs(&[
            "NVIDIA_VISIBLE_DEVICES=void",
            "NVIDIA_REQUIRE_CUDA=cuda>=99",
        ]),
        envs(&["NVIDIA_VISIBLE_DEVICES=", "CUDA_VERSION=12.4.1"]),
        envs(&["PATH=/bin"]),
    ] {
        let d = decide("no-driver", &env);
        assert_eq!(d.verdict, Verdict::Skip, "{env:?}");
        assert!(!d.gpu_container);
        assert!(d.edits.is_empty());
        assert!(d.findings.is_empty());
    }
}

#[test]
fn modes() {
    let failing = envs(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=13.0",
    ]);
    let mut cfg = Config {
        mode: Mode::Warn,
        ..Default::default()
    };
    let d = decide_with(&cfg, "a100", &failing);
    assert_eq!(d.verdict, Verdict::Allow);
    assert!(d.has_errors(), "warn mode keeps the findings");
    assert!(!d.edits.env.is_empty(), "warn mode still edits");
    cfg.mode = Mode::Off;
    let d = decide_with(&cfg, "a100", &failing);
    assert_eq!(d.verdict, Verdict::Skip);
    assert!(d.findings.is_empty() && d.edits.is_empty());
}

#[test]
fn invalid_config_refuses_gpu_containers_only() {
    let err = gpu_guard::config::ConfigError {
        path: "/etc/gpu-guard/config.toml".into(),
        message: "key `tuning.enabeld`: unknown field".into(),
        unreadable: false,
    };
    let host = data("hosts/a100.json");
    let gpu = Container::from_env(Env::from_entries(["NVIDIA_VISIBLE_DEVICES=all"]));
    let d = pipeline::decide_container(
        &Policy::invalid(err.clone()),
        ContainerInput::new(gpu, SpecAccess::Edit),
        HostChoice::File(&host),
    );
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(
        errors(&d)[0].contains("/etc/gpu-guard/config.toml")
            && errors(&d)[0].contains("tuning.enabeld")
    );
    let plain = Container::from_env(Env::from_entries(["PATH=/bin"]));
    let d = pipeline::decide_container(
        &Policy::invalid(err),
        ContainerInput::new(plain, SpecAccess::Edit),
        HostChoice::File(&host),
    );
    assert_eq!(d.verdict, Verdict::Skip);
}

#[test]
fn hostile_values_are_escaped_and_bounded() {
    let evil = "NVIDIA_REQUIRE_CUDA=cuda>=12.4\n\u{1b}[31mFAKE LOG LINE";
    let d = decide("a100", &envs(&["NVIDIA_VISIBLE_DEVICES=all", evil]));
    for f in &d.findings {
        assert!(
            !f.message.contains('\n') && !f.message.contains('\u{1b}'),
            "{}",
            f.message
        );
    }
    // a 1 MB requirement value: decided, with a bounded message
    let big = format!(
        "NVIDIA_REQUIRE_CUDA={}",
        "brand=tesla,driver>=1,driver<2 ".repeat(33_000)
    );
    assert!(big.len() > 1_000_000);
    let d = decide("geforce-545", &envs(&["NVIDIA_VISIBLE_DEVICES=all", &big]));
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(errors(&d)[0].len() < 2000, "{}", errors(&d)[0].len());
    // thousands of requirements: decided, with a bounded number of findings
    let mut many = envs(&["NVIDIA_VISIBLE_DEVICES=all"]);
    many.extend((0..10_000).map(|i| format!("NVIDIA_REQUIRE_{i}=cuda>=99.{i}")));
    let d = decide("a100", &many);
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(d.findings.len() < 20, "{}", d.findings.len());
    assert!(has(
        &d,
        Check::Requirement,
        Severity::Error,
        "9992 more NVIDIA_REQUIRE_* variables"
    ));
}

#[test]
fn tuning_and_security_edits_in_the_decision() {
    let d = decide(
        "t4-a10",
        &envs(&["NVIDIA_VISIBLE_DEVICES=all", "TF_GPU_ALLOCATOR=bfc"]),
    );
    assert_eq!(d.verdict, Verdict::Allow);
    let added: Vec<&str> = d.edits.env.keys().map(|k| k.as_str()).collect();
    assert_eq!(
        added,
        vec![
            "CUDA_DEVICE_ORDER",
            "CUDA_DEVICE_MAX_CONNECTIONS",
            "PYTORCH_CUDA_ALLOC_CONF"
        ]
    );
    assert!(d.edits.no_new_privileges);
    let d = decide("t4-a10", &envs(&["NVIDIA_VISIBLE_DEVICES=1"]));
    assert!(
        d.edits.env.contains_key("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"),
        "A10 alone is 8.6"
    );
}
