//! Security profiles and scoped exceptions: each profile's resulting
//! effective set, precedence of `security.capabilities`, the restricted
//! profile's rules, config errors, and exceptions chosen by the CRI
//! runtime's own annotations (never ones a pod author sets), through the
//! library and through `gpu-guard check`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_guard::config;
use gpu_guard::core::capability;
use gpu_guard::core::container::{Capabilities, Container};
use gpu_guard::core::cri_facts::{self, CriRuntime};
use gpu_guard::core::decide::security_only;
use gpu_guard::core::decision::{Severity, Verdict};
use gpu_guard::core::policy::Config;
use gpu_guard::core::profiles;
use gpu_guard::core::security::{plan, SpecAccess};

/// What `docker run` gives a container, plus two it must never keep.
fn wide() -> Vec<String> {
    let mut v: Vec<String> = profiles::DOCKER_DEFAULT
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.push("CAP_SYS_ADMIN".into());
    v.push("CAP_NET_ADMIN".into());
    v
}

/// A container with these capabilities, uid and annotations, as the
/// runtime wrapper sees it when the engine's runtime root vouches for the
/// CRI runtime whose container-type key the annotations carry (containerd's
/// first): the wrapper invoked by that runtime (core::cri_facts).
fn container(caps: &[String], uid: Option<u32>, annotations: &[(&str, &str)]) -> Container {
    let has = |k: &str| annotations.iter().any(|(a, _)| *a == k);
    let cri_runtime = if has(cri_facts::CONTAINERD_CONTAINER_TYPE) {
        Some(CriRuntime::Containerd)
    } else if has(cri_facts::CRIO_CONTAINER_TYPE) {
        Some(CriRuntime::Crio)
    } else {
        None
    };
    Container {
        cri_runtime,
        capabilities: Capabilities {
            bounding: Some(caps.to_vec()),
            effective: Some(caps.to_vec()),
            inheritable: None,
            permitted: Some(caps.to_vec()),
            ambient: None,
        },
        uid,
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        ..Default::default()
    }
}

/// CapEff after the edit stage: the effective set minus what the plan drops.
fn cap_eff(cfg: &Config, c: &Container) -> Vec<String> {
    let p = plan(
        c,
        &cfg.security,
        &cfg.capability_allowlist(),
        SpecAccess::Edit,
    );
    let mut eff: Vec<String> = c
        .capabilities
        .effective
        .clone()
        .unwrap()
        .into_iter()
        .filter(|x| !p.dropped.contains(x))
        .collect();
    eff.sort();
    eff
}

fn sorted(caps: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = caps.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn cfg(text: &str) -> Config {
    config::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn each_profile_gives_its_capeff() {
    let table: [(&str, Vec<String>); 4] = [
        ("docker-default", sorted(&profiles::DOCKER_DEFAULT)),
        ("baseline", sorted(&profiles::BASELINE)),
        ("gpu-guard", sorted(&profiles::GPU_GUARD)),
        ("restricted", sorted(&["CAP_NET_BIND_SERVICE"])),
    ];
    for (name, want) in table {
        let c = cfg(&format!("[security]\nprofile = \"{name}\"\n"));
        let got = cap_eff(&c, &container(&wide(), Some(1000), &[]));
        assert_eq!(got, want, "profile {name}");
    }
    // docker-default is moby's 14; baseline is docker's without NET_RAW.
    assert_eq!(profiles::DOCKER_DEFAULT.len(), 14);
    let mut no_raw = sorted(&profiles::DOCKER_DEFAULT);
    no_raw.retain(|c| c != "CAP_NET_RAW");
    assert_eq!(no_raw, sorted(&profiles::BASELINE));
    // The shipped default is the gpu-guard profile, unchanged from before profiles.
    assert_eq!(
        Config::default().capability_allowlist(),
        sorted(&profiles::GPU_GUARD)
    );
}

#[test]
fn explicit_capabilities_override_the_profile() {
    let c =
        cfg("[security]\nprofile = \"docker-default\"\ncapabilities = [\"chown\", \"CAP_KILL\"]\n");
    assert_eq!(
        cap_eff(&c, &container(&wide(), Some(0), &[])),
        sorted(&["CAP_CHOWN", "CAP_KILL"])
    );
    // An empty list is a list: drop everything.
    let c = cfg("[security]\ncapabilities = []\n");
    assert!(cap_eff(&c, &container(&wide(), None, &[])).is_empty());
}

#[test]
fn restricted_forces_nnp_and_refuses_root() {
    let c = cfg("[security]\nprofile = \"restricted\"\nno_new_privileges = false\n");
    let p = plan(
        &container(&wide(), Some(1000), &[]),
        &c.security,
        &c.capability_allowlist(),
        SpecAccess::Edit,
    );
    assert!(p.no_new_privileges);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let root = container(&wide(), Some(0), &[]);
    let p = plan(
        &root,
        &c.security,
        &c.capability_allowlist(),
        SpecAccess::Edit,
    );
    assert_eq!(p.findings.len(), 1);
    assert_eq!(p.findings[0].severity, Severity::Error);
    assert!(p.findings[0].message.contains("uid 0"), "{:?}", p.findings);
    let d = security_only(&root, true, &c, SpecAccess::Edit);
    assert_eq!(d.verdict, Verdict::Refuse);
    // The key turns the root rule off; nnp stays forced.
    let c = cfg("[security]\nprofile = \"restricted\"\nno_new_privileges = false\nrestricted_refuse_root = false\n");
    let p = plan(
        &root,
        &c.security,
        &c.capability_allowlist(),
        SpecAccess::Edit,
    );
    assert!(p.findings.is_empty() && p.no_new_privileges);
    // Other profiles never look at the uid; no uid known: nothing to refuse.
    let c = cfg("[security]\nprofile = \"baseline\"\n");
    assert!(plan(
        &root,
        &c.security,
        &c.capability_allowlist(),
        SpecAccess::Edit
    )
    .findings
    .is_empty());
    let c = cfg("[security]\nprofile = \"restricted\"\n");
    let nouid = container(&wide(), None, &[]);
    assert!(plan(
        &nouid,
        &c.security,
        &c.capability_allowlist(),
        SpecAccess::Edit
    )
    .findings
    .is_empty());
}

#[test]
fn defined_profiles() {
    let c = cfg("[security]\nprofile = \"inference\"\n[security.profiles.inference]\ncapabilities = [\"NET_BIND_SERVICE\", \"CAP_SETUID\"]\nrefuse_root = true\n");
    assert_eq!(
        cap_eff(&c, &container(&wide(), Some(7), &[])),
        sorted(&["CAP_NET_BIND_SERVICE", "CAP_SETUID"])
    );
    assert!(!plan(
        &container(&wide(), Some(0), &[]),
        &c.security,
        &c.capability_allowlist(),
        SpecAccess::Edit
    )
    .findings
    .is_empty());
}

#[test]
fn config_errors_name_the_key() {
    for (text, key) in [
        ("[security]\nprofile = \"nope\"\n", "security.profile"),
        (
            "[security.profiles.baseline]\ncapabilities = []\n",
            "security.profiles.baseline",
        ),
        (
            "[security.profiles.x]\ncapabilities = [\"CAP_NOPE\"]\n",
            "security.profiles.x.capabilities[0]",
        ),
        (
            "[[security.exceptions]]\nallow_privileged = true\n",
            "security.exceptions[0]",
        ),
        (
            "[[security.exceptions]]\nnamespace = \"a\"\n",
            "security.exceptions[0]",
        ),
        (
            "[[security.exceptions]]\nnamespace = \"a\"\nprofile = \"nope\"\n",
            "security.exceptions[0].profile",
        ),
        (
            "[[security.exceptions]]\nnamespace = \"\"\nallow_privileged = true\n",
            "security.exceptions[0].namespace",
        ),
        (
            "[[security.exceptions]]\nnamespace = \"a\"\nenv = \"X\"\nallow_privileged = true\n",
            "env",
        ),
    ] {
        let e = config::parse(text).unwrap_err();
        assert!(e.contains(key), "{text}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

const EXEMPT: &str = "[[security.exceptions]]\nnamespace = \"gpu-operator\"\nprofile = \"docker-default\"\nallow_privileged = true\n";

fn privileged_caps() -> Vec<String> {
    capability::all_names()
}

/// containerd's own keys for a container of pod `pod` in `ns`.
fn containerd_keys<'a>(ns: &'a str, pod: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("io.kubernetes.cri.container-type", "container"),
        ("io.kubernetes.cri.sandbox-namespace", ns),
        ("io.kubernetes.cri.sandbox-name", pod),
        ("io.kubernetes.cri.image-name", "nvcr.io/nvidia/driver:550"),
    ]
}

#[test]
fn exception_admits_privileged_only_in_its_namespace() {
    let c = cfg(EXEMPT);
    let exempt = container(
        &privileged_caps(),
        Some(0),
        &containerd_keys("gpu-operator", "nvidia-driver-daemonset-x"),
    );
    let d = security_only(&exempt, true, &c, SpecAccess::Edit);
    assert_eq!(d.verdict, Verdict::Allow, "{:?}", d.findings);
    assert!(d
        .findings
        .iter()
        .any(|f| f.message.contains("security.exceptions[0]")));

    let other = container(
        &privileged_caps(),
        Some(0),
        &containerd_keys("default", "x"),
    );
    let d = security_only(&other, true, &c, SpecAccess::Edit);
    assert_eq!(d.verdict, Verdict::Refuse);
    let f = &d.findings[0];
    assert!(f.message.contains("privileged"), "{f:?}");
    let fix = f.fix.as_deref().unwrap();
    assert!(
        fix.contains("[[security.exceptions]] namespace = \"default\" allow_privileged = true"),
        "{fix}"
    );
}

#[test]
fn exception_profile_applies_to_unprivileged_containers() {
    let c = cfg(EXEMPT);
    let ex = container(&wide(), Some(0), &containerd_keys("gpu-operator", "p"));
    assert_eq!(cap_eff(&c, &ex), sorted(&profiles::DOCKER_DEFAULT));
    let not = container(&wide(), Some(0), &containerd_keys("ml", "p"));
    assert_eq!(cap_eff(&c, &not), sorted(&profiles::GPU_GUARD));
    // pod and image globs narrow it; all selectors must match.
    let c = cfg("[[security.exceptions]]\nnamespace = \"gpu-*\"\npod = \"nvidia-driver-*\"\nimage = \"nvcr.io/nvidia/*\"\nprofile = \"baseline\"\n");
    let hit = container(
        &wide(),
        None,
        &containerd_keys("gpu-operator", "nvidia-driver-abc"),
    );
    assert_eq!(cap_eff(&c, &hit), sorted(&profiles::BASELINE));
    let miss = container(&wide(), None, &containerd_keys("gpu-operator", "toolkit"));
    assert_eq!(cap_eff(&c, &miss), sorted(&profiles::GPU_GUARD));
}

#[test]
fn pod_author_cannot_claim_the_namespace() {
    let c = cfg(EXEMPT);
    // containerd wrote the real namespace; the pod's own annotations got
    // through under other keys (CRI-O's, a look-alike). The decision reads
    // containerd's key only.
    let mut keys = containerd_keys("default", "evil");
    keys.push(("io.kubernetes.pod.namespace", "gpu-operator"));
    keys.push(("gpu-operator.namespace", "gpu-operator"));
    keys.push(("io.kubernetes.cri.sandbox-namespace.x", "gpu-operator"));
    let d = security_only(
        &container(&privileged_caps(), Some(0), &keys),
        true,
        &c,
        SpecAccess::Edit,
    );
    assert_eq!(d.verdict, Verdict::Refuse);
    // Both runtimes' markers: one set was forged; trust neither.
    let mut keys = containerd_keys("gpu-operator", "evil");
    keys.push(("io.kubernetes.cri-o.ContainerType", "container"));
    let d = security_only(
        &container(&privileged_caps(), Some(0), &keys),
        true,
        &c,
        SpecAccess::Edit,
    );
    assert_eq!(d.verdict, Verdict::Refuse);
    // No runtime marker (docker, podman, a hand-made spec): no exception.
    let keys = vec![("io.kubernetes.cri.sandbox-namespace", "gpu-operator")];
    let d = security_only(
        &container(&privileged_caps(), Some(0), &keys),
        true,
        &c,
        SpecAccess::Edit,
    );
    assert_eq!(d.verdict, Verdict::Refuse);
    // Env never counts.
    let mut env_only = container(&privileged_caps(), Some(0), &[]);
    env_only.env.set("KUBERNETES_NAMESPACE", "gpu-operator");
    let d = security_only(&env_only, true, &c, SpecAccess::Edit);
    assert_eq!(d.verdict, Verdict::Refuse);
}

#[test]
fn crio_keys_select_under_crio() {
    let c = cfg("[[security.exceptions]]\nnamespace = \"gpu-operator\"\nhandler = \"nvidia\"\nallow_privileged = true\n");
    let keys = [
        ("io.kubernetes.cri-o.ContainerType", "container"),
        ("io.kubernetes.pod.namespace", "gpu-operator"),
        ("io.kubernetes.pod.name", "nvidia-driver"),
        ("io.kubernetes.cri-o.RuntimeHandler", "nvidia"),
    ];
    let d = security_only(
        &container(&privileged_caps(), Some(0), &keys),
        true,
        &c,
        SpecAccess::Edit,
    );
    assert_eq!(d.verdict, Verdict::Allow, "{:?}", d.findings);
    // containerd records no handler: a handler selector never matches there.
    let d = security_only(
        &container(
            &privileged_caps(),
            Some(0),
            &containerd_keys("gpu-operator", "nvidia-driver"),
        ),
        true,
        &c,
        SpecAccess::Edit,
    );
    assert_eq!(d.verdict, Verdict::Refuse);
}

// ---- through the binary: `gpu-guard check --spec` ----

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);

use crate::support::tempdir as tmp;

fn write_config(dir: &Path, extra: &str) -> PathBuf {
    let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
    let p = dir.join("config.toml");
    std::fs::write(
        &p,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n{extra}",
            host.display()
        ),
    )
    .unwrap();
    p
}

/// A privileged GPU container spec as containerd writes it for a pod.
fn cri_spec(annotations: serde_json::Value) -> String {
    let caps = privileged_caps();
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["NVIDIA_VISIBLE_DEVICES=all"],
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps}
        },
        "root": {"path": "rootfs"},
        "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}]},
        "annotations": annotations
    })
    .to_string()
}

/// `check --engine containerd --spec` of `spec`.
fn check(config: &Path, spec: &str, dir: &Path) -> (i32, String) {
    check_as(config, spec, dir, &["--engine", "containerd"])
}

fn check_as(config: &Path, spec: &str, dir: &Path, extra: &[&str]) -> (i32, String) {
    let f = dir.join("config.json");
    std::fs::write(&f, spec).unwrap();
    let o = Command::new(*BIN)
        .args(["--config", config.to_str().unwrap(), "check"])
        .args(extra)
        .arg("--spec")
        .arg(&f)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn check_cli_exempts_by_namespace_and_names_the_mechanism() {
    let dir = tmp("cli");
    let conf = write_config(&dir, EXEMPT);
    let ann = |ns: &str| {
        serde_json::json!({
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.sandbox-namespace": ns,
            "io.kubernetes.cri.sandbox-name": "nvidia-driver-daemonset-abc",
        })
    };
    // As containerd's wrapper would decide (its runtime root vouches for
    // containerd's keys).
    let (code, out) = check(&conf, &cri_spec(ann("gpu-operator")), &dir);
    assert_eq!(code, 0, "{out}");
    let (code, out) = check(&conf, &cri_spec(ann("default")), &dir);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("security.exceptions"), "{out}");
    // A pod in "default" whose own annotation claims gpu-operator under
    // CRI-O's key: containerd's key decides.
    let mut forged = ann("default");
    forged["io.kubernetes.pod.namespace"] = "gpu-operator".into();
    let (code, out) = check(&conf, &cri_spec(forged), &dir);
    assert_eq!(code, 1, "{out}");
    // The keys conflict: refused for that, whatever the exceptions say.
    assert!(
        out.contains("both containerd's and CRI-O's Kubernetes keys"),
        "{out}"
    );
    // Without --engine, or as docker's and podman's wrapper: the spec alone
    // vouches for nothing, and check says how to ask.
    for extra in [
        &[][..],
        &["--engine", "docker"],
        &["--engine", "podman"],
        // As the prestart hook under containerd: a hook believes none.
        &["--engine", "containerd", "--stage", "prestart"],
    ] {
        let (code, out) = check_as(&conf, &cri_spec(ann("gpu-operator")), &dir, extra);
        assert_eq!(code, 1, "{extra:?}: {out}");
        assert!(
            out.contains("the container is privileged"),
            "{extra:?}: {out}"
        );
        assert!(out.contains("--engine containerd"), "{extra:?}: {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn exceptions_need_evidence_of_the_cri_runtime_from_outside_the_spec() {
    let c = cfg(EXEMPT);
    let keys = containerd_keys("gpu-operator", "nvidia-driver-daemonset-x");
    let mut exempt = container(&privileged_caps(), Some(0), &keys);
    assert_eq!(
        security_only(&exempt, true, &c, SpecAccess::Edit).verdict,
        Verdict::Allow
    );
    // The same spec where nothing outside it says containerd made it (the
    // hooks, docker's or podman's wrapper): no exception.
    exempt.cri_runtime = None;
    assert_eq!(
        security_only(&exempt, true, &c, SpecAccess::Edit).verdict,
        Verdict::Refuse
    );
    // Said to be CRI-O's: containerd's keys are not CRI-O's own.
    exempt.cri_runtime = Some(CriRuntime::Crio);
    let d = security_only(&exempt, true, &c, SpecAccess::Edit);
    assert_eq!(d.verdict, Verdict::Refuse, "{:?}", d.findings);
}
