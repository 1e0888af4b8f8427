//! The resource limits a container inherits when its spec sets none.
//!
//! runc applies only the `process.rlimits` a spec lists
//! (libcontainer/init_linux.go setupRlimits); every other limit of the
//! container's init is the one runc itself runs with, which the hooks
//! (children of runc) and the runtime wrapper (which execs runc) share.
//! A tuning rule that raises a limit the spec leaves out must start from
//! that value, or writing an entry would lower the hard limit it
//! inherits (`RLIMIT_STACK` is commonly soft 8 MiB, hard unlimited).

use crate::core::decision::Rlimit;
use nix::sys::resource::{getrlimit, Resource};
use std::collections::BTreeMap;

/// This process's limits of the given `RLIMIT_*` types, by name; a type
/// gpu-guard does not know, or a failed call, is left out. Unlimited is
/// u64::MAX, as runc's spec writes RLIM_INFINITY.
pub fn inherited(kinds: &[&str]) -> BTreeMap<String, Rlimit> {
    let mut out = BTreeMap::new();
    for kind in kinds {
        let r = match *kind {
            "RLIMIT_MEMLOCK" => Resource::RLIMIT_MEMLOCK,
            "RLIMIT_STACK" => Resource::RLIMIT_STACK,
            _ => continue,
        };
        if let Ok((soft, hard)) = getrlimit(r) {
            out.insert(kind.to_string(), Rlimit { soft, hard });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_limits() {
        let got = inherited(&["RLIMIT_STACK", "RLIMIT_MEMLOCK", "RLIMIT_NOPE"]);
        assert_eq!(got.len(), 2);
        let s = got["RLIMIT_STACK"];
        assert!(s.soft <= s.hard && s.soft > 0, "{s:?}");
    }
}
