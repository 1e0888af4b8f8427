//! gpu-guard reads a spec's process as runc's Go decoder does,
//! checked against Go itself.
//!
//! tests/data/go/spec_decode.go (standard library only) decodes files with
//! `json.NewDecoder(f).Decode` into the runtime-spec types runc 1.1 uses
//! (`v11`) and those of runtime-spec v1.3.0 (`v13`). Over a generated set
//! of variants (a type error in the first or a later duplicate `process`,
//! inside one object, under a case-variant key, before a `process: null`,
//! nested in structs, inside lists; and merges of valid duplicates), every
//! case must satisfy:
//!
//! - gpu-guard says runc refuses the spec (its reader fails, or
//!   `runc_type_error` names a value) exactly when Go's v11 decode fails;
//! - a spec Go refuses is not rewritten (runc reports its own error);
//! - the file gpu-guard writes (or leaves) is refused by Go's v11 and v13
//!   decoders exactly when the original is, and where they accept it they
//!   read the same process as from the original, apart from the fields the
//!   edits change, which hold the edits.
//!
//! Without `go` the test prints SKIP (and fails under GPU_GUARD_CI=1;
//! integration/setup.sh installs golang-go).

use gpu_guard::core::decision::{Edits, Rlimit};
use gpu_guard::oci::spec_file::{LoadedProcess, LoadedSpec};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the Go decoder, or says why it cannot (SKIP; a failure in CI).
fn go_decoder() -> Option<PathBuf> {
    let have_go = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_go {
        let why = "go is not installed (apt-get install golang-go; integration/setup.sh does)";
        crate::support::skip_or_fail(why);
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-spec-decode");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("spec_decode");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/go/spec_decode.go");
    let out = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .env("GOCACHE", dir.join("cache"))
        .env("GOPATH", dir.join("gopath"))
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "")
        .env("CGO_ENABLED", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(bin)
}

/// What Go made of each file: (v11, v13) results, in order.
fn run_go(bin: &Path, mode: &str, files: &[PathBuf]) -> Vec<(Value, Value)> {
    let mut results = Vec::new();
    for chunk in files.chunks(500) {
        let out = Command::new(bin).arg(mode).args(chunk).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            results.push((v["v11"].clone(), v["v13"].clone()));
        }
    }
    assert_eq!(results.len(), files.len());
    results
}

/// The fields of specs-go Process with values Go accepts and values it
/// refuses (first good first; the view reads env, capabilities,
/// noNewPrivileges and rlimits, the others only Go does).
const FIELDS: &[(&str, &[&str], &[&str])] = &[
    (
        "terminal",
        &["true", "false", "null"],
        &["\"true\"", "1", "[]", "{}"],
    ),
    (
        "consoleSize",
        &[r#"{"height":1,"width":2}"#, "null", r#"{"width":3}"#],
        &[
            "5",
            "\"x\"",
            "[]",
            r#"{"height":-1}"#,
            r#"{"width":1.5}"#,
            r#"{"height":18446744073709551616}"#,
            r#"{"height":-0}"#,
        ],
    ),
    (
        "user",
        &[
            r#"{"uid":1,"gid":2}"#,
            r#"{"umask":18,"additionalGids":[1,2]}"#,
            r#"{"additionalGids":[null,3]}"#,
            "null",
            r#"{"username":"u","uid":4294967295}"#,
        ],
        &[
            "5",
            r#"{"uid":-1}"#,
            r#"{"uid":4294967296}"#,
            r#"{"gid":"0"}"#,
            r#"{"umask":"022"}"#,
            r#"{"additionalGids":[1,"x"]}"#,
            r#"{"additionalGids":5}"#,
            r#"{"username":1}"#,
            r#"{"uid":1e0}"#,
            r#"{"UID":true}"#,
        ],
    ),
    (
        "args",
        &[
            r#"["sh","-c","true"]"#,
            r#"[null,"x"]"#,
            "null",
            "[]",
            r#"["a","b","c"]"#,
        ],
        &["\"sh\"", "[1]", r#"[["a"]]"#, "{}"],
    ),
    ("commandLine", &["\"x\""], &["1", "false"]),
    (
        "cwd",
        &["\"/\"", "null", "\"/tmp\""],
        &["5", "true", r#"["/"]"#],
    ),
    (
        "env",
        &[r#"["NVIDIA_VISIBLE_DEVICES=all"]"#, r#"[null,"B=2"]"#],
        &["\"A=1\"", "[1]"],
    ),
    (
        "capabilities",
        &[r#"{"bounding":["CAP_SYS_ADMIN","CAP_CHOWN"]}"#, "null"],
        &[r#"{"bounding":"CAP_CHOWN"}"#, r#"{"effective":[1]}"#, "5"],
    ),
    (
        "noNewPrivileges",
        &["false", "null", "true"],
        &["\"yes\"", "0"],
    ),
    (
        "rlimits",
        &[
            r#"[{"type":"RLIMIT_NOFILE","hard":10,"soft":10}]"#,
            "[null]",
            r#"[{"hard":5},{"type":"RLIMIT_MEMLOCK","hard":1,"soft":1}]"#,
        ],
        &["[1]", r#"[{"hard":"x"}]"#, r#"[{"type":1}]"#, "{}"],
    ),
    ("apparmorProfile", &["\"p\""], &["1"]),
    (
        "oomScoreAdj",
        &["5", "-5", "null", "0"],
        &["\"5\"", "1.5", "1e3", "9223372036854775808", "true"],
    ),
    ("selinuxLabel", &["\"l\""], &["[]", "1"]),
    (
        "scheduler",
        &[
            r#"{"policy":"SCHED_OTHER","nice":1}"#,
            r#"{"flags":["SCHED_FLAG_RESET_ON_FORK"],"nice":-2147483648}"#,
            "null",
        ],
        &[
            "5",
            r#"{"nice":"1"}"#,
            r#"{"nice":2147483648}"#,
            r#"{"flags":[1]}"#,
            r#"{"runtime":-1}"#,
            r#"{"priority":1.5}"#,
        ],
    ),
    (
        "ioPriority",
        &[r#"{"class":"IOPRIO_CLASS_BE","priority":1}"#],
        &[r#"{"priority":"x"}"#, r#"{"class":1}"#, "[]"],
    ),
    (
        "execCPUAffinity",
        &[r#"{"initial":"0-1"}"#, r#"{"final":"2"}"#],
        &[r#"{"initial":0}"#, "\"0\""],
    ),
    // Unknown to every runtime: never a type error.
    ("zzzFuture", &["5", r#"{"a":[1]}"#, "\"x\""], &[]),
];

/// A process's members around the varied field (which they leave out): a
/// GPU request, a capability the edits drop, an rlimit they raise.
fn base(skip: &str) -> String {
    [
        ("args", r#"["sh"]"#),
        ("cwd", "\"/\""),
        ("env", r#"["NVIDIA_VISIBLE_DEVICES=all"]"#),
        (
            "capabilities",
            r#"{"bounding":["CAP_SYS_ADMIN","CAP_CHOWN"],"effective":["CAP_SYS_ADMIN"]}"#,
        ),
        (
            "rlimits",
            r#"[{"type":"RLIMIT_MEMLOCK","hard":65536,"soft":65536}]"#,
        ),
        ("noNewPrivileges", "false"),
    ]
    .iter()
    .filter(|(k, _)| *k != skip)
    .map(|(k, v)| format!("\"{k}\":{v}"))
    .collect::<Vec<_>>()
    .join(",")
}

/// The key with its first letter in upper case (Go folds it to the field).
fn variant(key: &str) -> String {
    let mut c = key.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

/// config.json variants: (name, text).
fn spec_cases() -> Vec<(String, String)> {
    let mut cases = Vec::new();
    for (k, goods, bads) in FIELDS {
        let b = base(k);
        let g = goods[0];
        let kk = variant(k);
        for v in goods.iter().chain(bads.iter()) {
            cases.push((
                format!("{k}={v}"),
                format!(r#"{{"process":{{{b},"{k}":{v}}}}}"#),
            ));
        }
        for bad in *bads {
            let layouts = [
                (
                    "hidden by a later process",
                    format!(r#"{{"process":{{{b},"{k}":{bad}}},"process":{{"{k}":{g}}}}}"#),
                ),
                (
                    "hidden within one process",
                    format!(r#"{{"process":{{{b},"{k}":{bad},"{k}":{g}}}}}"#),
                ),
                (
                    "in the later process",
                    format!(r#"{{"process":{{{b},"{k}":{g}}},"process":{{"{k}":{bad}}}}}"#),
                ),
                (
                    "under a case variant",
                    format!(r#"{{"process":{{{b},"{kk}":{bad}}},"Process":{{"{k}":{g}}}}}"#),
                ),
                (
                    "before a null process",
                    format!(
                        r#"{{"process":{{"{k}":{bad}}},"process":null,"process":{{{b},"{k}":{g}}}}}"#
                    ),
                ),
            ];
            for (what, text) in layouts {
                cases.push((format!("{k}={bad} {what}"), text));
            }
        }
        for g1 in *goods {
            for g2 in *goods {
                cases.push((
                    format!("{k}: {g1} merged with {g2}"),
                    format!(
                        r#"{{"process":{{{b},"{k}":{g1}}},"proce\u017f\u017f":{{"{k}":{g2}}}}}"#
                    ),
                ));
            }
        }
    }
    cases
}

/// exec --process variants: the file is the process.
fn process_cases() -> Vec<(String, String)> {
    let mut cases = Vec::new();
    for (k, goods, bads) in FIELDS {
        let b = base(k);
        let g = goods[0];
        let kk = variant(k);
        for v in goods.iter().chain(bads.iter()) {
            cases.push((format!("{k}={v}"), format!(r#"{{{b},"{k}":{v}}}"#)));
        }
        for bad in *bads {
            cases.push((
                format!("{k}={bad} hidden by a duplicate"),
                format!(r#"{{{b},"{k}":{bad},"{k}":{g}}}"#),
            ));
            cases.push((
                format!("{k}={bad} under a case variant"),
                format!(r#"{{{b},"{kk}":{bad},"{k}":{g}}}"#),
            ));
        }
        for g1 in *goods {
            for g2 in *goods {
                cases.push((
                    format!("{k}: {g1} then {g2}"),
                    format!(r#"{{{b},"{k}":{g1},"{kk}":{g2}}}"#),
                ));
            }
        }
    }
    cases
}

fn edits() -> Edits {
    let mut e = Edits::default();
    e.env
        .insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
    e.capabilities_dropped = vec!["CAP_SYS_ADMIN".into()];
    e.no_new_privileges = true;
    e.rlimits.insert(
        "RLIMIT_MEMLOCK".into(),
        Rlimit {
            soft: 1 << 30,
            hard: 1 << 30,
        },
    );
    e
}

/// gpu-guard's reading of one file: whether it says runc refuses it, and
/// the file it writes (None: left as it is).
fn gpu_guard(mode: &str, text: &[u8]) -> (bool, Option<Vec<u8>>) {
    let e = edits();
    if mode == "spec" {
        match LoadedSpec::from_bytes(Path::new("config.json"), text.to_vec(), None) {
            Err(_) => (true, None),
            Ok(s) => {
                let out = s.patched(&e).expect("a merge of a readable spec");
                (s.runc_type_error().is_some(), out)
            }
        }
    } else {
        match LoadedProcess::from_bytes(text.to_vec()) {
            Err(_) => (true, None),
            Ok(p) => {
                let out = p.patched(&e).expect("a merge of a readable process");
                (p.runc_type_error().is_some(), out)
            }
        }
    }
}

/// A decoded process without the fields the edits change.
fn untouched(p: &Value) -> Value {
    let mut p = p.clone();
    if let Some(o) = p.as_object_mut() {
        for k in ["env", "capabilities", "noNewPrivileges", "rlimits"] {
            o.remove(k);
        }
    }
    p
}

/// The edits as Go reads them from the rewritten file.
fn assert_edits_in_force(what: &str, p: &Value) {
    assert_eq!(p["noNewPrivileges"], Value::Bool(true), "{what}: {p}");
    let caps = p["capabilities"].to_string();
    assert!(!caps.contains("CAP_SYS_ADMIN"), "{what}: {p}");
    let env = p["env"].to_string();
    assert!(env.contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"), "{what}: {p}");
    let memlock = p["rlimits"]
        .as_array()
        .and_then(|r| r.iter().rev().find(|r| r["type"] == "RLIMIT_MEMLOCK"))
        .unwrap_or_else(|| panic!("{what}: no memlock in {p}"));
    assert!(
        memlock["soft"].as_u64() >= Some(1 << 30),
        "{what}: the memlock runc applies is {memlock}"
    );
}

fn differential(bin: &Path, mode: &str, cases: &[(String, String)]) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("go-parity-{mode}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    let mut ours = Vec::new();
    for (i, (_, text)) in cases.iter().enumerate() {
        let (refuses, out) = gpu_guard(mode, text.as_bytes());
        let input = dir.join(format!("{i}.in.json"));
        let output = dir.join(format!("{i}.out.json"));
        std::fs::write(&input, text).unwrap();
        std::fs::write(&output, out.as_deref().unwrap_or(text.as_bytes())).unwrap();
        files.push(input);
        files.push(output);
        ours.push((refuses, out.is_some()));
    }
    let go = run_go(bin, mode, &files);
    let mut refused = 0;
    for (i, (what, text)) in cases.iter().enumerate() {
        let what = format!("{mode} {what}: {text}");
        let ((in11, in13), (out11, out13)) = (&go[2 * i], &go[2 * i + 1]);
        let (refuses, rewritten) = ours[i];
        let go_refuses = !in11["error"].is_null();
        refused += usize::from(go_refuses);
        assert_eq!(refuses, go_refuses, "{what}: Go says {}", in11["error"]);
        if go_refuses {
            assert!(!rewritten, "{what}: a spec runc refuses was rewritten");
        }
        for (v, a, b) in [("v11", in11, out11), ("v13", in13, out13)] {
            assert_eq!(
                a["error"].is_null(),
                b["error"].is_null(),
                "{what}: {v}: before {}, after {}",
                a["error"],
                b["error"]
            );
            if a["error"].is_null() {
                assert_eq!(
                    untouched(&a["process"]),
                    untouched(&b["process"]),
                    "{what}: {v} reads another process after the rewrite"
                );
                if rewritten {
                    assert_edits_in_force(&format!("{what} ({v})"), &b["process"]);
                }
            }
        }
    }
    // The table holds both kinds in numbers.
    assert!(refused > 50 && refused < cases.len() - 50, "{refused}");
}

#[test]
fn type_errors_and_merges_agree_with_gos_decoder() {
    let Some(bin) = go_decoder() else {
        return;
    };
    differential(&bin, "spec", &spec_cases());
    differential(&bin, "process", &process_cases());
}
