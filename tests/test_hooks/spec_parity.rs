//! gpu-guard's view of a spec equals runc's (Go
//! encoding/json into runtime-spec's structs), its edits win over every
//! spelling of their keys, an unreadable spec is refused only when it names
//! a GPU request, exec's privilege flags are held to the policy, and the
//! wrapper finds create/run whatever global flags come first.
//!
//! The expected values are what Go's decoder produces (documented per
//! case); integration/test-spec-parity.sh checks the same specs against a
//! real runc, inside the container.

use gpu_guard::core::container::Container;
use gpu_guard::core::decision::Edits;
use gpu_guard::oci::runtime_args::parse;
use gpu_guard::oci::spec_file::{mentions_gpu, LoadedProcess, LoadedSpec};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_gpu-guard");

const HOOK: &str = r#""hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}]}"#;

fn load(text: &[u8]) -> LoadedSpec {
    LoadedSpec::from_bytes(Path::new("config.json"), text.to_vec(), None)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn policy_edits() -> Edits {
    let mut e = Edits::default();
    e.env
        .insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
    e.capabilities_dropped = vec!["CAP_SYS_ADMIN".into(), "CAP_NET_RAW".into()];
    e.no_new_privileges = true;
    e
}

/// What gpu-guard's view must say of a spec (runc's reading).
struct Expect {
    nnp: bool,
    env: &'static [&'static str],
    bounding: Option<&'static [&'static str]>,
}

fn caps(c: &Container) -> Option<Vec<&str>> {
    c.capabilities
        .bounding
        .as_ref()
        .map(|b| b.iter().map(|s| s.as_str()).collect())
}

/// Every spelling of `key` among an object's keys, as written in `text`
/// (a serde re-read cannot see duplicates, so count in the bytes).
fn spellings(text: &str, key: &str) -> usize {
    let lower = text.to_ascii_lowercase().replace('\u{17f}', "s");
    lower
        .matches(&format!("\"{}\"", key.to_ascii_lowercase()))
        .count()
}

#[test]
fn the_view_is_runcs_and_edits_win() {
    let deep_open = "[".repeat(300);
    let deep_close = "]".repeat(300);
    let big_pad = "x".repeat(65 << 20);
    let cases: Vec<(&str, String, Expect)> = vec![
        (
            "nesting deeper than serde's 128 levels",
            format!(
                r#"{{"x":{deep_open}{deep_close},"process":{{"env":["NVIDIA_VISIBLE_DEVICES=all"],"capabilities":{{"bounding":["CAP_SYS_ADMIN","CAP_CHOWN"]}}}},{HOOK}}}"#
            ),
            Expect {
                nnp: false,
                env: &["NVIDIA_VISIBLE_DEVICES=all"],
                bounding: Some(&["CAP_SYS_ADMIN", "CAP_CHOWN"]),
            },
        ),
        (
            "1e99999 in an unknown field",
            format!(
                r#"{{"unknownNumber":1e99999,"process":{{"env":["NVIDIA_VISIBLE_DEVICES=all"],"capabilities":{{"bounding":["CAP_SYS_ADMIN"]}}}},{HOOK}}}"#
            ),
            Expect {
                nnp: false,
                env: &["NVIDIA_VISIBLE_DEVICES=all"],
                bounding: Some(&["CAP_SYS_ADMIN"]),
            },
        ),
        (
            "a lone surrogate reads as U+FFFD",
            format!(
                r#"{{"process":{{"env":["A=\ud800","NVIDIA_VISIBLE_DEVICES=all"],"capabilities":{{"bounding":["CAP_SYS_ADMIN"]}}}},{HOOK}}}"#
            ),
            Expect {
                nnp: false,
                env: &["A=\u{FFFD}", "NVIDIA_VISIBLE_DEVICES=all"],
                bounding: Some(&["CAP_SYS_ADMIN"]),
            },
        ),
        (
            "case-variant keys: the last spelling wins",
            format!(
                r#"{{"process":{{"noNewPrivileges":true,"env":["A=1"],"capabilities":{{"bounding":["CAP_CHOWN"]}},"Env":["NVIDIA_VISIBLE_DEVICES=all"],"NoNewPrivileges":false,"Capabilities":{{"Bounding":["CAP_SYS_ADMIN"]}}}},{HOOK}}}"#
            ),
            Expect {
                nnp: false,
                env: &["NVIDIA_VISIBLE_DEVICES=all"],
                bounding: Some(&["CAP_SYS_ADMIN"]),
            },
        ),
        (
            "duplicate process keys merge field by field",
            format!(
                r#"{{"process":{{"args":["sh"],"env":["NVIDIA_VISIBLE_DEVICES=all"],"noNewPrivileges":true}},"process":{{"capabilities":{{"bounding":["CAP_SYS_ADMIN"]}},"noNewPrivileges":false}},{HOOK}}}"#
            ),
            Expect {
                nnp: false,
                env: &["NVIDIA_VISIBLE_DEVICES=all"],
                bounding: Some(&["CAP_SYS_ADMIN"]),
            },
        ),
        (
            "Unicode folding: long s and the Kelvin sign",
            format!(
                r#"{{"proce\u017f\u017f":{{"env":["NVIDIA_VISIBLE_DEVICES=all"],"capabilitie\u017f":{{"bounding":["CAP_SYS_ADMIN"]}}}},{HOOK}}}"#
            ),
            Expect {
                nnp: false,
                env: &["NVIDIA_VISIBLE_DEVICES=all"],
                bounding: Some(&["CAP_SYS_ADMIN"]),
            },
        ),
        (
            "escaped key names",
            format!(
                r#"{{"\u0070rocess":{{"\u0065nv":["NVIDIA_VISIBLE_DEVICES=all"],"capabilities":{{"bounding":["CAP_SYS_ADMIN"]}}}},{HOOK}}}"#
            ),
            Expect {
                nnp: false,
                env: &["NVIDIA_VISIBLE_DEVICES=all"],
                bounding: Some(&["CAP_SYS_ADMIN"]),
            },
        ),
        (
            "null clears a slice; a later process null would clear the process",
            format!(
                r#"{{"process":{{"env":["A=1"],"capabilities":{{"bounding":["CAP_CHOWN"]}}}},"process":{{"env":null,"Env":["NVIDIA_VISIBLE_DEVICES=all"],"capabilities":{{"bounding":["CAP_SYS_ADMIN"]}}}},{HOOK}}}"#
            ),
            Expect {
                nnp: false,
                env: &["NVIDIA_VISIBLE_DEVICES=all"],
                bounding: Some(&["CAP_SYS_ADMIN"]),
            },
        ),
        (
            "null in a string slice keeps the element the earlier list left",
            format!(
                r#"{{"process":{{"env":["NVIDIA_VISIBLE_DEVICES=all","B=2"],"env":[null,"C=3"],"capabilities":{{"bounding":["CAP_SYS_ADMIN"]}}}},{HOOK}}}"#
            ),
            Expect {
                nnp: false,
                env: &["NVIDIA_VISIBLE_DEVICES=all", "C=3"],
                bounding: Some(&["CAP_SYS_ADMIN"]),
            },
        ),
        (
            "a file over 64 MiB",
            format!(
                r#"{{"pad":"{big_pad}","process":{{"env":["NVIDIA_VISIBLE_DEVICES=all"],"capabilities":{{"bounding":["CAP_SYS_ADMIN"]}}}},{HOOK}}}"#
            ),
            Expect {
                nnp: false,
                env: &["NVIDIA_VISIBLE_DEVICES=all"],
                bounding: Some(&["CAP_SYS_ADMIN"]),
            },
        ),
        (
            "trailing data after the object is ignored (json.Decoder)",
            format!(
                r#"{{"process":{{"env":["NVIDIA_VISIBLE_DEVICES=all"],"capabilities":{{"bounding":["CAP_SYS_ADMIN"]}}}},{HOOK}}} garbage"#
            ),
            Expect {
                nnp: false,
                env: &["NVIDIA_VISIBLE_DEVICES=all"],
                bounding: Some(&["CAP_SYS_ADMIN"]),
            },
        ),
    ];
    for (what, text, want) in cases {
        let spec = load(text.as_bytes());
        let c = &spec.container;
        let env: Vec<String> = c
            .env
            .vars()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut want_env: Vec<String> = want.env.iter().map(|s| s.to_string()).collect();
        want_env.sort();
        assert_eq!(env, want_env, "{what}: env");
        assert_eq!(c.no_new_privileges, want.nnp, "{what}: noNewPrivileges");
        assert_eq!(
            caps(c),
            want.bounding.map(|b| b.to_vec()),
            "{what}: bounding"
        );
        assert!(
            gpu_guard::core::detect::classify(c).gpu,
            "{what}: a GPU container"
        );
        // The edits: re-read as runc reads them, they are in force.
        let out = spec.patched(&policy_edits()).unwrap().expect(what);
        let after = load(&out);
        assert!(after.container.no_new_privileges, "{what}: nnp after edit");
        let b = caps(&after.container).unwrap();
        assert!(!b.contains(&"CAP_SYS_ADMIN"), "{what}: {b:?}");
        assert_eq!(
            after.container.env.get("CUDA_DEVICE_ORDER"),
            Some("PCI_BUS_ID"),
            "{what}"
        );
        assert_eq!(
            after.container.env.get("NVIDIA_VISIBLE_DEVICES"),
            Some("all"),
            "{what}"
        );
        // One spelling of each edited key, so a first-key-wins reader
        // (crun's yajl) and serde read the same values.
        let text = String::from_utf8_lossy(&out);
        let text = if text.len() > 1 << 20 {
            text.replace(&big_pad, "")
        } else {
            text.into_owned()
        };
        for key in [
            "process",
            "env",
            "capabilities",
            "noNewPrivileges",
            "bounding",
        ] {
            assert_eq!(spellings(&text, key), 1, "{what}: {key} in {text}");
        }
        // What gpu-guard did not touch is still there.
        if what.contains("1e99999") {
            assert!(text.contains("1e99999"), "{text}");
        }
    }
}

#[test]
fn merges_lists_of_structs_and_maps_as_go_does() {
    // Go decodes a repeated list into the same slice: element 0 of the
    // second `mounts` merges into element 0 of the first; `hooks` is a
    // pointer to a struct, so the two merge stage by stage; annotations (a
    // map) merge key by key.
    let text = br#"{"mounts":[{"source":"/dev/nvidia0","destination":"/dev/nvidia0"},{"destination":"/x"}],
        "mounts":[{"type":"bind"}],
        "hooks":{"poststop":[{"path":"/bin/true"}]},
        "Hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}]},
        "hooks":{"futureStage":[{"path":"/ignored"}]},
        "annotations":{"a":"1"},"annotations":{"b":"2","a":null},
        "linux":{"devices":[{"path":"/dev/nvidia0"}]},"Linux":{"Devices":[{"type":"c"}]}}"#;
    let c = load(text).container.clone();
    assert_eq!(c.mounts.len(), 1);
    assert_eq!(c.mounts[0].source, "/dev/nvidia0");
    assert_eq!(c.devices, vec!["/dev/nvidia0"]);
    let paths: Vec<&str> = c.hooks.iter().map(|h| h.path.as_str()).collect();
    assert_eq!(
        paths,
        vec!["/usr/bin/nvidia-container-runtime-hook", "/bin/true"]
    );
    assert_eq!(c.annotations.get("a").map(|s| s.as_str()), Some(""));
    assert_eq!(c.annotations.get("b").map(|s| s.as_str()), Some("2"));
    // a later, longer list reuses elements a shorter one left behind
    let text = br#"{"mounts":[{"source":"/a"},{"source":"/dev/nvidia0"}],"mounts":[{"source":"/c"}],"mounts":[{"destination":"/d"},{"destination":"/e"}]}"#;
    let c = load(text).container.clone();
    let got: Vec<(&str, &str)> = c
        .mounts
        .iter()
        .map(|m| (m.source.as_str(), m.destination.as_str()))
        .collect();
    assert_eq!(got, vec![("/c", "/d"), ("/dev/nvidia0", "/e")]);
}

#[test]
fn type_errors_and_bad_json_are_errors_runc_shares() {
    for bad in [
        &br#"{"process":{"env":"A=1"}}"#[..],
        br#"{"process":{"Env":[1]}}"#,
        br#"{"process":{"NoNewPrivileges":"yes"}}"#,
        br#"{"process":{"env":["A=1"]"#,
        br#"{"process":{"env":["A=1"],}}"#,
        b"{\"process\":{\"env\":[\"A=\x01\"]}}",
    ] {
        assert!(
            LoadedSpec::from_bytes(Path::new("c"), bad.to_vec(), None).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let deep = format!("{{\"x\":{}{}}}", "[".repeat(10_001), "]".repeat(10_001));
    assert!(LoadedSpec::from_bytes(Path::new("c"), deep.into_bytes(), None).is_err());
    let ok = format!("{{\"x\":{}{}}}", "[".repeat(9_999), "]".repeat(9_999));
    assert!(LoadedSpec::from_bytes(Path::new("c"), ok.into_bytes(), None).is_ok());
}

#[test]
fn exec_process_files_follow_the_same_rules() {
    let text = br#"{"args":["sh"],"env":["A=1"],"noNewPrivileges":true,"capabilities":{"bounding":["CAP_CHOWN"]},
        "NoNewPrivileges":false,"Capabilities":{"Bounding":["CAP_SYS_ADMIN"],"effective":["CAP_SYS_ADMIN"]},"x":1e99999,"y":"\ud800"}"#;
    let p = LoadedProcess::from_bytes(text.to_vec()).unwrap();
    assert!(!p.view.no_new_privileges);
    let c = Container::from_process(&p.view);
    assert_eq!(
        c.capabilities.bounding,
        Some(vec!["CAP_SYS_ADMIN".to_string()])
    );
    let out = p.patched(&policy_edits()).unwrap().unwrap();
    let again = LoadedProcess::from_bytes(out.clone()).unwrap();
    assert!(again.view.no_new_privileges);
    let c = Container::from_process(&again.view);
    assert_eq!(c.capabilities.bounding, Some(vec![]));
    assert_eq!(c.capabilities.effective, Some(vec![]));
    let text = String::from_utf8(out).unwrap();
    assert_eq!(spellings(&text, "noNewPrivileges"), 1, "{text}");
    assert!(
        text.contains(r#""args":["sh"]"#) && text.contains("1e99999"),
        "{text}"
    );
}

#[test]
fn gpu_mentions_in_unreadable_files() {
    for (bytes, want) in [
        (&b"NVIDIA_VISIBLE_DEVICES=all"[..], true),
        (b"nvidia.com/gpu=0", true),
        (b"/dev/nvidia0", true),
        (b"/usr/bin/nvidia-container-runtime-hook", true),
        (b"\\u004eVIDIA_VISIBLE_DEVICES", true),
        (b"{\"process\":{\"env\":[\"PATH=/bin\"]", false),
    ] {
        assert_eq!(
            mentions_gpu(bytes),
            want,
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

#[test]
fn unknown_global_flags_do_not_hide_create() {
    for argv in [
        &[
            "--cgroup-manager",
            "systemd",
            "create",
            "--bundle",
            "/b",
            "id",
        ][..],
        &["--systemd-cgroup", "create", "--bundle", "/b", "id"],
        &["--debug", "--root", "/r", "create", "-b", "/b", "id"],
        &["--foo=bar", "create", "--bundle=/b", "id"],
        &["--foo", "bar", "create", "-bundle", "/b", "id"],
        &[
            "--log-level",
            "debug",
            "--foo",
            "bar",
            "create",
            "--pid-file",
            "/p",
            "--bundle",
            "/b",
            "id",
        ],
        &[
            "create",
            "--no-pivot",
            "--unknown",
            "x",
            "--bundle",
            "/b",
            "id",
        ],
    ] {
        let inv = parse(&os(argv));
        assert_eq!(inv.command.as_deref(), Some("create"), "{argv:?}");
        assert_eq!(inv.bundle.as_deref(), Some(Path::new("/b")), "{argv:?}");
    }
    let inv = parse(&os(&["--foo", "bar", "run", "-b", "/b", "id"]));
    assert_eq!(inv.command.as_deref(), Some("run"));
    // `create` as the value of a known flag is not the subcommand
    let inv = parse(&os(&["--root", "create", "state", "id"]));
    assert_eq!(inv.command.as_deref(), Some("state"));
    // exec's privilege flags
    let inv = parse(&os(&[
        "exec",
        "--cap",
        "CAP_SYS_ADMIN",
        "-c",
        "CAP_NET_RAW",
        "--no-new-privs=false",
        "--process-label",
        "l",
        "--apparmor=unconfined",
        "-u",
        "0",
        "id",
        "sh",
        "--cap",
        "X",
    ]));
    assert_eq!(inv.exec.caps, vec!["CAP_SYS_ADMIN", "CAP_NET_RAW"]);
    assert_eq!(inv.exec.no_new_privs, Some(false));
    assert_eq!(inv.exec.process_label.as_deref(), Some("l"));
    assert_eq!(inv.exec.apparmor.as_deref(), Some("unconfined"));
    assert_eq!(inv.exec.user.as_deref(), Some("0"));
    assert_eq!(inv.id.as_deref(), Some("id"));
    assert_eq!(
        parse(&os(&["exec", "--no-new-privs", "id"]))
            .exec
            .no_new_privs,
        Some(true)
    );
    assert_eq!(
        parse(&os(&["exec", "--no-new-privs=0", "id"]))
            .exec
            .no_new_privs,
        Some(false)
    );
}

// ---- the wrapper, end to end, with a recording stand-in for runc ----

use crate::support::TempDir as Tmp;

/// A fake runc that appends its argv to `calls` and answers `state`.
fn fake_runtime(dir: &Path, bundle: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("fake-runc");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\necho \"$*\" >> {calls}\ncase \" $* \" in *\" state \"*) echo '{{\"bundle\":\"{b}\"}}';; esac\nexit 0\n",
            calls = dir.join("calls").display(),
            b = bundle.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn config(dir: &Path, runtime: &Path) -> PathBuf {
    let p = dir.join("config.toml");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
    std::fs::write(
        &p,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"{}\"\n[kernel_image]\ncache_dir = \"{}\"\n[log]\nsyslog = false\n[runtime]\npath = \"{}\"\n",
            data.display(),
            dir.join("cache.json").display(),
            dir.join("scan").display(),
            runtime.display()
        ),
    )
    .unwrap();
    p
}

fn wrapper(t: &Tmp, cfg: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(cfg)
        .arg("runtime")
        .args(args)
        .env("GPU_GUARD_MARKER_DIR", t.0.join("markers"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn calls(t: &Tmp) -> String {
    std::fs::read_to_string(t.0.join("calls")).unwrap_or_default()
}

#[test]
fn wrapper_edits_tricky_specs_and_refuses_unreadable_gpu_ones() {
    let t = Tmp::new("wrap");
    let b = t.0.join("bundle");
    std::fs::create_dir_all(&b).unwrap();
    let rt = fake_runtime(&t.0, &b);
    let cfg = config(&t.0, &rt);
    let b_s = b.to_str().unwrap();
    let log = t.0.join("log.json");
    let log_s = log.to_str().unwrap();
    // case variants + duplicate process, behind an unknown global flag
    let spec = format!(
        r#"{{"process":{{"args":["sh"],"noNewPrivileges":true,"env":["A=1"]}},"process":{{"Env":["NVIDIA_VISIBLE_DEVICES=all"],"NoNewPrivileges":false,"Capabilities":{{"Bounding":["CAP_SYS_ADMIN","CAP_CHOWN"]}}}},"x":1e99999,{HOOK}}}"#
    );
    std::fs::write(b.join("config.json"), &spec).unwrap();
    let o = wrapper(
        &t,
        &cfg,
        &[
            "--cgroup-manager",
            "systemd",
            "--log",
            log_s,
            "create",
            "--bundle",
            b_s,
            "gpu1",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let after = load(&std::fs::read(b.join("config.json")).unwrap());
    assert!(after.container.no_new_privileges);
    assert_eq!(caps(&after.container), Some(vec!["CAP_CHOWN"]));
    assert_eq!(
        after.container.env.get("NVIDIA_VISIBLE_DEVICES"),
        Some("all")
    );
    assert!(calls(&t).contains("create --bundle"));
    // exec into it: --cap outside the allowlist and --no-new-privs=false are refused
    for (flags, what) in [
        (&["--cap", "CAP_SYS_ADMIN"][..], "--cap CAP_SYS_ADMIN"),
        (&["--no-new-privs=false"], "--no-new-privs=false"),
        (
            &["--process-label", "system_u:system_r:spc_t:s0"],
            "--process-label",
        ),
    ] {
        let mut args = vec!["--log", log_s, "exec"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["gpu1", "sh"]);
        let o = wrapper(&t, &cfg, &args);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{what}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let logged = std::fs::read_to_string(&log).unwrap();
        assert!(
            logged.lines().last().unwrap().contains(what),
            "{what}: {logged}"
        );
    }
    let before = calls(&t);
    let o = wrapper(&t, &cfg, &["exec", "--cap", "CAP_CHOWN", "gpu1", "sh"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // the marker answered: the runtime was not asked for `state`
    assert!(
        !calls(&t)[before.len()..].contains("state"),
        "{}",
        calls(&t)
    );
    // exec --process with case variants: edited in place
    let pf = t.0.join("process.json");
    std::fs::write(&pf, r#"{"args":["sh"],"noNewPrivileges":true,"NoNewPrivileges":false,"capabilities":{"bounding":["CAP_SYS_ADMIN"]}}"#).unwrap();
    let o = wrapper(
        &t,
        &cfg,
        &["exec", "--process", pf.to_str().unwrap(), "gpu1"],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let p = LoadedProcess::from_bytes(std::fs::read(&pf).unwrap()).unwrap();
    assert!(p.view.no_new_privileges);
    assert_eq!(
        Container::from_process(&p.view).capabilities.bounding,
        Some(vec![])
    );

    // a non-GPU container: exec pays no `state` call, flags pass
    std::fs::write(
        b.join("config.json"),
        r#"{"process":{"args":["sh"],"env":["A=1"]}}"#,
    )
    .unwrap();
    let o = wrapper(&t, &cfg, &["create", "--bundle", b_s, "cpu1"]);
    assert_eq!(o.status.code(), Some(0));
    let before = calls(&t);
    let o = wrapper(&t, &cfg, &["exec", "--cap", "CAP_SYS_ADMIN", "cpu1", "sh"]);
    assert_eq!(o.status.code(), Some(0));
    std::fs::write(&pf, r#"{"args":["sh"],"env":["A=1"]}"#).unwrap();
    let o = wrapper(&t, &cfg, &["exec", "-p", pf.to_str().unwrap(), "cpu1"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        !calls(&t)[before.len()..].contains("state"),
        "{}",
        calls(&t)
    );
    // delete forgets the marker; an unknown container falls back to `state`
    wrapper(&t, &cfg, &["delete", "-f", "cpu1"]);
    let before = calls(&t);
    wrapper(&t, &cfg, &["exec", "--cap", "CAP_SYS_ADMIN", "cpu1", "sh"]);
    assert!(calls(&t)[before.len()..].contains("state"), "{}", calls(&t));

    // unreadable: refused when it names a GPU request, else passed through
    std::fs::write(
        b.join("config.json"),
        r#"{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all"]"#,
    )
    .unwrap();
    let o = wrapper(
        &t,
        &cfg,
        &["--log", log_s, "create", "--bundle", b_s, "bad1"],
    );
    assert_eq!(o.status.code(), Some(1));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged
            .lines()
            .last()
            .unwrap()
            .contains("unexpected end of JSON input"),
        "{logged}"
    );
    std::fs::write(b.join("config.json"), r#"{"process":{"env":["A=1"]"#).unwrap();
    let before = calls(&t);
    let o = wrapper(
        &t,
        &cfg,
        &["--log", log_s, "create", "--bundle", b_s, "bad2"],
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(calls(&t)[before.len()..].contains("bad2"));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged
            .lines()
            .last()
            .unwrap()
            .contains("standing aside for container bad2"),
        "{logged}"
    );
}
