//! Renders a decision for people: `check` output, the hook's stderr (which
//! runc and podman embed in their error), and the one-line form for the
//! runtime's `--log` file and syslog.

use crate::core::decision::{Decision, Severity, Verdict};
use crate::core::logfmt::Line;
use crate::core::policy::Mode;
use crate::core::sanitize::{esc, one_line};
use std::fmt::Write;

fn severity_word(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Allow => "ALLOW",
        Verdict::Refuse => "REFUSE",
        Verdict::Skip => "SKIP",
    }
}

/// The full text for people, several lines.
pub fn human(d: &Decision) -> String {
    let mut s = String::new();
    let who = match &d.container_id {
        Some(id) => format!("container {}", esc(id)),
        None => "container".to_string(),
    };
    let kind = if d.gpu_container {
        match &d.visible_gpus {
            Some(v) if v.is_empty() => "GPU container, no GPU visible".to_string(),
            Some(v) => format!(
                "GPU container, GPUs {}",
                v.iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            None => "GPU container".to_string(),
        }
    } else {
        "not a GPU container".to_string()
    };
    let _ = writeln!(s, "{}: {who} ({kind})", verdict_word(d.verdict));
    if let Some(src) = &d.host_source {
        let _ = writeln!(s, "  host: {src}");
    }
    for f in &d.findings {
        let _ = writeln!(
            s,
            "  {:<7} [{}] {}",
            severity_word(f.severity),
            f.check.as_str(),
            f.title()
        );
        for line in &f.details {
            let _ = writeln!(s, "          - {line}");
        }
        if let Some(fix) = &f.fix {
            let _ = writeln!(s, "          fix: {fix}");
        }
    }
    human_edits(&mut s, &d.edits);
    s
}

/// The edits' lines of [`human`], one `  edit: ...` line each.
fn human_edits(s: &mut String, e: &crate::core::decision::Edits) {
    if !e.env.is_empty() {
        let vars: Vec<String> = e
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect();
        let _ = writeln!(s, "  edit: add env {}", vars.join(" "));
    }
    if !e.capabilities_dropped.is_empty() {
        let _ = writeln!(s, "  edit: drop {}", e.capabilities_dropped.join(" "));
    }
    if e.no_new_privileges {
        let _ = writeln!(s, "  edit: no_new_privileges = true");
    }
    for (kind, r) in &e.rlimits {
        let v = |n: u64| {
            if n == u64::MAX {
                "unlimited".to_string()
            } else {
                n.to_string()
            }
        };
        let _ = writeln!(
            s,
            "  edit: rlimit {kind} soft={} hard={}",
            v(r.soft),
            v(r.hard)
        );
    }
    for (dest, m) in &e.mounts {
        let _ = writeln!(
            s,
            "  edit: mount {dest} size={} ({})",
            m.size,
            crate::core::tuning::shm::human(m.size)
        );
    }
    if let Some(c) = &e.cpuset {
        let _ = writeln!(s, "  edit: cpuset cpus={} mems={}", c.cpus, c.mems);
    }
}

/// What a refusing hook prints on stderr: why, then how to fix it.
pub fn refusal(d: &Decision) -> String {
    let mut s = String::new();
    let who = match &d.container_id {
        Some(id) => format!("container {}", esc(id)),
        None => "this container".to_string(),
    };
    let _ = writeln!(s, "gpu-guard refused to start {who}:");
    for f in d.errors() {
        let _ = writeln!(s, "  [{}] {}", f.check.as_str(), f.title());
        for line in &f.details {
            let _ = writeln!(s, "    - {line}");
        }
        if let Some(fix) = &f.fix {
            let _ = writeln!(s, "    fix: {fix}");
        }
    }
    s
}

/// One line: the runtime `--log` entry (containerd shows it as
/// `OCI runtime create failed: <msg>`) and syslog.
pub fn refusal_line(d: &Decision) -> String {
    let who = match &d.container_id {
        Some(id) => format!("container {}", esc(id)),
        None => "the container".to_string(),
    };
    let parts: Vec<String> = d
        .errors()
        .map(|f| match &f.fix {
            Some(fix) => format!("[{}] {} (fix: {})", f.check.as_str(), f.message, fix),
            None => format!("[{}] {}", f.check.as_str(), f.message),
        })
        .collect();
    one_line(&format!("gpu-guard refused {who}: {}", parts.join("; ")))
}

/// ` env+=A=1,B=2 caps-=X nnp=true rlimits=R mounts=/dev/shm:size=N`,
/// the edits in log-line words.
fn edits_words(e: &crate::core::decision::Edits) -> String {
    let mut s = String::new();
    if !e.env.is_empty() {
        let vars: Vec<String> = e
            .env
            .iter()
            .map(|(k, v)| format!("{}={}", esc(k), esc(v.as_str().unwrap_or_default())))
            .collect();
        let _ = write!(s, " env+={}", vars.join(","));
    }
    if !e.capabilities_dropped.is_empty() {
        let _ = write!(s, " caps-={}", e.capabilities_dropped.join(","));
    }
    if e.no_new_privileges {
        s.push_str(" nnp=true");
    }
    if !e.rlimits.is_empty() {
        let r: Vec<&str> = e.rlimits.keys().map(String::as_str).collect();
        let _ = write!(s, " rlimits={}", r.join(","));
    }
    for (dest, m) in &e.mounts {
        let _ = write!(s, " mounts={}:size={}", esc(dest), m.size);
    }
    if let Some(c) = &e.cpuset {
        let _ = write!(s, " cpuset={}/{}", c.cpus, c.mems);
    }
    s
}

/// The record of a decision made under `mode` (syslog, the runtime's
/// `--log`), in core::logfmt's one format for every mode:
///
/// `verdict=refuse mode=enforce container=ID namespace=NS pod=POD
/// container_name=NAME image=REF gpu=true gpus=0,1 check=requirement
/// findings="error [requirement] ..."`
///
/// - `verdict`: allow, refuse, skip, or would_refuse (audit and warn:
///   enforce would have refused it, and it starts);
/// - `namespace`, `pod`, `container_name`, `image`: only where the CRI
///   runtime's record of them is believed (core::workload);
/// - `check`: the check of the first error finding, or `none`, as the
///   metrics' label;
/// - `edits`: what gpu-guard changed; `would_edit` under audit: what
///   enforce would have changed, and nothing was;
/// - `findings`: the errors and warnings, `SEVERITY [CHECK] MESSAGE`
///   joined by ` | `.
pub fn log_line(d: &Decision, mode: Mode) -> String {
    let mut l = Line::new()
        .field("verdict", d.outcome(mode))
        .field("mode", mode.name())
        .untrusted("container", d.container_id.as_deref().unwrap_or("-"));
    if let Some(w) = &d.workload {
        l = l
            .untrusted_opt("namespace", w.namespace.as_deref())
            .untrusted_opt("pod", w.pod.as_deref())
            .untrusted_opt("container_name", w.container.as_deref())
            .untrusted_opt("image", w.image.as_deref());
    }
    l = l.field("gpu", d.gpu_container);
    if let Some(v) = &d.visible_gpus {
        let gpus: Vec<String> = v.iter().map(|i| i.to_string()).collect();
        l = l.field("gpus", gpus.join(","));
    }
    let check = d.errors().next().map_or("none", |f| f.check.as_str());
    l = l.field("check", check);
    let (key, edits) = match (mode, d.verdict) {
        (Mode::Audit, Verdict::Refuse) => ("would_edit", &d.withheld_edits),
        (Mode::Audit, _) => ("would_edit", &d.edits),
        _ => ("edits", &d.edits),
    };
    let words = edits_words(edits);
    if !words.is_empty() {
        l = l.field(key, words.trim_start());
    }
    let findings: Vec<String> = d
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .map(|f| {
            format!(
                "{} [{}] {}",
                severity_word(f.severity),
                f.check.as_str(),
                f.message
            )
        })
        .collect();
    if !findings.is_empty() {
        l = l.field("findings", findings.join(" | "));
    }
    l.finish()
}

/// The level a decision's record is logged at: `error` for a refusal;
/// `warning` for what audit or warn let start and enforce would refuse,
/// for what audit would have edited, and for a decision with a warning;
/// else `info`.
pub fn log_level(d: &Decision, mode: Mode) -> Severity {
    let would_edit = mode == Mode::Audit && !log_edits(d, mode).is_empty();
    match d.outcome(mode) {
        "refuse" => Severity::Error,
        "would_refuse" => Severity::Warning,
        _ if would_edit || d.findings.iter().any(|f| f.severity >= Severity::Warning) => {
            Severity::Warning
        }
        _ => Severity::Info,
    }
}

fn log_edits(d: &Decision, mode: Mode) -> &crate::core::decision::Edits {
    if mode == Mode::Audit && d.verdict == Verdict::Refuse {
        &d.withheld_edits
    } else {
        &d.edits
    }
}
