#!/usr/bin/env bash
# Real-GPU check: `gpu-guard host --json` must agree with nvidia-smi on a host
# with an NVIDIA GPU. Exits 0 when every field matches, 1 on any difference,
# 2 when it cannot run (no nvidia-smi, no gpu-guard, no jq).
#
# Usage: integration/gpu-check.sh [path/to/gpu-guard]
#   default: $GPU_GUARD, else target/release/gpu-guard, else gpu-guard on PATH.
#
# Compared per GPU, in nvidia-smi's order (its index order is NVML's):
#   nvidia-smi --query-gpu=driver_version,name,compute_cap,uuid,memory.total,pci.bus_id \
#              --format=csv,noheader,nounits
# against driver_version, gpus[i].name, .compute_capability, .uuid,
# .memory_mib (both are NVML's total bytes / 1 MiB) and .pci_bus_id.
set -u -o pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
gg=${1:-${GPU_GUARD:-}}
if [[ -z $gg ]]; then
  if [[ -x $here/target/release/gpu-guard ]]; then gg=$here/target/release/gpu-guard
  else gg=$(command -v gpu-guard || true); fi
fi
for tool in nvidia-smi jq; do
  command -v "$tool" >/dev/null || { echo "gpu-check: $tool not found" >&2; exit 2; }
done
[[ -n $gg && -x $gg ]] || { echo "gpu-check: gpu-guard binary not found (pass its path)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A fresh probe: no facts file, no cache, the system's libnvidia-ml.so.1.
cat >"$tmp/config.toml" <<'TOML'
[host]
facts_file = ""
nvml_library = ""
cache_file = ""
[log]
syslog = false
TOML

if ! "$gg" --config "$tmp/config.toml" host --json >"$tmp/host.json" 2>"$tmp/host.err"; then
  echo "gpu-check: gpu-guard host --json failed:" >&2
  cat "$tmp/host.err" >&2
  exit 1
fi
if ! nvidia-smi --query-gpu=driver_version,name,compute_cap,uuid,memory.total,pci.bus_id \
    --format=csv,noheader,nounits >"$tmp/smi.csv" 2>"$tmp/smi.err"; then
  echo "gpu-check: nvidia-smi failed:" >&2
  cat "$tmp/smi.err" >&2
  exit 2
fi
[[ -s $tmp/host.err ]] && { echo "gpu-check: gpu-guard warnings:"; cat "$tmp/host.err"; }

fail=0
differ() { echo "DIFF $1: nvidia-smi '$2', gpu-guard '$3'"; fail=1; }
trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; s=${s%"${s##*[![:space:]]}"}; printf '%s' "$s"; }

n_smi=$(grep -c . "$tmp/smi.csv" || true)
n_gg=$(jq '.gpus | length' "$tmp/host.json")
[[ $n_smi == "$n_gg" ]] || differ "GPU count" "$n_smi" "$n_gg"

i=0
while IFS=, read -r drv name cc uuid mem bus; do
  drv=$(trim "$drv"); name=$(trim "$name"); cc=$(trim "$cc")
  uuid=$(trim "$uuid"); mem=$(trim "$mem"); bus=$(trim "$bus")
  g=$(jq -c ".gpus[$i] // {}" "$tmp/host.json")
  [[ $drv == "$(jq -r '.driver_version // ""' "$tmp/host.json")" ]] ||
    differ "driver_version" "$drv" "$(jq -r '.driver_version' "$tmp/host.json")"
  for pair in "name:$name" "compute_capability:$cc" "uuid:$uuid" "memory_mib:$mem" "pci_bus_id:$bus"; do
    key=${pair%%:*}; want=${pair#*:}
    got=$(jq -r ".$key // \"\" | tostring" <<<"$g")
    # nvidia-smi prints bus ids with upper-case hex, as NVML's busId does.
    [[ $want == "$got" ]] || differ "GPU $i $key" "$want" "$got"
  done
  i=$((i + 1))
done <"$tmp/smi.csv"

if ((fail)); then
  echo "gpu-check: FAIL (gpu-guard host --json differs from nvidia-smi)"
  exit 1
fi
echo "gpu-check: OK: $n_gg GPU(s), driver $(jq -r .driver_version "$tmp/host.json"), CUDA $(jq -r .cuda_driver_version "$tmp/host.json")"
