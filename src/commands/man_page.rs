//! gpu-guard(1): clap_mangen's sections from the command-line definition,
//! then what a definition cannot hold and man-pages(7) expects of a
//! command's page: EXAMPLES, FILES, ENVIRONMENT and SEE ALSO. `gpu-guard
//! man` prints it; the packages' pages (crates/assets) are the same, and
//! each subcommand's page ends with its own SEE ALSO.

use std::io::Write;

/// One entry of a section: a tag (a command, a path, a variable) set in
/// bold, and what it is.
struct Entry {
    tag: &'static str,
    text: &'static str,
}

const fn e(tag: &'static str, text: &'static str) -> Entry {
    Entry { tag, text }
}

const EXAMPLES: &[Entry] = &[
    e(
        "gpu-guard check --image docker://nvcr.io/nvidia/pytorch:24.05-py3 --host a100.json",
        "Judge a registry image (streamed, never stored) against a host facts file written by gpu-guard host --json on that host.",
    ),
    e(
        "gpu-guard check --image ./pytorch.tar --hosts /srv/gpu-facts/",
        "Judge a docker save tar on every host facts file of a directory: a table, a summary and exit status 1 when it is refused somewhere (--json for the fleet JSON, --wide for whole notes on a terminal).",
    ),
    e(
        "kubectl get nodes -o json | gpu-guard check --image docker://registry.example/ml/app:1 --nodes - --affinity",
        "Print a Kubernetes nodeAffinity that admits exactly the nodes where the image runs, from their GPU Feature Discovery and gpu-guard.io labels.",
    ),
    e(
        "gpu-guard check --env NVIDIA_REQUIRE_CUDA='cuda>=12.4' --json",
        "Decide, as the hook would on this host, for a container described by its environment alone; the decision as JSON.",
    ),
    e(
        "gpu-guard host --json > facts.json",
        "This host's driver and GPUs as host facts JSON, for check --host elsewhere.",
    ),
    e(
        "gpu-guard host --host-root /host --node-labels --write",
        "From a pod that mounts the host at /host: probe the host's /proc, /dev and /sys there and write the gpu-guard.io node labels for node-feature-discovery.",
    ),
    e(
        "gpu-guard doctor",
        "Check what this node needs: config, host facts, each engine's registration, chains, hooks, CDI specs and state directories; each problem with its fix.",
    ),
    e(
        "gpu-guard install docker --dry-run",
        "Show, as a unified diff, how docker's daemon.json would register gpu-guard-runtime; without --dry-run, make the change (--set-default makes it docker's default runtime).",
    ),
    e(
        "gpu-guard install containerd --check --host-root /host",
        "Report whether containerd's effective configuration still runs gpu-guard as installed, and the command that repairs it.",
    ),
    e(
        "gpu-guard scan --json /usr/local/cuda/lib64/libcublasLt.so.12",
        "List the SASS and PTX compiled into a library.",
    ),
];

const FILES: &[Entry] = &[
    e(
        "/etc/gpu-guard/config.toml",
        "The configuration, unless --config or GPU_GUARD_CONFIG names another. Read as policy: owned by root (or the user running gpu-guard), not writable by group or others.",
    ),
    e(
        "/etc/gpu-guard/config.d/*.toml",
        "Drop-ins beside the configuration, merged over it in lexical order (packages and gpu-guard install write here, never to config.toml).",
    ),
    e(
        "/run/gpu-guard/host-facts.json",
        "The host facts cache (host.cache_file), so a container start does not wait for NVML; never used with --host-root.",
    ),
    e(
        "/run/gpu-guard/scan, /run/gpu-guard/libraries",
        "Caches of the GPU-code and library scans of container root filesystems (kernel_image.cache_dir, libraries.cache_dir).",
    ),
    e(
        "/run/gpu-guard/containers",
        "What the runtime wrapper learnt at create about each container it started (GPU or not, its bundle), for its execs; removed at delete ($XDG_RUNTIME_DIR/gpu-guard/containers when not run as root).",
    ),
    e(
        "/var/lib/gpu-guard",
        "What gpu-guard install changed in each engine's configuration, with backups, for install --check and uninstall (--state-dir).",
    ),
    e(
        "/etc/nvidia-container-runtime/config.toml",
        "NVIDIA container toolkit settings read for GPU detection (detect.nvidia_config).",
    ),
    e(
        "/etc/cdi, /var/run/cdi",
        "CDI specs checked for containers that ask for CDI devices (host.cdi_spec_dirs).",
    ),
    e(
        "/etc/kubernetes/node-feature-discovery/features.d/gpu-guard",
        "The node labels written by host --node-labels --write.",
    ),
    e(
        "/proc/driver/nvidia, /dev/nvidia*, /sys/bus/pci/devices",
        "Read by the host probe, under DIR with --host-root.",
    ),
];

const ENVIRONMENT: &[Entry] = &[
    e(
        "GPU_GUARD_CONFIG",
        "The configuration file when --config is not given (default /etc/gpu-guard/config.toml).",
    ),
    e(
        "REGISTRY_AUTH_FILE",
        "Registry credentials for check --image docker://, searched first (containers-auth.json(5) format: auths).",
    ),
    e(
        "DOCKER_CONFIG",
        "A directory whose config.json holds registry credentials, searched next; without it, $HOME/.docker/config.json. Credential helpers are never run.",
    ),
    e(
        "DOCKER_HOST",
        "The docker daemon's socket for check --image docker-daemon: (unix:// only; default /var/run/docker.sock).",
    ),
    e(
        "PATH",
        "Where the runtime wrapper finds runc, then crun, when runtime.path names no runtime.",
    ),
    e(
        "XDG_RUNTIME_DIR",
        "Where the runtime wrapper keeps its container records when not run as root.",
    ),
];

/// See also, for gpu-guard(1).
const SEE_ALSO: &str = "gpu-guard-check(1), gpu-guard-hook(1), gpu-guard-runtime(1), \
gpu-guard-host(1), gpu-guard-scan(1), gpu-guard-install(1), gpu-guard-uninstall(1), \
gpu-guard-doctor(1), gpu-guard-admission(1), runc(8), containers-transports(5), skopeo(1), \
dockerd(8), containerd(8), crio(8), podman(1)";

/// Text as roff: backslashes escaped, hyphens as `\-` (so an option
/// copied from the page is a hyphen-minus), a line that would start with
/// a control character (`.`, `'`) guarded with `\&` (groff(7)).
fn roff(text: &str) -> String {
    let mut s = text.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with(['.', '\'']) {
        s.insert_str(0, "\\&");
    }
    s
}

fn section(out: &mut Vec<u8>, name: &str, entries: &[Entry]) {
    let _ = writeln!(out, ".SH {name}");
    for en in entries {
        let _ = writeln!(out, ".TP\n\\fB{}\\fR\n{}", roff(en.tag), roff(en.text));
    }
}

/// The SEE ALSO section of a subcommand's page, `gpu-guard-NAME(1)`.
pub fn see_also_for(subcommand: &str) -> Vec<u8> {
    let extra = match subcommand {
        "runtime" => ", runc(8)",
        "hook" => ", oci-hooks(5)",
        "check" => ", containers-transports(5), skopeo(1)",
        _ => "",
    };
    format!(".SH \"SEE ALSO\"\ngpu\\-guard(1){}\n", roff(extra)).into_bytes()
}

/// gpu-guard(1) for `cmd` (the top-level command): clap_mangen's title,
/// name, synopsis, description, options and subcommands, then EXAMPLES,
/// FILES, ENVIRONMENT and SEE ALSO, then the version.
pub fn render(cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    // `help` is clap's, not a page of its own (as clap_mangen::generate_to).
    let man = clap_mangen::Man::new(cmd.disable_help_subcommand(true));
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    man.render_subcommands_section(&mut out)?;
    section(&mut out, "EXAMPLES", EXAMPLES);
    section(&mut out, "FILES", FILES);
    section(&mut out, "ENVIRONMENT", ENVIRONMENT);
    let _ = writeln!(
        out,
        ".PP\nA container's own environment (NVIDIA_VISIBLE_DEVICES, NVIDIA_REQUIRE_*, CUDA_VERSION, ...) is read from its spec or image, never from gpu\\-guard's."
    );
    let _ = writeln!(out, ".SH \"SEE ALSO\"\n{}", roff(SEE_ALSO));
    man.render_version_section(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_escapes_what_groff_would_read_as_markup() {
        assert_eq!(roff("--host-root"), "\\-\\-host\\-root");
        assert_eq!(roff(".config"), "\\&.config");
        assert_eq!(roff("'x"), "\\&'x");
        assert_eq!(roff("a\\b"), "a\\eb");
    }
}
