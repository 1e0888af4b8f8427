//! Linux capability names as OCI specs spell them (`CAP_SYS_ADMIN`).
//!
//! Names and numbers come from the `caps` crate, which follows
//! include/uapi/linux/capability.h (up to CAP_CHECKPOINT_RESTORE, Linux 5.9),
//! so the names gpu-guard prints and the bits a kernel shows in
//! /proc/PID/status (CapEff, CapBnd) cannot drift apart.
//!
//! Only the config's allowlist is validated strictly ([`parse`]). A
//! container spec may name capabilities this table does not know: runc
//! accepts them with a warning (libcontainer/capabilities), so callers keep
//! such names as written.

use caps::Capability;

/// Capabilities 0..=37 (CAP_CHOWN .. CAP_AUDIT_READ) exist on every kernel
/// since 3.16; `docker run --privileged` and `podman --privileged` grant all of
/// them, so a spec holding every one is "privileged-style".
const PRIVILEGED_CORE: u8 = 38;

/// `sys_admin`, `SYS_ADMIN`, `cap_sys_admin` and `CAP_SYS_ADMIN` all name
/// the same capability. None for a name the kernel does not define.
pub fn parse(name: &str) -> Option<Capability> {
    caps::to_canonical(name.trim()).parse().ok()
}

/// The canonical spelling (`CAP_SYS_ADMIN`) of a known capability name.
pub fn normalize(name: &str) -> Option<String> {
    parse(name).map(|c| c.to_string())
}

/// Every known capability, in kernel number order.
pub fn all() -> Vec<Capability> {
    let mut all: Vec<Capability> = caps::all().into_iter().collect();
    all.sort_by_key(Capability::index);
    all
}

/// The names of every known capability, in kernel number order.
pub fn all_names() -> Vec<String> {
    all().iter().map(ToString::to_string).collect()
}

/// The bitmask /proc/PID/status prints for these names (CapEff, CapBnd:
/// bit N is capability N). Unknown names add nothing; validate with
/// [`parse`] first where that matters.
pub fn mask<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> u64 {
    names
        .into_iter()
        .filter_map(|n| parse(n.as_ref()))
        .fold(0, |m, c| m | c.bitmask())
}

/// The names of the known capabilities set in `mask`, in kernel number order.
pub fn decode(mask: u64) -> Vec<String> {
    all()
        .into_iter()
        .filter(|c| mask & c.bitmask() != 0)
        .map(|c| c.to_string())
        .collect()
}

/// True when `caps` holds every capability a privileged container gets.
/// Only `CAP_`-prefixed names count (any case), as runc reads them.
pub fn is_privileged_set<'a>(caps: impl IntoIterator<Item = &'a str>) -> bool {
    let core = (1u64 << PRIVILEGED_CORE) - 1;
    let prefixed = caps
        .into_iter()
        .filter(|c| c.trim().to_ascii_uppercase().starts_with("CAP_"));
    mask(prefixed) & core == core
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_spellings() {
        assert_eq!(normalize("sys_admin").as_deref(), Some("CAP_SYS_ADMIN"));
        assert_eq!(normalize("cap_sys_admin").as_deref(), Some("CAP_SYS_ADMIN"));
        assert_eq!(normalize("CAP_NET_RAW").as_deref(), Some("CAP_NET_RAW"));
        assert_eq!(normalize("NET_RAW").as_deref(), Some("CAP_NET_RAW"));
        assert_eq!(normalize(" Net_Raw ").as_deref(), Some("CAP_NET_RAW"));
        assert_eq!(normalize("CAP_NOPE"), None);
        assert_eq!(normalize(""), None);
        assert_eq!(normalize("CAP_"), None);
    }

    #[test]
    fn table_is_the_kernels() {
        let names = all_names();
        assert_eq!(names.len(), 41);
        assert_eq!(names[0], "CAP_CHOWN");
        assert_eq!(names[21], "CAP_SYS_ADMIN");
        assert_eq!(names[37], "CAP_AUDIT_READ");
        assert_eq!(names[40], "CAP_CHECKPOINT_RESTORE");
    }

    #[test]
    fn masks_match_proc_status() {
        // Docker's default set, as /proc/self/status prints it (CapEff).
        let docker = crate::core::profiles::DOCKER_DEFAULT;
        assert_eq!(mask(docker), 0x00000000a80425fb);
        assert_eq!(mask(["chown", "nope"]), 1);
        assert_eq!(mask(all_names()), 0x000001ffffffffff);
        let mut sorted = docker.map(String::from).to_vec();
        sorted.sort_by_key(|n| parse(n).map(|c| c.index()));
        assert_eq!(decode(0x00000000a80425fb), sorted);
        assert!(decode(0).is_empty());
        // Bits past the table (a newer kernel) are not named.
        assert_eq!(decode(1 << 63), Vec::<String>::new());
    }

    #[test]
    fn privileged_needs_all_core_caps() {
        let all = all_names();
        assert!(is_privileged_set(all.iter().map(String::as_str)));
        assert!(!is_privileged_set(
            all.iter()
                .map(String::as_str)
                .filter(|c| *c != "CAP_SYS_ADMIN")
        ));
        assert!(!is_privileged_set(["CAP_SYS_ADMIN", "CAP_CHOWN"]));
        let lower: Vec<String> = all.iter().map(|c| c.to_lowercase()).collect();
        assert!(is_privileged_set(lower.iter().map(String::as_str)));
        let bare: Vec<String> = all.iter().map(|c| c[4..].to_string()).collect();
        assert!(!is_privileged_set(bare.iter().map(String::as_str)));
    }
}
