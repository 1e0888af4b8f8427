//! Security profiles (named capability allowlists) and the scoped
//! exceptions that grant one to chosen containers.
//!
//! A profile is what a container may keep: a capability allowlist, whether
//! `no_new_privileges` is forced, whether uid 0 is refused. The host policy
//! (`[security] profile`) names the default one; an exception
//! (`[[security.exceptions]]`) names another for the containers it
//! selects, or lets them run privileged.
//!
//! Exceptions select by facts the container cannot forge: the Kubernetes
//! namespace, pod name and image that the CRI runtime writes into the OCI
//! spec itself, believed only when the runtime that made the container is
//! known from outside the spec; never an env var or an annotation a pod
//! author chooses (see [`crate::core::cri_facts`]).

use crate::core::capability;
use crate::core::container::Container;
pub use crate::core::cri_facts::CriFacts;
use crate::core::policy::{Config, Exception, ProfileDef, SecurityConfig};

/// Docker's default capabilities (moby oci/caps/defaults.go,
/// `DefaultCapabilities`): 14, in moby's order.
pub const DOCKER_DEFAULT: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// The capabilities the Kubernetes Pod Security Standard "baseline" lets a
/// container add (kubernetes.io/docs/concepts/security/pod-security-standards,
/// "Capabilities"; k8s.io/pod-security-admission policy/check_capabilities_baseline.go):
/// Docker's default set without NET_RAW.
pub const BASELINE: [&str; 13] = [
    "CAP_AUDIT_WRITE",
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_MKNOD",
    "CAP_NET_BIND_SERVICE",
    "CAP_SETFCAP",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_SETUID",
    "CAP_SYS_CHROOT",
];

/// gpu-guard's own default: Docker's set without NET_RAW, MKNOD,
/// AUDIT_WRITE and SETFCAP (config/config.toml says why for each).
pub const GPU_GUARD: [&str; 10] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_NET_BIND_SERVICE",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_SETUID",
    "CAP_SYS_CHROOT",
];

/// Pod Security Standard "restricted": every capability dropped, only
/// NET_BIND_SERVICE may be added back; privilege escalation disallowed
/// (allowPrivilegeEscalation = false is no_new_privileges); runAsNonRoot.
const RESTRICTED: [&str; 1] = ["CAP_NET_BIND_SERVICE"];

/// The built-in profile names, in the order the docs list them.
const BUILTIN_NAMES: [&str; 4] = ["docker-default", "baseline", "gpu-guard", "restricted"];

/// A profile, resolved: what a container it applies to may keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    /// Normalized (`CAP_` prefix, upper case), sorted, deduplicated.
    pub capabilities: Vec<String>,
    /// Forces `process.noNewPrivileges = true` whatever
    /// `security.no_new_privileges` says.
    pub force_no_new_privileges: bool,
    /// Refuses a container whose process runs as uid 0.
    pub refuse_root: bool,
}

fn normalized<'a>(caps: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut v: Vec<String> = caps.into_iter().filter_map(capability::normalize).collect();
    v.sort();
    v.dedup();
    v
}

/// A built-in profile by name.
fn builtin(name: &str, sec: &SecurityConfig) -> Option<Profile> {
    let (caps, force_nnp, refuse_root): (&[&str], bool, bool) = match name {
        "docker-default" => (&DOCKER_DEFAULT, false, false),
        "baseline" => (&BASELINE, false, false),
        "gpu-guard" => (&GPU_GUARD, false, false),
        "restricted" => (&RESTRICTED, true, sec.restricted_refuse_root),
        _ => return None,
    };
    Some(Profile {
        name: name.to_string(),
        capabilities: normalized(caps.iter().copied()),
        force_no_new_privileges: force_nnp,
        refuse_root,
    })
}

fn defined(name: &str, def: &ProfileDef) -> Profile {
    Profile {
        name: name.to_string(),
        capabilities: normalized(def.capabilities.iter().map(String::as_str)),
        force_no_new_privileges: def.no_new_privileges,
        refuse_root: def.refuse_root,
    }
}

/// A profile by name: built-in, then `[security.profiles.NAME]`.
pub fn lookup(name: &str, sec: &SecurityConfig) -> Option<Profile> {
    builtin(name, sec).or_else(|| sec.profiles.get(name).map(|d| defined(name, d)))
}

/// The host's default profile: `security.profile`, with its capability
/// list replaced by `security.capabilities` when that key is set (the
/// older key stays valid and wins, so an existing config keeps its list).
pub fn default_profile(sec: &SecurityConfig) -> Profile {
    let mut p = lookup(&sec.profile, sec).unwrap_or_else(|| {
        // validate() refuses an unknown name; a config built in code
        // without it gets gpu-guard's own list rather than nothing.
        builtin("gpu-guard", sec).unwrap_or(Profile {
            name: sec.profile.clone(),
            capabilities: Vec::new(),
            force_no_new_privileges: false,
            refuse_root: false,
        })
    });
    if let Some(caps) = &sec.capabilities {
        p.capabilities = normalized(caps.iter().map(String::as_str));
    }
    p
}

impl Config {
    /// The capability allowlist of the default profile, normalized
    /// (`CAP_` prefix, upper case), sorted: `security.capabilities` when
    /// set, else the list of `security.profile`.
    pub fn capability_allowlist(&self) -> Vec<String> {
        default_profile(&self.security).capabilities
    }
}

/// Checks profile names and definitions (no I/O): the default and every
/// exception's profile exist, a defined profile does not shadow a
/// built-in, its capabilities are known, and every exception selects
/// something and grants something.
pub fn validate(sec: &SecurityConfig) -> Result<(), String> {
    for (name, def) in &sec.profiles {
        if BUILTIN_NAMES.contains(&name.as_str()) {
            return Err(format!(
                "key `security.profiles.{name}`: `{name}` is a built-in profile and cannot be redefined; choose another name"
            ));
        }
        for (i, cap) in def.capabilities.iter().enumerate() {
            if capability::parse(cap).is_none() {
                return Err(format!(
                    "key `security.profiles.{name}.capabilities[{i}]`: unknown capability `{cap}`"
                ));
            }
        }
    }
    let known = || {
        let mut names: Vec<String> = BUILTIN_NAMES.iter().map(|s| s.to_string()).collect();
        names.extend(sec.profiles.keys().cloned());
        names.join(", ")
    };
    if lookup(&sec.profile, sec).is_none() {
        return Err(format!(
            "key `security.profile`: unknown profile `{}` (known: {})",
            sec.profile,
            known()
        ));
    }
    for (i, ex) in sec.exceptions.iter().enumerate() {
        if ex.namespace.is_none() && ex.pod.is_none() && ex.image.is_none() && ex.handler.is_none()
        {
            return Err(format!(
                "key `security.exceptions[{i}]`: selects every container; give at least one of namespace, pod, image, handler (to change the policy for all containers, set security.profile)"
            ));
        }
        if ex.profile.is_none() && !ex.allow_privileged {
            return Err(format!(
                "key `security.exceptions[{i}]`: grants nothing; set profile or allow_privileged = true"
            ));
        }
        for (key, v) in [
            ("namespace", &ex.namespace),
            ("pod", &ex.pod),
            ("image", &ex.image),
            ("handler", &ex.handler),
        ] {
            if v.as_deref() == Some("") {
                return Err(format!(
                    "key `security.exceptions[{i}].{key}`: empty; leave the key out to match any {key}"
                ));
            }
        }
        if let Some(p) = &ex.profile {
            if lookup(p, sec).is_none() {
                return Err(format!(
                    "key `security.exceptions[{i}].profile`: unknown profile `{p}` (known: {})",
                    known()
                ));
            }
        }
    }
    Ok(())
}

/// `*` any run of characters, `?` one character, anything else itself.
pub fn glob_match(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = s.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

impl Exception {
    /// Whether this exception selects a container with these facts: every
    /// selector given matches; a fact the runtime did not record matches
    /// no selector.
    pub fn matches(&self, f: &CriFacts) -> bool {
        let sel = |pat: &Option<String>, fact: &Option<String>| match pat {
            None => true,
            Some(p) => fact.as_deref().is_some_and(|v| glob_match(p, v)),
        };
        sel(&self.namespace, &f.namespace)
            && sel(&self.pod, &f.pod)
            && sel(&self.image, &f.image)
            && sel(&self.handler, &f.handler)
    }

    /// `namespace=gpu-operator pod=nvidia-*`, for messages.
    pub fn describe(&self) -> String {
        [
            ("namespace", &self.namespace),
            ("pod", &self.pod),
            ("image", &self.image),
            ("handler", &self.handler),
        ]
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(" ")
    }
}

/// The first exception that selects the container, with its index.
pub fn matching_exception<'a>(
    c: &Container,
    sec: &'a SecurityConfig,
) -> Option<(usize, &'a Exception, CriFacts)> {
    if sec.exceptions.is_empty() {
        return None;
    }
    let facts = c.cri_facts();
    sec.exceptions
        .iter()
        .enumerate()
        .find(|(_, e)| e.matches(&facts))
        .map(|(i, e)| (i, e, facts.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("gpu-operator", "gpu-operator"));
        assert!(!glob_match("gpu-operator", "gpu-operator2"));
        assert!(glob_match("nvidia-*", "nvidia-driver-daemonset-x"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match(
            "nvcr.io/nvidia/*:*",
            "nvcr.io/nvidia/driver:550"
        ));
        assert!(glob_match("*a*b", "xxaxxb"));
        assert!(!glob_match("*a*b", "xxaxxbc"));
    }
}
