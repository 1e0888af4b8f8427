//! Host security policy: `no_new_privileges` and a capability allowlist.
//!
//! runc hands the capability sets and noNewPrivileges to the container's init
//! before prestart/createRuntime hooks run (libcontainer/process_linux.go), so
//! only an entry point that runs before `create` (the runtime wrapper, podman's
//! precreate hook) can change them. The prestart hook can only verify.

use crate::core::capability;
use crate::core::container::{Capabilities, Container};
use crate::core::decision::{Check, Finding};
use crate::core::policy::{Exception, OnFailure, SecurityConfig};
use crate::core::profiles;
use crate::core::sanitize::esc;

/// Whether the entry point can change the spec or only check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecAccess {
    /// Runtime wrapper, podman precreate, `check` by default.
    Edit,
    /// Prestart/createRuntime hook: the container's process is already set up.
    Verify,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub findings: Vec<Finding>,
    /// Capabilities to remove from every set, sorted.
    pub dropped: Vec<String>,
    /// Set process.noNewPrivileges = true.
    pub no_new_privileges: bool,
}

const INSTALL_HINT: &str = "let gpu-guard apply the policy before the container is created: `gpu-guard install docker` (or containerd, crio) registers the runtime wrapper, `gpu-guard install podman` the precreate hook";

fn outside(caps: &Capabilities, allow: &[String]) -> Extra {
    Capabilities::SETS
        .iter()
        .filter_map(|set| {
            let extra: Vec<String> = caps
                .set(set)?
                .iter()
                .filter(|c| {
                    let n = capability::normalize(c).unwrap_or_else(|| c.to_string());
                    !allow.contains(&n)
                })
                .cloned()
                .collect();
            (!extra.is_empty()).then_some((*set, extra))
        })
        .collect()
}

/// The capabilities outside the allowlist, per set, and the set names.
type Extra = Vec<(&'static str, Vec<String>)>;

/// The security plan for a container: a privileged container gets only a
/// policy finding; otherwise the extras are dropped (edit stage) or
/// reported (verify stage).
///
/// `allow` is the default profile's allowlist
/// ([`crate::core::policy::Config::capability_allowlist`]). A matching
/// `[[security.exceptions]]` entry replaces the profile (and may let the
/// container be privileged); the plan then says which entry applied.
pub fn plan(c: &Container, cfg: &SecurityConfig, allow: &[String], stage: SpecAccess) -> Plan {
    let mut p = Plan::default();
    if let Some(why) = c.cri_conflict() {
        p.findings.push(conflict_finding(c, &why));
    }
    let (profile, exception) = profile_for(c, cfg, allow);
    if let Some((i, ex, _)) = &exception {
        p.findings.push(Finding::info(
            Check::Security,
            format!(
                "security exception security.exceptions[{i}] ({}) applies: profile `{}`{}",
                esc(&ex.describe()),
                esc(&profile.name),
                if ex.allow_privileged {
                    ", privileged allowed"
                } else {
                    ""
                }
            ),
        ));
    }
    let privileged = c
        .capabilities
        .bounding
        .as_ref()
        .is_some_and(|b| capability::is_privileged_set(b.iter().map(|s| s.as_str())));
    if privileged {
        let allowed_by_exception = exception
            .as_ref()
            .is_some_and(|(_, e, _)| e.allow_privileged);
        let policy = if allowed_by_exception {
            OnFailure::Allow
        } else {
            cfg.privileged
        };
        p.findings
            .push(privileged_finding(policy, c, allowed_by_exception));
        return p;
    }
    if profile.refuse_root && c.uid == Some(0) {
        p.findings.push(root_finding(&profile.name, c));
    }
    let no_new_privileges = cfg.no_new_privileges || profile.force_no_new_privileges;
    let extra = outside(&c.capabilities, &profile.capabilities);
    match stage {
        SpecAccess::Edit => {
            let mut dropped: Vec<String> =
                extra.iter().flat_map(|(_, e)| e.iter().cloned()).collect();
            dropped.sort();
            dropped.dedup();
            p.dropped = dropped;
            p.no_new_privileges = no_new_privileges;
        }
        SpecAccess::Verify => {
            if no_new_privileges && !c.no_new_privileges {
                p.findings.push(
                    Finding::error(
                        Check::Security,
                        "process.noNewPrivileges is not true, and host policy requires it for GPU containers",
                    )
                    .with_fix(format!(
                        "run with --security-opt no-new-privileges, or {INSTALL_HINT}"
                    )),
                );
            }
            if !extra.is_empty() {
                p.findings.push(extra_capabilities_finding(&extra));
            }
        }
    }
    p
}

/// The exception that selects a container: its index, the entry and the
/// CRI facts it matched.
pub type ExceptionMatch<'a> = (usize, &'a Exception, profiles::CriFacts);

/// The profile a container runs under: the one its `[[security.exceptions]]`
/// entry names, else the default profile with `allow` as its list; and the
/// exception, when one selects it. [`plan`] applies it to the container,
/// and `core::exec_policy` to what an exec adds.
pub fn profile_for<'a>(
    c: &Container,
    cfg: &'a SecurityConfig,
    allow: &[String],
) -> (profiles::Profile, Option<ExceptionMatch<'a>>) {
    let exception = profiles::matching_exception(c, cfg);
    let mut profile = profiles::default_profile(cfg);
    profile.capabilities = allow.to_vec();
    let granted = exception
        .as_ref()
        .and_then(|(_, ex, _)| ex.profile.as_deref())
        .and_then(|name| profiles::lookup(name, cfg));
    if let Some(granted) = granted {
        profile = granted;
    }
    (profile, exception)
}

/// How to exempt this container: a `[[security.exceptions]]` entry for its
/// namespace when the CRI runtime recorded one, else the general shape.
fn exception_hint(c: &Container, grant: &str) -> String {
    let facts = c.cri_facts();
    match &facts.namespace {
        Some(ns) => format!(
            "add a scoped exception to the gpu-guard config: [[security.exceptions]] namespace = \"{}\" {grant}",
            esc(ns)
        ),
        None => format!(
            "for Kubernetes pods, add a scoped exception to the gpu-guard config: [[security.exceptions]] namespace = \"NAMESPACE\" {grant}"
        ),
    }
}

/// The error for a spec whose CRI keys cannot all be the runtime's own
/// (core::cri_facts::conflict): someone else wrote some of them, so the
/// container is refused rather than judged on facts nobody can vouch for.
fn conflict_finding(c: &Container, why: &str) -> Finding {
    let rt = c.cri_runtime.map_or("the CRI runtime", |r| r.name());
    Finding::error(
        Check::Security,
        format!(
            "the container's annotations carry both containerd's and CRI-O's Kubernetes keys, and they disagree: {why}; keys {rt} did not write cannot select a security exception"
        ),
    )
    .with_fix("remove the other runtime's io.kubernetes.* annotations from the pod, and any pod_annotations / container_annotations pattern of the runtime that passes them through")
}

/// The error for uid 0 under a profile that refuses root.
fn root_finding(profile: &str, c: &Container) -> Finding {
    Finding::error(
        Check::Security,
        format!(
            "the container runs as uid 0, and security profile `{}` refuses root",
            esc(profile)
        ),
    )
    .with_fix(format!(
        "run it as a non-root user (docker --user, Kubernetes securityContext.runAsUser / runAsNonRoot), or {}",
        exception_hint(c, "profile = \"baseline\"")
    ))
}

/// The finding for a privileged container, per `security.privileged` (or
/// an exception that allows it). Separate because a privileged container
/// ends the plan: its capabilities and no_new_privileges are left alone
/// either way.
fn privileged_finding(policy: OnFailure, c: &Container, by_exception: bool) -> Finding {
    match policy {
        OnFailure::Refuse => Finding::error(
            Check::Security,
            "the container is privileged: its bounding set holds every capability",
        )
        .with_fix(format!(
            "run it without --privileged (add only the capabilities it needs), or {}, or set security.privileged = \"allow\" for every container",
            exception_hint(c, "allow_privileged = true")
        )),
        OnFailure::Allow if by_exception => Finding::warning(
            Check::Security,
            "the container is privileged: a security exception allows it, so its capabilities and no_new_privileges are left untouched",
        ),
        OnFailure::Allow => Finding::warning(
            Check::Security,
            "the container is privileged: host policy (security.privileged = \"allow\") leaves its capabilities and no_new_privileges untouched",
        ),
    }
}

/// The verify-stage error for capabilities outside the allowlist (`extra`
/// is not empty): the spec fields that hold them, and the `--cap-drop`
/// flags that remove them. Split out of [`plan`] as the only wording
/// step with its own grouping.
fn extra_capabilities_finding(extra: &Extra) -> Finding {
    let fields = extra_fields(extra);
    let mut all: Vec<&str> = extra
        .iter()
        .flat_map(|(_, e)| e.iter().map(|s| s.as_str()))
        .collect();
    all.sort_unstable();
    all.dedup();
    let drops: Vec<String> = all
        .iter()
        .map(|c| format!("--cap-drop {}", esc(c.trim_start_matches("CAP_"))))
        .collect();
    Finding::error(
        Check::Security,
        format!(
            "capabilities outside the host allowlist: {}",
            fields.join("; ")
        ),
    )
    .with_fix(format!("run with {}, or {INSTALL_HINT}", drops.join(" ")))
}

/// One phrase per group of capability sets holding the same extras:
/// `process.capabilities.{bounding,effective,permitted} hold ...`.
fn extra_fields(extra: &Extra) -> Vec<String> {
    let mut groups: Vec<(Vec<&str>, &Vec<String>)> = Vec::new();
    for (set, caps) in extra {
        match groups.iter_mut().find(|(_, c)| *c == caps) {
            Some(g) => g.0.push(set),
            None => groups.push((vec![set], caps)),
        }
    }
    groups
        .iter()
        .map(|(sets, caps)| {
            let (name, verb) = if sets.len() == 1 {
                (sets[0].to_string(), "holds")
            } else {
                (format!("{{{}}}", sets.join(",")), "hold")
            };
            format!(
                "process.capabilities.{name} {verb} {}",
                esc(&caps.join(", "))
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::Config;

    fn container(bounding: &[&str], nnp: bool) -> Container {
        let mut c = Container::default();
        let v: Vec<String> = bounding.iter().map(|s| s.to_string()).collect();
        c.capabilities = Capabilities {
            bounding: Some(v.clone()),
            effective: Some(v.clone()),
            inheritable: None,
            permitted: Some(v),
            ambient: Some(vec![]),
        };
        c.no_new_privileges = nnp;
        c
    }

    #[test]
    fn edit_drops_what_is_outside() {
        let cfg = Config::default();
        let allow = cfg.capability_allowlist();
        let c = container(&["CAP_CHOWN", "CAP_NET_RAW", "CAP_MKNOD", "CAP_FOO"], false);
        let p = plan(&c, &cfg.security, &allow, SpecAccess::Edit);
        assert_eq!(p.dropped, vec!["CAP_FOO", "CAP_MKNOD", "CAP_NET_RAW"]);
        assert!(p.no_new_privileges);
        assert!(p.findings.is_empty());
    }

    #[test]
    fn verify_names_fields() {
        let cfg = Config::default();
        let allow = cfg.capability_allowlist();
        let c = container(&["CAP_CHOWN", "CAP_NET_RAW"], false);
        let p = plan(&c, &cfg.security, &allow, SpecAccess::Verify);
        assert_eq!(p.findings.len(), 2);
        assert!(p.findings[0].message.contains("noNewPrivileges"));
        assert!(p.findings[1]
            .message
            .contains("process.capabilities.{bounding,effective,permitted} hold CAP_NET_RAW"));
        assert!(p.findings[1]
            .fix
            .as_ref()
            .unwrap()
            .contains("gpu-guard install"));
        let ok = container(&["CAP_CHOWN"], true);
        assert!(plan(&ok, &cfg.security, &allow, SpecAccess::Verify)
            .findings
            .is_empty());
    }

    #[test]
    fn privileged_follows_policy() {
        let mut cfg = Config::default();
        let allow = cfg.capability_allowlist();
        let all = capability::all_names();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let c = container(&all, false);
        let p = plan(&c, &cfg.security, &allow, SpecAccess::Edit);
        assert_eq!(
            p.findings[0].severity,
            crate::core::decision::Severity::Error
        );
        cfg.security.privileged = OnFailure::Allow;
        let p = plan(&c, &cfg.security, &allow, SpecAccess::Edit);
        assert_eq!(
            p.findings[0].severity,
            crate::core::decision::Severity::Warning
        );
        assert!(p.dropped.is_empty() && !p.no_new_privileges);
    }
}
