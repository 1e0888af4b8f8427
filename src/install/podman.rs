//! podman: the `precreate` hook file, which lets gpu-guard edit the config
//! (env, capabilities, no_new_privileges) before podman hands it to the
//! runtime. Nothing else in podman's configuration changes.
//!
//! Where it goes: CRI-O reads /usr/share/containers/oci/hooks.d by default
//! (see crio.rs) and refuses a hooks.d file with a stage it does not know,
//! such as `precreate` (podman passes `precreate` as an extension stage to
//! containers/common pkg/hooks; CRI-O passes none). So the precreate file
//! goes in /etc/containers/oci/hooks.d, which CRI-O does not read unless its
//! `hooks_dir` names it; `install podman` refuses when it does.
//!
//! podman reads only the directories of containers.conf `[engine] hooks_dir`,
//! whose built-in default is /usr/share/containers/oci/hooks.d alone
//! (containers/common pkg/config default.go; seen with podman 4.3.1 on
//! Debian 12: a hook file in /etc/containers/oci/hooks.d does not run). So
//! `install podman` also writes a containers.conf drop-in that keeps the
//! directories podman reads now and adds ours. CRI-O does not read
//! containers.conf.

use toml_edit::{DocumentMut, Item};

pub const DEFAULT_HOOKS_DIR: &str = "/etc/containers/oci/hooks.d";
/// containers.conf(5): the distribution's file, then the admin's; each is
/// followed by its `.d` directory of drop-ins, read in lexical order.
pub const CONTAINERS_CONF: [&str; 2] = [
    "/usr/share/containers/containers.conf",
    "/etc/containers/containers.conf",
];
/// The drop-in `install podman` writes; last in lexical order, so it wins.
pub const CONF_DROP_IN: &str = "/etc/containers/containers.conf.d/99-gpu-guard.conf";
/// `[engine] hooks_dir` when no containers.conf sets it.
pub const BUILTIN_HOOKS_DIRS: [&str; 1] = ["/usr/share/containers/oci/hooks.d"];

/// The drop-in's text: podman's hook directories as they are, plus `ours`.
pub fn drop_in_text(current: &[String], ours: &str) -> String {
    let mut dirs: Vec<String> = current.to_vec();
    if !dirs.iter().any(|d| d == ours) {
        dirs.push(ours.to_string());
    }
    let list = dirs
        .iter()
        .map(|d| format!("  {},", toml_edit::Value::from(d.as_str())))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        "# Written by `gpu-guard install podman`; removed by `gpu-guard uninstall podman`.\n\
         # podman reads hooks only from these directories; gpu-guard's precreate hook is\n\
         # in {ours}, where CRI-O (which refuses precreate hooks) does not look.\n\
         [engine]\nhooks_dir = [\n{list}\n]\n"
    )
}

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
    fn drop_in_keeps_the_current_dirs_and_adds_ours() {
        let t = drop_in_text(
            &["/usr/share/containers/oci/hooks.d".into()],
            DEFAULT_HOOKS_DIR,
        );
        assert_eq!(
            configured_hooks_dirs([t.as_str()]),
            Some(vec![
                "/usr/share/containers/oci/hooks.d".to_string(),
                DEFAULT_HOOKS_DIR.to_string()
            ])
        );
        let t2 = drop_in_text(&[DEFAULT_HOOKS_DIR.into()], DEFAULT_HOOKS_DIR);
        assert_eq!(configured_hooks_dirs([t2.as_str()]).unwrap().len(), 1);
    }

    #[test]
    fn hooks_dir_is_read_from_the_engine_table() {
        assert_eq!(configured_hooks_dirs(["#hooks_dir = [\"/x\"]\n"]), None);
        assert_eq!(
            configured_hooks_dirs(["[engine]\nhooks_dir = [\"/x\"]\n", "[engine]\n"]),
            Some(vec!["/x".to_string()])
        );
    }
}
