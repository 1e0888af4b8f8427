#!/usr/bin/env bash
# Benchmark: a kubelet-style pod start through containerd's CRI
# (RunPodSandbox + CreateContainer + StartContainer of busybox `sleep`, a
# GPU container: NVIDIA_VISIBLE_DEVICES=all, allowed on the host profile)
# with runtime handler gpu-guard (the wrapper, then runc) against handler
# runc, interleaved, pods removed untimed between rounds, medians.
# Private containerd as in test-cri.sh. Goal: ratio <= 1.05.
# Usage: sudo integration/bench-cri.sh [rounds]   (NO_BUILD=1 skips the build)
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/cri_lib.sh"
ROUNDS=${1:-20}
[ "${NO_BUILD:-0}" = 1 ] || (cd "$REPO_DIR" && cargo build --release -q) || exit 1
GG="$REPO_DIR/target/release/gpu-guard"
cri_need
new_scratch
CUR=
trap '[ -n "$CUR" ] && cri_stop "$CUR"; rm -rf "$T"' EXIT
cri_stubs "$T/stubs"
cri_images "$T/img" || exit 1
mkdir -p "$T/bin" "$T/c"
ln -sf "$GG" "$T/bin/gpu-guard"
ln -sf gpu-guard "$T/bin/gpu-guard-runtime"
GG_SYSLOG=false gg_config "$T/gg.toml" h100x8
cri_base_config "$T/c/containerd.toml" 2 "$T/c"
"$GG" --config "$T/gg.toml" install containerd --config-path "$T/c/containerd.toml" \
    --bin-dir "$T/bin" --state-dir "$T/c/gg-state" >/dev/null || exit 1
CUR="$T/c"
cri_start "$T/c" "$T/c/containerd.toml" "$T/gg.toml" || { echo "bench-cri: containerd did not start" >&2; exit 1; }
cri_import "$T/img" || exit 1
out=$(cri bench --rounds "$ROUNDS" --image localhost/gg-busybox:1 --env NVIDIA_VISIBLE_DEVICES=all -- sleep 1000) || exit 1
printf '%s\n' "$out" | jq -r '"CRI pod start (RunPodSandbox+CreateContainer+StartContainer, GPU container): gpu-guard \(.median_ms["gpu-guard"]) ms, runc \(.median_ms.runc) ms (min \(.min_ms["gpu-guard"]) / \(.min_ms.runc)), ratio \(.ratio)  [goal <= 1.05], \(.rounds) rounds"'
