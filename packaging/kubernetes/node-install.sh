#!/bin/sh
# gpu-guard's node installer: the DaemonSet's init container command
# (/usr/bin/gpu-guard-node-install in the image built by build-image.sh).
#
# With the host's directories mounted under $HOST_ROOT (default /host), it
# copies the binary to the host ($BIN_DIR, default /opt/gpu-guard/bin),
# puts the default config in /etc/gpu-guard unless one is there, and runs
# `gpu-guard install $ENGINE` against the host's files (--bin-dir is the
# host path the runtime will run). Only when that changes something does it
# restart the runtime, through the host's PID 1 (hostPID: true; running
# containers survive a containerd restart, their shims keep them). A second
# run on a registered node changes nothing and restarts nothing.
#
# Before it registers anything it runs the copied binary in the host's root
# (`chroot $HOST_ROOT`: its --version and doctor), and refuses a binary that
# cannot run there.
#
# Environment: ENGINE (containerd | crio, default containerd), SET_DEFAULT
# (true: make gpu-guard the default runtime), RESTART_RUNTIME (false: leave
# the restart to the admin), CONFIG_PATH (the engine's config, host path;
# k3s: /var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl, RKE2:
# /var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl, whose
# directory must be mounted under $HOST_ROOT), RESTART_UNIT (the systemd unit
# to restart, default $ENGINE; k3s, k3s-agent, rke2-server or rke2-agent on
# k3s and RKE2 nodes, which render their template at start).
set -eu

ENGINE=${ENGINE:-containerd}
SET_DEFAULT=${SET_DEFAULT:-false}
RESTART_RUNTIME=${RESTART_RUNTIME:-true}
CONFIG_PATH=${CONFIG_PATH:-}
RESTART_UNIT=${RESTART_UNIT:-$ENGINE}
HOST_ROOT=${HOST_ROOT:-/host}
BIN_DIR=${BIN_DIR:-/opt/gpu-guard/bin}
# The image's binary and default config (tests point these elsewhere).
IMAGE_BIN=${IMAGE_BIN:-/usr/bin/gpu-guard}
IMAGE_CONFIG=${IMAGE_CONFIG:-/etc/gpu-guard/config.toml}

host_bin="$HOST_ROOT$BIN_DIR"
mkdir -p "$host_bin"

refuse() {
    echo "gpu-guard: error: $1" >&2
    echo "gpu-guard: error: nothing was registered with $ENGINE on this node; the engine's configuration is unchanged" >&2
    exit 1
}

# The engine will exec this binary with the host's loader and libraries,
# not the image's: run it there first (chroot into the host's root, which
# the DaemonSet mounts read-only at $HOST_ROOT), before it replaces
# anything. A binary that cannot start on this host (a glibc older than
# it needs, a missing loader, another architecture) is never put in place
# nor registered: as a runtime it would make every pod of the engine fail
# to start. The init container fails instead, so the DaemonSet's pod is
# not Ready and this log says why.
candidate=gpu-guard
if ! cmp -s "$IMAGE_BIN" "$host_bin/gpu-guard"; then
    cp "$IMAGE_BIN" "$host_bin/gpu-guard.new"
    chmod 0755 "$host_bin/gpu-guard.new"
    candidate=gpu-guard.new
fi
if ! version=$(timeout 60 chroot "$HOST_ROOT" "$BIN_DIR/$candidate" --version 2>&1); then
    rm -f "$host_bin/gpu-guard.new"
    refuse "$BIN_DIR/gpu-guard cannot run on this host: $(printf '%s' "$version" | tr '\n' ' ')"
fi
echo "gpu-guard: on this host: $version"
if [ "$candidate" = gpu-guard.new ]; then
    # Replace by rename: a running gpu-guard keeps its old inode. A re-run
    # with the same binary writes nothing.
    mv -f "$host_bin/gpu-guard.new" "$host_bin/gpu-guard"
    echo "gpu-guard: installed $BIN_DIR/gpu-guard"
fi
[ "$(readlink "$host_bin/gpu-guard-runtime" 2>/dev/null)" = gpu-guard ] || ln -sfn gpu-guard "$host_bin/gpu-guard-runtime"
mkdir -p "$HOST_ROOT/etc/gpu-guard"
[ -e "$HOST_ROOT/etc/gpu-guard/config.toml" ] || cp "$IMAGE_CONFIG" "$HOST_ROOT/etc/gpu-guard/config.toml"

# doctor, in the host's root and with the host's config: exit 0 all well,
# 1 problems it names (no engine registered yet is one, before the first
# install); 2 the host's gpu-guard config is invalid, which would refuse
# every GPU container; anything else, it did not run to the end.
set +e
report=$(timeout 120 chroot "$HOST_ROOT" "$BIN_DIR/gpu-guard" doctor 2>&1)
rc=$?
set -e
printf '%s\n' "$report" | sed 's/^/gpu-guard: doctor: /'
case $rc in
    0 | 1) ;;
    2) refuse "the host's gpu-guard config is invalid (doctor above); fix /etc/gpu-guard/config.toml" ;;
    *) refuse "$BIN_DIR/gpu-guard doctor did not complete on this host (exit status $rc)" ;;
esac

set -- --host-root "$HOST_ROOT" --bin-dir "$BIN_DIR"
[ "$SET_DEFAULT" = true ] && set -- "$@" --set-default
[ -n "$CONFIG_PATH" ] && set -- "$@" --config-path "$CONFIG_PATH"
# A restart owed by an earlier run that changed the config but failed to
# restart (the init container is retried, and would otherwise find nothing
# to change and never restart). Kept in the host's gpu-guard state dir.
pending="$HOST_ROOT/var/lib/gpu-guard/restart-pending-$ENGINE"
# Files the install would change. gpu-guard's own drop-ins (the chain to
# NVIDIA's runtime in /etc/gpu-guard/config.d) are read at every container
# start: only a change to the engine's config needs a restart.
changes=$(gpu-guard install "$ENGINE" "$@" --dry-run | grep -E '^(\+\+\+ b/|--- a/)' || true)
engine_changes=$(printf '%s\n' "$changes" | grep -v '/etc/gpu-guard/config\.d/' | grep -v '^$' || true)
if [ -n "$engine_changes" ]; then
    mkdir -p "$(dirname "$pending")"
    : > "$pending"
fi
if [ -n "$changes" ]; then
    gpu-guard install "$ENGINE" "$@"
fi
if [ -z "$engine_changes" ] && [ ! -e "$pending" ]; then
    echo "gpu-guard is already registered with $ENGINE"
    exit 0
fi
if [ "$RESTART_RUNTIME" = true ]; then
    # NSENTER: only for tests (busybox sh runs its own applet for a bare
    # `nsenter`, whatever PATH says).
    ${NSENTER:-nsenter} --target 1 --mount --uts --ipc --net --pid -- systemctl restart "$RESTART_UNIT"
    echo "gpu-guard: restarted $RESTART_UNIT"
else
    echo "gpu-guard: restart $RESTART_UNIT on this node to apply"
fi
rm -f "$pending"
