//! NUMA placement and P2P for GPU containers (`tuning.numa`,
//! `tuning.nccl_p2p`; docs/health.md):
//!
//! - GPUs on more than one NUMA node, or a cpuset with no CPU (or memory
//!   node) on its GPUs' node, is a `tuning` warning: host-to-device copies
//!   and the CPU threads feeding the GPUs cross the socket interconnect.
//!   Docker's `--gpus` sets no cpuset at all (lablup/backend.ai#11217);
//!   Kubernetes aligns CPUs and GPUs only under the Topology Manager.
//! - `"pin"`: a container with no cpuset of its own whose GPUs share one
//!   node gets that node's CPUs (its GPUs' `local_cpulist`, online ones)
//!   and memory node as `linux.resources.cpu.{cpus,mems}`. A cpuset the
//!   user, the engine or kubelet's CPU manager set is never overridden.
//! - GPUs of a multi-GPU container that NVML reports no P2P path between
//!   get a note; `"disable"` also sets `NCCL_P2P_DISABLE=1`. NCCL detects
//!   a missing path itself; its environment-variable docs warn that such
//!   variables are for debugging (docs.nvidia.com/deeplearning/nccl,
//!   "Environment Variables"), so it is set only when the config asks.

use crate::core::container::Container;
use crate::core::cpulist::CpuList;
use crate::core::decision::{Check, CpusetEdit, Finding};
use crate::core::facts::Gpu;
use crate::core::policy::{NcclP2p, NumaMode, TuningConfig};
use crate::core::security::SpecAccess;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// What the host allows a cpuset to name (sysfs `cpu/online`,
/// `node/has_memory`); None: unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaHost {
    pub online_cpus: Option<CpuList>,
    pub memory_nodes: Option<CpuList>,
}

/// What the NUMA and P2P rules do to one container.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub cpuset: Option<CpusetEdit>,
    pub env: Map<String, Value>,
    pub findings: Vec<Finding>,
}

/// `0, 1` for people.
fn indices(gpus: &[&Gpu]) -> String {
    gpus.iter()
        .map(|g| g.index.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The visible GPUs by known NUMA node.
fn by_node<'a>(visible: &[&'a Gpu]) -> BTreeMap<u32, Vec<&'a Gpu>> {
    let mut m: BTreeMap<u32, Vec<&Gpu>> = BTreeMap::new();
    for g in visible {
        if let Some(Some(n)) = g.numa_node {
            m.entry(n).or_default().push(g);
        }
    }
    m
}

/// The CPUs local to `gpus` (the union of their `local_cpus`); None when
/// one is unknown or unreadable.
fn local_cpus(gpus: &[&Gpu]) -> Option<CpuList> {
    let mut all = CpuList::default();
    for g in gpus {
        all = all.union(&CpuList::parse(g.local_cpus.as_deref()?).ok()?);
    }
    Some(all)
}

pub fn plan(
    c: &Container,
    visible: &[&Gpu],
    cfg: &TuningConfig,
    stage: SpecAccess,
    host: &NumaHost,
) -> Plan {
    let mut p = Plan::default();
    if cfg.numa != NumaMode::Off {
        numa(c, visible, cfg, stage, host, &mut p);
    }
    if cfg.nccl_p2p != NcclP2p::Off {
        p2p(c, visible, cfg, stage, &mut p);
    }
    p
}

fn numa(
    c: &Container,
    visible: &[&Gpu],
    cfg: &TuningConfig,
    stage: SpecAccess,
    host: &NumaHost,
    p: &mut Plan,
) {
    let nodes = by_node(visible);
    if nodes.len() > 1 {
        let parts: Vec<String> = nodes
            .iter()
            .map(|(n, gs)| format!("GPU {} on NUMA node {n}", indices(gs)))
            .collect();
        p.findings.push(
            Finding::warning(
                Check::Tuning,
                format!(
                    "the container's GPUs span NUMA nodes ({}): transfers and the CPU threads that feed them cross the socket interconnect",
                    parts.join(", ")
                ),
            )
            .with_fix("give the container GPUs of one NUMA node (`nvidia-smi topo -m` shows each GPU's; Kubernetes: the Topology Manager's single-numa-node policy)"),
        );
        return;
    }
    let Some((&node, gpus)) = nodes.iter().next() else {
        return;
    };
    let local = local_cpus(gpus);
    if c.cpuset.is_set() {
        far_cpuset(c, node, gpus, local.as_ref(), p);
        return;
    }
    let can_pin = cfg.numa == NumaMode::Pin
        && stage == SpecAccess::Edit
        && c.cpuset.patchable
        && gpus.len() == visible.len()
        && crate::core::tuning::tuning_on(c, cfg);
    if !can_pin {
        return;
    }
    let Some(mut cpus) = local else { return };
    if let Some(online) = &host.online_cpus {
        cpus = cpus.intersect(online);
    }
    if cpus.is_empty() {
        return;
    }
    // A node sysfs says has no memory (a CPU-only node) cannot be a
    // cpuset's mems: only the CPUs are pinned then. Unknown (a host
    // described by facts): a node with CPUs has memory.
    let mems = match &host.memory_nodes {
        Some(m) if !m.contains(node) => String::new(),
        _ => node.to_string(),
    };
    let edit = CpusetEdit {
        cpus: cpus.to_string(),
        mems,
    };
    p.findings.push(Finding::info(
        Check::Tuning,
        format!(
            "pinned to NUMA node {node} of GPU {} (tuning.numa = \"pin\"): cpus {}{}",
            indices(gpus),
            edit.cpus,
            if edit.mems.is_empty() {
                String::new()
            } else {
                format!(", mems {}", edit.mems)
            }
        ),
    ));
    p.cpuset = Some(edit);
}

/// A cpuset of the container's own with no CPU, or no memory node, on its
/// GPUs' node: a warning; never changed.
fn far_cpuset(c: &Container, node: u32, gpus: &[&Gpu], local: Option<&CpuList>, p: &mut Plan) {
    let cpus = CpuList::parse(&c.cpuset.cpus)
        .ok()
        .filter(|l| !l.is_empty());
    let mems = CpuList::parse(&c.cpuset.mems)
        .ok()
        .filter(|l| !l.is_empty());
    let far_cpus = matches!((&cpus, local), (Some(have), Some(l)) if have.intersect(l).is_empty());
    let far_mems = mems.as_ref().is_some_and(|m| !m.contains(node));
    if !far_cpus && !far_mems {
        return;
    }
    let mut what = Vec::new();
    if far_cpus {
        what.push(format!(
            "cpus {} has no CPU of node {node} ({})",
            c.cpuset.cpus.trim(),
            local.map(ToString::to_string).unwrap_or_default()
        ));
    }
    if far_mems {
        what.push(format!(
            "mems {} leaves out node {node}",
            c.cpuset.mems.trim()
        ));
    }
    p.findings.push(
        Finding::warning(
            Check::Tuning,
            format!(
                "the container's cpuset is far from its GPUs: GPU {} on NUMA node {node}, but its {}",
                indices(gpus),
                what.join(" and its ")
            ),
        )
        .with_fix(format!(
            "give it CPUs and memory of node {node} (`docker run --cpuset-cpus/--cpuset-mems`; Kubernetes: the Topology Manager aligns the CPU and device managers), or GPUs of the node its CPUs are on"
        )),
    );
}

fn p2p(c: &Container, visible: &[&Gpu], cfg: &TuningConfig, stage: SpecAccess, p: &mut Plan) {
    let mut pairs = Vec::new();
    for (i, a) in visible.iter().enumerate() {
        for b in &visible[i + 1..] {
            if let Some(status) = a.p2p.get(&b.index.to_string()) {
                pairs.push(format!("GPU {} and {} ({status})", a.index, b.index));
            }
        }
    }
    if pairs.is_empty() {
        return;
    }
    const VAR: &str = "NCCL_P2P_DISABLE";
    let disable = cfg.nccl_p2p == NcclP2p::Disable
        && stage == SpecAccess::Edit
        && !c.env.contains(VAR)
        && crate::core::tuning::tuning_on(c, cfg);
    if disable {
        p.env.insert(VAR.into(), Value::String("1".into()));
    }
    p.findings.push(
        Finding::info(
            Check::Tuning,
            format!(
                "NVML reports no P2P path between {}: NCCL moves their traffic through host memory or the network, slower than P2P{}",
                pairs.join(", "),
                if disable {
                    "; NCCL_P2P_DISABLE=1 set (tuning.nccl_p2p = \"disable\")"
                } else {
                    ""
                }
            ),
        )
        .with_fix("for collective-heavy jobs, give the container GPUs under one PCIe switch or NVLink domain (`nvidia-smi topo -p2p r` shows the pairs)"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::{Cpuset, Env};

    fn gpu(index: u32, node: Option<u32>, cpus: &str) -> Gpu {
        Gpu {
            index,
            numa_node: Some(node),
            local_cpus: Some(cpus.into()),
            ..Gpu::default()
        }
    }

    fn container(cpus: &str, mems: &str) -> Container {
        Container {
            env: Env::from_entries(["A=1"]),
            cpuset: Cpuset {
                cpus: cpus.into(),
                mems: mems.into(),
                patchable: true,
            },
            ..Container::default()
        }
    }

    fn cfg(numa: NumaMode, nccl: NcclP2p) -> TuningConfig {
        TuningConfig {
            numa,
            nccl_p2p: nccl,
            ..TuningConfig::default()
        }
    }

    fn host() -> NumaHost {
        NumaHost {
            online_cpus: Some(CpuList::parse("0-63").unwrap()),
            memory_nodes: Some(CpuList::parse("0-1").unwrap()),
        }
    }

    #[test]
    fn pins_one_node_and_never_a_set_cpuset() {
        let g0 = gpu(0, Some(0), "0-15,32-47");
        let g1 = gpu(1, Some(0), "0-15,32-47");
        let pin = cfg(NumaMode::Pin, NcclP2p::Note);
        let p = plan(
            &container("", ""),
            &[&g0, &g1],
            &pin,
            SpecAccess::Edit,
            &host(),
        );
        assert_eq!(
            p.cpuset,
            Some(CpusetEdit {
                cpus: "0-15,32-47".into(),
                mems: "0".into()
            })
        );
        // Not in the hook, not under "warn", not over a cpuset of its own.
        assert_eq!(
            plan(
                &container("", ""),
                &[&g0],
                &pin,
                SpecAccess::Verify,
                &host()
            )
            .cpuset,
            None
        );
        let warn = cfg(NumaMode::Warn, NcclP2p::Note);
        let p = plan(&container("", ""), &[&g0], &warn, SpecAccess::Edit, &host());
        assert_eq!(p, Plan::default());
        let p = plan(
            &container("0-3", ""),
            &[&g0],
            &pin,
            SpecAccess::Edit,
            &host(),
        );
        assert_eq!(p, Plan::default());
        // Offline CPUs are left out; memory nodes unknown: the node has memory.
        let mut h = host();
        h.online_cpus = Some(CpuList::parse("0-7").unwrap());
        h.memory_nodes = None;
        let p = plan(&container("", ""), &[&g0], &pin, SpecAccess::Edit, &h);
        assert_eq!(
            p.cpuset.unwrap(),
            CpusetEdit {
                cpus: "0-7".into(),
                mems: "0".into()
            }
        );
        // A node sysfs says has no memory: only the CPUs are pinned.
        h.memory_nodes = Some(CpuList::parse("1").unwrap());
        let p = plan(&container("", ""), &[&g0], &pin, SpecAccess::Edit, &h);
        assert_eq!(p.cpuset.unwrap().mems, "");
    }

    #[test]
    fn warns_across_nodes_and_for_a_far_cpuset() {
        let g0 = gpu(0, Some(0), "0-15");
        let g4 = gpu(4, Some(1), "16-31");
        let pin = cfg(NumaMode::Pin, NcclP2p::Note);
        let p = plan(
            &container("", ""),
            &[&g0, &g4],
            &pin,
            SpecAccess::Edit,
            &host(),
        );
        assert_eq!(p.cpuset, None);
        assert!(
            p.findings[0]
                .message
                .contains("GPU 0 on NUMA node 0, GPU 4 on NUMA node 1"),
            "{:?}",
            p.findings
        );
        let p = plan(
            &container("16-31", "1"),
            &[&g0],
            &pin,
            SpecAccess::Edit,
            &host(),
        );
        let m = &p.findings[0].message;
        assert!(m.contains("cpus 16-31 has no CPU of node 0 (0-15)"), "{m}");
        assert!(m.contains("mems 1 leaves out node 0"), "{m}");
        // Overlapping (kubelet's shared pool): no warning.
        let p = plan(
            &container("0-63", ""),
            &[&g0],
            &pin,
            SpecAccess::Edit,
            &host(),
        );
        assert!(p.findings.is_empty(), "{:?}", p.findings);
        // Unknown nodes: nothing said.
        let gx = gpu(2, None, "");
        let p = plan(&container("", ""), &[&gx], &pin, SpecAccess::Edit, &host());
        assert_eq!(p, Plan::default());
    }

    #[test]
    fn p2p_note_and_opt_in_disable() {
        let mut g0 = gpu(0, Some(0), "0-15");
        let mut g1 = gpu(1, Some(0), "0-15");
        g0.p2p
            .insert("1".into(), "ioh_topology_not_supported".into());
        g1.p2p
            .insert("0".into(), "ioh_topology_not_supported".into());
        let note = cfg(NumaMode::Off, NcclP2p::Note);
        let p = plan(
            &container("", ""),
            &[&g0, &g1],
            &note,
            SpecAccess::Edit,
            &host(),
        );
        assert!(p.env.is_empty());
        assert_eq!(p.findings.len(), 1);
        assert!(p.findings[0]
            .message
            .contains("GPU 0 and 1 (ioh_topology_not_supported)"));
        let dis = cfg(NumaMode::Off, NcclP2p::Disable);
        let p = plan(
            &container("", ""),
            &[&g0, &g1],
            &dis,
            SpecAccess::Edit,
            &host(),
        );
        assert_eq!(p.env["NCCL_P2P_DISABLE"], "1");
        // One GPU: no pair, nothing.
        let p = plan(&container("", ""), &[&g0], &dis, SpecAccess::Edit, &host());
        assert_eq!(p, Plan::default());
        // The container's own setting wins.
        let mut c = container("", "");
        c.env.set("NCCL_P2P_DISABLE", "0");
        let p = plan(&c, &[&g0, &g1], &dis, SpecAccess::Edit, &host());
        assert!(p.env.is_empty());
    }
}
