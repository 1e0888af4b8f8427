//! k3s and RKE2: their embedded containerd reads a `config.toml` that k3s
//! (RKE2) writes anew at every start, from a Go template when there is one:
//! `/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl` (RKE2:
//! `/var/lib/rancher/rke2/...`; `config-v3.toml.tmpl` for the containerd
//! 2.x config), which is used instead of k3s's own (k3s docs, "Configuring
//! containerd"). An edit of `config.toml` is lost at the next start, so
//! `install containerd --config-path ...tmpl` edits the template.
//!
//! A template that is plain TOML (a copy of a rendered `config.toml`) is
//! edited as any containerd config (plan.rs). A Go template, or one that
//! does not exist yet, gets a block of its own appended: k3s's templates
//! define k3s's whole configuration as `{{ template "base" . }}` (k3s
//! pkg/agent/templates/templates.go, `ParseTemplateFromConfig`; k3s
//! v1.24.17, v1.25.13, v1.26.8, v1.27.5, v1.28.1 and later), so a new
//! template is that line and the block, and k3s's settings stay k3s's. The
//! block adds only gpu-guard's runtime tables (TOML lets a table that the
//! base does not define come later), with `SystemdCgroup = {{ .SystemdCgroup
//! }}` so the cgroup driver follows k3s's own choice. The default runtime is
//! in a table the base defines, so `--set-default` is refused: k3s and
//! RKE2 set it with their `--default-runtime` flag (`default-runtime:` in
//! their config.yaml).

use std::path::{Path, PathBuf};

use super::{cri_plugin, parse, version as config_version, ContainerdError, Ours, RUNTIME_NAME};

const BEGIN: &str = "# BEGIN gpu-guard: written by `gpu-guard install containerd`; `gpu-guard uninstall containerd` removes it";
const END: &str = "# END gpu-guard";
/// What a new template holds before the block: k3s's own configuration.
pub const BASE: &str = "{{ template \"base\" . }}";

/// Where k3s and RKE2 keep their containerd config (k3s docs,
/// "Configuring containerd"; RKE2 docs, "Configuring containerd"), in the
/// order install looks for them.
pub const DISTRO_DIRS: [&str; 2] = [
    "/var/lib/rancher/k3s/agent/etc/containerd",
    "/var/lib/rancher/rke2/agent/etc/containerd",
];

/// The containerd config install edits when none is named: on a k3s or
/// RKE2 node (its rendered `config.toml` is there, under `host_root`) the
/// template k3s renders it from: an existing `config-v3.toml.tmpl` or
/// `config.toml.tmpl`, else the one k3s reads for the rendered version
/// (`config-v3.toml.tmpl` for a version 3 config, containerd 2.x: k3s
/// pkg/agent/containerd/config.go, `setupContainerdConfig`); else `None`
/// (containerd's own `/etc/containerd/config.toml`).
pub fn detect(fs_path: &dyn Fn(&Path) -> PathBuf) -> Option<PathBuf> {
    DISTRO_DIRS.iter().find_map(|dir| {
        let dir = Path::new(dir);
        let rendered_host = dir.join("config.toml");
        let rendered_text = std::fs::read_to_string(fs_path(&rendered_host)).ok()?;
        let existing = ["config-v3.toml.tmpl", "config.toml.tmpl"]
            .iter()
            .map(|n| dir.join(n))
            .find(|t| fs_path(t).exists());
        Some(existing.unwrap_or_else(
            || match version(&rendered_host, Some(&rendered_text)) >= 3 {
                true => dir.join("config-v3.toml.tmpl"),
                false => dir.join("config.toml.tmpl"),
            },
        ))
    })
}

/// A k3s/RKE2 template path (`*.tmpl`).
pub fn is_template(host: &Path) -> bool {
    host.extension().is_some_and(|e| e == "tmpl")
}

/// A template gpu-guard edits with a block: a Go template, or none yet.
pub fn needs_block(host: &Path, text: Option<&str>) -> bool {
    is_template(host) && text.map_or(true, |t| t.contains("{{"))
}

/// The file k3s and RKE2 render their templates to, beside them.
pub fn rendered(host: &Path) -> PathBuf {
    host.with_file_name("config.toml")
}

/// The config version the template renders: the rendered file's, else
/// from the name (`config-v3.toml.tmpl` is the containerd 2.x config).
pub fn version(host: &Path, rendered_text: Option<&str>) -> i64 {
    let from_rendered = rendered_text
        .and_then(|t| parse(Some(t)).ok())
        .and_then(|d| config_version(&d).ok().flatten());
    let named_v3 = host
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("config-v3"));
    from_rendered.unwrap_or(if named_v3 { 3 } else { 2 })
}

/// The service to restart so k3s or RKE2 renders the template again.
pub fn restart_hint(host: &Path) -> Option<&'static str> {
    let s = host.to_string_lossy();
    if s.contains("/rancher/rke2/") {
        Some("systemctl restart rke2-server (rke2-agent on agent nodes)")
    } else if s.contains("/rancher/k3s/") {
        Some("systemctl restart k3s (k3s-agent on agent nodes)")
    } else if is_template(host) {
        Some("restart k3s or RKE2 (they render the template at start)")
    } else {
        None
    }
}

/// gpu-guard's block for `version`: the runtime tables install writes,
/// over a copy of the rendered config's runtime settings (`rendered_text`),
/// with the cgroup driver left to the template.
pub fn block(
    version: i64,
    ours: Ours,
    rendered_text: Option<&str>,
) -> Result<String, ContainerdError> {
    let plugin = cri_plugin(version);
    let source = rendered_text
        .and_then(|t| parse(Some(t)).ok())
        .and_then(|d| super::lookup(d.as_table(), &["plugins", plugin]).cloned());
    let mut doc = toml_edit::DocumentMut::new();
    super::add_runtime(&mut doc, source.as_ref(), plugin, ours, false)?;
    if let Some(o) = super::descend(
        doc.as_table_mut(),
        &[
            "plugins",
            plugin,
            "containerd",
            "runtimes",
            RUNTIME_NAME,
            "options",
        ],
        false,
    )? {
        o.remove("SystemdCgroup");
    }
    let mut lines: Vec<String> = vec![BEGIN.to_string()];
    for line in doc.to_string().lines() {
        lines.push(line.to_string());
        if line.starts_with('[') && line.trim_end().ends_with(".options]") {
            lines.push("SystemdCgroup = {{ .SystemdCgroup }}".to_string());
        }
    }
    lines.push(END.to_string());
    Ok(lines.join("\n") + "\n")
}

/// The template without gpu-guard's block, and whether it had one.
fn without_block(text: &str) -> (String, bool) {
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        return (text.to_string(), false);
    };
    if e < b {
        return (text.to_string(), false);
    }
    let after = text[e + END.len()..]
        .strip_prefix('\n')
        .unwrap_or(&text[e + END.len()..]);
    let before = text[..b].trim_end_matches('\n');
    let joined = match (before.is_empty(), after.is_empty()) {
        (true, _) => after.to_string(),
        (false, true) => format!("{before}\n"),
        (false, false) => format!("{before}\n{after}"),
    };
    (joined, true)
}

/// The template with `block` in place of any earlier one (appended).
pub fn install_text(before: Option<&str>, block: &str) -> Result<String, ContainerdError> {
    let rest = match before {
        None => format!("{BASE}\n"),
        Some(t) => without_block(t).0,
    };
    let theirs = [
        format!("runtimes.{RUNTIME_NAME}]"),
        format!("runtimes.\"{RUNTIME_NAME}\"]"),
        format!("runtimes.'{RUNTIME_NAME}']"),
    ];
    if theirs.iter().any(|t| rest.contains(t.as_str())) {
        return Err(ContainerdError::Shape(format!(
            "a `{RUNTIME_NAME}` runtime outside gpu-guard's block (remove it: install writes its own)"
        )));
    }
    let sep = if rest.ends_with("\n\n") || rest.is_empty() {
        ""
    } else if rest.ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    };
    Ok(format!("{rest}{sep}{block}"))
}

/// The template once uninstalled: the block gone; `None` when what is
/// left is only the base line install wrote (the file goes, when install
/// created it).
pub fn uninstall_text(before: &str) -> Option<String> {
    let (rest, _) = without_block(before);
    (rest.trim() != BASE && !rest.trim().is_empty()).then_some(rest)
}

/// Whether the template holds gpu-guard's block (the drift check).
pub fn has_block(text: &str) -> bool {
    without_block(text).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_over_the_base_and_back() {
        let ours = Ours {
            binary: "/opt/gpu-guard/bin/gpu-guard-runtime",
            root: "/run/gpu-guard/containerd",
        };
        let b = block(2, ours, None).unwrap();
        assert!(
            b.contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu-guard]"),
            "{b}"
        );
        assert!(
            b.contains("BinaryName = \"/opt/gpu-guard/bin/gpu-guard-runtime\""),
            "{b}"
        );
        assert!(b.contains("SystemdCgroup = {{ .SystemdCgroup }}"), "{b}");
        let t = install_text(None, &b).unwrap();
        assert!(
            t.starts_with("{{ template \"base\" . }}\n\n# BEGIN gpu-guard"),
            "{t}"
        );
        assert_eq!(
            install_text(Some(&t), &b).unwrap(),
            t,
            "a second install changes nothing"
        );
        assert_eq!(uninstall_text(&t), None);
        let theirs = format!("{BASE}\n[plugins.x]\n  y = 1\n");
        let with = install_text(Some(&theirs), &b).unwrap();
        assert_eq!(uninstall_text(&with).as_deref(), Some(theirs.as_str()));
        let v3 = block(3, ours, None).unwrap();
        assert!(v3.contains("\"io.containerd.cri.v1.runtime\""), "{v3}");
        let clash = format!(
            "{BASE}\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.\"gpu-guard\"]\n"
        );
        assert!(install_text(Some(&clash), &b).is_err());
    }
}
