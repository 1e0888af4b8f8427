//! Table tests: CDI names as device requests, env requests that count only
//! when something attaches GPUs, unknown requirement keys dropped as
//! NVIDIA's Go checker drops them, and hostile container strings through
//! classify → decide → the report.

use gpu_guard::core::container::{Container, Env};
use gpu_guard::core::decision::{Check, Decision, Severity, Verdict};
use gpu_guard::core::detect;
use gpu_guard::core::policy::{Config, EnvRequests};
use gpu_guard::core::report;
use gpu_guard::core::security::SpecAccess;
use gpu_guard::oci::spec::parse_spec_bytes;
use gpu_guard::pipeline::{self, ContainerInput, HostChoice, Policy};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);
const T4_A10_GPU1: &str = "GPU-00000001-1c6e-4d64-9e0a-3c1f2a7b9ea1";
const A100_MIG1: &str = "MIG-1c8d5f63-2b44-5e8f-9a32-7bad1e5f4c23";
const UNATTACHED: &str =
    "asks for GPUs by env, but no NVIDIA hook, runtime or device will attach them";

fn host(profile: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/hosts/{profile}.json"))
}

/// NVIDIA's legacy prestart hook, as `docker run --gpus` adds it.
fn nvidia_hook() -> Value {
    json!({"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook",
                         "args": ["nvidia-container-runtime-hook", "prestart"]}]})
}

/// A spec with `env` and the other top-level parts in `extra`.
fn spec(env: &[&str], extra: Value) -> Container {
    let mut v = json!({"process": {"env": env, "noNewPrivileges": true}});
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, x) in e {
            o.insert(k.clone(), x.clone());
        }
    }
    Container::from_spec(&v, None).unwrap()
}

fn decide_with(cfg: &Config, profile: &str, c: &Container) -> Decision {
    pipeline::decide_container(
        &Policy::valid(cfg.clone()),
        ContainerInput::new(c.clone(), SpecAccess::Edit),
        HostChoice::File(&host(profile)),
    )
}

fn decide(profile: &str, c: &Container) -> Decision {
    decide_with(&Config::default(), profile, c)
}

fn has(d: &Decision, check: Check, severity: Severity, needle: &str) -> bool {
    d.findings
        .iter()
        .any(|f| f.check == check && f.severity == severity && f.message.contains(needle))
}

/// (extra spec parts, env, verdict, visible GPUs; None: not a GPU container)
type SpecCase<'a> = (Value, Vec<&'a str>, Verdict, Option<Vec<u32>>);
/// (what, env, extra spec parts, chained runtime, GPU container?)
type AttachCase<'a> = (&'a str, &'a [&'a str], Value, Option<&'a str>, bool);

// ---------------------------------------------------------------- A1

#[test]
fn cdi_names_resolve_like_plain_names() {
    let arch = "NVIDIA_REQUIRE_ARCH=arch>=8.0";
    let gpu1 = format!("nvidia.com/gpu={T4_A10_GPU1}");
    let mixed_uuid = format!("nvidia.com/gpu=0,{T4_A10_GPU1}");
    let mig = format!("nvidia.com/mig={A100_MIG1}");
    let mig_gpu_kind = format!("nvidia.com/gpu={A100_MIG1}");
    // (host, NVIDIA_VISIBLE_DEVICES, verdict, visible GPUs; None: not a GPU container)
    let table: Vec<(&str, &str, Verdict, Option<Vec<u32>>)> = vec![
        (
            "t4-a10",
            "nvidia.com/gpu=all",
            Verdict::Refuse,
            Some(vec![0, 1]),
        ),
        (
            "t4-a10",
            "runtime.nvidia.com/gpu=all",
            Verdict::Refuse,
            Some(vec![0, 1]),
        ),
        ("t4-a10", "nvidia.com/gpu=1", Verdict::Allow, Some(vec![1])),
        (
            "t4-a10",
            "runtime.nvidia.com/gpu=1",
            Verdict::Allow,
            Some(vec![1]),
        ),
        (
            "t4-a10",
            "nvidia.com/gpu=0,nvidia.com/gpu=1",
            Verdict::Refuse,
            Some(vec![0, 1]),
        ),
        (
            "t4-a10",
            "0,nvidia.com/gpu=1",
            Verdict::Refuse,
            Some(vec![0, 1]),
        ),
        (
            "t4-a10",
            " nvidia.com/gpu=1 , 1 ",
            Verdict::Allow,
            Some(vec![1]),
        ),
        ("t4-a10", &gpu1, Verdict::Allow, Some(vec![1])),
        ("t4-a10", &mixed_uuid, Verdict::Refuse, Some(vec![0, 1])),
        // nvidia-ctk's type-index naming (pkg/nvcdi/namer.go)
        (
            "t4-a10",
            "nvidia.com/gpu=gpu1",
            Verdict::Allow,
            Some(vec![1]),
        ),
        // the device plugin's kind, in the shipped detect.cdi_kinds
        (
            "t4-a10",
            "k8s.device-plugin.nvidia.com/gpu=1",
            Verdict::Allow,
            Some(vec![1]),
        ),
        (
            "t4-a10",
            "nvidia.com/gpu=none",
            Verdict::Allow,
            Some(vec![]),
        ),
        // another vendor's kind is no NVIDIA request; with one, only the NVIDIA part counts
        ("t4-a10", "amd.com/gpu=all", Verdict::Skip, None),
        (
            "t4-a10",
            "vendor.com/fpga=0,example.org/x=1",
            Verdict::Skip,
            None,
        ),
        (
            "t4-a10",
            "vendor.com/fpga=0,nvidia.com/gpu=1",
            Verdict::Allow,
            Some(vec![1]),
        ),
        // MIG: by UUID under either kind, gpu:mig, type-index mig0:1
        ("a100-mig", &mig, Verdict::Allow, Some(vec![0])),
        ("a100-mig", &mig_gpu_kind, Verdict::Allow, Some(vec![0])),
        (
            "a100-mig",
            "nvidia.com/gpu=0:1",
            Verdict::Allow,
            Some(vec![0]),
        ),
        (
            "a100-mig",
            "nvidia.com/mig=mig0:1",
            Verdict::Allow,
            Some(vec![0]),
        ),
    ];
    for (profile, visible, want, gpus) in table {
        let env = [
            format!("NVIDIA_VISIBLE_DEVICES={visible}"),
            arch.to_string(),
        ];
        let env: Vec<&str> = env.iter().map(String::as_str).collect();
        let c = spec(&env, json!({"hooks": nvidia_hook()}));
        let d = decide(profile, &c);
        assert_eq!(d.verdict, want, "{visible} on {profile}: {:#?}", d.findings);
        assert_eq!(d.gpu_container, gpus.is_some(), "{visible}");
        if let Some(g) = gpus {
            assert_eq!(d.visible_gpus, Some(g), "{visible}");
        }
        assert!(
            !has(
                &d,
                Check::Device,
                Severity::Error,
                "which this host does not have"
            ),
            "{visible}: {:#?}",
            d.findings
        );
    }
}

#[test]
fn unknown_cdi_devices_are_named_as_written() {
    for visible in [
        "nvidia.com/gpu=5",
        "nvidia.com/gpu=gpu7",
        "runtime.nvidia.com/gpu=GPU-nope",
        "0,nvidia.com/mig=MIG-nope",
    ] {
        let env = format!("NVIDIA_VISIBLE_DEVICES={visible}");
        let d = decide("t4-a10", &spec(&[&env], json!({"hooks": nvidia_hook()})));
        assert_eq!(d.verdict, Verdict::Refuse, "{visible}");
        let written = visible.rsplit(',').next().unwrap();
        assert!(
            has(
                &d,
                Check::Device,
                Severity::Error,
                &format!("asks for GPU {written}, which this host does not have")
            ),
            "{visible}: {:#?}",
            d.findings
        );
    }
}

#[test]
fn cdi_kinds_from_config() {
    let env = [
        "NVIDIA_VISIBLE_DEVICES=example.com/gpu=1",
        "NVIDIA_REQUIRE_ARCH=arch>=8.0",
    ];
    let c = spec(&env, json!({"hooks": nvidia_hook()}));
    assert_eq!(decide("t4-a10", &c).verdict, Verdict::Skip);
    let mut cfg = Config::default();
    cfg.detect.cdi_kinds.push("example.com/gpu".into());
    let d = decide_with(&cfg, "t4-a10", &c);
    assert_eq!(d.verdict, Verdict::Allow, "{:#?}", d.findings);
    assert_eq!(d.visible_gpus, Some(vec![1]));
    // invalid kinds are config errors naming the key
    for bad in [
        "nvidia.com",
        "/gpu",
        "nvidia.com/",
        "nvidia.com/g=u",
        "nvidia com/gpu",
    ] {
        let e =
            gpu_guard::config::parse(&format!("[detect]\ncdi_kinds = [\"{bad}\"]\n")).unwrap_err();
        assert!(e.contains("detect.cdi_kinds[0]"), "{bad}: {e}");
    }
}

#[test]
fn cdi_names_in_annotations_and_volume_mounts() {
    let arch = "NVIDIA_REQUIRE_ARCH=arch>=8.0";
    let dn = |dest: &str| json!({"source": "/dev/null", "destination": dest, "type": "bind"});
    // (extra spec parts, env, verdict, visible)
    let table: Vec<SpecCase> = vec![
        // annotations attach by themselves (the engine injected the devices)
        (
            json!({"annotations": {"cdi.k8s.io/gpu": "runtime.nvidia.com/gpu=1"}}),
            vec![arch],
            Verdict::Allow,
            Some(vec![1]),
        ),
        (
            json!({"annotations": {"cdi.k8s.io/gpu": format!("k8s.device-plugin.nvidia.com/gpu={T4_A10_GPU1}")}}),
            vec![arch],
            Verdict::Allow,
            Some(vec![1]),
        ),
        (
            json!({"annotations": {"nvidia.cdi.k8s.io/x": "nvidia.com/gpu=all"}}),
            vec![arch],
            Verdict::Refuse,
            Some(vec![0, 1]),
        ),
        (
            json!({"annotations": {"cdi.k8s.io/x": "vendor.com/fpga=0"}}),
            vec![arch],
            Verdict::Skip,
            None,
        ),
        // device-list volume mounts, cdi/<vendor>/<class>/<device> and cdi/<kind>=<device>
        (
            json!({"hooks": nvidia_hook(), "mounts": [dn("/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/1")]}),
            vec![
                "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices",
                arch,
            ],
            Verdict::Allow,
            Some(vec![1]),
        ),
        (
            json!({"hooks": nvidia_hook(), "mounts": [dn("/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=all")]}),
            vec![
                "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices",
                arch,
            ],
            Verdict::Refuse,
            Some(vec![0, 1]),
        ),
        (
            json!({"hooks": nvidia_hook(), "mounts": [dn(&format!("/var/run/nvidia-container-devices/{T4_A10_GPU1}")),
                                                   dn("/var/run/nvidia-container-devices/imex/channel0")]}),
            vec![
                "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices",
                arch,
            ],
            Verdict::Allow,
            Some(vec![1]),
        ),
        // the mounts win over the env, as in NVIDIA's VisibleDevices
        (
            json!({"hooks": nvidia_hook(), "mounts": [dn("/var/run/nvidia-container-devices/1")]}),
            vec!["NVIDIA_VISIBLE_DEVICES=0", arch],
            Verdict::Allow,
            Some(vec![1]),
        ),
        // another vendor's mount, or a mount not from /dev/null, names no NVIDIA GPU
        (
            json!({"hooks": nvidia_hook(), "mounts": [dn("/var/run/nvidia-container-devices/cdi/vendor.com/fpga/0")]}),
            vec![arch],
            Verdict::Skip,
            None,
        ),
        (
            json!({"hooks": nvidia_hook(), "mounts": [{"source": "/tmp/x", "destination": "/var/run/nvidia-container-devices/0"}]}),
            vec![arch],
            Verdict::Skip,
            None,
        ),
    ];
    // The volume-mounts strategy needs NVIDIA's
    // accept-nvidia-visible-devices-as-volume-mounts = true (its default is
    // false: tests/decide/nvidia_settings.rs).
    let mut cfg = Config::default();
    cfg.detect.nvidia.accept_volume_mounts = true;
    for (extra, env, want, gpus) in table {
        let what = format!("{extra} {env:?}");
        let d = decide_with(&cfg, "t4-a10", &spec(&env, extra));
        assert_eq!(d.verdict, want, "{what}: {:#?}", d.findings);
        assert_eq!(d.gpu_container, gpus.is_some(), "{what}");
        if let Some(g) = gpus {
            assert_eq!(d.visible_gpus, Some(g), "{what}");
        }
    }
}

// ---------------------------------------------------------------- A2

#[test]
fn env_requests_count_only_when_attached() {
    let req = [
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
    ];
    let legacy = ["CUDA_VERSION=12.4.1"];
    let ctk = |args: Value| json!({"hooks": {"createContainer": [{"path": "/usr/bin/nvidia-ctk", "args": args}]}});
    let dev = |p: &str, major: u32, minor: u32| json!({"linux": {"devices": [{"path": p, "type": "c", "major": major, "minor": minor}]}});
    let bind = |src: &str, dst: &str| json!({"source": src, "destination": dst, "type": "bind", "options": ["bind"]});
    // (what, env, extra spec parts, chained runtime, GPU container?)
    let table: Vec<AttachCase> = vec![
        ("env alone", &req, json!({}), None, false),
        ("legacy image alone", &legacy, json!({}), None, false),
        (
            "legacy hook",
            &req,
            json!({"hooks": nvidia_hook()}),
            None,
            true,
        ),
        (
            "legacy hook, legacy image",
            &legacy,
            json!({"hooks": nvidia_hook()}),
            None,
            true,
        ),
        (
            "old hook name",
            &req,
            json!({"hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-toolkit"}]}}),
            None,
            true,
        ),
        (
            "cdi hook",
            &req,
            json!({"hooks": {"createContainer": [{"path": "/usr/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache"]}]}}),
            None,
            true,
        ),
        (
            "nvidia-ctk hook",
            &req,
            ctk(json!(["nvidia-ctk", "hook", "create-symlinks"])),
            None,
            true,
        ),
        (
            "nvidia-ctk not as hook",
            &req,
            ctk(json!(["nvidia-ctk", "cdi", "list"])),
            None,
            false,
        ),
        ("nvidia-ctk no args", &req, ctk(json!([])), None, false),
        (
            "gpu-guard's own hook",
            &req,
            json!({"hooks": {"prestart": [{"path": "/usr/bin/gpu-guard", "args": ["gpu-guard", "hook", "prestart"]}]}}),
            None,
            false,
        ),
        (
            "look-alike hook",
            &req,
            json!({"hooks": {"prestart": [{"path": "/opt/nvidia-container-runtime-hook.sh"}]}}),
            None,
            false,
        ),
        (
            "nvidia runtime",
            &req,
            json!({}),
            Some("/usr/bin/nvidia-container-runtime"),
            true,
        ),
        (
            "nvidia runtime cdi",
            &req,
            json!({}),
            Some("/usr/bin/nvidia-container-runtime.cdi"),
            true,
        ),
        (
            "nvidia runtime legacy",
            &legacy,
            json!({}),
            Some("nvidia-container-runtime.legacy"),
            true,
        ),
        ("runc", &req, json!({}), Some("/usr/sbin/runc"), false),
        ("crun", &req, json!({}), Some("/usr/bin/crun"), false),
        ("device node", &req, dev("/dev/nvidia0", 195, 0), None, true),
        (
            "control node",
            &req,
            dev("/dev/nvidiactl", 195, 255),
            None,
            true,
        ),
        ("other device", &req, dev("/dev/fuse", 10, 229), None, false),
        (
            "bind-mounted nodes",
            &req,
            json!({"mounts": [bind("/dev/nvidia0", "/dev/nvidia0"), bind("/dev/nvidiactl", "/dev/nvidiactl")]}),
            None,
            true,
        ),
        (
            "bind mount by source",
            &req,
            json!({"mounts": [bind("/dev/nvidia1", "/dev/gpu")]}),
            None,
            true,
        ),
        (
            "bind mount elsewhere",
            &req,
            json!({"mounts": [bind("/srv/nvidia0", "/data")]}),
            None,
            false,
        ),
        (
            "cdi annotation",
            &req,
            json!({"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}}),
            None,
            true,
        ),
    ];
    for (what, env, extra, runtime, gpu) in table {
        let mut c = spec(env, extra);
        c.chained_runtime = runtime.map(String::from);
        let d = decide("a100", &c);
        assert_eq!(d.gpu_container, gpu, "{what}: {:#?}", d.findings);
        if gpu {
            assert_eq!(d.verdict, Verdict::Refuse, "{what}: {:#?}", d.findings);
            assert!(
                !has(&d, Check::Device, Severity::Info, UNATTACHED),
                "{what}"
            );
        } else {
            assert_eq!(d.verdict, Verdict::Skip, "{what}");
            assert!(
                d.edits.is_empty(),
                "{what}: a skipped container is not changed"
            );
            assert!(
                has(&d, Check::Device, Severity::Info, UNATTACHED),
                "{what}: {:#?}",
                d.findings
            );
            assert!(d.errors().next().is_none(), "{what}");
        }
        // detect.env_requests = "always": every env request is a GPU container
        let mut always = Config::default();
        always.detect.env_requests = EnvRequests::Always;
        let d = decide_with(&always, "a100", &c);
        assert_eq!(d.verdict, Verdict::Refuse, "{what} (always)");
    }
}

#[test]
fn attach_signals_alone_are_not_requests() {
    // hook or NVIDIA runtime without any request: not a GPU container, no note
    for extra in [nvidia_hook(), json!({})] {
        let mut c = spec(&["PATH=/bin"], json!({"hooks": extra}));
        c.chained_runtime = Some("/usr/bin/nvidia-container-runtime".into());
        let d = decide("a100", &c);
        assert_eq!(d.verdict, Verdict::Skip);
        assert!(d.findings.is_empty(), "{:#?}", d.findings);
    }
    // void / empty: no request, no note, whatever attaches
    for v in ["void", ""] {
        let d = decide(
            "a100",
            &spec(&[&format!("NVIDIA_VISIBLE_DEVICES={v}")], json!({})),
        );
        assert!(d.findings.is_empty(), "{v}: {:#?}", d.findings);
    }
    // the config key parses, kebab-case, and rejects others
    let c = gpu_guard::config::parse("[detect]\nenv_requests = \"always\"\n").unwrap();
    assert_eq!(c.detect.env_requests, EnvRequests::Always);
    let e = gpu_guard::config::parse("[detect]\nenv_requests = \"sometimes\"\n").unwrap_err();
    assert!(e.contains("detect.env_requests"), "{e}");
    // security.apply_to = "all" still carries the note
    let mut cfg = Config::default();
    cfg.security.apply_to = gpu_guard::core::policy::ApplyTo::All;
    let d = decide_with(
        &cfg,
        "a100",
        &spec(&["NVIDIA_VISIBLE_DEVICES=all"], json!({})),
    );
    assert!(!d.gpu_container);
    assert!(
        has(&d, Check::Device, Severity::Info, UNATTACHED),
        "{:#?}",
        d.findings
    );
}

#[test]
fn env_only_container_is_judged_attached() {
    // Container::from_env (check --env without a spec) assumes GPUs attached.
    let c = Container::from_env(Env::from_entries([
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
    ]));
    assert!(c.assume_attached);
    assert!(detect::classify(&c).gpu);
    assert_eq!(decide("a100", &c).verdict, Verdict::Refuse);
}

fn run(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(*BIN).args(args).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

use crate::support::tempdir as tmpdir;

fn config_file(dir: &Path, extra: &str) -> PathBuf {
    let p = dir.join("config.toml");
    std::fs::write(
        &p,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n{extra}",
            host("a100").display()
        ),
    )
    .unwrap();
    p
}

#[test]
fn check_cli_env_alone_versus_spec() {
    let dir = tmpdir("cli");
    let cfg = config_file(&dir, "");
    let cfg = cfg.to_str().unwrap();
    let env = [
        "--env",
        "NVIDIA_VISIBLE_DEVICES=all",
        "--env",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
    ];
    let (code, out) = run(&[&["--config", cfg, "check"][..], &env[..]].concat());
    assert_eq!(code, Some(1), "--env alone is judged attached: {out}");
    let specf = dir.join("config.json");
    std::fs::write(&specf, json!({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"]}}).to_string()).unwrap();
    let (code, out) = run(&["--config", cfg, "check", "--spec", specf.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("SKIP") && out.contains(UNATTACHED), "{out}");
    let (_, help) = run(&["check", "--help"]);
    assert!(help.contains("as if run with GPUs attached"), "{help}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The runtime wrapper passes its real runtime to detection: NVIDIA's
/// runtime behind it makes env requests count; runc does not.
#[test]
fn wrapper_passes_the_chained_runtime() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmpdir("wrap");
    let bundle = dir.join("bundle");
    std::fs::create_dir_all(bundle.join("rootfs")).unwrap();
    let spec = json!({"ociVersion": "1.0.2", "root": {"path": "rootfs"},
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"], "noNewPrivileges": true}});
    for (name, want) in [("nvidia-container-runtime", 1), ("runc", 0)] {
        let rt_dir = dir.join(format!("rt-{name}"));
        std::fs::create_dir_all(&rt_dir).unwrap();
        let rt = rt_dir.join(name);
        std::fs::write(&rt, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        let cfg = config_file(
            &rt_dir,
            &format!("[runtime]\npath = \"{}\"\n", rt.display()),
        );
        let (code, out) = run(&[
            "--config",
            cfg.to_str().unwrap(),
            "runtime",
            "create",
            "--bundle",
            bundle.to_str().unwrap(),
            "c1",
        ]);
        assert_eq!(code, Some(want), "{name}: {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------- A3

#[test]
fn unknown_requirement_keys_are_dropped_as_nvidia_go_does() {
    // a100: driver 535.104.05, CUDA 12.2, brand tesla
    let dropped = "uses a key NVIDIA does not define";
    let table: &[(&[&str], Verdict, &[&str])] = &[
        (
            &["NVIDIA_REQUIRE_CUDA=cuda>=11.6 foo=bar"],
            Verdict::Allow,
            &[dropped, "alternative `foo=bar` has only keys"],
        ),
        (
            &["NVIDIA_REQUIRE_CUDA=cuda>=12.4 foo=bar"],
            Verdict::Refuse,
            &[dropped, "alternative `foo=bar` has only keys"],
        ),
        (
            &["NVIDIA_REQUIRE_CUDA=cuda>=12.4 foo=bar,BAZ>=1 cudnn>=8"],
            Verdict::Refuse,
            &["alternatives `foo=bar,BAZ>=1`, `cudnn>=8` have only keys"],
        ),
        (
            &["NVIDIA_REQUIRE_CUDA=foo=bar,cuda>=12.4"],
            Verdict::Refuse,
            &[dropped],
        ),
        (
            &["NVIDIA_REQUIRE_CUDA=foo=bar,cuda>=12.0"],
            Verdict::Allow,
            &[dropped],
        ),
        (
            &["NVIDIA_REQUIRE_CUDA=brand=tesla,nccl>=2 cuda>=12.4"],
            Verdict::Allow,
            &[dropped],
        ),
        (
            &["NVIDIA_REQUIRE_CUDA=foo=bar"],
            Verdict::Allow,
            &["NVIDIA_REQUIRE_CUDA imposes nothing"],
        ),
        (
            &["NVIDIA_REQUIRE_X=cudnn>=9 nccl>=2,foo=1"],
            Verdict::Allow,
            &["NVIDIA_REQUIRE_X imposes nothing"],
        ),
        (
            &["NVIDIA_REQUIRE_X=foo=bar", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"],
            Verdict::Refuse,
            &["NVIDIA_REQUIRE_X imposes nothing"],
        ),
        (&["NVIDIA_REQUIRE_CUDA=cuda>=12.0"], Verdict::Allow, &[]),
    ];
    for (env, want, warnings) in table {
        let mut e = vec!["NVIDIA_VISIBLE_DEVICES=all"];
        e.extend_from_slice(env);
        let d = decide("a100", &spec(&e, json!({"hooks": nvidia_hook()})));
        assert_eq!(d.verdict, *want, "{env:?}: {:#?}", d.findings);
        for w in *warnings {
            assert!(
                has(&d, Check::Requirement, Severity::Warning, w),
                "{env:?} wants `{w}`: {:#?}",
                d.findings
            );
        }
        if warnings.is_empty() {
            assert!(
                d.findings.iter().all(|f| f.check != Check::Requirement),
                "{env:?}"
            );
        }
    }
    // thousands of unknown factors: a bounded number of warnings
    let many = format!("NVIDIA_REQUIRE_CUDA=cuda>=12.0 {}", "k=1,".repeat(5000));
    let d = decide(
        "a100",
        &spec(
            &["NVIDIA_VISIBLE_DEVICES=all", &many],
            json!({"hooks": nvidia_hook()}),
        ),
    );
    assert_eq!(d.verdict, Verdict::Allow);
    assert!(d.findings.len() < 20, "{}", d.findings.len());
    assert!(
        has(
            &d,
            Check::Requirement,
            Severity::Warning,
            "4992 more factors"
        ),
        "{:#?}",
        d.findings
    );
}

// ---------------------------------------------------------------- E

fn no_controls(what: &str, s: &str) {
    if let Some(c) = s
        .chars()
        .find(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'))
    {
        panic!(
            "{what}: raw control {:?} in {:?}",
            c,
            s.chars().take(400).collect::<String>()
        );
    }
}

#[test]
fn hostile_names_and_values_neither_panic_nor_reach_the_report_raw() {
    let big = "é".repeat(1 << 19); // 1 MB
    let big_ascii = format!("cuda>=99{}", "\u{1b}[2J".repeat(1 << 18));
    let hostile_values = [
        "GPUé",
        "é",
        "MIGé",
        "MIG-é",
        "MIG",
        "GPU-\u{1b}[31mred",
        "0,\u{1b}[2J",
        "0\n1",
        "\0",
        "nvidia.com/gpu=\u{1b}]0;title\u{7}",
        "nvidia.com/gpu=é",
        "nvidia.com/gpu=gpué",
        "nvidia.com/mig=migé:1",
        "\u{2028}",
        "\u{85}",
        "𝔾𝕡𝕦",
        "0:é",
        "é:0",
        &big,
    ];
    let mut cases: Vec<(Vec<String>, Value)> = Vec::new();
    for v in hostile_values {
        cases.push((vec![format!("NVIDIA_VISIBLE_DEVICES={v}")], json!({})));
    }
    let names = [
        "NVIDIA_REQUIRE_Z\u{1b}[31m",
        "NVIDIA_REQUIRE_\n\rX",
        "NVIDIA_REQUIRE_NUL\0",
        "NVIDIA_REQUIRE_é\u{2028}",
    ];
    for n in names {
        cases.push((vec![format!("{n}=cuda>=99")], json!({})));
        cases.push((vec![format!("{n}=foo\u{1b}[1m=1")], json!({})));
        cases.push((vec![format!("{n}=cuda>=\u{1b}")], json!({})));
        cases.push((vec![format!("{n}=arch>=é")], json!({})));
    }
    let long_name = format!("NVIDIA_REQUIRE_{}", "\u{1b}é".repeat(1 << 18));
    cases.push((vec![format!("{long_name}=cuda>=99")], json!({})));
    cases.push((vec![format!("NVIDIA_REQUIRE_CUDA={big_ascii}")], json!({})));
    cases.push((vec![format!("NVIDIA_REQUIRE_CUDA=é{big}")], json!({})));
    cases.push((
        vec![format!(
            "NVIDIA_REQUIRE_CUDA={}",
            "x\u{1b}=1 ".repeat(1 << 17)
        )],
        json!({}),
    ));
    cases.push((vec!["CUDA_VERSION=\u{1b}[31m12".into()], json!({})));
    let many: Vec<String> = (0..100_000).map(|i| format!("{i}\u{1b}")).collect();
    cases.push((
        vec![format!("NVIDIA_VISIBLE_DEVICES={}", many.join(","))],
        json!({}),
    ));
    cases.push((vec![format!("CUDA_VERSION={big}")], json!({})));
    cases.push((
        vec![
            "NVIDIA_DISABLE_REQUIRE=\u{1b}".into(),
            "NVIDIA_REQUIRE_CUDA=cuda>=99".into(),
        ],
        json!({}),
    ));
    cases.push((vec![], json!({"annotations": {"cdi.k8s.io/\u{1b}[2J\nx": "nvidia.com/gpu=9\u{7}", "cdi.k8s.io/é": format!("nvidia.com/gpu={big}")}})));
    cases.push((vec![], json!({"linux": {"devices": [{"path": "/dev/nvidia\n7"}, {"path": "/dev/nvidiaé"}, {"path": "/dev/nvidia99"}]}})));
    cases.push((vec!["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices".into()],
        json!({"mounts": [{"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/\u{1b}[2Jé"},
                          {"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/é\n"},
                          {"source": "/dev/nvidia\u{1b}", "destination": "/dev/nvidia\u{1b}9"}]})));

    for attached in [true, false] {
        for (env, extra) in &cases {
            let mut v = json!({"process": {"env": env, "noNewPrivileges": true}});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            if attached {
                v["hooks"] = nvidia_hook();
            }
            // through the byte parser, as the hook reads config.json
            let bytes = serde_json::to_vec(&v).unwrap();
            let spec_v = parse_spec_bytes(&bytes).unwrap();
            let mut c = Container::from_spec(&spec_v, None).unwrap();
            c.id = Some("id\u{1b}[2J\nforged".into());
            let what: String = format!(
                "{:?}",
                env.iter()
                    .map(|e| e.chars().take(60).collect::<String>())
                    .collect::<Vec<_>>()
            );
            let d = decide("t4-a10", &c);
            for f in &d.findings {
                no_controls(&what, &f.message);
                no_controls(&what, f.title());
                f.fix.iter().for_each(|x| no_controls(&what, x));
                f.details.iter().for_each(|x| no_controls(&what, x));
                assert!(
                    f.message.len() < 64 * 1024,
                    "{what}: {} bytes",
                    f.message.len()
                );
                // escaped once, never twice
                assert!(
                    !f.message.contains("\\\\x1b"),
                    "{what}: double-escaped: {}",
                    f.message
                );
            }
            let human = report::human(&d);
            for line in human.lines() {
                no_controls(&what, line);
            }
            assert!(
                human.len() < 1 << 20,
                "{what}: report is {} bytes",
                human.len()
            );
            for line in report::refusal(&d).lines() {
                no_controls(&what, line);
            }
            no_controls(&what, &report::refusal_line(&d));
            serde_json::to_string(&d).unwrap();
        }
    }

    // the escaped forms are readable: ESC shows as \x1b, once
    let c = spec(
        &[
            "NVIDIA_VISIBLE_DEVICES=0,GPU-\u{1b}[31mx",
            "NVIDIA_REQUIRE_Z\u{1b}[1m=cuda>=99",
        ],
        json!({"hooks": nvidia_hook()}),
    );
    let d = decide("t4-a10", &c);
    assert!(
        has(
            &d,
            Check::Device,
            Severity::Error,
            "asks for GPU GPU-\\x1b[31mx,"
        ),
        "{:#?}",
        d.findings
    );
    assert!(
        has(
            &d,
            Check::Requirement,
            Severity::Error,
            "NVIDIA_REQUIRE_Z\\x1b[1m is not satisfied"
        ),
        "{:#?}",
        d.findings
    );
}

// ------------------------------------------------- devices by number

/// (what, spec parts, capabilities, NVIDIA GPU container?, GPUs named:
/// None = all, Some(minors), AMD device signals)
type DeviceCase<'a> = (
    &'a str,
    Value,
    &'a [&'a str],
    bool,
    Option<Vec<&'a str>>,
    usize,
);

/// A host whose /proc/devices registers NVIDIA's and AMD's drivers.
fn gpu_host_majors() -> gpu_guard::core::device_table::HostMajors {
    gpu_guard::core::device_table::HostMajors::new(
        [
            ("nvidia", 195),
            ("nvidia-uvm", 508),
            ("nvidia-caps", 511),
            ("kfd", 235),
            ("drm", 226),
            ("fuse", 10),
        ]
        .map(|(n, m)| (n.to_string(), m)),
    )
}

#[test]
fn gpus_are_found_by_device_number_whatever_the_path() {
    let node = |p: &str, t: &str, major: i64, minor: i64| json!({"path": p, "type": t, "major": major, "minor": minor});
    let nodes = |n: Vec<Value>| json!({"linux": {"devices": n}});
    let deny_all = json!({"allow": false, "access": "rwm"});
    let rule = |t: &str, major: Value, minor: Value, access: &str| json!({"allow": true, "type": t, "major": major, "minor": minor, "access": access});
    let rules = |r: Vec<Value>| json!({"linux": {"resources": {"devices": r}}});
    let with_mount = |mut v: Value, m: Value| {
        v["mounts"] = json!([m]);
        v
    };
    let mknod: &[&str] = &["CAP_CHOWN", "CAP_MKNOD"];
    let plain: &[&str] = &["CAP_CHOWN"];
    let any = Value::Null;
    let table: Vec<DeviceCase> = vec![
        (
            "renamed GPU node",
            nodes(vec![node("/dev/g0", "c", 195, 0)]),
            plain,
            true,
            Some(vec!["minor:0"]),
            0,
        ),
        (
            "renamed control node",
            nodes(vec![node("/dev/ctl", "c", 195, 255)]),
            plain,
            true,
            Some(vec![]),
            0,
        ),
        (
            "unbuffered char type",
            nodes(vec![node("/dev/x", "u", 195, 3)]),
            plain,
            true,
            Some(vec!["minor:3"]),
            0,
        ),
        (
            "nvidia-uvm by the host's major",
            nodes(vec![node("/dev/u", "c", 508, 0)]),
            plain,
            true,
            Some(vec![]),
            0,
        ),
        (
            "nvidia-caps by the host's major",
            nodes(vec![node("/dev/c1", "c", 511, 1)]),
            plain,
            true,
            Some(vec![]),
            0,
        ),
        (
            "a block device of major 195",
            nodes(vec![node("/dev/b", "b", 195, 0)]),
            plain,
            false,
            None,
            0,
        ),
        (
            "/dev/fuse",
            nodes(vec![node("/dev/fuse", "c", 10, 229)]),
            plain,
            false,
            None,
            0,
        ),
        (
            "rule for every GPU with CAP_MKNOD",
            rules(vec![
                deny_all.clone(),
                rule("c", json!(195), any.clone(), "rwm"),
            ]),
            mknod,
            true,
            None,
            0,
        ),
        (
            "rule for GPU 3 with CAP_MKNOD",
            rules(vec![
                deny_all.clone(),
                rule("c", json!(195), json!(3), "rw"),
            ]),
            mknod,
            true,
            Some(vec!["minor:3"]),
            0,
        ),
        (
            "rule without a way to the node",
            rules(vec![
                deny_all.clone(),
                rule("c", json!(195), any.clone(), "rwm"),
            ]),
            plain,
            false,
            None,
            0,
        ),
        (
            "rule with the host's /dev bound",
            with_mount(
                rules(vec![
                    deny_all.clone(),
                    rule("c", json!(195), any.clone(), "rw"),
                ]),
                json!({"source": "/dev", "destination": "/host/dev", "type": "bind", "options": ["rbind"]}),
            ),
            plain,
            true,
            None,
            0,
        ),
        (
            "rule with a devtmpfs",
            with_mount(
                rules(vec![deny_all.clone(), rule("c", json!(195), json!(1), "r")]),
                json!({"source": "devtmpfs", "destination": "/d", "type": "devtmpfs"}),
            ),
            plain,
            true,
            Some(vec!["minor:1"]),
            0,
        ),
        (
            "mknod permission alone",
            rules(vec![
                deny_all.clone(),
                rule("c", json!(195), any.clone(), "m"),
            ]),
            mknod,
            false,
            None,
            0,
        ),
        (
            "rule taken back",
            rules(vec![
                rule("c", json!(195), any.clone(), "rw"),
                json!({"allow": false, "type": "c", "major": 195, "access": "rw"}),
            ]),
            mknod,
            false,
            None,
            0,
        ),
        // The host also has AMD's kfd and DRM: noted, not judged.
        (
            "privileged: a *:* rwm",
            rules(vec![json!({"allow": true, "access": "rwm"})]),
            mknod,
            true,
            None,
            2,
        ),
        (
            "c *:* rwm",
            rules(vec![
                deny_all.clone(),
                rule("c", any.clone(), any.clone(), "rwm"),
            ]),
            mknod,
            true,
            None,
            2,
        ),
        (
            "rule for nvidia-uvm",
            rules(vec![
                deny_all.clone(),
                rule("c", json!(508), any.clone(), "rw"),
            ]),
            mknod,
            true,
            Some(vec![]),
            0,
        ),
        (
            "rule for /dev/fuse",
            rules(vec![
                deny_all.clone(),
                rule("c", json!(10), json!(229), "rwm"),
            ]),
            mknod,
            false,
            None,
            0,
        ),
        (
            "AMD kfd and a render node",
            nodes(vec![
                node("/dev/kfd", "c", 235, 0),
                node("/dev/dri/renderD128", "c", 226, 128),
            ]),
            plain,
            true,
            None,
            2,
        ),
        (
            "a DRM card node",
            nodes(vec![node("/dev/dri/card0", "c", 226, 0)]),
            plain,
            false,
            None,
            0,
        ),
    ];
    let mut cfg = Config::default();
    cfg.detect.majors = gpu_host_majors();
    for (what, extra, caps, gpu, named, amd) in table {
        let mut c = spec(&[], extra);
        c.capabilities.bounding = Some(caps.iter().map(|s| s.to_string()).collect());
        let d = detect::classify_with(&c, &cfg.detect);
        assert_eq!(d.gpu, gpu, "{what}: {:?}", d.signals);
        assert_eq!(d.amd_signals.len(), amd, "{what}: {:?}", d.amd_signals);
        // AMD's nodes make a GPU container of AMD GPUs only: NVIDIA's
        // request stays empty (core::amd::visible names its GPUs).
        assert_eq!(d.amd_only, gpu && d.signals.is_empty(), "{what}");
        assert!(!d.amd_only || amd > 0, "{what}");
        if !gpu || d.amd_only {
            assert!(!d.request.all && d.request.devices.is_empty(), "{what}");
            continue;
        }
        match &named {
            None => assert!(d.request.all, "{what}: {:?}", d.request),
            Some(minors) => {
                assert!(!d.request.all, "{what}");
                let got: Vec<&str> = d.request.devices.iter().map(|r| r.name.as_str()).collect();
                assert_eq!(&got, minors, "{what}");
            }
        }
    }
}

#[test]
fn dynamic_majors_and_wildcards_follow_the_host() {
    // On a host without NVIDIA's driver, a rule for every device gives no
    // GPU (a privileged CNI daemon is not a GPU container), and a major
    // NVIDIA draws at load time is just a number; 195 is NVIDIA's anyway.
    let cpu_host = Config::default();
    let mut c = spec(
        &[],
        json!({"linux": {"resources": {"devices": [{"allow": true, "access": "rwm"}]}}}),
    );
    c.capabilities.bounding = Some(vec!["CAP_MKNOD".into()]);
    assert!(!detect::classify_with(&c, &cpu_host.detect).gpu);
    let c = spec(
        &[],
        json!({"linux": {"devices": [{"path": "/dev/u", "type": "c", "major": 508, "minor": 0}]}}),
    );
    assert!(!detect::classify_with(&c, &cpu_host.detect).gpu);
    let c = spec(
        &[],
        json!({"linux": {"devices": [{"path": "/dev/g", "type": "c", "major": 195, "minor": 1}]}}),
    );
    assert!(detect::classify_with(&c, &cpu_host.detect).gpu);
}

#[test]
fn a_renamed_node_is_judged_as_the_gpu_of_that_minor() {
    // l4x2-minor: GPU 0 has minor 2, GPU 1 minor 0. /dev/g0 (c 195:0) is
    // GPU 1, and it gets the GPU policy and the checks.
    let c = spec(
        &["NVIDIA_REQUIRE_CUDA=cuda>=12.0"],
        json!({"linux": {"devices": [{"path": "/dev/g0", "type": "c", "major": 195, "minor": 0}]},
               "process": {"env": ["NVIDIA_REQUIRE_CUDA=cuda>=12.0"],
                           "capabilities": {"bounding": ["CAP_CHOWN", "CAP_NET_RAW", "CAP_SYS_ADMIN"]}}}),
    );
    let d = decide("l4x2-minor", &c);
    assert!(d.gpu_container, "{:#?}", d.findings);
    assert_eq!(d.visible_gpus, Some(vec![1]), "{:#?}", d.findings);
    assert!(
        d.edits
            .capabilities_dropped
            .iter()
            .any(|x| x == "CAP_NET_RAW"),
        "{:?}",
        d.edits
    );
    // A minor the host has no GPU for is named with its number.
    let c = spec(
        &[],
        json!({"linux": {"devices": [{"path": "/dev/g7", "type": "c", "major": 195, "minor": 7}]}}),
    );
    let d = decide("l4x2-minor", &c);
    assert_eq!(d.verdict, Verdict::Refuse);
    assert!(
        has(&d, Check::Device, Severity::Error, "/dev/g7 (c 195:7)"),
        "{:#?}",
        d.findings
    );
}
