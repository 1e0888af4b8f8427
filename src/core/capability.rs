//! Linux capability names as OCI specs spell them (`CAP_SYS_ADMIN`).

/// Capabilities by number (include/uapi/linux/capability.h, up to Linux 5.9).
pub const ALL: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// Capabilities 0..=37 (CAP_CHOWN .. CAP_AUDIT_READ) exist on every kernel
/// since 3.16; `docker run --privileged` and `podman --privileged` grant all of
/// them, so a spec holding every one is "privileged-style".
const PRIVILEGED_CORE: usize = 38;

/// `sys_admin`, `SYS_ADMIN` and `CAP_SYS_ADMIN` all name the same capability.
pub fn normalize(name: &str) -> Option<String> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("CAP_") {
        upper
    } else {
        format!("CAP_{upper}")
    };
    ALL.contains(&full.as_str()).then_some(full)
}

/// True when `caps` holds every capability a privileged container gets.
pub fn is_privileged_set<'a>(caps: impl IntoIterator<Item = &'a str>) -> bool {
    let held: std::collections::HashSet<String> = caps
        .into_iter()
        .map(|c| c.trim().to_ascii_uppercase())
        .collect();
    ALL[..PRIVILEGED_CORE].iter().all(|c| held.contains(*c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_spellings() {
        assert_eq!(normalize("sys_admin").as_deref(), Some("CAP_SYS_ADMIN"));
        assert_eq!(normalize("CAP_NET_RAW").as_deref(), Some("CAP_NET_RAW"));
        assert_eq!(normalize("NET_RAW").as_deref(), Some("CAP_NET_RAW"));
        assert_eq!(normalize("CAP_NOPE"), None);
        assert_eq!(normalize(""), None);
    }

    #[test]
    fn privileged_needs_all_core_caps() {
        assert!(is_privileged_set(ALL.iter().copied()));
        assert!(!is_privileged_set(
            ALL.iter().copied().filter(|c| *c != "CAP_SYS_ADMIN")
        ));
        assert!(!is_privileged_set(["CAP_SYS_ADMIN", "CAP_CHOWN"]));
    }
}
