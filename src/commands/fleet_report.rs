//! `gpu-guard check` on many hosts (`--host` repeated, `--hosts DIR`,
//! `--nodes FILE`) and `--affinity`: gathers the hosts, judges the container
//! once per host through [`crate::fleet::FleetContainer`], prints a table and a
//! summary (or the fleet JSON, or the affinity). Exit status per
//! [`crate::fleet::summary`].

use crate::commands::cli::CheckArgs;
use crate::commands::output::{print_decision_strict, usage, EXIT_ALLOW, EXIT_REFUSE};
use crate::core::decision::Verdict;
use crate::core::facts::{HostFacts as Facts, HostReport};
use crate::core::policy::Config;
use crate::fleet::nodes::{self, NodeLabels};
use crate::fleet::{affinity, summary, FleetContainer, Host, HostFacts, HostResult, ImageInfo};
use crate::pipeline::ContainerInput;
use std::collections::BTreeMap;

/// True when `check` is asked about more than one host, or for an affinity.
pub fn wanted(args: &CheckArgs) -> bool {
    args.host.len() > 1 || args.hosts.is_some() || args.nodes.is_some() || args.affinity
}

/// The hosts of `--host`, `--hosts` and `--nodes`, in that order, and the
/// nodes (for the affinity). Any unreadable input is a usage error.
fn gather(args: &CheckArgs) -> Result<(Vec<Host>, Vec<NodeLabels>), String> {
    let mut files: Vec<std::path::PathBuf> = args.host.clone();
    if let Some(dir) = &args.hosts {
        let rd = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot read --hosts {}: {e}", dir.display()))?;
        let mut found: Vec<_> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        found.sort();
        files.extend(found);
    }
    let mut hosts = Vec::with_capacity(files.len());
    for f in &files {
        let facts = crate::host::facts_file::read_facts_file(f).map_err(|e| e.to_string())?;
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
        hosts.push(Host {
            name: name.unwrap_or_else(|| f.display().to_string()),
            facts: HostFacts::Known {
                report: HostReport::from_facts(facts, format!("facts file {}", f.display())),
                labels: None,
            },
        });
    }
    let mut node_list = Vec::new();
    if let Some(p) = &args.nodes {
        node_list = nodes::read_nodes(p).map_err(|e| e.to_string())?;
        nodes::check_unique(node_list.iter().map(|n| n.name.as_str()))
            .map_err(|e| e.to_string())?;
        for n in &node_list {
            hosts.push(nodes::host_from_node(n).map_err(|e| e.to_string())?);
        }
    }
    Ok((hosts, node_list))
}

/// What was read of an image (`check --image`), for the fleet output: a
/// JSON object merged into the `image` object, and a line for people.
pub struct ImageReport {
    pub json: serde_json::Map<String, serde_json::Value>,
    pub line: String,
}

/// Runs the multi-host check of the container of `case` (its scans made
/// already by `check --image`, or read once from its rootfs). `cfg` is the
/// loaded, valid config.
pub fn main(cfg: &Config, case: ContainerInput, args: &CheckArgs) -> i32 {
    main_with(cfg, case, args, None)
}

/// [`main`], with what was read of the image.
pub fn main_with(
    cfg: &Config,
    case: ContainerInput,
    args: &CheckArgs,
    image: Option<&ImageReport>,
) -> i32 {
    let (hosts, node_list) = match gather(args) {
        Ok(h) => h,
        Err(e) => return usage(e),
    };
    if hosts.is_empty() && !args.affinity {
        return usage("no hosts: --hosts DIR holds no *.json file and --nodes lists no node");
    }
    let cfg = &other_hosts(cfg, args);
    let subject = FleetContainer::new(cfg, case).with_gpus_wanted(args.gpu_count.unwrap_or(1));
    let results = subject.judge_all(&hosts);
    if args.affinity {
        return print_affinity(&subject, args, &node_list, &results);
    }
    if let [(
        one,
        Host {
            facts: HostFacts::Known { .. },
            ..
        },
    )] = &results.iter().zip(&hosts).collect::<Vec<_>>()[..]
    {
        return print_decision_strict(&one.decision, args.json, args.strict);
    }
    print_fleet(&subject, args, &hosts, &results, image)
}

/// The policy for hosts other than this one: NVIDIA's toolkit settings
/// (`detect.nvidia`, read from this host's file when the config was
/// loaded) are those of `--nvidia-config FILE`, else NVIDIA's defaults,
/// never this host's file: other hosts need not run NVIDIA's toolkit as
/// this one does.
fn other_hosts(cfg: &Config, args: &CheckArgs) -> Config {
    let mut cfg = cfg.clone();
    cfg.detect.nvidia = match &args.nvidia_config {
        Some(p) => crate::host::nvidia_config::read(&p.to_string_lossy()),
        None => Default::default(),
    };
    cfg
}

fn print_fleet(
    subject: &FleetContainer,
    args: &CheckArgs,
    hosts: &[Host],
    results: &[HostResult],
    image: Option<&ImageReport>,
) -> i32 {
    let counts = summary::counts(results);
    if args.json {
        let mut info = ImageInfo::from_container(subject.container());
        if let Some(d) = image
            .and_then(|i| i.json.get("digest"))
            .and_then(|d| d.as_str())
        {
            info.digest = Some(d.to_string());
        }
        if let Some(r) = image
            .and_then(|i| i.json.get("reference"))
            .and_then(|d| d.as_str())
        {
            info.reference = Some(r.to_string());
        }
        let mut v = match serde_json::to_value(summary::to_json(&info, results)) {
            Ok(v) => v,
            Err(e) => return usage(format!("cannot print the results: {e}")),
        };
        if let (Some(extra), Some(obj)) =
            (image, v.get_mut("image").and_then(|i| i.as_object_mut()))
        {
            for (k, x) in &extra.json {
                obj.entry(k.clone()).or_insert_with(|| x.clone());
            }
        }
        match serde_json::to_string_pretty(&v) {
            Ok(s) => println!("{s}"),
            Err(e) => return usage(format!("cannot print the results: {e}")),
        }
    } else {
        if let Some(i) = image {
            println!("{}", i.line);
        }
        let facts: Vec<Option<&Facts>> = hosts
            .iter()
            .map(|h| match &h.facts {
                HostFacts::Known { report, .. } => report.facts.as_ref(),
                HostFacts::NoGpuFacts { .. } => None,
            })
            .collect();
        // Cut only for a person at a terminal: a script or a pager that
        // reads the table gets every note whole, as with --wide.
        use std::io::IsTerminal;
        let note_max = (!args.wide && std::io::stdout().is_terminal()).then_some(summary::NOTE_MAX);
        print!("{}", summary::table(subject, results, &facts, note_max));
        println!("{}", summary::summary_line(subject, results, &facts));
    }
    summary::exit_status(&counts, args.any)
}

fn print_affinity(
    subject: &FleetContainer,
    args: &CheckArgs,
    node_list: &[NodeLabels],
    results: &[HostResult],
) -> i32 {
    let a = if args.nodes.is_some() {
        // Node name -> None when allowed, Some(why not) otherwise. Nodes
        // come last in `results`, in the order of `node_list`.
        let offset = results.len() - node_list.len();
        let verdicts: BTreeMap<String, Option<String>> = results[offset..]
            .iter()
            .map(|r| {
                let d = &r.decision;
                let why = (d.verdict != Verdict::Allow).then(|| match d.errors().next() {
                    Some(f) => f.title().to_string(),
                    None => "not judged as a GPU container".to_string(),
                });
                (r.host.clone(), why)
            })
            .collect();
        affinity::for_nodes(subject, node_list, &verdicts)
    } else {
        affinity::for_labels(subject)
    };
    if args.json {
        for n in &a.notes {
            eprintln!(
                "gpu-guard: warning: affinity: {}",
                crate::core::sanitize::one_line(n)
            );
        }
        println!("{:#}", affinity::to_json(&a));
    } else {
        print!("{}", affinity::to_yaml(&a));
    }
    let none = a.terms == [crate::fleet::selector::admits_none()];
    // Not exact is never looser, but a gate must not pass on it.
    if none || !a.exact {
        EXIT_REFUSE
    } else {
        EXIT_ALLOW
    }
}
