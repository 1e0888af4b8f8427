//! doctor's checks of the container engines: for each one install recorded
//! or that is present on the node, whether its effective configuration
//! runs gpu-guard as installed (`install::registration`, the drift check of
//! `install ENGINE --check`), whether the runtime its wrapper chains can
//! run (`pipeline::runtime::chained_runtime_in`, the wrapper's check), and whether its hook files are there and call a gpu-guard binary.

use super::{Check, Node};
use crate::install::registration::{effective_registration, recorded, Registration};
use crate::install::{hooks, Engine, EngineState, Options};
use crate::pipeline::runtime::{chained_runtime_in, Filesystem};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Files whose presence means the engine is on the node (host paths).
fn markers(engine: Engine) -> &'static [&'static str] {
    match engine {
        Engine::Docker => &[
            "/usr/bin/dockerd",
            "/usr/sbin/dockerd",
            "/usr/local/bin/dockerd",
            "/etc/docker/daemon.json",
        ],
        Engine::Containerd => &[
            "/usr/bin/containerd",
            "/usr/sbin/containerd",
            "/usr/local/bin/containerd",
            "/etc/containerd/config.toml",
            // k3s's and RKE2's embedded containerd.
            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
            "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
        ],
        Engine::Crio => &[
            "/usr/bin/crio",
            "/usr/local/bin/crio",
            "/etc/crio/crio.conf",
        ],
        Engine::Podman => &["/usr/bin/podman", "/usr/local/bin/podman"],
    }
}

/// install's options for `engine` on the node: the root, the state
/// directory, the runtime root of the config, and the gpu-guard drop-in
/// directory install writes the chain into (as `gpu-guard install` finds
/// it: beside the config in effect, the host's under `--host-root`).
fn options(node: &Node, engine: Engine) -> Options {
    let mut o = Options::new(engine, &node.host_root);
    o.state_dir = node.state_dir.clone();
    o.root = node.config.runtime.engines.root(engine).to_string();
    o.config_d = if node.host_root == Path::new("/") {
        crate::config::drop_in_dir(&node.config_path)
    } else {
        PathBuf::from(crate::install::GPU_GUARD_CONFIG_D)
    };
    o
}

/// Every engine's checks, then one error when gpu-guard is registered
/// with none (then nothing on the node is checked at all).
pub fn all(node: &Node) -> Vec<Check> {
    let mut out = Vec::new();
    let mut installed = Vec::new();
    let mut present = Vec::new();
    for e in Engine::ALL {
        let o = options(node, e);
        let name = format!("engine.{}", e.name());
        let here = markers(e).iter().any(|m| o.fs_path(Path::new(m)).exists());
        if here {
            present.push(e.name());
        }
        match recorded(&o) {
            Err(err) => out.push(Check::error(
                name,
                format!("cannot read what install recorded for {}: {err}", e.name()),
                format!("remove the state file and run `gpu-guard install {}` again", e.name()),
            )),
            Ok(None) if here => out.push(Check::warning(
                name,
                format!("{} is on this node but gpu-guard is not registered with it: containers it starts bypass gpu-guard", e.name()),
                format!("gpu-guard install {} (or ignore this if {} runs no GPU containers)", e.name(), e.name()),
            )),
            Ok(None) => {}
            Ok(Some(st)) => {
                installed.push(e);
                out.push(registration(&o));
                out.push(chain(node, e, &st));
                if matches!(e, Engine::Podman | Engine::Crio) {
                    out.push(hook_files(&o, &st));
                }
            }
        }
    }
    out.extend(configured_chains(node, &installed));
    if installed.is_empty() {
        let fix = match present.as_slice() {
            [] => "gpu-guard install ENGINE (docker, containerd, crio or podman)".to_string(),
            some => some
                .iter()
                .map(|e| format!("gpu-guard install {e}"))
                .collect::<Vec<_>>()
                .join("; "),
        };
        out.push(Check::error(
            "engines",
            format!(
                "gpu-guard is registered with no engine (no install recorded in {}): no container on this node is checked",
                node.state_dir.join("engines").display()
            ),
            fix,
        ));
    }
    out
}

fn registration(o: &Options) -> Check {
    let name = format!("engine.{}", o.engine.name());
    match effective_registration(o) {
        Ok(Registration::Ok) => Check::ok(
            name,
            format!(
                "{} runs gpu-guard as installed (its merged configuration, every drop-in included)",
                o.engine.name()
            ),
        ),
        Ok(Registration::Drift(d)) => Check::error(
            name,
            format!(
                "{} no longer runs gpu-guard: {}",
                o.engine.name(),
                d.line()
                    .trim_start_matches(&format!("{}: ", o.engine.name()))
            ),
            d.fix,
        ),
        Ok(Registration::NotInstalled) => Check::error(
            name,
            format!(
                "the install record of {} vanished while doctor ran",
                o.engine.name()
            ),
            format!("gpu-guard install {}", o.engine.name()),
        ),
        Err(e) => Check::error(
            name,
            format!("cannot read {}'s configuration: {e}", o.engine.name()),
            format!(
                "fix the file it names, then `gpu-guard install {} --check`",
                o.engine.name()
            ),
        ),
    }
}

/// The chains the config names that no recorded install covers:
/// `runtime.path`, and `[runtime.engines.ENGINE] path` of each engine
/// install has not recorded. The next install, or a registration made by
/// hand, runs them, so one that cannot run is an error now, not after.
fn configured_chains(node: &Node, installed: &[Engine]) -> Vec<Check> {
    let fs = |host: &Path| node.fs(host);
    let root = match node.host_root == Path::new("/") {
        true => Filesystem::Own,
        false => Filesystem::Mounted(&fs),
    };
    let mut out = Vec::new();
    let mut judge = |name: String, engine: Option<Engine>, what: String| {
        out.push(match chained_runtime_in(&node.config, engine, &root) {
            Ok(path) => Check::ok(name, format!("{what} chains to {}", path.display())),
            Err(p) => Check::error(name, p.message, p.fix),
        });
    };
    if !node.config.runtime.path.is_empty() {
        judge("chain".into(), None, "runtime.path".into());
    }
    for e in Engine::ALL {
        if installed.contains(&e) || node.config.runtime.engines.get(e).path.is_none() {
            continue;
        }
        judge(
            format!("chain.{}", e.name()),
            Some(e),
            format!("runtime.engines.{}.path", e.name()),
        );
    }
    out
}

fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The runtime the engine's wrapper execs: runnable, and the one install
/// chained (the engine's default runtime when it was NVIDIA's).
fn chain(node: &Node, engine: Engine, st: &EngineState) -> Check {
    let name = format!("chain.{}", engine.name());
    // The wrapper's own judgement of its chain (pipeline::runtime), on
    // this node's root: what `host` and `check` say, and the wrapper's
    // `--log` line, word for word.
    let fs = |host: &Path| node.fs(host);
    let root = match node.host_root == Path::new("/") {
        true => Filesystem::Own,
        false => Filesystem::Mounted(&fs),
    };
    let runs = match chained_runtime_in(&node.config, Some(engine), &root) {
        Ok(path) => path.display().to_string(),
        Err(p) => return Check::error(name, p.message, p.fix),
    };
    let configured = node.config.chained_runtime(Some(engine));
    if let Some(c) = st.chain.as_ref().filter(|c| c.runtime != configured) {
        let origin = if c.explicit {
            "as --chain-runtime chose"
        } else {
            "the engine's default runtime when it installed"
        };
        return Check::warning(
            name,
            format!(
                "{} containers chain to {runs}, but install chained {} ({origin}); the config now says otherwise",
                engine.name(),
                c.runtime
            ),
            format!(
                "remove the setting that overrides {} (`gpu-guard host` names the file), or `gpu-guard install {} --chain-runtime {runs}` to record it",
                c.file.display(),
                engine.name()
            ),
        );
    }
    Check::ok(
        name,
        format!("{} containers chain to {runs}", engine.name()),
    )
}

/// The hooks.d files install put in place for podman or CRI-O.
fn hook_files(o: &Options, st: &EngineState) -> Check {
    let name = format!("hooks.{}", o.engine.name());
    let mut files: Vec<PathBuf> = st
        .created
        .iter()
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str());
            matches!(n, Some(hooks::PRESTART_FILE | hooks::PRECREATE_FILE))
        })
        .cloned()
        .collect();
    if o.engine == Engine::Podman {
        files.push(st.config.join(hooks::PRECREATE_FILE));
    }
    files.sort();
    files.dedup();
    let mut problems = Vec::new();
    for f in &files {
        if let Err(why) = hook_file(&|p: &Path| o.fs_path(p), f) {
            problems.push(format!("{}: {why}", f.display()));
        }
    }
    if problems.is_empty() {
        let shown: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        return Check::ok(
            name,
            format!("hook files valid, calling gpu-guard: {}", shown.join(", ")),
        );
    }
    Check::error(
        name,
        format!(
            "{}; {} cannot start containers while a hook file is broken",
            problems.join("; "),
            o.engine.name()
        ),
        format!(
            "gpu-guard install {} (rewrites the hook files)",
            o.engine.name()
        ),
    )
}

/// One hooks.d file (oci-hooks(5)): present, JSON, `hook.path` an
/// executable gpu-guard binary on the host.
pub(super) fn hook_file(fs: &dyn Fn(&Path) -> PathBuf, host: &Path) -> Result<(), String> {
    let text = match crate::sys::fsutil::read_to_string_limited(&fs(host), 1 << 20) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("missing (install wrote it)".into())
        }
        Err(e) => return Err(format!("cannot read it: {e}")),
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("not valid JSON: {e}"))?;
    let path = v["hook"]["path"]
        .as_str()
        .ok_or("no hook.path (oci-hooks(5) needs one)")?;
    let bin = Path::new(path);
    if bin.file_name().and_then(|n| n.to_str()) != Some("gpu-guard") {
        return Err(format!("hook.path {path} is not a gpu-guard binary"));
    }
    if !executable(&fs(bin)) {
        return Err(format!(
            "hook.path {path} does not exist or is not executable"
        ));
    }
    Ok(())
}
