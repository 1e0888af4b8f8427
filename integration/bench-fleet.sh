#!/usr/bin/env bash
# Per-host cost of `gpu-guard check --hosts DIR` (under
# 1 ms a host once the container is built). Generates N host facts files,
# times a run on 1 host and on N, and prints (t_N - t_1) / (N - 1).
# The same for N Kubernetes nodes (`--nodes`, facts from GFD and gpu-guard
# labels), and the time of the label-only affinity of the official
# nvidia/cuda 12.8.1 requirement (61 alternatives).
# Usage: integration/bench-fleet.sh [N]   (builds the release binary)
set -euo pipefail
N=${1:-1000}
cd "$(dirname "$0")/.."
cargo build --release --quiet
BIN=target/release/gpu-guard
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/all" "$WORK/one"
printf '[host]\ncache_file = ""\n[log]\nsyslog = false\n' >"$WORK/config.toml"
drivers=(535.104.05 545.29.06 550.54.14 550.54.15 525.85.12)
cudas=(12.2 12.3 12.4 12.4 12.0)
for i in $(seq 1 "$N"); do
  k=$((i % 5))
  printf '{"driver_version":"%s","cuda_driver_version":"%s","gpus":[{"index":0,"uuid":"GPU-%08d","name":"NVIDIA H100 80GB HBM3","brand":"tesla","compute_capability":"9.0"},{"index":1,"uuid":"GPU-%08dx","name":"NVIDIA H100 80GB HBM3","brand":"tesla","compute_capability":"9.0"}]}\n' \
    "${drivers[$k]}" "${cudas[$k]}" "$i" "$i" >"$WORK/all/host-$(printf %05d "$i").json"
done
cp "$WORK/all/host-00001.json" "$WORK/one/"
cp "$WORK/all/host-00002.json" "$WORK/one/"
REQ='NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=525,driver<526 brand=tesla,driver>=535,driver<536'
run() { "$BIN" --config "$WORK/config.toml" check --env NVIDIA_VISIBLE_DEVICES=all --env "$REQ" --hosts "$1" --json >/dev/null || true; }
now() { date +%s%N; }
best() { # best of 5 runs, in ns
  local b=0 t0 t
  for _ in 1 2 3 4 5; do t0=$(now); run "$1"; t=$(($(now) - t0)); if [ "$b" = 0 ] || [ "$t" -lt "$b" ]; then b=$t; fi; done
  echo "$b"
}
t1=$(best "$WORK/one")
tn=$(best "$WORK/all")
per=$(( (tn - t1) / (N - 2) ))
echo "hosts: $N; run on 2 hosts: $((t1 / 1000)) us; on $N hosts: $((tn / 1000)) us; per host: ${per} ns ($(awk "BEGIN{printf \"%.3f\", $per/1e6}") ms)"
if [ "$per" -ge 1000000 ]; then echo "FAIL: per-host cost is 1 ms or more" >&2; exit 1; fi

# Nodes: GFD and gpu-guard labels, brands and branches mixed.
brands=(tesla nvidia geforcertx unknown quadro)
branches=(535 545 550 570 525)
node() { # name branch brand
  printf '{"kind":"Node","metadata":{"name":"%s","labels":{"nvidia.com/cuda.driver-version.major":"%s","nvidia.com/cuda.driver-version.minor":"104","nvidia.com/cuda.driver-version.revision":"05","nvidia.com/cuda.runtime-version.major":"12","nvidia.com/cuda.runtime-version.minor":"4","nvidia.com/gpu.compute.major":"9","nvidia.com/gpu.compute.minor":"0","nvidia.com/gpu.count":"8","gpu-guard.io/brand":"%s","gpu-guard.io/driver.branch":"%s"}}}' "$1" "$2" "$3" "$2"
}
nodes_file() { # count file
  { printf '{"kind":"List","items":['
    for i in $(seq 1 "$1"); do
      [ "$i" -gt 1 ] && printf ','
      node "node-$i" "${branches[$((i % 5))]}" "${brands[$((i % 5))]}"
    done
    printf ']}'; } >"$2"
}
nodes_file "$N" "$WORK/nodes.json"
nodes_file 2 "$WORK/nodes2.json"
runn() { "$BIN" --config "$WORK/config.toml" check --env "$REQ" --nodes "$1" --json >/dev/null || true; }
bestn() {
  local b=0 t0 t
  for _ in 1 2 3 4 5; do t0=$(now); runn "$1"; t=$(($(now) - t0)); if [ "$b" = 0 ] || [ "$t" -lt "$b" ]; then b=$t; fi; done
  echo "$b"
}
n1=$(bestn "$WORK/nodes2.json")
nn=$(bestn "$WORK/nodes.json")
pern=$(( (nn - n1) / (N - 2) ))
echo "nodes: $N; run on 2 nodes: $((n1 / 1000)) us; on $N nodes: $((nn / 1000)) us; per node: ${pern} ns ($(awk "BEGIN{printf \"%.3f\", $pern/1e6}") ms)"
R128=$(awk -F'\t' '$1=="12.8.1"{print $3}' tests/data/requirements/nvidia-cuda-official.tsv)
b=0
for _ in 1 2 3; do
  t0=$(now)
  "$BIN" --config "$WORK/config.toml" check --env "NVIDIA_REQUIRE_CUDA=$R128" --affinity --json >"$WORK/aff.json" 2>/dev/null
  t=$(($(now) - t0)); if [ "$b" = 0 ] || [ "$t" -lt "$b" ]; then b=$t; fi
done
terms=$(grep -o '"matchExpressions"' "$WORK/aff.json" | wc -l)
echo "label affinity, nvidia/cuda 12.8.1 (61 alternatives): $terms terms, $((b / 1000000)) ms"
if [ "$pern" -ge 1000000 ]; then echo "FAIL: per-node cost is 1 ms or more" >&2; exit 1; fi
