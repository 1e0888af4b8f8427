//! `gpu-guard scan --rootfs DIR --libraries`: what the rootfs's GPU
//! libraries need at start, resolved as glibc's loader will resolve them
//! in a GPU container (scan::ldso): the resolution tree of each judged
//! object like `lddtree` prints it (injected driver libraries marked), the
//! libraries that will not load, the CUDA runtimes the image ships, and
//! with `--host FILE` the findings a start on that host would get.

use crate::commands::cli::ScanArgs;
use crate::core::container::Env;
use crate::core::decision::{Finding, Severity};
use crate::core::facts::HostFacts;
use crate::core::policy::{Enforcement, LibrariesConfig};
use crate::core::sanitize::esc;
use crate::scan::ldso::resolve::{Resolved, StartEnv};
use crate::scan::ldso::tree::Tree;
use std::io::Write;
use std::path::Path;

const EXIT_OK: i32 = 0;
const EXIT_ERROR_FINDING: i32 = 1;
const EXIT_BAD_INPUT: i32 = 2;

struct Setup {
    cfg: LibrariesConfig,
    facts: Option<HostFacts>,
    inputs: StartEnv,
}

fn setup(config: Option<&Path>, args: &ScanArgs) -> Result<Setup, String> {
    let cfg = crate::config::load(config).map_err(|e| e.to_string())?;
    let mut lib = cfg.libraries.clone();
    // Asked for explicitly: "off" is taken as "warn".
    if lib.severity == Enforcement::Off {
        lib.severity = Enforcement::Warn;
    }
    let facts = match &args.host {
        Some(h) => Some(crate::host::facts_file::read_facts_file(h).map_err(|e| e.to_string())?),
        None => None,
    };
    let mut env = Env::default();
    for e in &args.env {
        if !e.contains('=') {
            return Err(format!("--env wants KEY=VALUE, got `{}`", esc(e)));
        }
        let (k, v) = e.split_once('=').unwrap_or_default();
        env.set(k, v);
    }
    // Judged as started with GPUs, as `check --image` judges an image.
    let mut inputs = StartEnv::from_env(&env, None, true);
    inputs.driver_version = facts.as_ref().and_then(|f| f.driver_version.clone());
    Ok(Setup {
        cfg: lib,
        facts,
        inputs,
    })
}

pub fn main(config: Option<&Path>, args: &ScanArgs) -> i32 {
    let s = match setup(config, args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpu-guard: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let mut status = EXIT_OK;
    let mut all = Vec::new();
    for rootfs in &args.paths {
        if !rootfs.is_dir() {
            eprintln!(
                "gpu-guard: {}: not a directory",
                esc(&rootfs.display().to_string())
            );
            status = EXIT_BAD_INPUT;
            continue;
        }
        let r = crate::scan::ldso::scan_rootfs(rootfs, &s.inputs, &s.cfg, true);
        let findings = crate::core::libraries::assess(&r.scan, s.facts.as_ref(), &s.cfg);
        if findings.iter().any(|f| f.severity == Severity::Error) {
            status = status.max(EXIT_ERROR_FINDING);
        }
        all.push((rootfs.display().to_string(), r, findings));
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        print_json(&mut out, &all);
    } else {
        for (p, r, f) in &all {
            print_text(&mut out, p, r, f);
        }
    }
    if out.flush().is_err() {
        return EXIT_BAD_INPUT;
    }
    status
}

fn print_json(out: &mut impl Write, all: &[(String, Resolved, Vec<Finding>)]) {
    let v: Vec<serde_json::Value> = all
        .iter()
        .map(|(p, r, f)| {
            serde_json::json!({
                "rootfs": p,
                "libraries": r.scan,
                "trees": r.trees,
                "injected": r.injected,
                "findings": f,
            })
        })
        .collect();
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({ "rootfs": v })).unwrap_or_default()
    );
}

fn print_tree(out: &mut impl Write, t: &Tree) {
    let _ = writeln!(out, "{}", esc(&t.root));
    for l in &t.lines {
        let pad = "    ".repeat(l.depth);
        let via = match l.via {
            crate::core::libraries::RequestKind::Dlopen => " [dlopen]",
            crate::core::libraries::RequestKind::Needed => "",
        };
        let at = match (&l.path, &l.note) {
            (Some(p), None) => esc(p),
            (Some(p), Some(n)) => format!("{} ({})", esc(p), esc(n)),
            (None, Some(n)) => esc(n),
            (None, None) => "not found".into(),
        };
        let injected = if l.injected {
            " [injected by NVIDIA's runtime]"
        } else {
            ""
        };
        let _ = writeln!(out, "{pad}{}{via} => {at}{injected}", esc(&l.name));
    }
}

fn print_text(out: &mut impl Write, rootfs: &str, r: &Resolved, findings: &[Finding]) {
    let rootfs = esc(rootfs);
    if let Some(e) = &r.scan.error {
        let _ = writeln!(out, "{rootfs}: cannot read it: {}", esc(e));
        return;
    }
    let _ = writeln!(
        out,
        "{rootfs}: {} object(s) judged; {} librar(y/ies) injected for the container's driver capabilities; {} loader cache entries after ldconfig",
        r.scan.judged,
        r.injected.len(),
        r.cache_entries
    );
    for t in &r.trees {
        print_tree(out, t);
    }
    if r.scan.cuda_runtimes.is_empty() {
        let _ = writeln!(out, "CUDA runtimes: none");
    }
    for rt in &r.scan.cuda_runtimes {
        let _ = writeln!(
            out,
            "CUDA runtime: {} (CUDA {}, from {}; needs NVIDIA driver {} or newer)",
            esc(&rt.path),
            esc(&rt.version),
            esc(&rt.source),
            rt.min_driver.as_deref().unwrap_or("unknown")
        );
    }
    for f in findings {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        };
        let _ = writeln!(out, "{sev}: {}", f.title());
        for d in &f.details {
            let _ = writeln!(out, "  {d}");
        }
        if let Some(fix) = &f.fix {
            let _ = writeln!(out, "  fix: {fix}");
        }
    }
}
