# Helpers for the CRI tests and benchmark: a private containerd (its own
# root, state and sockets under $T, no systemd), gpu-guard registered in it
# with `gpu-guard install containerd`, busybox images imported from
# hand-made docker-archive tars, and a Python CRI client whose stubs are
# generated from the k8s-cri crate's api.proto. Source after lib.sh and
# new_scratch. shellcheck shell=bash

CRI_PY="$INTEGRATION_DIR/cri_client.py"

# cri_need: everything the CRI tests need, or skip_or_fail.
cri_need() {
    need_root
    need_cmd containerd ctr runc jq python3 cargo
    [ -x "$GG" ] || skip_or_fail "gpu-guard binary $GG not built"
    python3 -c 'import grpc, grpc_tools' 2>/dev/null ||
        skip_or_fail "python grpcio/grpcio-tools missing (integration/setup.sh installs them)"
}

# cri_stubs DIR: fetch the k8s-cri crate with cargo (a throwaway project;
# crates.io or the local cargo cache) and generate Python stubs from its
# proto/v1.proto (k8s.io/cri-api pkg/apis/runtime/v1/api.proto) into DIR.
cri_stubs() {
    local dir=$1 proj="$T/cri-proto" manifest proto
    mkdir -p "$proj/src"
    printf '[package]\nname = "cri-proto"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nk8s-cri = "=0.11.0"\n' > "$proj/Cargo.toml"
    echo 'fn main() {}' > "$proj/src/main.rs"
    (cd "$proj" && cargo fetch -q) >"$T/cargo-fetch.log" 2>&1 ||
        { cat "$T/cargo-fetch.log"; skip_or_fail "cargo fetch of k8s-cri failed"; }
    manifest=$(cd "$proj" && cargo metadata --format-version 1 2>/dev/null |
        jq -r '.packages[] | select(.name == "k8s-cri") | .manifest_path')
    proto="$(dirname "$manifest")/proto/v1.proto"
    [ -f "$proto" ] || skip_or_fail "k8s-cri ships no proto/v1.proto (looked in $(dirname "$manifest"))"
    python3 "$CRI_PY" gen "$proto" "$dir" >/dev/null || skip_or_fail "cannot generate CRI stubs from $proto"
    export CRI_STUBS=$dir
}

cri() { python3 "$CRI_PY" "$@"; }

# cri_images DIR: docker-archive tars of busybox images in DIR.
#   localhost/gg-pause:1   the sandbox image
#   localhost/gg-busybox:1 plain
#   localhost/gg-cuda13:1  ENV NVIDIA_REQUIRE_CUDA=cuda>=13.0
cri_images() {
    local dir=$1
    mkdir -p "$dir"
    make_rootfs "$dir/rootfs"
    ln -sf busybox "$dir/rootfs/bin/tr"
    cri docker-archive "$dir/pause.tar" localhost/gg-pause:1 "$dir/rootfs" -- sleep 1000000 >/dev/null &&
        cri docker-archive "$dir/busybox.tar" localhost/gg-busybox:1 "$dir/rootfs" -- sh >/dev/null &&
        cri docker-archive --env 'NVIDIA_REQUIRE_CUDA=cuda>=13.0' --env CUDA_VERSION=13.0.0 \
            "$dir/cuda13.tar" localhost/gg-cuda13:1 "$dir/rootfs" -- sh >/dev/null
}

# cri_base_config FILE VERSION DIR: a minimal containerd config (1 or 2)
# with everything under DIR: root, state, grpc socket, a local sandbox
# image, restrict_oom_score_adj (an unprivileged VM cannot set -998), and
# runtimes.runc (required once any runtime table exists). runc passes the
# CDI annotations through to the OCI spec, as `nvidia-ctk runtime configure
# --cdi.enabled` sets up (container_annotations); gpu-guard's runtime copies
# runc's table, so it gets them too.
cri_base_config() {
    local file=$1 version=$2 dir=$3 plugin
    if [ "$version" = 1 ]; then plugin=cri; else plugin='"io.containerd.grpc.v1.cri"'; fi
    {
        [ "$version" = 1 ] || echo "version = $version"
        cat <<EOF
root = "$dir/root"
state = "$dir/state"
[grpc]
  address = "$dir/containerd.sock"
[plugins.$plugin]
  sandbox_image = "localhost/gg-pause:1"
  restrict_oom_score_adj = true
[plugins.$plugin.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  container_annotations = ["cdi.k8s.io/*"]
EOF
    } > "$file"
}

# cri_start DIR CONFIG GG_CONFIG: containerd on CONFIG, gpu-guard reading
# GG_CONFIG (the shim, and so the runtime, inherit containerd's env).
# Sets CRI_SOCK and CONTAINERD_PID.
cri_start() {
    local dir=$1 config=$2 ggcfg=$3
    export CRI_SOCK="$dir/containerd.sock"
    GPU_GUARD_CONFIG="$ggcfg" containerd --config "$config" >"$dir/containerd.log" 2>&1 &
    CONTAINERD_PID=$!
    for _ in $(seq 1 100); do
        [ -S "$CRI_SOCK" ] && ctr -a "$CRI_SOCK" version >/dev/null 2>&1 && return 0
        kill -0 "$CONTAINERD_PID" 2>/dev/null || break
        sleep 0.2
    done
    tail -20 "$dir/containerd.log"
    return 1
}

# cri_import DIR: the images of cri_images into namespace k8s.io.
cri_import() {
    local t
    for t in pause busybox cuda13; do
        ctr -n k8s.io -a "$CRI_SOCK" images import "$1/$t.tar" >/dev/null || return 1
    done
}

# cri_stop DIR: removes every pod, stops containerd and its shims, unmounts.
cri_stop() {
    local dir=$1
    [ -n "${CONTAINERD_PID:-}" ] || return 0
    if kill -0 "$CONTAINERD_PID" 2>/dev/null; then
        timeout 60 python3 "$CRI_PY" cleanup >/dev/null 2>&1
        kill "$CONTAINERD_PID" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$CONTAINERD_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$CONTAINERD_PID" 2>/dev/null
    fi
    wait "$CONTAINERD_PID" 2>/dev/null
    CONTAINERD_PID=
    # Shims outlive containerd by design; end any left serving this
    # instance (each records its pid in its task directory).
    local f
    for f in "$dir"/state/io.containerd.runtime.v2.task/*/*/shim.pid; do
        [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
    done
    grep -F " $dir/" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
}
