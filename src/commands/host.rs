//! `gpu-guard host [--json]`: what the probe sees on this host.

use crate::commands::cli::{HostArgs, ProbeChildArgs};
use crate::core::facts::{HostProblem, HostProblemKind, HostReport};
use crate::core::runtime_engines::Engine;
use crate::pipeline::runtime::RuntimeProblem;
use std::fmt::Write as _;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum HostCommandError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot encode host facts: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("cannot write node labels to {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The host's driver and GPUs are known; warnings (a degraded probe, a
/// missing device node) may have been printed.
pub const EXIT_FACTS: i32 = 0;
/// Facts were printed but the host cannot run GPU containers as it is: no
/// NVIDIA driver, or a GPU lost. Like nvidia-smi, which fails when it
/// cannot talk to the driver, scripts can tell this from success.
pub const EXIT_HOST_ERROR: i32 = 1;
/// No facts could be established (the probe failed), or bad usage/config.
pub const EXIT_NO_FACTS: i32 = 2;

/// `gpu-guard host [--json]`: the facts and an exit status per
/// [`EXIT_FACTS`], [`EXIT_HOST_ERROR`], [`EXIT_NO_FACTS`].
pub fn main(config: Option<&Path>, args: &HostArgs) -> i32 {
    match host_command_inner(config, args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpu-guard: error: {e}");
            EXIT_NO_FACTS
        }
    }
}

/// `gpu-guard __probe ...` (hidden): the probe child of
/// [`crate::host::child`], with the parent's paths from its arguments.
pub fn probe_child(args: &ProbeChildArgs) -> i32 {
    let paths = crate::host::ProbePaths {
        proc_nvidia: args.proc_nvidia.clone(),
        dev: args.dev.clone(),
        boot_id: args.boot_id.clone(),
        modules: args.modules.clone(),
        devices: args.devices.clone(),
        sys: args.sys.clone(),
        probe_exe: std::path::PathBuf::from(crate::host::SELF_EXE),
        host_root: std::path::PathBuf::from("/"),
    };
    crate::host::child::serve(&args.nvml_library, &paths)
}

fn host_command_inner(config: Option<&Path>, args: &HostArgs) -> Result<i32, HostCommandError> {
    let loaded = crate::config::load_detailed(config)?;
    let cfg = &loaded.config;
    let (report, nodes) = probe_host(cfg, &args.host_root);
    let chains = chain_problems(cfg);
    let Some(facts) = &report.facts else {
        if report.problems.is_empty() {
            eprintln!("gpu-guard: error: the probe failed");
        }
        print_problems(&report);
        print_chain_problems(&chains);
        return Ok(EXIT_NO_FACTS);
    };
    if args.node_labels {
        // Labels of a host without a driver or with a lost GPU are written
        // (stale labels would place pods on a node that cannot run them),
        // but the exit status says the host cannot run GPU containers.
        node_labels(facts, args)?;
        print_problems(&report);
        print_node_problems(&nodes);
        if (facts.driver_version.is_none() && !has_amd(facts)) || facts.gpus.is_empty() {
            let what = if facts.gpus.is_empty() && facts.driver_version.is_some() {
                "no GPUs"
            } else {
                "no NVIDIA driver and no AMD GPU"
            };
            eprintln!(
                "gpu-guard: error: no GPU facts to label ({what} per {})",
                report.source
            );
            return Ok(EXIT_HOST_ERROR);
        }
        return Ok(exit_status(&report, &nodes));
    }
    // The engines install registered: each one's chain, and drift; and
    // the CDI spec directories' problems.
    let (info, mut warnings) = crate::commands::install::host_lines(cfg);
    warnings.extend(cdi_warnings(cfg, facts));
    if args.json {
        let text = serde_json::to_string_pretty(facts).map_err(HostCommandError::Encode)?;
        println!("{text}");
    } else {
        print_human(&loaded, &report, &info, &warnings);
    }
    // The probe's problems and every error go to stderr in both forms,
    // one line each (the facts, and the table, stay on stdout for scripts).
    print_problems(&report);
    print_node_problems(&nodes);
    let no_driver_reported = report
        .problems
        .iter()
        .any(|p| p.kind == HostProblemKind::NoDriver);
    if facts.driver_version.is_none() && !no_driver_reported && !has_amd(facts) {
        eprintln!(
            "gpu-guard: error: no NVIDIA driver ({} has no driver version)",
            report.source
        );
    }
    if args.json {
        for w in &warnings {
            eprintln!("gpu-guard: warning: {w}");
        }
    }
    print_chain_problems(&chains);
    if !chains.is_empty() {
        // No container starts through the wrapper: as bad as a lost GPU.
        return Ok(EXIT_HOST_ERROR);
    }
    Ok(exit_status(&report, &nodes))
}

/// The probe a container start makes (with `--host-root`, the host's
/// paths under it and no cache: the cache file is a host path), and the
/// device nodes' problems of a probed host (a facts file describes a host
/// whose nodes are not read, as at a container start).
fn probe_host(
    cfg: &crate::core::policy::Config,
    root: &Path,
) -> (HostReport, Vec<(bool, String, String)>) {
    let rooted = root != Path::new("/");
    let paths = if rooted {
        crate::host::ProbePaths::under_root(root)
    } else {
        crate::host::ProbePaths::from_env()
    };
    let report = if rooted {
        let mut c = cfg.clone();
        c.host.cache_file.clear();
        crate::host::probe_for_with(&c, &paths)
    } else {
        crate::host::probe_for_with(cfg, &paths)
    };
    let nodes = match &report.facts {
        Some(f) if cfg.host.facts_file.is_empty() => crate::host::device_node_problems(
            f,
            &paths.dev,
            paths.devices.as_deref(),
            &root.join("etc/group"),
        ),
        _ => Vec::new(),
    };
    (report, nodes)
}

/// Each device-node problem, one line on stderr.
fn print_node_problems(nodes: &[(bool, String, String)]) {
    for (error, message, fix) in nodes {
        let word = if *error { "error" } else { "warning" };
        eprintln!("gpu-guard: {word}: {message} (fix: {fix})");
    }
}

/// The problems of the CDI spec directories (`host.cdi_spec_dirs`), one
/// line each with its fix (docs/interfaces.md, "Host health and tuning").
/// Warnings only: they do not change the exit status.
fn cdi_warnings(
    cfg: &crate::core::policy::Config,
    facts: &crate::core::facts::HostFacts,
) -> Vec<String> {
    if cfg.host.cdi_spec_dirs.is_empty() {
        return Vec::new();
    }
    let specs = crate::host::cdi::load(&cfg.host.cdi_spec_dirs);
    let kinds = crate::core::detect::nvidia_cdi_kinds(&cfg.detect);
    let driver = facts.driver_version.as_deref();
    crate::core::cdi::audit(&specs, &kinds, driver, &crate::host::cdi::RealPaths)
        .into_iter()
        .map(|f| match &f.fix {
            Some(fix) if !fix.is_empty() => format!("{} (fix: {fix})", f.message),
            _ => f.message,
        })
        .collect()
}

/// The chained runtimes the config names (`runtime.path`, each
/// `runtime.engines.ENGINE.path`) that cannot be run, each once.
fn chain_problems(cfg: &crate::core::policy::Config) -> Vec<RuntimeProblem> {
    let mut out: Vec<RuntimeProblem> = Vec::new();
    let mut engines: Vec<Option<Engine>> = vec![None];
    engines.extend(
        Engine::ALL
            .into_iter()
            .filter(|e| cfg.runtime.engines.get(*e).path.is_some())
            .map(Some),
    );
    for e in engines {
        if e.is_none() && cfg.runtime.path.is_empty() {
            continue;
        }
        if let Some(p) = crate::pipeline::runtime::chained_runtime_problem(cfg, e) {
            out.push(p);
        }
    }
    out
}

/// The report for people: the table, the chain and drop-in lines, each
/// engine's line, and the engines' and CDI specs' warnings below it, as
/// they always were.
fn print_human(
    loaded: &crate::config::Loaded,
    report: &HostReport,
    info: &[String],
    warnings: &[String],
) {
    print!("{}", render_table(report));
    if let Some(line) = crate::config::chained_runtime_line(loaded) {
        println!("{line}");
    }
    if let Some(line) = crate::config::drop_ins_line(loaded) {
        println!("{line}");
    }
    for line in info {
        println!("{line}");
    }
    for w in warnings {
        println!("warning: {w}");
    }
}

/// A chained runtime that cannot be run, on stderr like every problem.
fn print_chain_problems(chains: &[RuntimeProblem]) {
    for p in chains {
        eprintln!("gpu-guard: error: {} (fix: {})", p.message, p.fix);
    }
}

/// `--node-labels [--write [--output PATH]]`: gpu-guard's node labels,
/// printed, or written atomically where node-feature-discovery's local
/// source reads them (a reader sees the old file or the new one).
fn node_labels(
    facts: &crate::core::facts::HostFacts,
    args: &HostArgs,
) -> Result<(), HostCommandError> {
    use crate::fleet::labels;
    let text = labels::feature_file(&labels::node_labels(facts));
    if !args.write {
        print!("{text}");
        return Ok(());
    }
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| labels::FEATURES_FILE.into());
    crate::sys::fsutil::atomic_write(&path, text.as_bytes(), 0o644).map_err(|source| {
        HostCommandError::Write {
            path: path.clone(),
            source,
        }
    })?;
    eprintln!("gpu-guard: wrote node labels to {}", path.display());
    Ok(())
}

/// Does the host have AMD GPUs (and so can run GPU containers without
/// NVIDIA's driver)?
fn has_amd(facts: &crate::core::facts::HostFacts) -> bool {
    facts.gpus.iter().any(|g| g.is_amd())
}

/// The label of a problem on this host: no NVIDIA driver is only a note
/// where AMD GPUs run the GPU containers.
fn label_on(report: &HostReport, kind: &HostProblemKind) -> &'static str {
    let amd = report.facts.as_ref().is_some_and(has_amd);
    match kind {
        HostProblemKind::NoDriver if amd => "note",
        k => problem_label(k),
    }
}

/// Each host problem, one line on stderr.
fn print_problems(report: &HostReport) {
    for p in &report.problems {
        eprintln!("gpu-guard: {}: {}", label_on(report, &p.kind), one_line(p));
    }
}

/// 1 when a problem is an error (no driver, lost GPU, a device node that
/// is not the driver's), or the facts name no driver (a facts file can say
/// so without a problem) and no AMD GPU, else 0.
fn exit_status(report: &HostReport, nodes: &[(bool, String, String)]) -> i32 {
    let error = report
        .problems
        .iter()
        .any(|p| label_on(report, &p.kind) == "error")
        || nodes.iter().any(|(e, _, _)| *e);
    let no_driver = report
        .facts
        .as_ref()
        .is_some_and(|f| f.driver_version.is_none() && !has_amd(f));
    if error || no_driver {
        EXIT_HOST_ERROR
    } else {
        EXIT_FACTS
    }
}

fn problem_label(kind: &HostProblemKind) -> &'static str {
    match kind {
        HostProblemKind::NoDriver | HostProblemKind::ProbeFailed => "error",
        HostProblemKind::Untrusted => "error",
        HostProblemKind::GpuLost { .. } => "error",
        HostProblemKind::Degraded => "warning",
    }
}

fn one_line(p: &HostProblem) -> String {
    match &p.fix {
        Some(f) => format!("{} (fix: {f})", p.message),
        None => p.message.clone(),
    }
}

/// One GPU's cells in the table's column order ([`HEAD`]).
fn gpu_cells(g: &crate::core::facts::Gpu) -> Vec<String> {
    let dash = |s: Option<&str>| s.filter(|s| !s.is_empty()).unwrap_or("-").to_string();
    let numa = match (&g.numa_node, &g.local_cpus) {
        (None, _) => "-".to_string(),
        (Some(None), _) => "none".to_string(),
        (Some(Some(n)), Some(c)) => format!("{n} (CPUs {c})"),
        (Some(Some(n)), None) => n.to_string(),
    };
    vec![
        g.index.to_string(),
        g.vendor.as_str().to_string(),
        dash(Some(&g.name)),
        if g.is_amd() {
            "-".into()
        } else {
            g.brand.clone()
        },
        dash(g.compute_capability.as_deref()),
        dash(g.target_id.as_deref()),
        g.memory_mib
            .map(|m| format!("{m} MiB"))
            .unwrap_or_else(|| "-".into()),
        dash(g.pci_bus_id.as_deref()),
        dash(g.health.as_ref().map(|h| h.state.word())),
        numa,
        dash(Some(&g.uuid)),
    ]
}

/// The table's columns: NVIDIA and AMD GPUs in one table, told apart by
/// VENDOR; CC is NVIDIA's compute capability, TARGET an AMD GPU's LLVM
/// target ID (the column is left out on a host without AMD GPUs).
const HEAD: [&str; 11] = [
    "GPU", "VENDOR", "NAME", "BRAND", "CC", "TARGET", "MEMORY", "BUS ID", "HEALTH", "NUMA", "UUID",
];
/// The index of TARGET in [`HEAD`].
const TARGET_COLUMN: usize = 5;

/// The host for people: driver line, one row per GPU, then its MIG
/// devices, why it is not healthy and the peers it has no P2P path to.
fn render_table(report: &HostReport) -> String {
    let mut out = String::new();
    let Some(f) = &report.facts else {
        return out;
    };
    let dash = |s: Option<&str>| s.unwrap_or("-").to_string();
    let amdgpu = f
        .amdgpu_driver_version
        .as_deref()
        .map(|v| format!(", amdgpu {v}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "Driver {}, CUDA {}{amdgpu} (source: {})",
        dash(f.driver_version.as_deref()),
        dash(f.cuda_driver_version.as_deref()),
        report.source
    );
    if f.gpus.is_empty() {
        let _ = writeln!(out, "No GPUs");
        return out;
    }
    let mut head: Vec<String> = HEAD.map(String::from).to_vec();
    let mut rows: Vec<Vec<String>> = f.gpus.iter().map(gpu_cells).collect();
    if !f.gpus.iter().any(|g| g.is_amd()) {
        head.remove(TARGET_COLUMN);
        for r in &mut rows {
            r.remove(TARGET_COLUMN);
        }
    }
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<width$}  ", width = w[i]);
            }
        }
        l.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(&head));
    for (r, g) in rows.iter().zip(&f.gpus) {
        let _ = writeln!(out, "{}", line(r));
        let pad = "";
        for m in &g.mig_devices {
            let _ = writeln!(out, "{pad:w$}  MIG {}", m.uuid, w = w[0]);
        }
        if let Some(h) = g.health.as_ref().filter(|h| !h.reasons.is_empty()) {
            let _ = writeln!(
                out,
                "{pad:w$}  {}: {}",
                h.state.word(),
                h.reasons.join(", "),
                w = w[0]
            );
        }
        if !g.p2p.is_empty() {
            let peers: Vec<String> = g
                .p2p
                .iter()
                .map(|(p, s)| format!("GPU {p} ({s})"))
                .collect();
            let _ = writeln!(
                out,
                "{pad:w$}  no P2P path to {}",
                peers.join(", "),
                w = w[0]
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::facts::{Gpu, HostFacts, MigDevice};

    #[test]
    fn table_lists_gpus_migs_and_problems() {
        let mut r = HostReport::from_facts(
            HostFacts {
                driver_version: Some("550.90.07".into()),
                cuda_driver_version: Some("12.4".into()),
                gpus: vec![Gpu {
                    index: 0,
                    uuid: "GPU-a".into(),
                    name: "NVIDIA A100-SXM4-40GB".into(),
                    brand: "nvidia".into(),
                    compute_capability: Some("8.0".into()),
                    memory_mib: Some(40960),
                    pci_bus_id: Some("00000000:07:00.0".into()),
                    mig_devices: vec![MigDevice {
                        uuid: "MIG-x".into(),
                    }],
                    minor_number: None,
                    health: Some(crate::core::health::judge(
                        &crate::core::health::NvmlHealth {
                            remap_pending: true,
                            ..Default::default()
                        },
                    )),
                    numa_node: Some(Some(1)),
                    local_cpus: Some("16-31".into()),
                    ..Gpu::default()
                }],
                ..Default::default()
            },
            "NVML (libnvidia-ml.so.1)",
        );
        r.problems.push(HostProblem {
            kind: HostProblemKind::Degraded,
            message: "something is off".into(),
            fix: Some("do this".into()),
        });
        let t = render_table(&r);
        assert!(
            t.starts_with("Driver 550.90.07, CUDA 12.4 (source: NVML"),
            "{t}"
        );
        assert!(t.contains("NVIDIA A100-SXM4-40GB"), "{t}");
        assert!(t.contains("40960 MiB"), "{t}");
        assert!(t.contains("MIG MIG-x"), "{t}");
        assert!(t.contains("degraded  1 (CPUs 16-31)"), "{t}");
        assert!(t.contains("degraded: row remapping pending"), "{t}");
        // Problems are not part of the table: they go to stderr.
        assert!(!t.contains("something is off"), "{t}");
        assert_eq!(one_line(&r.problems[0]), "something is off (fix: do this)");
        let none = render_table(&HostReport::from_facts(HostFacts::default(), "no driver"));
        assert!(none.contains("Driver -, CUDA -"), "{none}");
        assert!(none.contains("No GPUs"), "{none}");
    }
}
