//! `gpu-guard check` on many hosts: the table, the
//! fleet JSON, exit codes, `--any`, `--hosts DIR`, repeated `--host`, nodes
//! from GPU Feature Discovery labels, and `host --node-labels [--write]`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);
const REQ: &str = "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=535,driver<536";

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

use crate::support::tempdir as tmpdir;

/// A config that never probes this machine and writes no log.
fn config(dir: &Path, facts: Option<&Path>) -> PathBuf {
    let p = dir.join("config.toml");
    let facts = facts.map(|f| f.display().to_string()).unwrap_or_default();
    std::fs::write(
        &p,
        format!(
            "[host]\nfacts_file = \"{facts}\"\ncache_file = \"\"\n[kernel_image]\ncache_dir = \"{}\"\n[log]\nsyslog = false\n",
            dir.join("cache").display()
        ),
    )
    .unwrap();
    p
}

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(*BIN)
        .env_remove("GPU_GUARD_CONFIG")
        .arg("--config")
        .arg(config(dir, None))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn nodes_check(dir: &Path, extra: &[&str]) -> Output {
    let nodes = data("nodes/fleet.json");
    let mut args = vec![
        "check",
        "--env",
        "NVIDIA_VISIBLE_DEVICES=all",
        "--env",
        REQ,
        "--nodes",
        nodes.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(dir, &args)
}

#[test]
fn nodes_table_and_summary() {
    let d = tmpdir("table");
    let o = nodes_check(&d, &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("HOST"), "{out}");
    assert_eq!(lines.len(), 1 + 7 + 1, "{out}");
    let row = |n: &str| *lines.iter().find(|l| l.starts_with(n)).unwrap();
    assert!(row("gpu-t4-535 ").contains("allow"), "{out}");
    assert!(row("gpu-a100-550 ").contains("allow"));
    assert!(row("gpu-rtx4090-545 ").contains("refuse"));
    assert!(row("gpu-rtx4090-545 ").contains("driver 545 too old for CUDA 12.4"));
    assert!(row("gpu-a100-mig-525 ").contains("driver 525 too old for CUDA 12.4"));
    // A node without GPU facts is refused: a GPU container
    // cannot be judged there.
    assert!(row("cpu-1 ").contains("refuse"), "{out}");
    assert!(row("cpu-1 ").contains("no GPU facts"));
    assert_eq!(
        lines[8],
        "runs on 4 of 7 hosts; refused on 3: driver 545 too old for CUDA 12.4 on 1, driver 525 too old for CUDA 12.4 on 1, no GPU facts on 1"
    );
    // --any: allowed somewhere is enough.
    assert_eq!(nodes_check(&d, &["--any"]).status.code(), Some(0));
}

#[test]
fn nodes_json_shape_and_label_facts() {
    let d = tmpdir("json");
    let o = nodes_check(&d, &["--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["image"]["env"]["NVIDIA_REQUIRE_CUDA"],
        REQ.split_once('=').unwrap().1
    );
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 7);
    assert_eq!(v["summary"]["allowed"], 4);
    assert_eq!(v["summary"]["refused"], 3);
    assert_eq!(v["summary"]["no_gpu_facts"], 1);
    let by = |n: &str| results.iter().find(|r| r["host"] == n).unwrap();
    // Every result carries a Decision (design.md).
    let cpu = &by("cpu-1")["decision"];
    assert_eq!(cpu["verdict"], "refuse", "{cpu}");
    assert_eq!(cpu["findings"][0]["check"], "host");
    assert_eq!(cpu["findings"][0]["severity"], "error");
    assert!(cpu["findings"][0]["message"]
        .as_str()
        .unwrap()
        .starts_with("no GPU facts"));
    let h100 = &by("gpu-h100-550")["decision"];
    assert_eq!(h100["verdict"], "allow");
    let info = h100["findings"][0]["message"].as_str().unwrap();
    // Without gpu-guard's sm labels the compute capability is unknown:
    // GPU Feature Discovery's shows one GPU model of the node.
    assert!(
        info.starts_with("host facts from node labels: driver 550.54.14, CUDA 12.4, 8× NVIDIA-H100-80GB-HBM3, cc unknown without gpu-guard's gpu-guard.io/sm.min labels (GPU Feature Discovery shows 9.0 for one GPU model"),
        "{info}"
    );
    assert!(
        info.ends_with("brand tesla (gpu-guard.io labels)"),
        "{info}"
    );
    let a100 = &by("gpu-a100-550")["decision"];
    assert!(a100["findings"][0]["message"]
        .as_str()
        .unwrap()
        .contains("brand unknown (no gpu-guard.io/brand label)"));
    // The old-label node: facts from the deprecated names.
    let old = by("gpu-l4-oldgfd")["decision"]["findings"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(old.contains("driver 550.54.15, CUDA 12.4"), "{old}");
}

/// An alternative whose brand labels cannot tell does not hold, so the
/// unlabelled A100 is refused, never "allowed" with a warning; a warning
/// names the label that decides it.
#[test]
fn unknown_brand_does_not_hold_and_names_its_label() {
    let d = tmpdir("brand");
    // CUDA 12.4 fails everywhere below; only brand=tesla,driver>=550 could hold.
    let o = run(
        &d,
        &[
            "check",
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=13.0 brand=tesla,driver>=550,driver<551",
            "--nodes",
            data("nodes/fleet.json").to_str().unwrap(),
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let by = |n: &str| {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["host"] == n)
            .unwrap()["decision"]
            .clone()
    };
    // Labelled tesla: holds. Unlabelled A100: not shown to hold -> refused.
    assert_eq!(by("gpu-h100-550")["verdict"], "allow");
    let a100 = by("gpu-a100-550");
    assert_eq!(a100["verdict"], "refuse", "{a100}");
    let err = a100["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["severity"] == "error")
        .unwrap()
        .clone();
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("not shown to hold"),
        "{err}"
    );
    let warn = a100["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["severity"] == "warning")
        .unwrap()
        .clone();
    assert!(
        warn["message"]
            .as_str()
            .unwrap()
            .contains("brand of GPU 0 is unknown"),
        "{warn}"
    );
    assert!(
        warn["fix"].as_str().unwrap().contains("--node-labels"),
        "{warn}"
    );
    assert!(
        warn["message"]
            .as_str()
            .unwrap()
            .contains("gpu-guard.io/brand would decide it"),
        "{warn}"
    );
    // Labelled geforcertx: a definite failure.
    assert_eq!(by("gpu-rtx4090-545")["verdict"], "refuse");
}

#[test]
fn hosts_dir_and_repeated_host() {
    let d = tmpdir("hosts");
    let dir = data("hosts");
    let o = run(
        &d,
        &[
            "check",
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--env",
            REQ,
            "--hosts",
            dir.to_str().unwrap(),
        ],
    );
    let out = text(&o);
    let n = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    assert_eq!(out.lines().count(), n + 2, "{out}");
    // Sorted by file name.
    let names: Vec<&str> = out
        .lines()
        .skip(1)
        .take(n)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "{out}");
    assert_eq!(o.status.code(), Some(1), "{out}");

    let a100 = data("hosts/a100.json");
    let h100 = data("hosts/h100x8.json");
    let two = run(
        &d,
        &[
            "check",
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--env",
            REQ,
            "--host",
            a100.to_str().unwrap(),
            "--host",
            h100.to_str().unwrap(),
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&two.stdout).unwrap();
    assert_eq!(v["results"][0]["host"], "a100.json");
    assert_eq!(v["results"][1]["host"], "h100x8.json");
    // One host: the plain Decision, as before.
    let one = run(
        &d,
        &[
            "check",
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--env",
            REQ,
            "--host",
            h100.to_str().unwrap(),
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    assert!(v["verdict"].is_string(), "{v}");
    // Bad input is 2.
    let bad = run(&d, &["check", "--env", REQ, "--hosts", "/nonexistent-dir"]);
    assert_eq!(bad.status.code(), Some(2));
    let bad = run(
        &d,
        &["check", "--env", REQ, "--nodes", a100.to_str().unwrap()],
    );
    assert_eq!(bad.status.code(), Some(2), "a facts file is no node list");
}

#[test]
fn node_labels_print_and_write() {
    let d = tmpdir("labels");
    let cfg = config(&d, Some(&data("hosts/t4-a10.json")));
    let o = Command::new(*BIN)
        .env_remove("GPU_GUARD_CONFIG")
        .args(["--config", cfg.to_str().unwrap(), "host", "--node-labels"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o);
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        lines,
        [
            "gpu-guard.io/brand=mixed",
            "gpu-guard.io/brand.nvidia=true",
            "gpu-guard.io/brand.tesla=true",
            "gpu-guard.io/compute.min=7.5",
            "gpu-guard.io/compute.min.major=7",
            "gpu-guard.io/compute.min.minor=5",
            "gpu-guard.io/cuda.int=1202",
            "gpu-guard.io/driver.branch=535",
            "gpu-guard.io/driver.int=535129003",
            "gpu-guard.io/fwd-compat.eligible=true",
            "gpu-guard.io/gpu.count=2",
            "gpu-guard.io/sm.max=86",
            "gpu-guard.io/sm.min=75",
            "gpu-guard.io/vendor=nvidia",
        ]
    );
    let target = d.join("features.d/gpu-guard");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    let w = Command::new(*BIN)
        .env_remove("GPU_GUARD_CONFIG")
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "host",
            "--node-labels",
            "--write",
            "--output",
        ])
        .arg(&target)
        .output()
        .unwrap();
    assert_eq!(
        w.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&w.stderr)
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), out);
    // --write needs --node-labels.
    let bad = Command::new(*BIN)
        .args(["--config", cfg.to_str().unwrap(), "host", "--write"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// The NOTE column is never cut when stdout is not a terminal (a pipe, a
/// file): every row holds its whole note. On a terminal (a pty from
/// util-linux `script`) a long note is cut with `…`, and `--wide` prints it
/// whole; `--wide` is for the table, so `--json` with it is bad usage.
#[test]
fn the_note_column_is_cut_only_on_a_terminal() {
    let dir = tmpdir("fleet-wide");
    let long = "forward-compatibility alternative";
    let o = nodes_check(&dir, &[]);
    let piped = text(&o);
    let row = piped
        .lines()
        .find(|l| l.starts_with("gpu-t4-535"))
        .unwrap_or_else(|| panic!("no gpu-t4-535 row in {piped}"));
    assert!(row.chars().count() > 200, "{row}");
    assert!(row.contains("error 804") && !row.contains('…'), "{row}");
    let wide = nodes_check(&dir, &["--wide"]);
    assert_eq!(text(&wide), piped, "--wide changes nothing when piped");

    let o = nodes_check(&dir, &["--wide", "--json"]);
    assert_eq!(o.status.code(), Some(2));

    if !crate::support::have_tool("script") {
        return;
    }
    let on_tty = |extra: &str| {
        let cfg = config(&dir, None);
        let cmd = format!(
            "{} --config {} check --env NVIDIA_VISIBLE_DEVICES=all --env '{REQ}' --nodes {} {extra}",
            *BIN,
            cfg.display(),
            data("nodes/fleet.json").display()
        );
        let o = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .env_remove("GPU_GUARD_CONFIG")
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).replace('\r', "")
    };
    let tty = on_tty("");
    let row = tty
        .lines()
        .find(|l| l.starts_with("gpu-t4-535"))
        .unwrap_or_else(|| panic!("no gpu-t4-535 row in {tty}"));
    assert!(row.contains(long) && row.ends_with('…'), "{row}");
    assert!(!row.contains("error 804"), "{row}");
    let tty_wide = on_tty("--wide");
    let row = tty_wide
        .lines()
        .find(|l| l.starts_with("gpu-t4-535"))
        .unwrap_or_else(|| panic!("no gpu-t4-535 row in {tty_wide}"));
    assert!(row.contains("error 804") && !row.contains('…'), "{row}");
}
