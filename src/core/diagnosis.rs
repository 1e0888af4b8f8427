//! Turns a failed requirement into a finding a person can act on.
//!
//! NVIDIA's hook says `unsatisfied condition: cuda>=12.4` whatever failed: it
//! prints the first alternative (libnvidia-container src/cli/dsl.c). Official
//! images carry thirty-odd alternatives, most of them forward-compatibility
//! terms for other GPU brands, so the real cause is easy to miss. Here every
//! alternative is accounted for, grouped by the reason it failed, with the
//! host value that made it fail, and the fix names the driver to install.

use crate::core::cuda_tables;
use crate::core::decision::{Check, Finding};
use crate::core::facts::{Gpu, HostFacts};
use crate::core::requirement::{Judgement, Key, Outcome, Requirement, TermResult};
use crate::core::sanitize::esc;
use crate::core::version::Version;

/// Most groups listed in the message; the rest are counted.
const MAX_GROUPS: usize = 6;
/// Most alternatives named inside one group line.
const MAX_NAMED: usize = 4;

/// A requirement that failed on some of the visible GPUs (None = no GPU).
pub struct Failure<'a> {
    pub requirement: &'a Requirement,
    pub failing: Vec<(Option<&'a Gpu>, Judgement)>,
}

/// Where it failed, for the message: "GPU 0 (NVIDIA A100, compute capability 8.0)".
fn where_text(failing: &[(Option<&Gpu>, Judgement)]) -> String {
    let gpus: Vec<&Gpu> = failing.iter().filter_map(|(g, _)| *g).collect();
    if gpus.is_empty() {
        return "this host".to_string();
    }
    let same_model = gpus
        .iter()
        .all(|g| g.name == gpus[0].name && g.compute_capability == gpus[0].compute_capability);
    if gpus.len() > 1 && same_model {
        let idx: Vec<String> = gpus.iter().map(|g| g.index.to_string()).collect();
        let first = gpus[0].describe();
        // "GPU 0 (X, cc)" → "GPUs 0, 1 (X, cc)"
        let detail = first.split_once(' ').map(|x| x.1).unwrap_or("");
        let detail = detail.split_once(' ').map(|x| x.1).unwrap_or("");
        format!("GPUs {} {}", idx.join(", "), detail)
    } else {
        gpus.iter()
            .map(|g| g.describe())
            .collect::<Vec<_>>()
            .join(" and ")
    }
}

fn reason(t: &TermResult) -> &str {
    match &t.outcome {
        Outcome::Fail(w) | Outcome::Unknown(w) => w,
        Outcome::Pass => "holds",
    }
}

/// Alternatives that failed for the same reason on the same key.
struct ReasonGroup<'a> {
    key: Option<Key>,
    why: String,
    terms: Vec<&'a TermResult>,
}

/// One line per group of alternatives that failed for the same reason.
fn group_lines(terms: &[TermResult]) -> Vec<String> {
    group_by_reason(terms).iter().map(group_line).collect()
}

/// Groups the alternatives by (key, reason) in first-seen order, then puts
/// the most telling groups first. Split from the wording: grouping decides
/// what is said, the `*_line` helpers how.
fn group_by_reason(terms: &[TermResult]) -> Vec<ReasonGroup<'_>> {
    let mut groups: Vec<ReasonGroup> = Vec::new();
    for t in terms {
        let r = reason(t).to_string();
        match groups.iter_mut().find(|g| g.key == t.key && g.why == r) {
            Some(g) => g.terms.push(t),
            None => groups.push(ReasonGroup {
                key: t.key,
                why: r,
                terms: vec![t],
            }),
        }
    }
    // Most telling first: cuda, arch, driver, then brand mismatches.
    let rank = |k: &Option<Key>| match k {
        Some(Key::Cuda) => 0,
        Some(Key::Arch) => 1,
        Some(Key::Driver) => 2,
        Some(Key::Brand) => 4,
        None => 3,
    };
    groups.sort_by_key(|g| rank(&g.key));
    groups
}

/// Words one group: a lone alternative is quoted whole; brand and driver
/// groups (the forward-compatibility terms of official images) are
/// summarised; any other group lists its alternatives.
fn group_line(g: &ReasonGroup) -> String {
    match g.key {
        _ if g.terms.len() == 1 => single_line(g.terms[0], g.key, &g.why),
        Some(Key::Brand) => brand_line(&g.terms, &g.why),
        Some(Key::Driver) => driver_line(&g.terms, &g.why),
        _ => alternatives_line(&g.terms, &g.why),
    }
}

/// A group of one alternative: the term and why, plus the failing factor
/// when the term has several factors and the factor is not a brand.
fn single_line(t: &TermResult, key: Option<Key>, why: &str) -> String {
    let multi_factor = t.term.contains(',');
    match (&t.factor, key, multi_factor) {
        (Some(f), Some(k), true) if k != Key::Brand => {
            format!("{}: {} (needs {})", esc(&t.term), why, esc(f))
        }
        _ => format!("{}: {}", esc(&t.term), why),
    }
}

/// Alternatives that failed on their brand: counted, with the brands named.
fn brand_line(ts: &[&TermResult], why: &str) -> String {
    let brands: Vec<String> = unique(
        ts.iter()
            .filter_map(|t| t.factor.as_deref())
            .map(|f| f.split_once('=').map(|x| x.1).unwrap_or(f).to_string()),
    );
    format!(
        "{} alternatives for other GPU brands ({}): {}",
        ts.len(),
        esc(&named(&brands)),
        why
    )
}

/// Alternatives that failed on the driver. Official images carry
/// brand=X,driver>=B,driver<B+1 per forward-compatible branch B: name the
/// branches (and brands); without branches, list the alternatives.
fn driver_line(ts: &[&TermResult], why: &str) -> String {
    let branches = unique(ts.iter().flat_map(|t| {
        t.term
            .split(',')
            .filter_map(|f| f.strip_prefix("driver>="))
            .map(|v| v.split('.').next().unwrap_or(v).to_string())
            .collect::<Vec<_>>()
    }));
    let brands = unique(ts.iter().flat_map(|t| {
        t.term
            .split(',')
            .filter_map(|f| f.strip_prefix("brand="))
            .map(String::from)
            .collect::<Vec<_>>()
    }));
    let for_brands = if brands.is_empty() {
        String::new()
    } else {
        format!(" for {}", esc(&named(&brands)))
    };
    if branches.is_empty() {
        alternatives_line(ts, why)
    } else {
        format!(
            "{} forward-compatibility alternatives{for_brands} need driver branch {}: {}",
            ts.len(),
            esc(&or_list(&branches)),
            why
        )
    }
}

/// Any other group: counted, with the alternatives named (bounded).
fn alternatives_line(ts: &[&TermResult], why: &str) -> String {
    format!(
        "{} alternatives ({}): {}",
        ts.len(),
        esc(&named(
            &ts.iter().map(|t| t.term.clone()).collect::<Vec<_>>()
        )),
        why
    )
}

/// Distinct items in first-seen order (linear: a hostile image may list
/// tens of thousands of alternatives).
fn unique(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items.filter(|i| seen.insert(i.clone())).collect()
}

fn named(items: &[String]) -> String {
    if items.len() <= MAX_NAMED {
        items.join(", ")
    } else {
        format!(
            "{}, ... {} more",
            items[..MAX_NAMED].join(", "),
            items.len() - MAX_NAMED
        )
    }
}

fn or_list(items: &[String]) -> String {
    match items.len() {
        0 => String::new(),
        1 => items[0].clone(),
        n => format!("{} or {}", items[..n - 1].join(", "), items[n - 1]),
    }
}

/// The finding for one failed requirement.
pub fn requirement_failure(f: &Failure, facts: &HostFacts, honor_disable_require: bool) -> Finding {
    let req = f.requirement;
    let where_ = where_text(&f.failing);
    // The first failing GPU's alternatives carry the story; others repeat it
    // unless they differ, and then they get their own detail lines.
    let mut details: Vec<String> = Vec::new();
    let mut summary: Vec<String> = Vec::new();
    for (i, (gpu, j)) in f.failing.iter().enumerate() {
        let lines = group_lines(&j.terms);
        if i == 0 {
            summary = lines.clone();
            details.extend(lines);
        } else if lines != summary {
            let who = gpu.map(|g| g.describe()).unwrap_or_else(|| "no GPU".into());
            details.push(format!("on {who}:"));
            details.extend(lines.into_iter().map(|l| format!("  {l}")));
        }
    }
    let shown: Vec<String> = summary.iter().take(MAX_GROUPS).cloned().collect();
    let headline = format!("{} is not satisfied on {}", req.source, where_);
    let mut message = format!("{headline}: {}", shown.join("; "));
    if summary.len() > MAX_GROUPS {
        message.push_str(&format!("; and {} more", summary.len() - MAX_GROUPS));
    }
    Finding::error(Check::Requirement, message)
        .with_fix(fix_text(f, facts, honor_disable_require))
        .with_details(details)
        .with_headline(headline)
}

/// The fix for a failed requirement: one clause per kind of failure (CUDA,
/// compute capability, brand/driver branch), then the escape hatch.
fn fix_text(f: &Failure, facts: &HostFacts, honor_disable_require: bool) -> String {
    let req = f.requirement;
    let mut fixes = Vec::new();
    let cuda_failed = f.failing.iter().any(|(_, j)| failed_on(j, Key::Cuda));
    if let (true, Some(floor)) = (cuda_failed, req.cuda_floor()) {
        fixes.extend(cuda_fixes(floor, facts));
    }
    let arch_failed: Vec<&Gpu> = f
        .failing
        .iter()
        .filter(|(_, j)| failed_on(j, Key::Arch))
        .filter_map(|(g, _)| *g)
        .collect();
    if let (false, Some(floor)) = (arch_failed.is_empty(), req.arch_floor()) {
        fixes.push(arch_fix(floor, &arch_failed));
    }
    let only_brand = !cuda_failed
        && arch_failed.is_empty()
        && f.failing.iter().all(|(_, j)| {
            j.terms
                .iter()
                .all(|t| matches!(t.key, Some(Key::Brand) | Some(Key::Driver)))
        });
    if only_brand {
        fixes.push(
            "run it on a GPU brand and driver branch the image lists, or use an image without this restriction"
                .to_string(),
        );
    }
    if fixes.is_empty() {
        fixes.push(format!(
            "change {} to something this host meets, or run the container on a host that meets it",
            req.source
        ));
    }
    fixes.push(disable_require_fix(honor_disable_require).to_string());
    fixes.join("; ")
}

/// Whether some alternative of `j` failed on a factor of `key`.
fn failed_on(j: &Judgement, key: Key) -> bool {
    j.terms
        .iter()
        .any(|t| t.key == Some(key) && matches!(t.outcome, Outcome::Fail(_)))
}

/// The fixes when the CUDA floor failed: the driver that provides it (from
/// the CUDA tables), or an older image. Its own helper because it is the
/// only clause that reads the host's driver and CUDA versions.
fn cuda_fixes(floor: &Version, facts: &HostFacts) -> Vec<String> {
    let mut fixes = Vec::new();
    let host_cuda = facts
        .cuda_driver_version
        .as_deref()
        .and_then(|c| Version::parse(c).ok());
    let driver_text = facts.driver_version.as_deref().unwrap_or("unknown");
    let host = match &host_cuda {
        Some(c) => format!("this host has driver {driver_text} with CUDA {c}"),
        None => format!("this host has driver {driver_text}"),
    };
    match cuda_tables::min_driver_for_cuda(floor) {
        Some(d) => fixes.push(format!(
            "install NVIDIA driver {d} or newer, the minimum for CUDA {floor} ({host})"
        )),
        None => fixes.push(format!(
            "install an NVIDIA driver that supports CUDA {floor} ({host})"
        )),
    }
    if let Some(c) = &host_cuda {
        fixes.push(format!(
            "or use an image built for CUDA {}.{} or older",
            c.major(),
            c.minor()
        ));
    }
    fixes
}

/// The fix when the compute capability floor failed, naming what each
/// failing GPU has.
fn arch_fix(floor: &Version, arch_failed: &[&Gpu]) -> String {
    let have: Vec<String> = arch_failed
        .iter()
        .map(|g| {
            format!(
                "GPU {} has {}",
                g.index,
                g.compute_capability.as_deref().unwrap_or("unknown")
            )
        })
        .collect();
    format!(
        "run it on GPUs with compute capability {floor} or higher ({}), or use an image built for this GPU",
        have.join(", ")
    )
}

/// The last clause: how to start anyway, or that host policy forbids it.
fn disable_require_fix(honor_disable_require: bool) -> &'static str {
    if honor_disable_require {
        "to start it anyway at your own risk, set NVIDIA_DISABLE_REQUIRE=true on the container"
    } else {
        "host policy ignores NVIDIA_DISABLE_REQUIRE (requirements.honor_disable_require = false)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::requirement::{Context, RequirementOutcome};

    const CUDA_12_4: &str = "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 brand=geforcertx,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=titan,driver>=470,driver<471 brand=titanrtx,driver>=470,driver<471 brand=tesla,driver>=525,driver<526 brand=unknown,driver>=525,driver<526 brand=nvidia,driver>=525,driver<526 brand=nvidiartx,driver>=525,driver<526 brand=geforce,driver>=525,driver<526 brand=geforcertx,driver>=525,driver<526 brand=quadro,driver>=525,driver<526 brand=quadrortx,driver>=525,driver<526 brand=titan,driver>=525,driver<526 brand=titanrtx,driver>=525,driver<526 brand=tesla,driver>=535,driver<536 brand=unknown,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536 brand=nvidiartx,driver>=535,driver<536 brand=geforce,driver>=535,driver<536 brand=geforcertx,driver>=535,driver<536 brand=quadro,driver>=535,driver<536 brand=quadrortx,driver>=535,driver<536 brand=titan,driver>=535,driver<536 brand=titanrtx,driver>=535,driver<536";

    #[test]
    fn official_image_on_geforce_names_the_real_causes() {
        let facts = HostFacts {
            driver_version: Some("545.23.06".into()),
            cuda_driver_version: Some("12.3".into()),
            gpus: vec![Gpu {
                index: 0,
                name: "NVIDIA GeForce RTX 4090".into(),
                brand: "geforce".into(),
                compute_capability: Some("8.9".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let req = Requirement::parse("NVIDIA_REQUIRE_CUDA", CUDA_12_4).unwrap();
        let d = Version::parse("545.23.06").unwrap();
        let c = Version::parse("12.3").unwrap();
        let j = req.judge(&Context {
            driver: Some(&d),
            driver_text: Some("545.23.06"),
            cuda: Some(&c),
            gpu: Some(&facts.gpus[0]),
        });
        assert_eq!(j.outcome, RequirementOutcome::Fails);
        let f = requirement_failure(
            &Failure {
                requirement: &req,
                failing: vec![(Some(&facts.gpus[0]), j)],
            },
            &facts,
            true,
        );
        let m = &f.message;
        assert!(m.starts_with("NVIDIA_REQUIRE_CUDA is not satisfied on GPU 0 (NVIDIA GeForce RTX 4090, compute capability 8.9)"), "{m}");
        assert!(
            m.contains("cuda>=12.4: driver 545.23.06 provides CUDA 12.3"),
            "{m}"
        );
        assert!(
            m.contains("3 forward-compatibility alternatives for geforce need driver branch 470, 525 or 535: driver is 545.23.06"),
            "{m}"
        );
        assert!(m.contains("27 alternatives for other GPU brands"), "{m}");
        assert!(m.contains("GPU 0 is geforce"), "{m}");
        assert!(!m.contains('\n'));
        let fix = f.fix.unwrap();
        assert!(
            fix.contains("install NVIDIA driver 550.54.14 or newer, the minimum for CUDA 12.4"),
            "{fix}"
        );
        assert!(
            fix.contains("use an image built for CUDA 12.3 or older"),
            "{fix}"
        );
        assert!(fix.contains("NVIDIA_DISABLE_REQUIRE=true"), "{fix}");
    }
}
