//! doctor's checks of the config (valid, trusted, its mode) and of the host
//! facts (NVML within the deadline, the driver, the GPUs, the device nodes).

use super::{Check, Node};
use crate::commands::cli::DoctorArgs;
use crate::core::facts::{HostProblemKind, HostReport};
use crate::core::policy::{Config, Mode};
use std::path::{Path, PathBuf};

/// The config in effect on the node, as install finds it: `--config` (or
/// `GPU_GUARD_CONFIG`), else the default path, under `--host-root` the
/// host's. Returns the config checks, the node, and whether the config is
/// valid (an invalid one is exit 2; the other checks use the defaults).
pub fn config_checks(flag: Option<&Path>, args: &DoctorArgs) -> (Vec<Check>, Node, bool) {
    let (path, explicit) = crate::config::config_path(flag);
    let rooted = args.host_root != Path::new("/") && !explicit;
    let (host_path, read_path) = if rooted {
        let host = PathBuf::from(crate::config::DEFAULT_CONFIG_PATH);
        let fs = args.host_root.join(host.strip_prefix("/").unwrap_or(&host));
        (host, fs)
    } else {
        (path.clone(), path)
    };
    let mut node = Node {
        host_root: args.host_root.clone(),
        state_dir: args.state_dir.clone(),
        config: Config::default(),
        config_path: host_path,
    };
    if rooted && std::fs::symlink_metadata(&read_path).is_err() {
        let c = Check::ok(
            "config",
            format!(
                "no {} on the host: the built-in defaults (the shipped config.toml) apply",
                node.config_path.display()
            ),
        );
        return (vec![c], node, true);
    }
    let flag = (rooted || explicit).then_some(read_path.as_path());
    // Under --host-root the files are named as the host names them.
    let host_named = |mut c: Check| {
        if rooted {
            let root = args.host_root.display().to_string();
            c.message = c.message.replace(root.trim_end_matches('/'), "");
        }
        c
    };
    match crate::config::load_detailed(flag) {
        Ok(loaded) => {
            let checks = vec![host_named(valid(&loaded)), mode(&loaded.config)];
            node.config = loaded.config;
            (checks, node, true)
        }
        Err(e) => {
            let c = Check::error(
                "config",
                format!("{e}; GPU containers are refused until it is fixed (other containers start)"),
                "correct or remove the file it names (`gpu-guard check --env NVIDIA_VISIBLE_DEVICES=all` shows the same error until it is fixed)",
            );
            (vec![host_named(c)], node, false)
        }
    }
}

fn valid(l: &crate::config::Loaded) -> Check {
    let main = match &l.main {
        Some(p) => format!("{} is valid and trusted", p.display()),
        None => "no config file: the built-in defaults (the shipped config.toml) apply".to_string(),
    };
    let drop_ins = match crate::config::drop_ins_line(l) {
        Some(line) => format!("; {line}"),
        None => String::new(),
    };
    Check::ok("config", format!("{main}{drop_ins}"))
}

/// `enforce` is what refuses; any other mode lets containers through.
fn mode(cfg: &Config) -> Check {
    let name = serde_json::to_value(cfg.mode)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    if cfg.mode == Mode::Enforce {
        return Check::ok(
            "config.mode",
            "mode = \"enforce\": mismatched GPU containers are refused",
        );
    }
    let what = match name.as_str() {
        "off" => "gpu-guard decides nothing and changes nothing (the emergency bypass)",
        "audit" => "gpu-guard only logs what it would refuse and edit",
        _ => "gpu-guard logs what it would refuse and starts it anyway",
    };
    Check::warning(
        "config.mode",
        format!("mode = \"{name}\": {what}"),
        "set mode = \"enforce\" (or remove the drop-in that sets this mode) once the logs show nothing unexpected",
    )
}

/// The host's facts: `report` is the probe as a container start makes it.
/// On a host whose GPUs are all AMD's (`amd_gpus`, and NVML finds no
/// NVIDIA driver) the NVIDIA checks are one note: nothing there needs it.
pub fn host(node: &Node, report: &HostReport, amd_gpus: bool) -> Vec<Check> {
    if amd_gpus && no_nvidia(report) {
        return vec![Check::ok(
            "host.nvidia",
            "no NVIDIA driver or GPU: this node's GPUs are AMD's (the host.amd checks)",
        )];
    }
    let paths = crate::host::ProbePaths::from_env();
    let rooted = node.host_root != Path::new("/");
    let (dev, devices, group) = if rooted {
        (
            node.fs(Path::new("/dev")),
            Some(node.fs(Path::new("/proc/devices"))),
            node.fs(Path::new("/etc/group")),
        )
    } else {
        (paths.dev, paths.devices, PathBuf::from("/etc/group"))
    };
    let mut out = vec![nvml(report, node.config.host.probe_timeout_ms)];
    let Some(facts) = &report.facts else {
        return out;
    };
    let joined = |kind: fn(&HostProblemKind) -> bool| {
        let ps: Vec<_> = report.problems.iter().filter(|p| kind(&p.kind)).collect();
        let msg: Vec<&str> = ps.iter().map(|p| p.message.as_str()).collect();
        let fix = ps.iter().find_map(|p| p.fix.clone()).unwrap_or_default();
        (!ps.is_empty()).then(|| (msg.join("; "), fix))
    };
    out.push(
        match (
            &facts.driver_version,
            joined(|k| *k == HostProblemKind::NoDriver),
        ) {
            (Some(d), _) => {
                let cuda = facts.cuda_driver_version.as_deref().unwrap_or("unknown");
                Check::ok("host.driver", format!("NVIDIA driver {d}, CUDA {cuda}"))
            }
            (None, Some((m, f))) => Check::error("host.driver", m, f),
            (None, None) => Check::error(
                "host.driver",
                format!("no NVIDIA driver ({} names none)", report.source),
                "install the NVIDIA driver, or correct host.facts_file",
            ),
        },
    );
    if facts.driver_version.is_none() {
        return out;
    }
    out.push(match joined(|k| matches!(k, HostProblemKind::GpuLost { .. })) {
        Some((m, f)) => Check::error("host.gpus", m, f),
        None if !facts.gpus.iter().any(|g| g.vendor.is_nvidia()) => Check::error(
            "host.gpus",
            "the driver sees no GPU: every GPU container is refused",
            "check `nvidia-smi` and `dmesg | grep -i nvrm`; a GPU passed through to a VM or held by vfio-pci is not the host's",
        ),
        None => Check::ok("host.gpus", gpus_line(facts)),
    });
    out.push(health(facts));
    let problems = crate::host::device_node_problems(facts, &dev, devices.as_deref(), &group);
    out.push(device_nodes(&dev, &problems));
    out
}

/// Whether the probe found no NVIDIA driver (rather than one that failed
/// to answer: a hung NVML is still an error on a mixed host).
fn no_nvidia(report: &HostReport) -> bool {
    let no_driver = report
        .problems
        .iter()
        .any(|p| p.kind == HostProblemKind::NoDriver);
    match &report.facts {
        Some(f) => f.driver_version.is_none() && f.gpus.iter().all(|g| !g.vendor.is_nvidia()),
        None => no_driver,
    }
}

/// `host.device-nodes`: each node at fault, the worst deciding the status.
fn device_nodes(dev: &Path, problems: &[(bool, String, String)]) -> Check {
    if problems.is_empty() {
        return Check::ok(
            "host.device-nodes",
            format!(
                "{}/nvidiactl, nvidia-uvm and each GPU's node are character devices of the driver's majors that every user can open",
                dev.display()
            ),
        );
    }
    let msg: Vec<&str> = problems.iter().map(|(_, m, _)| m.as_str()).collect();
    let mut fixes: Vec<&str> = problems.iter().map(|(_, _, f)| f.as_str()).collect();
    fixes.dedup();
    if problems.iter().any(|(e, _, _)| *e) {
        Check::error("host.device-nodes", msg.join("; "), fixes.join("; "))
    } else {
        Check::warning("host.device-nodes", msg.join("; "), fixes.join("; "))
    }
}

/// `host.health`: NVML's health of each GPU (core::health). A failed GPU
/// is an error (containers given it are refused under the default
/// `[health] failed = "enforce"`), a degraded one a warning.
fn health(facts: &crate::core::facts::HostFacts) -> Check {
    use crate::core::health::{name_gpu, HealthState};
    let mut worst = HealthState::Ok;
    let mut lines = Vec::new();
    let mut known = 0;
    for g in &facts.gpus {
        let Some(h) = &g.health else { continue };
        known += 1;
        if h.state != HealthState::Ok {
            worst = worst.max(h.state);
            lines.push(format!(
                "{} is {}: {}",
                name_gpu(g),
                h.state.word(),
                h.reasons.join(", ")
            ));
        }
    }
    let fix = "drain the node and reset the GPU when idle (`nvidia-smi -r -i N`); a failed row remap or a GPU that falls off the bus again needs the board replaced";
    match worst {
        HealthState::Failed => Check::error("host.health", lines.join("; "), fix),
        HealthState::Degraded => Check::warning("host.health", lines.join("; "), fix),
        HealthState::Ok if known == 0 => Check::ok(
            "host.health",
            "GPU health not known (the facts do not say; NVML answers it)",
        ),
        HealthState::Ok => Check::ok(
            "host.health",
            format!(
                "NVML reports {known} GPU{} healthy",
                if known == 1 { "" } else { "s" }
            ),
        ),
    }
}

/// NVML answered (or the facts file was read) within the deadline.
fn nvml(report: &HostReport, deadline_ms: u64) -> Check {
    let degraded: Vec<&str> = report
        .problems
        .iter()
        .filter(|p| p.kind == HostProblemKind::Degraded)
        .map(|p| p.message.as_str())
        .collect();
    if report
        .problems
        .iter()
        .any(|p| p.kind == HostProblemKind::NoDriver)
    {
        return Check::error(
            "host.nvml",
            "NVML cannot answer: there is no NVIDIA driver (host.driver says what is missing)",
            "install the NVIDIA driver; NVML (libnvidia-ml.so.1) comes with it",
        );
    }
    if report.facts.is_none() {
        let p = report.problems.first();
        return Check::error(
            "host.nvml",
            p.map_or("the host probe failed".to_string(), |p| p.message.clone()),
            p.and_then(|p| p.fix.clone())
                .unwrap_or_else(|| "run `nvidia-smi` to see the driver's own error".into()),
        );
    }
    if !degraded.is_empty() {
        let fix = report
            .problems
            .iter()
            .find(|p| p.kind == HostProblemKind::Degraded)
            .and_then(|p| p.fix.clone())
            .unwrap_or_default();
        return Check::warning("host.nvml", degraded.join("; "), fix);
    }
    Check::ok(
        "host.nvml",
        format!(
            "host facts from {} within the {deadline_ms} ms deadline",
            report.source
        ),
    )
}

fn gpus_line(facts: &crate::core::facts::HostFacts) -> String {
    let nvidia: Vec<&crate::core::facts::Gpu> =
        facts.gpus.iter().filter(|g| g.vendor.is_nvidia()).collect();
    let each: Vec<String> = nvidia
        .iter()
        .take(8)
        .map(|g| {
            let cc = g.compute_capability.as_deref().unwrap_or("unknown");
            let name = if g.name.is_empty() {
                "unnamed"
            } else {
                g.name.as_str()
            };
            format!("{}: {name} ({}, {cc})", g.index, g.brand)
        })
        .collect();
    let more = nvidia.len().saturating_sub(8);
    let tail = if more > 0 {
        format!(", and {more} more")
    } else {
        String::new()
    };
    let n = nvidia.len();
    format!(
        "{n} GPU{}: {}{tail}",
        if n == 1 { "" } else { "s" },
        each.join(", ")
    )
}
