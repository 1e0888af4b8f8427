//! podman: the `precreate` hook file, which lets gpu-guard edit the config
//! (env, capabilities, no_new_privileges) before podman hands it to the
//! runtime. Nothing else in podman's configuration changes.
//!
//! Where it goes: rootful podman with no `hooks_dir` in containers.conf
//! reads /usr/share/containers/oci/hooks.d and /etc/containers/oci/hooks.d
//! (podman libpod/container_internal.go, `setupOCIHooks`: `hooks.DefaultDir,
//! hooks.OverrideDir`), while CRI-O reads only /usr/share/containers/oci/hooks.d
//! by default (see crio.rs) and refuses a hooks.d file with a stage it does
//! not know, such as `precreate` (podman passes `precreate` as an extension
//! stage to containers/common pkg/hooks; CRI-O passes none). So the
//! precreate file goes in /etc/containers/oci/hooks.d, which CRI-O does not
//! read unless its `hooks_dir` names it; `install podman` refuses when it does.

use toml_edit::{DocumentMut, Item};

pub const DEFAULT_HOOKS_DIR: &str = "/etc/containers/oci/hooks.d";
/// containers.conf(5): the distribution's file, then the admin's.
pub const CONTAINERS_CONF: [&str; 2] = [
    "/usr/share/containers/containers.conf",
    "/etc/containers/containers.conf",
];

/// `[engine] hooks_dir` as containers.conf files (in reading order) set it;
/// `None` when none does (podman then reads its two default directories).
/// A file that is not valid TOML is skipped: podman's own problem to report.
pub fn configured_hooks_dirs<'a>(files: impl IntoIterator<Item = &'a str>) -> Option<Vec<String>> {
    let mut out = None;
    for text in files {
        let Ok(doc) = text.parse::<DocumentMut>() else {
            continue;
        };
        if let Some(dirs) = doc
            .get("engine")
            .and_then(|e| e.get("hooks_dir"))
            .and_then(Item::as_array)
        {
            out = Some(
                dirs.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_dir_is_read_from_the_engine_table() {
        assert_eq!(configured_hooks_dirs(["#hooks_dir = [\"/x\"]\n"]), None);
        assert_eq!(
            configured_hooks_dirs(["[engine]\nhooks_dir = [\"/x\"]\n", "[engine]\n"]),
            Some(vec!["/x".to_string()])
        );
    }
}
