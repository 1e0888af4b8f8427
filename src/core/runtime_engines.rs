//! `[runtime.engines.<docker|containerd|crio|podman>]`: which container
//! engine invoked the runtime wrapper, told by the runtime root (`--root`)
//! the engine passes, and which runtime the wrapper chains to for it.
//!
//! A container's spec can never say which engine runs it, but it cannot
//! choose the runtime root either: the engine sets it from its own
//! configuration, and `gpu-guard install` registers the wrapper with a root
//! that belongs to that engine alone:
//! - containerd: the gpu-guard runtime's `options.Root`; containerd's runc
//!   shim appends the namespace (containerd `cmd/containerd-shim-runc-v2`,
//!   `process.NewRunc(root, path, namespace, ...)`: `filepath.Join(root,
//!   namespace)`), so the wrapper sees `--root /run/gpu-guard/containerd/k8s.io`.
//!   A runtime registered without `Root` gets the shim's default,
//!   `/run/containerd/runc/<namespace>`, also taken as containerd.
//! - CRI-O: the gpu-guard handler's `runtime_root` (crio.conf(5)).
//! - docker: dockerd gives every runtime of daemon.json the root
//!   `<exec-root>/runtime-runc` (moby `daemon/runtime_unix.go`,
//!   `defaultV2ShimConfig`: `filepath.Join(conf.ExecRoot, "runtime-"+defaultRuntimeName)`
//!   with `defaultRuntimeName = "runc"`, in 20.10 as in later releases), and
//!   the shim appends the namespace `moby`: `--root /var/run/docker/runtime-runc/moby`
//!   under the default exec-root (`/var/run/docker`: moby
//!   cmd/dockerd/config_common_unix.go, `getDefaultExecRoot`; seen with Debian 12's docker.io 20.10.24:
//!   integration/test-docker.sh). Only docker uses that root.
//! - podman runs gpu-guard as a hook, not as its runtime: no root by default.
//!
//! `/var/run` is `/run` on every current distribution (a symlink, FHS 3.0
//! and systemd's tmpfiles `var.conf`), so the two spellings are one root.
//! Matching is component-wise: `/run/gpu-guard/crio2` is not under
//! `/run/gpu-guard/crio`.

use crate::core::cri_facts::CriRuntime;
use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

/// The containerd namespace of containers the CRI plugin makes.
const CRI_NAMESPACE: &str = "k8s.io";

/// A container engine gpu-guard registers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Engine {
    Docker,
    Containerd,
    Crio,
    Podman,
}

impl Engine {
    pub const ALL: [Engine; 4] = [
        Engine::Docker,
        Engine::Containerd,
        Engine::Crio,
        Engine::Podman,
    ];

    /// The engine's name in config keys, file names and messages.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Containerd => "containerd",
            Engine::Crio => "crio",
            Engine::Podman => "podman",
        }
    }
}

/// The root `install` gives the containerd runtime (`options.Root`).
pub const CONTAINERD_ROOT: &str = "/run/gpu-guard/containerd";
/// containerd's runc shim's own root when a runtime sets none
/// (containerd `pkg/process`/`runtime/v2/runc`: `RuncRoot = "/run/containerd/runc"`).
pub const CONTAINERD_SHIM_DEFAULT_ROOT: &str = "/run/containerd/runc";
/// The root `install` gives the CRI-O handler (`runtime_root`).
pub const CRIO_ROOT: &str = "/run/gpu-guard/crio";
/// dockerd's root for the runtimes of daemon.json under its default
/// exec-root `/var/run/docker`.
pub const DOCKER_ROOT: &str = "/var/run/docker/runtime-runc";

/// One engine's entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineRuntime {
    /// The runtime the wrapper execs for this engine. Absent: the global
    /// `runtime.path`; `""`: the first runc, then crun, on PATH.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The runtime root (prefix) that identifies the engine; absent: the
    /// engine's default ([`default_root`]); `""`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
}

/// `[runtime.engines]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Engines {
    pub docker: EngineRuntime,
    pub containerd: EngineRuntime,
    pub crio: EngineRuntime,
    pub podman: EngineRuntime,
}

/// The root that identifies `engine` when the config sets none: the one
/// `gpu-guard install` registers (docker: the one dockerd picks).
pub fn default_root(engine: Engine) -> &'static str {
    match engine {
        Engine::Docker => DOCKER_ROOT,
        Engine::Containerd => CONTAINERD_ROOT,
        Engine::Crio => CRIO_ROOT,
        Engine::Podman => "",
    }
}

/// A path's normal components, `/var/run` read as `/run`; `None` for a
/// relative path or one with `..` (never an engine's root).
fn normal(path: &Path) -> Option<Vec<&std::ffi::OsStr>> {
    let mut out = Vec::new();
    let mut comps = path.components();
    if comps.next() != Some(Component::RootDir) {
        return None;
    }
    for c in comps {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return None,
        }
    }
    if out.len() >= 2 && out[0] == "var" && out[1] == "run" {
        out.remove(0);
    }
    Some(out)
}

/// Whether `root` is `prefix` or below it, component by component.
pub fn root_is_under(root: &Path, prefix: &Path) -> bool {
    match (normal(root), normal(prefix)) {
        (Some(r), Some(p)) => !p.is_empty() && r.starts_with(&p),
        _ => false,
    }
}

impl Engines {
    pub fn get(&self, engine: Engine) -> &EngineRuntime {
        match engine {
            Engine::Docker => &self.docker,
            Engine::Containerd => &self.containerd,
            Engine::Crio => &self.crio,
            Engine::Podman => &self.podman,
        }
    }

    /// The root that identifies `engine`: the configured one, else its default.
    pub fn root(&self, engine: Engine) -> &str {
        self.get(engine)
            .root
            .as_deref()
            .unwrap_or(default_root(engine))
    }

    /// The roots that identify `engine`: [`Self::root`], and for
    /// containerd also the shim's default.
    pub fn roots(&self, engine: Engine) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let own = self.root(engine);
        if !own.is_empty() {
            out.push(PathBuf::from(own));
        }
        if engine == Engine::Containerd {
            out.push(PathBuf::from(CONTAINERD_SHIM_DEFAULT_ROOT));
        }
        out
    }

    /// The engine whose root holds `root` (the wrapper's `--root`).
    pub fn engine_for_root(&self, root: &Path) -> Option<Engine> {
        Engine::ALL
            .into_iter()
            .find(|e| self.roots(*e).iter().any(|r| root_is_under(root, r)))
    }

    /// The CRI runtime that made a container, from the root the wrapper
    /// was invoked with (`--root`): CRI-O's root; containerd's root joined
    /// with the CRI plugin's own namespace `k8s.io` (containerd
    /// pkg/cri/constants `K8sContainerdNamespace`; other namespaces are
    /// `ctr`, nerdctl or docker, whose users choose annotations freely).
    pub fn cri_runtime(&self, root: &Path) -> Option<CriRuntime> {
        match self.engine_for_root(root)? {
            Engine::Crio => Some(CriRuntime::Crio),
            Engine::Containerd => {
                let comps = normal(root)?;
                let in_k8s = comps.last().is_some_and(|n| *n == CRI_NAMESPACE);
                let below = self.roots(Engine::Containerd).iter().any(|r| {
                    normal(r).is_some_and(|p| comps.len() == p.len() + 1 && comps.starts_with(&p))
                });
                (in_k8s && below).then_some(CriRuntime::Containerd)
            }
            Engine::Docker | Engine::Podman => None,
        }
    }

    /// Checks what serde cannot: roots are absolute and no engine's root
    /// lies under another's (one root, one engine).
    pub fn validate(&self) -> Result<(), String> {
        for e in Engine::ALL {
            let root = self.root(e);
            if !root.is_empty() && normal(Path::new(root)).map_or(true, |c| c.is_empty()) {
                return Err(format!(
                    "key `runtime.engines.{}.root`: `{root}` is not an absolute path without `..`",
                    e.name()
                ));
            }
        }
        for (i, a) in Engine::ALL.into_iter().enumerate() {
            for b in Engine::ALL.into_iter().skip(i + 1) {
                for ra in self.roots(a) {
                    for rb in self.roots(b) {
                        if root_is_under(&ra, &rb) || root_is_under(&rb, &ra) {
                            return Err(format!(
                                "keys `runtime.engines.{}.root` (`{}`) and `runtime.engines.{}.root` (`{}`): one lies under the other; each engine needs a root of its own",
                                a.name(),
                                ra.display(),
                                b.name(),
                                rb.display()
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The runtime the wrapper chains to: the engine's `path` when it has one,
/// else the global `runtime.path` (`""`: runc, then crun, on PATH).
pub fn chained_runtime<'a>(
    global: &'a str,
    engines: &'a Engines,
    engine: Option<Engine>,
) -> &'a str {
    engine
        .and_then(|e| engines.get(e).path.as_deref())
        .unwrap_or(global)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_name_their_engine_component_wise() {
        let e = Engines::default();
        for (root, want) in [
            ("/run/gpu-guard/containerd/k8s.io", Some(Engine::Containerd)),
            ("/run/gpu-guard/containerd", Some(Engine::Containerd)),
            (
                "/var/run/gpu-guard/containerd/default",
                Some(Engine::Containerd),
            ),
            ("/run/containerd/runc/k8s.io", Some(Engine::Containerd)),
            ("/run/gpu-guard/crio", Some(Engine::Crio)),
            ("/run/gpu-guard/crio2", None),
            ("/var/run/docker/runtime-runc/moby", Some(Engine::Docker)),
            ("/run/docker/runtime-runc/moby", Some(Engine::Docker)),
            ("/run/docker/runtime-runc2/moby", None),
            ("/run/runc", None),
            ("/run/gpu-guard/../gpu-guard/crio", None),
            ("run/gpu-guard/crio", None),
            ("/", None),
        ] {
            assert_eq!(e.engine_for_root(Path::new(root)), want, "{root}");
        }
    }

    #[test]
    fn only_the_cri_roots_vouch_for_cri_facts() {
        let e = Engines::default();
        for (root, want) in [
            (
                "/run/gpu-guard/containerd/k8s.io",
                Some(CriRuntime::Containerd),
            ),
            ("/run/containerd/runc/k8s.io", Some(CriRuntime::Containerd)),
            // ctr's and nerdctl's namespace, and a root with no namespace.
            ("/run/gpu-guard/containerd/default", None),
            ("/run/containerd/runc/moby", None),
            ("/run/gpu-guard/containerd", None),
            ("/run/gpu-guard/containerd/x/k8s.io", None),
            ("/run/gpu-guard/crio", Some(CriRuntime::Crio)),
            ("/var/run/docker/runtime-runc/moby", None),
            ("/run/runc/k8s.io", None),
        ] {
            assert_eq!(e.cri_runtime(Path::new(root)), want, "{root}");
        }
    }

    #[test]
    fn the_engine_path_wins_then_the_global_one() {
        let mut e = Engines::default();
        e.containerd.path = Some(String::new());
        e.docker.path = Some("/usr/bin/nvidia-container-runtime".into());
        let g = "/usr/local/bin/runc";
        assert_eq!(
            chained_runtime(g, &e, Some(Engine::Docker)),
            "/usr/bin/nvidia-container-runtime"
        );
        // An engine with `path = ""` searches PATH, never the global chain.
        assert_eq!(chained_runtime(g, &e, Some(Engine::Containerd)), "");
        assert_eq!(chained_runtime(g, &e, Some(Engine::Crio)), g);
        assert_eq!(chained_runtime(g, &e, None), g);
    }

    #[test]
    fn overlapping_or_relative_roots_are_refused() {
        let mut e = Engines::default();
        assert!(e.validate().is_ok());
        e.crio.root = Some("/run/gpu-guard".into());
        let err = e.validate().unwrap_err();
        assert!(err.contains("runtime.engines."), "{err}");
        let mut e = Engines::default();
        e.podman.root = Some("/run/containerd".into());
        assert!(e.validate().unwrap_err().contains("podman"));
        let mut e = Engines::default();
        e.docker.root = Some("relative/root".into());
        assert!(e.validate().unwrap_err().contains("docker.root"));
        e.docker.root = Some("/".into());
        assert!(e.validate().is_err());
    }
}
