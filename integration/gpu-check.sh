#!/usr/bin/env bash
# Real-GPU check: `gpu-guard host --json` must agree with nvidia-smi and sysfs
# on a host with an NVIDIA GPU. Exits 0 when every field matches, 1 on any
# difference, 2 when it cannot run (no nvidia-smi, no gpu-guard, no jq).
# No network; only the gpu-guard binary, nvidia-smi, jq and coreutils; a few
# seconds per GPU.
#
# Usage: integration/gpu-check.sh [path/to/gpu-guard]
#   default: $GPU_GUARD, else the release build
#   (target/x86_64-unknown-linux-gnu/release/gpu-guard), else gpu-guard on PATH.
#   GPU_CHECK_SYS (default /sys): the sysfs the NUMA facts are compared with.
#
# Compared per GPU, in nvidia-smi's order (its index order is NVML's):
#   nvidia-smi --query-gpu=driver_version,name,compute_cap,uuid,memory.total,pci.bus_id \
#              --format=csv,noheader,nounits
# against driver_version, gpus[i].name, .compute_capability, .uuid,
# .memory_mib (both are NVML's total bytes / 1 MiB) and .pci_bus_id; then
# (docs/health.md):
# - gpus[i].health.state against nvidia-smi's remapped_rows.failure (failed),
#   remapped_rows.pending, retired_pages.pending and
#   ecc.errors.uncorrected.volatile.total (degraded), each queried on its own
#   (a field the driver does not know counts as clear);
# - gpus[i].numa_node and .local_cpus against
#   $GPU_CHECK_SYS/bus/pci/devices/<bus id as the kernel spells it>/numa_node
#   (-1 is null) and local_cpulist (absent when sysfs has no such device);
# - gpus[i].p2p against `nvidia-smi topo -p2p r` and `-p2p w` (a pair not OK
#   in either is one gpu-guard lists), with more than one GPU;
# - `gpu-guard check --env NVIDIA_VISIBLE_DEVICES=0`: refused with a `health`
#   error exactly when GPU 0 is failed; its device-node findings, and
#   `gpu-guard host`'s, are printed.
set -u -o pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
gg=${1:-${GPU_GUARD:-}}
if [[ -z $gg ]]; then
  if [[ -x $here/target/x86_64-unknown-linux-gnu/release/gpu-guard ]]; then gg=$here/target/x86_64-unknown-linux-gnu/release/gpu-guard
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

# Health: what nvidia-smi reads, one field at a time for every GPU (a field
# the driver does not know leaves its column empty: clear).
smi_column() {
  nvidia-smi --query-gpu="$1" --format=csv,noheader,nounits 2>/dev/null | tr -d ' \t' || true
}
mapfile -t failure < <(smi_column remapped_rows.failure)
mapfile -t remap < <(smi_column remapped_rows.pending)
mapfile -t retire < <(smi_column retired_pages.pending)
mapfile -t ecc < <(smi_column ecc.errors.uncorrected.volatile.total)
mapfile -t gg_health < <(jq -r '.gpus[] | "\(.health.state // "absent") \(.health.reasons // [] | tojson)"' "$tmp/host.json")
yes_word() { case ${1,,} in yes|1|true|enabled|pending) return 0 ;; *) return 1 ;; esac; }
for ((g = 0; g < n_gg; g++)); do
  want=ok
  if yes_word "${failure[g]:-}"; then want=failed
  elif yes_word "${remap[g]:-}" || yes_word "${retire[g]:-}"; then want=degraded
  elif [[ ${ecc[g]:-} =~ ^[0-9]+$ ]] && ((ecc[g] > 0)); then want=degraded
  fi
  got=${gg_health[g]%% *}
  [[ $want == "$got" ]] || differ "GPU $g health" "$want" "$got"
  echo "GPU $g health: ${gg_health[g]}"
done

# Topology: sysfs, with the bus id as the kernel spells it.
sys=${GPU_CHECK_SYS:-/sys}
kernel_bus() {
  local b=${1,,}
  local dom=${b%%:*} rest=${b#*:}
  printf '%04x:%s' "$((16#$dom))" "$rest"
}
while IFS=$'\t' read -r g bus has node cpus; do
  [[ -n $bus ]] || continue
  d=$sys/bus/pci/devices/$(kernel_bus "$bus")
  if [[ -r $d/numa_node ]]; then
    want=$(tr -d '[:space:]' <"$d/numa_node")
    [[ $want == -1 ]] && want=null
    [[ $has == true && $want == "$node" ]] || differ "GPU $g numa_node" "$want" "$node"
    want=$(tr -d '[:space:]' <"$d/local_cpulist" 2>/dev/null || true)
    [[ $want == "$cpus" ]] || differ "GPU $g local_cpus" "$want" "$cpus"
  else
    [[ $has == false ]] || differ "GPU $g numa_node" "absent (no $d)" "$node"
  fi
  echo "GPU $g topology: NUMA node ${node/null/-}, CPUs ${cpus:--}"
done < <(jq -r '.gpus[] | [(.index|tostring), (.pci_bus_id // ""), (has("numa_node")|tostring), (.numa_node|tostring), (.local_cpus // "")] | @tsv' "$tmp/host.json")

# P2P: nvidia-smi's read and write matrices against each GPU's `p2p`.
if ((n_gg > 1)); then
  # "a b" for each ordered pair that is not OK in either matrix; the header
  # row starts with GPU0 too, so only rows holding the X of their diagonal.
  topo=$( { nvidia-smi topo -p2p r 2>/dev/null; nvidia-smi topo -p2p w 2>/dev/null; } || true)
  smi_pairs=$(awk '$1 ~ /^GPU[0-9]+$/ { a = substr($1, 4); if ($(a + 2) != "X") next
           for (i = 2; i <= NF; i++) if ($i != "X" && $i != "OK") print a, i - 2 }' <<<"$topo" | sort -u)
  gg_pairs=$(jq -r '.gpus[] | .index as $a | (.p2p // {}) | keys[] | "\($a) \(.)"' "$tmp/host.json" | sort -u)
  if ! grep -qE '^GPU0[[:space:]]+X' <<<"$topo"; then
    echo "p2p: nvidia-smi topo -p2p gave no matrix; gpu-guard: ${gg_pairs:-every pair has a path}"
  elif [[ $smi_pairs != "$gg_pairs" ]]; then
    differ "p2p pairs without a path" "$(tr '\n' ',' <<<"$smi_pairs")" "$(tr '\n' ',' <<<"$gg_pairs")"
  fi
fi

# A decision for a container given GPU 0, and the device nodes.
if ((n_gg > 0)); then
  "$gg" --config "$tmp/config.toml" check --env NVIDIA_VISIBLE_DEVICES=0 --json >"$tmp/check.json" 2>/dev/null
  verdict=$(jq -r .verdict "$tmp/check.json")
  health_err=$(jq '[.findings[] | select(.check == "health" and .severity == "error")] | length' "$tmp/check.json")
  state0=$(jq -r '.gpus[0].health.state // ""' "$tmp/host.json")
  if [[ $state0 == failed ]]; then
    [[ $health_err -ge 1 && $verdict == refuse ]] || differ "check GPU 0 (failed)" "refused with a health error" "$verdict"
  else
    [[ $health_err == 0 ]] || differ "check GPU 0 ($state0)" "no health error" "$health_err"
  fi
  echo "check NVIDIA_VISIBLE_DEVICES=0: $verdict"
  jq -r '.findings[] | select(.check == "host" or .check == "health" or .check == "tuning") | "  [\(.check)] \(.severity): \(.message)"' "$tmp/check.json"
  "$gg" --config "$tmp/config.toml" host >/dev/null 2>"$tmp/host2.err"
  grep -E '/nvidia' "$tmp/host2.err" | sed 's/^/device nodes: /' || true
fi

if ((fail)); then
  echo "gpu-check: FAIL (gpu-guard host --json differs from nvidia-smi or sysfs)"
  exit 1
fi
echo "gpu-check: OK: $n_gg GPU(s), driver $(jq -r .driver_version "$tmp/host.json"), CUDA $(jq -r .cuda_driver_version "$tmp/host.json")"
