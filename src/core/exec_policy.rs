//! The policy for a process exec'd into a container gpu-guard let start
//! (`runc exec`). The container was judged at create, so no requirement is
//! checked again: the security policy of the container's own profile (the
//! profile of the `[[security.exceptions]]` entry that selects it, else the
//! default) applies to the new process, and it gets the tuning variables
//! the main process got.
//!
//! runc builds the exec'd process in one of two ways (runc exec.go
//! getProcess):
//! - from a process file (`--process FILE`, what docker and containerd
//!   pass): the file is the whole process, every other flag is ignored;
//!   [`process_decision`] judges it as a container of its own, under the
//!   container's profile;
//! - without one (or with an empty `--process`): the bundle's `process`, as
//!   edited at create, with the command line's flags on top (`--cap` adds to
//!   the sets, `--no-new-privs[=BOOL]`, `--process-label`, `--apparmor`,
//!   `--user UID[:GID]`); [`flags_decision`] holds those flags to the
//!   container's profile.

use crate::core::container::{Container, Env};
use crate::core::decision::{Check, Decision, Finding, Verdict};
use crate::core::policy::{ApplyTo, Config, Mode};
use crate::core::sanitize::esc;
use crate::core::security::{self, SpecAccess};

/// What `runc exec` without a process file changes of the bundle's process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecChange {
    /// `--cap`, each added to the bounding, effective, permitted and
    /// ambient sets.
    pub caps: Vec<String>,
    /// `--no-new-privs[=BOOL]`, when given.
    pub no_new_privs: Option<bool>,
    /// `--process-label` and `--apparmor` when given: (flag, label).
    pub labels: Vec<(&'static str, String)>,
    /// The uid `--user` sets, as runc reads it.
    pub uid: Option<u32>,
}

impl ExecChange {
    /// True when the flags change the process's privileges.
    pub fn any(&self) -> bool {
        !self.caps.is_empty()
            || self.no_new_privs.is_some()
            || !self.labels.is_empty()
            || self.uid.is_some()
    }
}

/// The container an exec enters, as far as the wrapper knows it.
pub struct Target<'a> {
    /// The container's id, as the runtime was given it.
    pub id: Option<String>,
    /// The container's own view (its config.json: annotations select its
    /// security exception), when its bundle could be read.
    pub container: Option<&'a Container>,
    /// The container's own SELinux label and AppArmor profile, when known.
    pub own_labels: Option<(&'a str, &'a str)>,
    /// Whether it is a GPU container.
    pub gpu: bool,
}

/// Whether the security policy applies to an exec into this container.
pub fn applies(gpu: bool, cfg: &Config) -> bool {
    cfg.mode != Mode::Off && (gpu || cfg.security.apply_to == ApplyTo::All)
}

/// The decision for `runc exec` without a process file: a flag that leaves
/// the container's profile is an error (refused in enforce mode): a `--cap`
/// outside its capabilities, `--no-new-privs=false` where the policy or the
/// profile sets no_new_privileges, a label other than the container's own,
/// `--user 0` under a profile that refuses root. None when nothing is
/// wrong (the exec runs as the flags say; nothing to log).
pub fn flags_decision(target: &Target, change: &ExecChange, cfg: &Config) -> Option<Decision> {
    if !applies(target.gpu, cfg) || !change.any() {
        return None;
    }
    let none = Container::default();
    let c = target.container.unwrap_or(&none);
    let (profile, exception) = security::profile_for(c, &cfg.security, &cfg.capability_allowlist());
    if let Some((i, ex, _)) = exception.filter(|(_, e, _)| e.allow_privileged) {
        return Some(privileged_exception(target, change, i, &ex.describe()));
    }
    let mut findings = Vec::new();
    let outside: Vec<String> = change
        .caps
        .iter()
        .filter(|c| {
            crate::core::capability::normalize(c)
                .map_or(true, |n| !profile.capabilities.contains(&n))
        })
        .map(|c| esc(c))
        .collect();
    if !outside.is_empty() {
        findings.push(
            Finding::error(
                Check::Security,
                format!(
                    "runc exec --cap {} adds capabilities outside the container's security profile `{}` (security.capabilities)",
                    outside.join(", --cap "),
                    esc(&profile.name)
                ),
            )
            .with_fix("exec without --cap, or add the capability to the container's profile in the gpu-guard config"),
        );
    }
    let nnp = cfg.security.no_new_privileges || profile.force_no_new_privileges;
    if nnp && change.no_new_privs == Some(false) {
        findings.push(
            Finding::error(
                Check::Security,
                "runc exec --no-new-privs=false turns off no_new_privileges, which security.no_new_privileges requires",
            )
            .with_fix("exec without --no-new-privs=false"),
        );
    }
    findings.extend(label_findings(target, change));
    if profile.refuse_root && change.uid == Some(0) {
        findings.push(
            Finding::error(
                Check::Security,
                format!(
                    "runc exec --user runs the process as uid 0, and security profile `{}` refuses root",
                    esc(&profile.name)
                ),
            )
            .with_fix("exec as a non-root user (runc exec --user UID, docker exec --user UID)"),
        );
    }
    (!findings.is_empty()).then(|| {
        let mut d = verdict(target.gpu, target.id.clone(), findings, cfg);
        d.workload = target
            .container
            .and_then(|c| crate::core::workload::of(c.cri_facts()));
        d
    })
}

/// The decision for exec flags into a container whose exception lets it
/// run privileged (`allow_privileged = true`): what the container may be,
/// its execs may add, so the flags are not held to a profile (`--cap`,
/// `--no-new-privs=false`, `--user 0` and labels, as `docker exec
/// --privileged` into it would get); a warning names the exception. At
/// create such a container is left untouched only when it is privileged,
/// as here an exec cannot be narrowed, only refused, and refusing less
/// than the privileged exec the exception allows would protect nothing.
fn privileged_exception(target: &Target, change: &ExecChange, i: usize, which: &str) -> Decision {
    let mut flags: Vec<String> = change
        .caps
        .iter()
        .map(|c| format!("--cap {}", esc(c)))
        .collect();
    if let Some(nnp) = change.no_new_privs {
        flags.push(format!("--no-new-privs={nnp}"));
    }
    flags.extend(change.labels.iter().map(|(f, v)| format!("{f} {}", esc(v))));
    if let Some(uid) = change.uid {
        flags.push(format!("--user {uid}"));
    }
    let mut d = Decision::skip();
    d.container_id = target.id.clone();
    d.workload = target
        .container
        .and_then(|c| crate::core::workload::of(c.cri_facts()));
    d.gpu_container = target.gpu;
    d.verdict = Verdict::Allow;
    d.findings.push(Finding::warning(
        Check::Security,
        format!(
            "runc exec {} is allowed: security.exceptions[{i}] ({}) lets the container run privileged, so its execs are not held to a security profile",
            flags.join(" "),
            esc(which)
        ),
    ));
    d
}

/// `--process-label` and `--apparmor` other than the container's own.
fn label_findings(target: &Target, change: &ExecChange) -> Vec<Finding> {
    let mut out = Vec::new();
    for (flag, given) in &change.labels {
        let own = target.own_labels.map(|(selinux, apparmor)| match *flag {
            "--process-label" => selinux,
            _ => apparmor,
        });
        if own == Some(given.as_str()) {
            continue;
        }
        out.push(
            Finding::error(
                Check::Security,
                format!(
                    "runc exec {flag} {} runs the process under a security label other than the container's own ({})",
                    esc(given),
                    own.map(esc).unwrap_or_else(|| "unknown".into())
                ),
            )
            .with_fix(format!("exec without {flag}")),
        );
    }
    out
}

/// Refuse in enforce mode; otherwise the exec runs and the findings say
/// what enforce would have done.
fn verdict(gpu: bool, id: Option<String>, findings: Vec<Finding>, cfg: &Config) -> Decision {
    let mut d = Decision::skip();
    d.container_id = id;
    d.gpu_container = gpu;
    d.findings = findings;
    if cfg.mode.refuses() {
        d.verdict = Verdict::Refuse;
    } else {
        d.verdict = Verdict::Allow;
        d.findings.push(Finding::info(
            Check::Config,
            "mode = \"warn\": gpu-guard would refuse this exec; it runs anyway",
        ));
    }
    if cfg.mode == Mode::Audit {
        d.findings.push(crate::core::decide::audit_note());
    }
    d
}

/// The decision for `runc exec --process FILE`: the process (`process`,
/// built from the file) judged under the container's profile: its
/// annotations are the container's (a process file has none), and a GPU
/// exec (`target.gpu`: the container, or the process itself, asks for
/// GPUs) gets the main process's tuning variables from the container's
/// env. None when the policy does not apply (the file runs as it is).
pub fn process_decision(process: &Container, target: &Target, cfg: &Config) -> Option<Decision> {
    let gpu = target.gpu;
    if !applies(gpu, cfg) {
        return None;
    }
    let mut c = process.clone();
    if let Some(own) = target.container {
        c.annotations = own.annotations.clone();
        c.cri_runtime = own.cri_runtime;
    }
    let mut d = crate::core::decide::security_only(&c, gpu, cfg, SpecAccess::Edit);
    if gpu && d.verdict != Verdict::Refuse {
        if let Some(own) = target.container {
            d.edits.env = tuning_from_bundle(&own.env, &c.env, cfg);
        }
    }
    Some(d)
}

/// The tuning variables of the main process (`bundle`, the container's
/// config.json as edited at create) that the exec process (`process`)
/// lacks. containerd (CRI ExecSync, pkg/cri/server/container_execsync.go)
/// and docker (moby daemon/exec.go) build the exec process from their own
/// copy of the spec, not from the bundle the wrapper edited, so it would
/// miss them. Only names of the policy's tuning rules are considered; a
/// rule whose `unless_env` the exec process sets is skipped, as it was at
/// create. A variable the exec process sets keeps its value.
fn tuning_from_bundle(
    bundle: &Env,
    process: &Env,
    cfg: &Config,
) -> serde_json::Map<String, serde_json::Value> {
    let mut add = serde_json::Map::new();
    if !cfg.tuning.enabled {
        return add;
    }
    for rule in &cfg.tuning.env {
        if process.contains(&rule.name) || rule.unless_env.iter().any(|u| process.contains(u)) {
            continue;
        }
        if let Some(v) = bundle.get(&rule.name) {
            add.insert(rule.name.clone(), serde_json::Value::String(v.to_string()));
        }
    }
    add
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::Exception;

    #[test]
    fn exec_gets_the_main_process_tuning_but_keeps_its_own_values() {
        let cfg = Config::default();
        let bundle = Env::from_entries([
            "PATH=/bin",
            "CUDA_DEVICE_ORDER=PCI_BUS_ID",
            "CUDA_DEVICE_MAX_CONNECTIONS=8",
            "TF_GPU_ALLOCATOR=cuda_malloc_async",
            "NOT_A_TUNING_VAR=x",
        ]);
        let process = Env::from_entries(["PATH=/bin", "TF_GPU_ALLOCATOR=cuda_malloc"]);
        let add = tuning_from_bundle(&bundle, &process, &cfg);
        let got: Vec<(&str, &str)> = add
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
                ("CUDA_DEVICE_MAX_CONNECTIONS", "8"),
            ]
        );
    }

    #[test]
    fn exec_tuning_respects_unless_env_and_tuning_off() {
        let mut cfg = Config::default();
        let bundle = Env::from_entries(["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]);
        let process = Env::from_entries(["PYTORCH_ALLOC_CONF=x"]);
        assert!(tuning_from_bundle(&bundle, &process, &cfg).is_empty());
        cfg.tuning.enabled = false;
        assert!(tuning_from_bundle(&bundle, &Env::default(), &cfg).is_empty());
    }

    /// A container in namespace `ops` whose exception grants `docker-default`
    /// (which keeps CAP_NET_RAW), under the `restricted` default profile,
    /// made by containerd as the wrapper's runtime root tells.
    fn restricted_with_exception() -> (Config, Container) {
        let mut cfg = Config::default();
        cfg.security.profile = "restricted".into();
        cfg.security.exceptions.push(Exception {
            namespace: Some("ops".into()),
            profile: Some("docker-default".into()),
            ..Default::default()
        });
        let mut c = Container {
            cri_runtime: Some(crate::core::cri_facts::CriRuntime::Containerd),
            ..Default::default()
        };
        for (k, v) in [
            ("io.kubernetes.cri.container-type", "container"),
            ("io.kubernetes.cri.sandbox-namespace", "ops"),
        ] {
            c.annotations.insert(k.into(), v.into());
        }
        (cfg, c)
    }

    #[test]
    fn flags_are_held_to_the_containers_exception_profile() {
        let (cfg, c) = restricted_with_exception();
        let change = ExecChange {
            caps: vec!["CAP_NET_RAW".into()],
            ..Default::default()
        };
        let target = Target {
            id: None,
            container: Some(&c),
            own_labels: None,
            gpu: true,
        };
        // docker-default keeps CAP_NET_RAW: the exception's profile decides.
        assert_eq!(flags_decision(&target, &change, &cfg), None);
        // Without the exception, restricted (the default) refuses it.
        let plain = Container::default();
        let target = Target {
            id: None,
            container: Some(&plain),
            own_labels: None,
            gpu: true,
        };
        let d = flags_decision(&target, &change, &cfg).unwrap();
        assert_eq!(d.verdict, Verdict::Refuse);
        assert!(d.findings[0].message.contains("`restricted`"), "{d:?}");
    }

    #[test]
    fn an_allow_privileged_exception_lets_exec_flags_through_with_a_warning() {
        let (mut cfg, mut c) = restricted_with_exception();
        c.cri_runtime = Some(crate::core::cri_facts::CriRuntime::Containerd);
        cfg.security.exceptions[0].allow_privileged = true;
        let change = ExecChange {
            caps: vec!["CAP_SYS_ADMIN".into()],
            no_new_privs: Some(false),
            uid: Some(0),
            ..Default::default()
        };
        let target = Target {
            id: None,
            container: Some(&c),
            own_labels: None,
            gpu: true,
        };
        let d = flags_decision(&target, &change, &cfg).unwrap();
        assert_eq!(d.verdict, Verdict::Allow, "{d:?}");
        assert!(
            d.findings[0].message.contains("security.exceptions[0]"),
            "{d:?}"
        );
        assert!(
            d.findings[0].message.contains("--cap CAP_SYS_ADMIN"),
            "{d:?}"
        );
        // The same container without evidence of its CRI runtime: held to
        // restricted, refused.
        c.cri_runtime = None;
        let target = Target {
            id: None,
            container: Some(&c),
            own_labels: None,
            gpu: true,
        };
        let d = flags_decision(&target, &change, &cfg).unwrap();
        assert_eq!(d.verdict, Verdict::Refuse, "{d:?}");
    }

    #[test]
    fn user_0_is_held_to_refuse_root() {
        let mut cfg = Config::default();
        cfg.security.profile = "restricted".into();
        let c = Container::default();
        let target = Target {
            id: None,
            container: Some(&c),
            own_labels: None,
            gpu: true,
        };
        let root = ExecChange {
            uid: Some(0),
            ..Default::default()
        };
        let d = flags_decision(&target, &root, &cfg).unwrap();
        assert_eq!(d.verdict, Verdict::Refuse);
        assert!(d.findings[0].message.contains("uid 0"), "{d:?}");
        let user = ExecChange {
            uid: Some(1000),
            ..Default::default()
        };
        assert_eq!(flags_decision(&target, &user, &cfg), None);
        cfg.security.restricted_refuse_root = false;
        assert_eq!(flags_decision(&target, &root, &cfg), None);
        // The default profile (gpu-guard) does not refuse root.
        assert_eq!(flags_decision(&target, &root, &Config::default()), None);
    }

    #[test]
    fn a_profile_that_forces_no_new_privileges_holds_exec_to_it() {
        let mut cfg = Config::default();
        cfg.security.no_new_privileges = false;
        let c = Container::default();
        let target = Target {
            id: None,
            container: Some(&c),
            own_labels: None,
            gpu: true,
        };
        let off = ExecChange {
            no_new_privs: Some(false),
            ..Default::default()
        };
        assert_eq!(flags_decision(&target, &off, &cfg), None);
        cfg.security.profile = "restricted".into();
        assert_eq!(
            flags_decision(&target, &off, &cfg).unwrap().verdict,
            Verdict::Refuse
        );
    }

    #[test]
    fn the_process_file_keeps_the_containers_exception_for_a_cpu_container() {
        let (mut cfg, c) = restricted_with_exception();
        cfg.security.apply_to = ApplyTo::All;
        let mut process = Container::default();
        process.capabilities.bounding = Some(vec!["CAP_CHOWN".into(), "CAP_NET_RAW".into()]);
        let target = Target {
            id: None,
            container: Some(&c),
            own_labels: None,
            gpu: false,
        };
        let d = process_decision(&process, &target, &cfg).unwrap();
        assert!(d.edits.capabilities_dropped.is_empty(), "{d:?}");
        let target = Target {
            id: None,
            container: None,
            own_labels: None,
            gpu: false,
        };
        let d = process_decision(&process, &target, &cfg).unwrap();
        assert_eq!(
            d.edits.capabilities_dropped,
            vec!["CAP_CHOWN", "CAP_NET_RAW"]
        );
    }
}
