//! The label-only affinity against the per-node judgement, in process:
//! every official nvidia/cuda requirement string (tests/data/requirements)
//! with libraries of SASS and PTX across sm_50 to sm_120 (`a` and `f`
//! variants, PTX ISA versions a driver may or may not JIT), on nodes
//! labelled as `host --node-labels` labels them (one GPU model, two, three,
//! unknown capabilities, Tegra parts), with and without GFD's labels and
//! health counts. The terms are matched with the node-selector semantics
//! of [`crate::fleet::selector`]; the binary is tested the same way with a
//! separate evaluator (tests/image/fleet_affinity_exact.rs).

use super::*;
use crate::core::arch::{Arch, Kind, Variant};
use crate::core::container::{Container, Env};
use crate::core::decision::Verdict;
use crate::core::facts::{Gpu, HostFacts};
use crate::core::kernel_image::{Image, Library, Scanned};
use crate::core::policy::Config;
use crate::core::security::SpecAccess;
use crate::fleet::nodes::{host_from_node, NodeLabels};
use crate::pipeline::{ContainerInput, Scans};
use std::collections::BTreeMap;

fn sass(n: u32, v: Variant) -> Image {
    Image {
        kind: Kind::Sass,
        arch: Arch::new(n, v),
        ptx_isa: None,
    }
}

fn ptx(n: u32, v: Variant, isa: (u16, u16)) -> Image {
    Image {
        kind: Kind::Ptx,
        arch: Arch::new(n, v),
        ptx_isa: Some(isa),
    }
}

/// Libraries of every kind of code: plain, `a` and `f` SASS, PTX of ISAs
/// from CUDA 11.8 to 13.5, one library or several.
fn mixes() -> Vec<Vec<Vec<Image>>> {
    use Variant::{Arch as A, Family as F, Plain as P};
    vec![
        vec![vec![sass(50, P), sass(61, P), ptx(61, P, (7, 8))]],
        vec![vec![
            sass(75, P),
            sass(80, P),
            sass(90, A),
            ptx(90, P, (8, 4)),
        ]],
        vec![vec![sass(90, A)]],
        vec![vec![
            sass(100, F),
            sass(103, F),
            sass(120, F),
            ptx(100, F, (8, 8)),
        ]],
        vec![vec![ptx(80, P, (8, 0))]],
        vec![vec![sass(86, P)], vec![sass(80, P), ptx(80, P, (9, 0))]],
        vec![vec![sass(87, P), sass(72, P), sass(53, P)]],
        vec![vec![sass(120, A), sass(100, A), ptx(120, P, (9, 5))]],
        vec![
            vec![sass(70, P), ptx(70, P, (8, 5))],
            vec![sass(89, P), ptx(89, P, (9, 1))],
        ],
        vec![vec![
            sass(52, P),
            sass(60, P),
            sass(70, P),
            sass(75, P),
            sass(80, P),
            sass(86, P),
            sass(90, P),
            ptx(90, P, (8, 7)),
        ]],
    ]
}

fn official() -> Vec<String> {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/requirements/nvidia-cuda-official.tsv"
    );
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split('\t').nth(2).unwrap().to_string())
        .collect()
}

/// Hosts of every driver branch with GPU sets of one model, two, three,
/// and an unknown capability.
fn hosts() -> Vec<HostFacts> {
    let drivers = [
        ("470.256.02", "11.4"),
        ("525.60.13", "12.0"),
        ("535.104.05", "12.2"),
        ("550.54.15", "12.4"),
        ("570.86.15", "12.8"),
        ("575.57.08", "12.9"),
        ("580.65.06", "13.0"),
        ("615.10", "13.5"),
    ];
    let sets: &[&[(&str, Option<&str>)]] = &[
        &[("tesla", Some("9.0"))],
        &[("tesla", Some("8.0")), ("tesla", Some("8.0"))],
        &[("nvidia", Some("8.6"))],
        &[("nvidia", Some("8.7"))],
        &[("nvidia", Some("8.9"))],
        &[("tesla", Some("10.0"))],
        &[("nvidia", Some("10.3"))],
        &[("geforcertx", Some("12.0"))],
        &[("tesla", Some("7.5")), ("nvidia", Some("8.6"))],
        &[("tesla", Some("8.0")), ("tesla", Some("9.0"))],
        &[
            ("tesla", Some("7.0")),
            ("tesla", Some("8.0")),
            ("tesla", Some("9.0")),
        ],
        &[("geforce", Some("6.1"))],
        &[("tesla", Some("5.2"))],
        &[("tesla", None)],
    ];
    let mut out = Vec::new();
    for (d, c) in drivers {
        for set in sets {
            out.push(HostFacts {
                driver_version: Some(d.to_string()),
                cuda_driver_version: Some(c.to_string()),
                gpus: set
                    .iter()
                    .enumerate()
                    .map(|(k, (brand, cc))| Gpu {
                        index: k as u32,
                        brand: brand.to_string(),
                        compute_capability: cc.map(String::from),
                        ..Gpu::default()
                    })
                    .collect(),
                ..HostFacts::default()
            });
        }
    }
    out
}

/// A node labelled by `host --node-labels`, with GFD's driver labels and
/// on some a health count.
fn node(i: usize, facts: &HostFacts) -> NodeLabels {
    let mut l: BTreeMap<String, String> = crate::fleet::labels::node_labels(facts)
        .into_iter()
        .collect();
    let d = facts.driver_version.as_deref().unwrap();
    let p: Vec<&str> = d.split('.').collect();
    l.insert("nvidia.com/cuda.driver-version.major".into(), p[0].into());
    l.insert("nvidia.com/cuda.driver-version.minor".into(), p[1].into());
    if i % 3 == 0 {
        l.insert("gpu-guard.io/gpu.healthy".into(), (i % 2).to_string());
    }
    NodeLabels {
        name: format!("n{i}"),
        labels: l,
    }
}

#[test]
fn label_terms_admit_exactly_what_the_nodes_allow() {
    let cfg = Config::default();
    let nodes: Vec<NodeLabels> = hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| node(i, h))
        .collect();
    let reqs = official();
    let mut cases = 0;
    for (k, mix) in mixes().into_iter().enumerate() {
        let req = &reqs[(k * 5) % reqs.len()];
        let mut c = Container::from_env(Env::from_entries([format!("NVIDIA_REQUIRE_CUDA={req}")]));
        crate::fleet::attached::as_run_with_all_gpus(&mut c);
        let scanned = Scanned {
            libraries: mix
                .into_iter()
                .enumerate()
                .map(|(i, images)| Library {
                    path: format!("usr/lib/libk{i}.so"),
                    outcome: Ok(images),
                })
                .collect(),
            ..Default::default()
        };
        let case =
            ContainerInput::new(c, SpecAccess::Edit).with_scans(Scans::made(Some(scanned), None));
        let subject = FleetContainer::new(&cfg, case);
        let a = label_terms(&subject);
        assert!(a.exact, "{k}: {:?}", a.notes);
        assert!(a.terms.len() <= 16, "{k}: {} terms", a.terms.len());
        let mut allowed = 0;
        for n in &nodes {
            let h = host_from_node(n).unwrap();
            let ok = subject.judge_host(&h).verdict == Verdict::Allow;
            allowed += usize::from(ok);
            assert_eq!(
                selector::admits(&a.terms, n),
                ok,
                "{k} {req}: node {:?}\n{:#?}",
                n.labels,
                a.terms
            );
        }
        assert!(allowed > 0, "{k}: no node runs it");
        cases += 1;
    }
    assert_eq!(cases, mixes().len());
}

/// The webhook's healthy count per pod: every term's expression set for N.
#[test]
fn the_gpu_count_sets_every_healthy_expression() {
    let t = Term {
        match_expressions: vec![
            selector::Expr::exists(labels::DRIVER_INT),
            selector::Expr::new(labels::HEALTHY, "NotIn", &["0".to_string()]),
        ],
        match_fields: Vec::new(),
    };
    let four = with_gpu_count(&[t], 4);
    assert_eq!(four[0].match_expressions[1].values, ["0", "1", "2", "3"]);
}
