//! The judgement of resolved CDI devices against the host ([`judge`]) and
//! the host-wide audit of the spec directories ([`audit`]).

use super::{
    driver_version_in, split_name, CdiSpecs, Cut, DeviceNode, Edits, HostPaths, Index, NotChecked,
    PathState, Resolved, SpecEntry, SpecState, AMD_KIND, GENERATED_KINDS, MAX_DEVICES,
};
use crate::core::decision::{Check, Finding, Severity};
use crate::core::sanitize::esc;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The most distinct CDI devices of one container gpu-guard checks (each
/// costs a lookup and a few stats). A container that asks for more is
/// refused, naming the bound: a bound never turns the check off.
pub const MAX_CHECKED: usize = 1024;

/// Problems named one by one in a finding's details; the rest are counted.
const MAX_NAMED: usize = 8;

/// What one spec's edits lack on this host, for the container's devices.
#[derive(Debug, Default)]
struct Lacks {
    /// (path, version) tied to another driver than the running one.
    stale: Vec<(String, String)>,
    /// What is missing, as a phrase ("mount /x", "device node /dev/y").
    missing: Vec<String>,
    /// Device nodes of an AMD spec whose numbers are not the host's, as a
    /// phrase ("/dev/kfd is 510:0 in the spec, 511:0 on this host").
    nodes: Vec<String>,
}

/// Checks one set of edits against the host; `amd`: of AMD's kind, whose
/// described device nodes must be the host's ([`AMD_KIND`]).
fn check_edits(
    edits: &Edits,
    driver: Option<&str>,
    host: &dyn HostPaths,
    amd: bool,
    lacks: &mut Lacks,
) {
    let stale_or = |p: &str, lacks: &mut Lacks| -> bool {
        match (driver_version_in(p), driver) {
            (Some(v), Some(d)) if v != d => {
                lacks.stale.push((p.to_string(), v.to_string()));
                true
            }
            _ => false,
        }
    };
    for m in edits.mounts.iter().flatten() {
        let Some(p) = m.host_path.as_deref().filter(|p| p.starts_with('/')) else {
            continue;
        };
        if !stale_or(p, lacks) && host.state(p, false) == PathState::Missing {
            lacks.missing.push(format!("mount {p}"));
        }
    }
    for d in edits.device_nodes.iter().flatten() {
        // With its type and major number given, the runtime creates the
        // node without looking at the host (fillMissingInfo).
        let described = d.kind.as_deref().is_some_and(|k| !k.is_empty())
            && (d.major.unwrap_or(0) != 0 || d.kind.as_deref() == Some("p"));
        let Some(p) = d.host_path.as_deref().or(d.path.as_deref()) else {
            continue;
        };
        if described && amd && p.starts_with('/') {
            node_numbers(d, p, host, lacks);
            continue;
        }
        if described || !p.starts_with('/') {
            continue;
        }
        match host.state(p, true) {
            PathState::Missing => lacks.missing.push(format!("device node {p}")),
            PathState::Other => lacks
                .missing
                .push(format!("device node {p} (not a device)")),
            _ => {}
        }
    }
    for h in edits.hooks.iter().flatten() {
        for a in h.args.iter().flatten() {
            if let (Some(v), Some(d)) = (a.strip_prefix("--host-driver-version="), driver) {
                if v != d {
                    lacks
                        .stale
                        .push((format!("hook argument {a}"), v.to_string()));
                }
            }
        }
        let Some(p) = h.path.as_deref().filter(|p| p.starts_with('/')) else {
            continue;
        };
        if host.state(p, false) == PathState::Missing {
            lacks.missing.push(format!("hook {p}"));
        }
    }
}

/// An AMD spec's described character device against the host's node at
/// the same path: missing, not a device, or other numbers.
fn node_numbers(d: &DeviceNode, p: &str, host: &dyn HostPaths, lacks: &mut Lacks) {
    if d.kind.as_deref() != Some("c") {
        return;
    }
    let (major, minor) = (d.major.unwrap_or(0), d.minor.unwrap_or(0));
    match host.state(p, false) {
        PathState::Missing => lacks.missing.push(format!("device node {p}")),
        PathState::Other => lacks
            .missing
            .push(format!("device node {p} (not a device)")),
        PathState::Device => {
            let Some((hmaj, hmin)) = host.char_numbers(p) else {
                return;
            };
            let same =
                u64::try_from(major).ok() == Some(hmaj) && u64::try_from(minor).ok() == Some(hmin);
            if !same {
                lacks.nodes.push(format!(
                    "{p} is {major}:{minor} in the spec, {hmaj}:{hmin} on this host"
                ));
            }
        }
        PathState::Unknown(_) => {}
    }
}

/// `nvidia-ctk cdi generate --output=PATH` for the spec at `path` (the
/// toolkit's `--format` follows the file's extension only when given), and
/// NVIDIA's refresh unit where it is installed
/// (deployments/systemd/nvidia-cdi-refresh.service, which writes
/// /var/run/cdi/nvidia.yaml).
fn regenerate(path: &str, kind: &str, refresh_unit: bool) -> String {
    if kind == AMD_KIND {
        // amd-ctk writes JSON whatever the name (internal/cdi `WriteSpec`).
        return format!(
            "regenerate the spec for this host's devices: amd-ctk cdi generate --output={}",
            esc(path)
        );
    }
    let format = if path.ends_with(".json") {
        " --format=json"
    } else {
        ""
    };
    let mut fix = format!(
        "regenerate the spec for the running driver: nvidia-ctk cdi generate --output={}{format}",
        esc(path)
    );
    if refresh_unit {
        fix.push_str(", or systemctl restart nvidia-cdi-refresh.service");
    }
    fix
}

fn listed(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let all: Vec<String> = items.into_iter().collect();
    let mut out: Vec<String> = all.iter().take(MAX_NAMED).map(|s| esc(s)).collect();
    if all.len() > MAX_NAMED {
        out.push(format!("{} more", all.len() - MAX_NAMED));
    }
    out
}

/// The findings for what one spec (of `kind`) edits lack.
fn lack_findings(
    path: &str,
    kind: &str,
    what: &str,
    lacks: Lacks,
    driver: Option<&str>,
    severity: Severity,
    refresh_unit: bool,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let fix = regenerate(path, kind, refresh_unit);
    if let Some(first) = lacks.nodes.first() {
        out.push(
            Finding::new(
                Check::Host,
                severity,
                format!(
                    "CDI spec {} describes device nodes this host no longer has ({}{}): {what} would get nodes that reach no GPU, or another GPU than asked for (amdkfd draws its major at each boot; render minors move when GPUs change)",
                    esc(path),
                    esc(first),
                    if lacks.nodes.len() > 1 { ", ..." } else { "" }
                ),
            )
            .with_fix(fix.clone())
            .with_details(listed(lacks.nodes.iter().cloned())),
        );
    }
    if let Some((first, _)) = lacks.stale.first() {
        let old: BTreeSet<&str> = lacks.stale.iter().map(|(_, v)| v.as_str()).collect();
        let old: Vec<&str> = old.into_iter().collect();
        out.push(
            Finding::new(
                Check::Host,
                severity,
                format!(
                    "CDI spec {} was generated for NVIDIA driver {}, but this host runs {}: {what} would get the old driver's files ({}{}) and fail to start",
                    esc(path),
                    old.join(", "),
                    esc(driver.unwrap_or("?")),
                    esc(first),
                    if lacks.stale.len() > 1 { ", ..." } else { "" }
                ),
            )
            .with_fix(fix.clone())
            .with_details(listed(lacks.stale.iter().map(|(p, _)| p.clone()))),
        );
    }
    if let Some(first) = lacks.missing.first() {
        out.push(
            Finding::new(
                Check::Host,
                severity,
                format!(
                    "CDI spec {} names {} that this host does not have ({}{}): {what} would fail to start with `no such file or directory`",
                    esc(path),
                    if lacks.missing.len() == 1 { "a path".to_string() } else { format!("{} paths", lacks.missing.len()) },
                    esc(first),
                    if lacks.missing.len() > 1 { ", ..." } else { "" }
                ),
            )
            .with_fix(fix)
            .with_details(listed(lacks.missing)),
        );
    }
    out
}

/// What [`judge`] gathers over the requested devices.
#[derive(Default)]
struct Gathered<'a> {
    out: Vec<Finding>,
    /// Per spec file (and its kind): the devices whose edits were
    /// checked, and what lacks.
    checked: Vec<(&'a str, &'a str, Vec<String>, Lacks)>,
    /// Spec files whose top-level edits were checked.
    seen_top: BTreeSet<&'a str>,
    /// Files not read that might change what a device gets, with the
    /// devices they might change.
    uncertain: BTreeMap<&'a str, BTreeSet<&'a str>>,
    /// Listings a bound cut short (indices into `CdiSpecs::cuts`), with
    /// the devices they might change.
    cut: BTreeMap<usize, BTreeSet<&'a str>>,
}

impl<'a> Gathered<'a> {
    /// Checks the edits of a device found in `e`'s spec `s`.
    fn found(
        &mut self,
        q: &str,
        e: &'a SpecEntry,
        s: &'a super::Spec,
        dev: &Edits,
        driver: Option<&str>,
        host: &dyn HostPaths,
    ) {
        let i = match self.checked.iter().position(|(p, _, _, _)| *p == e.path) {
            Some(i) => i,
            None => {
                self.checked
                    .push((&e.path, &s.kind, Vec::new(), Lacks::default()));
                self.checked.len() - 1
            }
        };
        let (_, _, devices, lacks) = &mut self.checked[i];
        devices.push(q.to_string());
        let amd = s.kind == AMD_KIND;
        if self.seen_top.insert(&e.path) {
            check_edits(&s.edits, driver, host, amd, lacks);
        }
        check_edits(dev, driver, host, amd, lacks);
    }
}

/// The findings for a GPU container that asks for the CDI devices
/// `requested` (fully qualified names of NVIDIA kinds, as written): an
/// error for each device that cannot be resolved, or whose spec names
/// paths this host lacks or ties it to another driver than `driver`; an
/// error when a file that may define it was not read because of a bound,
/// or because others could have written it (then it is not parsed), or
/// when a bound cut the listing short; a warning for spec files that could
/// not be read and might define it. Every requested device is checked, up
/// to [`MAX_CHECKED`]; past that the container is refused.
pub fn judge(
    requested: &[String],
    specs: &CdiSpecs,
    driver: Option<&str>,
    host: &dyn HostPaths,
) -> Vec<Finding> {
    let wanted = checked_requests(requested);
    if wanted.len() > MAX_CHECKED {
        return vec![too_many_requested(wanted.len())];
    }
    let index = Index::of(specs);
    let host = Memo {
        inner: host,
        seen: RefCell::new(HashMap::new()),
    };
    let mut g = Gathered::default();
    for (q, kind, name) in wanted {
        let unread = unread_for(specs, kind);
        // Files not read (or not listed) from a directory as late as the
        // definition's may override it or clash with it; for a device not
        // found, any of them may define it.
        let from = match index.resolve(kind, name) {
            Resolved::Found(e, s, dev) => {
                g.found(q, e, s, dev, driver, &host);
                e.priority
            }
            Resolved::Conflict(files) => {
                g.out.push(conflict_finding(q, &files));
                continue;
            }
            Resolved::Missing if unread.is_empty() && specs.cuts.is_empty() => {
                g.out.push(missing_finding(q, kind, specs));
                continue;
            }
            Resolved::Missing => 0,
        };
        for u in unread.iter().filter(|u| u.priority >= from) {
            g.uncertain.entry(u.path.as_str()).or_default().insert(q);
        }
        for (i, _) in specs.cuts.iter().enumerate().filter(|(_, c)| c.to >= from) {
            g.cut.entry(i).or_default().insert(q);
        }
    }
    finish(g, specs, driver)
}

/// The distinct devices that need checking, as (name as written, kind,
/// device): a name CDI cannot parse asks for nothing here (CDI refuses
/// it), a kind NVIDIA's runtime generates afresh is never stale.
fn checked_requests(requested: &[String]) -> Vec<(&str, &str, &str)> {
    let mut seen = BTreeSet::new();
    requested
        .iter()
        .filter_map(|q| {
            let (kind, name) = split_name(q)?;
            (!GENERATED_KINDS.contains(&kind) && seen.insert(q.as_str())).then_some((
                q.as_str(),
                kind,
                name,
            ))
        })
        .collect()
}

/// The findings gathered: what the checked specs lack, then what was not
/// read (errors before warnings, so that no refusal is cut from the list).
fn finish(g: Gathered, specs: &CdiSpecs, driver: Option<&str>) -> Vec<Finding> {
    let mut out = g.out;
    for (path, kind, devices, mut lacks) in g.checked {
        dedup(&mut lacks);
        let what = devices.join(", ");
        out.extend(lack_findings(
            path,
            kind,
            &what,
            lacks,
            driver,
            Severity::Error,
            specs.refresh_unit,
        ));
    }
    for (i, devices) in &g.cut {
        out.push(cut_finding(&specs.cuts[*i], devices));
    }
    let entry = |p: &str| specs.entries.iter().find(|e| e.path == p);
    let (errors, warnings): (Vec<_>, Vec<_>) = g
        .uncertain
        .iter()
        .filter_map(|(p, devices)| Some((entry(p)?, devices)))
        .partition(|(e, _)| e.state.refuses_when_unread());
    for (e, devices) in errors.iter().take(MAX_NAMED) {
        out.push(unread_error(e, devices));
    }
    if errors.len() > MAX_NAMED {
        out.push(Finding::error(
            Check::Host,
            format!(
                "{} more CDI spec files that may define the container's CDI devices were not read",
                errors.len() - MAX_NAMED
            ),
        ));
    }
    for (e, _) in warnings.iter().take(MAX_NAMED) {
        out.push(not_read_finding(e, Severity::Warning));
    }
    out
}

/// The host's filesystem, each path asked once: every device of NVIDIA's
/// spec names the same nodes and libraries.
struct Memo<'h> {
    inner: &'h dyn HostPaths,
    seen: RefCell<HashMap<(String, bool), PathState>>,
}

impl HostPaths for Memo<'_> {
    fn char_numbers(&self, path: &str) -> Option<(u64, u64)> {
        self.inner.char_numbers(path)
    }

    fn state(&self, path: &str, nofollow: bool) -> PathState {
        let key = (path.to_string(), nofollow);
        if let Some(s) = self.seen.borrow().get(&key) {
            return s.clone();
        }
        let s = self.inner.state(path, nofollow);
        self.seen.borrow_mut().insert(key, s.clone());
        s
    }
}

fn too_many_requested(n: usize) -> Finding {
    Finding::error(
        Check::Host,
        format!(
            "the container asks for {n} CDI devices, more than gpu-guard checks ({MAX_CHECKED}): they were not checked, and a GPU container is not started unchecked"
        ),
    )
    .with_fix("ask for fewer CDI devices (`nvidia.com/gpu=all` names every GPU)")
}

fn cut_finding(c: &Cut, devices: &BTreeSet<&str>) -> Finding {
    Finding::error(
        Check::Host,
        format!(
            "{}: CDI device {} may be defined in a spec gpu-guard did not see, so it cannot be checked, and a GPU container is not started unchecked",
            esc(&c.message),
            listed(devices.iter().map(|d| d.to_string())).join(", ")
        ),
    )
    .with_fix("remove the spec files that are not CDI specs of this host from the CDI spec directories")
}

/// A file that may define the devices and was not read, where that must
/// refuse: past a bound, or of unknown authorship.
fn unread_error(e: &SpecEntry, devices: &BTreeSet<&str>) -> Finding {
    let devices = listed(devices.iter().map(|d| d.to_string())).join(", ");
    if e.state == SpecState::Untrusted {
        let why = e.untrusted.as_deref().unwrap_or("");
        return Finding::error(
            Check::Host,
            format!(
                "CDI device {devices} may come from {}, which others could have written ({}): gpu-guard does not read such a spec, and a CDI spec decides what is mounted into the container and which hooks run as root",
                esc(&e.path),
                esc(why)
            ),
        )
        .with_fix(format!(
            "make it root's: chown root {0} && chmod go-w {0} (and its directory), or remove it",
            esc(&e.path)
        ));
    }
    let f = not_read_finding(e, Severity::Error);
    Finding {
        message: format!(
            "{}; CDI device {devices} may be defined there, and a GPU container is not started unchecked",
            f.message
        ),
        ..f
    }
}

fn conflict_finding(device: &str, files: &[&str]) -> Finding {
    Finding::error(
        Check::Host,
        format!(
            "CDI device {} is defined in {}, all in one directory: CDI refuses a device defined twice, so the container would fail to start",
            esc(device),
            files.iter().map(|f| esc(f)).collect::<Vec<_>>().join(" and ")
        ),
    )
    .with_fix("remove all but one of the spec files that define it (nvidia-ctk cdi list shows the devices)")
}

/// Files that might define a device of `kind` but were not checked: those
/// that could not be read or were not (a bound, others could have written
/// them), and valid ones of that kind with too many devices.
fn unread_for<'a>(specs: &'a CdiSpecs, kind: &str) -> Vec<&'a SpecEntry> {
    specs
        .entries
        .iter()
        .filter(|e| match &e.state {
            SpecState::Unreadable(_) | SpecState::OverBound(_) | SpecState::Untrusted => true,
            SpecState::NotChecked(NotChecked::TooMany { kind: k, .. }) => k == kind,
            _ => false,
        })
        .collect()
}

fn missing_finding(device: &str, kind: &str, specs: &CdiSpecs) -> Finding {
    let fix = if kind == AMD_KIND {
        "generate the spec: amd-ctk cdi generate (amd-ctk cdi list shows the devices it defines: one per GPU, numbered in PCI bus order, and all)".to_string()
    } else if kind.starts_with("nvidia.com/") {
        "generate the spec: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (nvidia-ctk cdi list shows the devices it defines)".to_string()
    } else {
        format!(
            "check the tool that writes the CDI spec of kind {} (NVIDIA's device plugin writes k8s.device-plugin.nvidia.com/gpu)",
            esc(kind)
        )
    };
    let skipped = specs.entries.iter().filter_map(|e| match &e.state {
        SpecState::NotChecked(NotChecked::Invalid(why)) => {
            Some(format!("{} is not a valid CDI spec: {why}", e.path))
        }
        _ => None,
    });
    Finding::error(
        Check::Host,
        format!(
            "CDI device {} is not defined in any CDI spec in {}: the container would fail to start (unresolvable CDI devices)",
            esc(device),
            esc(&specs.dirs.join(", "))
        ),
    )
    .with_fix(fix)
    .with_details(listed(skipped))
}

fn not_read_finding(e: &SpecEntry, severity: Severity) -> Finding {
    let (what, fix) = match &e.state {
        SpecState::Unreadable(why) => (
            format!("CDI spec {} could not be read ({})", esc(&e.path), esc(why)),
            "make it a regular file root can read, or remove it",
        ),
        SpecState::NotChecked(NotChecked::TooMany { kind, devices }) => (
            format!(
                "CDI spec {} defines {devices} devices of {}, more than gpu-guard reads ({MAX_DEVICES})",
                esc(&e.path),
                esc(kind)
            ),
            "split it, or regenerate it with nvidia-ctk cdi generate",
        ),
        SpecState::NotChecked(NotChecked::Invalid(why)) => (
            format!(
                "CDI spec {} is not a valid CDI spec ({}): CDI runtimes skip it",
                esc(&e.path),
                esc(why)
            ),
            "fix or remove it",
        ),
        SpecState::OverBound(why) => (
            format!("CDI spec {} was not read ({})", esc(&e.path), esc(why)),
            "regenerate it (nvidia-ctk cdi generate writes a few KiB, nested a few levels), or remove it",
        ),
        SpecState::Untrusted => (
            format!(
                "CDI spec {} was not read: others could have written it ({})",
                esc(&e.path),
                esc(e.untrusted.as_deref().unwrap_or(""))
            ),
            "make it root's and not writable by group or others, or remove it",
        ),
        SpecState::Read(_) => (format!("CDI spec {}", esc(&e.path)), ""),
    };
    Finding::new(
        Check::Host,
        severity,
        format!("{what}; the devices it defines were not checked"),
    )
    .with_fix(fix)
}

/// `gpu-guard host`'s warnings about the spec directories: every problem
/// the reader met, every spec others could have written, and for each
/// spec of an NVIDIA kind (`kinds`) or AMD's what its devices lack on this
/// host.
pub fn audit(
    specs: &CdiSpecs,
    kinds: &[&str],
    driver: Option<&str>,
    host: &dyn HostPaths,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = specs
        .problems
        .iter()
        .map(|p| Finding::warning(Check::Host, p.clone()))
        .collect();
    for e in &specs.entries {
        if let Some(why) = &e.untrusted {
            out.push(
                Finding::warning(
                    Check::Host,
                    format!(
                        "CDI spec {} could be written by others ({}); gpu-guard does not read it, and GPU containers whose CDI devices it may define are refused",
                        esc(&e.path),
                        esc(why)
                    ),
                )
                .with_fix(format!("chown root {0} && chmod go-w {0}", esc(&e.path))),
            );
        }
        let SpecState::Read(s) = &e.state else {
            if e.state != SpecState::Untrusted {
                out.push(not_read_finding(e, Severity::Warning));
            }
            continue;
        };
        let amd = s.kind == AMD_KIND;
        if !(amd || kinds.contains(&s.kind.as_str())) || GENERATED_KINDS.contains(&s.kind.as_str())
        {
            continue;
        }
        let mut lacks = Lacks::default();
        check_edits(&s.edits, driver, host, amd, &mut lacks);
        for (_, d) in &s.devices {
            check_edits(d, driver, host, amd, &mut lacks);
        }
        dedup(&mut lacks);
        let what = format!("containers that use {}", esc(&s.kind));
        out.extend(lack_findings(
            &e.path,
            &s.kind,
            &what,
            lacks,
            driver,
            Severity::Warning,
            specs.refresh_unit,
        ));
    }
    out
}

/// Drops repeats (every device of NVIDIA's spec names the same nodes).
fn dedup(l: &mut Lacks) {
    let mut seen = BTreeSet::new();
    l.stale.retain(|(p, _)| seen.insert(p.clone()));
    let mut seen = BTreeSet::new();
    l.missing.retain(|p| seen.insert(p.clone()));
    let mut seen = BTreeSet::new();
    l.nodes.retain(|p| seen.insert(p.clone()));
}
