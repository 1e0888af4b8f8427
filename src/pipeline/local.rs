//! What only the host a container starts on can say about it, read when
//! the pipeline decides for this host (the hooks, the wrapper, `check`
//! without `--host`), never for a host described by a facts file or node
//! labels (docs/interfaces.md, "Host health and tuning"):
//!
//! - the resource limits the container inherits where its spec sets none,
//!   when `tuning.memlock` or `tuning.stack` would raise one;
//! - for `tuning.shm_size`, the host's RAM (a tmpfs without `size=` gets
//!   half) and the size of a bind-mounted `/dev/shm`'s source (statfs(2));
//! - the CDI spec check of the devices the container asks for
//!   (`host.cdi_spec_dirs`, core::cdi);
//! - the device nodes it will use (core::device_nodes): NVIDIA's for its
//!   NVIDIA GPUs, AMD's (`/dev/kfd` and the render nodes of the AMD GPUs
//!   it gets, core::amd::nodes) for its AMD GPUs, on a host that is
//!   probed (not described by `host.facts_file`), while the health checks
//!   are on (`[health]`);
//! - for `tuning.numa = "pin"`, the CPUs online and the memory nodes
//!   (sysfs), which a cpuset may name.
//!
//! Each is read only when the container's decision can use it.

use crate::core::cdi;
use crate::core::container::Container;
use crate::core::decide::HostLocal;
use crate::core::detect::Detection;
use crate::core::facts::HostFacts;
use crate::core::policy::{Config, NumaMode};
use crate::core::tuning::numa::NumaHost;
use crate::core::tuning::{self, shm};

/// Reads what `c`'s decision on this host needs.
pub(crate) fn read(
    c: &Container,
    det: &Detection,
    cfg: &Config,
    facts: Option<&HostFacts>,
) -> HostLocal {
    let mut out = HostLocal::default();
    if cfg.tuning.memlock.value().is_some() || cfg.tuning.stack.value().is_some() {
        out.rlimits = crate::sys::limits::inherited(&[tuning::MEMLOCK, tuning::STACK]);
    }
    let (ram, bind) = shm::needs(c, &cfg.tuning);
    if ram {
        out.shm.ram = nix::sys::sysinfo::sysinfo().ok().map(|s| s.ram_total());
    }
    if let Some(source) = bind {
        out.shm.bind_size = Some(filesystem_size(source));
    }
    if !det.cdi_devices.is_empty() && !cfg.host.cdi_spec_dirs.is_empty() {
        let specs = crate::host::cdi::load(&cfg.host.cdi_spec_dirs);
        let driver = facts.and_then(|f| f.driver_version.as_deref());
        out.cdi = cdi::judge(
            &det.cdi_devices,
            &specs,
            driver,
            &crate::host::cdi::RealPaths,
        );
    }
    let paths = crate::host::ProbePaths::from_env();
    // Part of the start-time health checks: off with them ([health]).
    let probed = cfg.host.facts_file.is_empty() && cfg.health.on();
    if let Some(f) = facts.filter(|_| probed) {
        out.device_nodes = device_nodes(c, det, f, &paths);
    }
    if cfg.tuning.numa == NumaMode::Pin && !c.cpuset.is_set() {
        let l = crate::host::topology::cpuset_limits(&paths.sys);
        out.numa = NumaHost {
            online_cpus: l.online_cpus,
            memory_nodes: l.memory_nodes,
        };
    }
    out
}

/// The device-node findings of a container given its GPUs on this host:
/// NVIDIA's nodes where it gets NVIDIA GPUs from a host with NVIDIA's
/// driver, AMD's where it gets AMD GPUs.
fn device_nodes(
    c: &Container,
    det: &Detection,
    facts: &HostFacts,
    paths: &crate::host::ProbePaths,
) -> Vec<crate::core::decision::Finding> {
    let user = container_user(c);
    let group = std::path::Path::new("/etc/group");
    let mut out = Vec::new();
    if !det.amd_only && facts.driver_version.is_some() {
        let (visible, _) = crate::core::detect::resolve(&det.request, facts);
        let names = crate::host::devnodes::nvidia_names(visible.iter().map(|i| &facts.gpus[*i]));
        let nodes =
            crate::host::devnodes::read(&paths.dev, paths.devices.as_deref(), &names, group);
        out.extend(crate::core::device_nodes::findings(&nodes, user.as_ref()));
    }
    let amd = crate::core::amd::visible::amd_gpus(c, det, facts);
    if !amd.gpus.is_empty() {
        let renders: Vec<String> = amd
            .gpus
            .iter()
            .filter_map(|g| g.render_node.clone())
            .collect();
        // amdkfd's major is the host's /proc/devices' `kfd`: under the
        // host root the KFD topology was read from.
        let devices = paths.devices.clone().or_else(|| {
            (paths.host_root != std::path::Path::new("/"))
                .then(|| paths.host_root.join("proc/devices"))
        });
        let nodes =
            crate::host::devnodes::read_amd(&paths.dev, devices.as_deref(), &renders, group);
        out.extend(crate::core::amd::nodes::findings(&nodes, user.as_ref()));
    }
    out
}

/// The user runc runs the container's process as, when its ids are the
/// host's: none in a user namespace, or without a spec (`check --env`).
fn container_user(c: &Container) -> Option<crate::core::device_nodes::User> {
    if c.user_namespace {
        return None;
    }
    let dac = c.capabilities.effective.as_ref().is_some_and(|e| {
        e.iter()
            .any(|x| crate::core::capability::normalize(x).as_deref() == Some("CAP_DAC_OVERRIDE"))
    });
    Some(crate::core::device_nodes::User {
        uid: c.uid?,
        gid: c.gid.unwrap_or(0),
        additional_gids: c.additional_gids.clone(),
        dac_override: dac,
    })
}

/// The size of the filesystem at `path` (statfs(2): blocks × block size),
/// as `df` shows a tmpfs's `size=`.
fn filesystem_size(path: &str) -> Result<u64, String> {
    let s = nix::sys::statfs::statfs(path).map_err(|e| e.desc().to_string())?;
    let block = u64::try_from(s.block_size()).map_err(|_| "a negative block size".to_string())?;
    Ok(s.blocks().saturating_mul(block))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filesystem_has_a_size() {
        assert!(filesystem_size("/").unwrap() > 0);
        assert_eq!(
            filesystem_size("/nonexistent/x").unwrap_err(),
            "No such file or directory"
        );
    }
}
