//! Renders a decision for people: `check` output, the hook's stderr (which
//! runc and podman embed in their error), and the one-line form for the
//! runtime's `--log` file and syslog.

use crate::core::decision::{Decision, Severity, Verdict};
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
    let e = &d.edits;
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
    s
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

/// The one line a decision under `mode = "audit"` is logged as (syslog and
/// the runtime's `--log`, at warning level): what enforce would refuse, or
/// the edits it would make, and that nothing was done. None for a decision
/// enforce would neither refuse nor change (logged as usual).
pub fn audit_line(d: &Decision) -> Option<String> {
    let edits = if d.verdict == Verdict::Refuse {
        &d.withheld_edits
    } else {
        &d.edits
    };
    let line = match d.verdict {
        Verdict::Refuse => {
            refusal_line(d).replacen("gpu-guard refused", "gpu-guard would refuse", 1)
        }
        _ if !edits.is_empty() => {
            let who = match &d.container_id {
                Some(id) => format!("container {}", esc(id)),
                None => "the container".to_string(),
            };
            format!("gpu-guard would edit {who}:{}", edits_words(edits))
        }
        _ => return None,
    };
    Some(one_line(&format!(
        "audit: {line}; mode = \"audit\": nothing was refused or changed"
    )))
}

/// ` env+=A,B caps-=X nnp=true rlimits=R`, the edits in log-line words.
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
    s
}

/// The syslog line for a decision worth logging.
pub fn log_line(d: &Decision) -> String {
    let id = d
        .container_id
        .as_deref()
        .map(esc)
        .unwrap_or_else(|| "-".into());
    let mut s = format!(
        "container={id} verdict={} gpu={}",
        match d.verdict {
            Verdict::Allow => "allow",
            Verdict::Refuse => "refuse",
            Verdict::Skip => "skip",
        },
        d.gpu_container
    );
    if let Some(v) = &d.visible_gpus {
        let _ = write!(
            s,
            " gpus={}",
            v.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    if !d.edits.env.is_empty() {
        let _ = write!(
            s,
            " env+={}",
            d.edits.env.keys().cloned().collect::<Vec<_>>().join(",")
        );
    }
    if !d.edits.capabilities_dropped.is_empty() {
        let _ = write!(s, " caps-={}", d.edits.capabilities_dropped.join(","));
    }
    if d.edits.no_new_privileges {
        s.push_str(" nnp=true");
    }
    if !d.edits.rlimits.is_empty() {
        let _ = write!(
            s,
            " rlimits={}",
            d.edits
                .rlimits
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    for (dest, m) in &d.edits.mounts {
        let _ = write!(s, " mount={dest}:size={}", m.size);
    }
    for f in &d.findings {
        if f.severity != Severity::Info {
            let _ = write!(
                s,
                " | {} [{}] {}",
                severity_word(f.severity),
                f.check.as_str(),
                f.message
            );
        }
    }
    one_line(&s)
}
