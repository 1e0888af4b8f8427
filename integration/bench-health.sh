#!/usr/bin/env bash
# Benchmark: the prestart hook's start-up with the health and topology
# checks on against off (docs/health.md), on a probed host (the fake NVML
# under real nvml-wrapper, a stand-in /proc, /dev and /sys).
#
#   on   the shipped [health] (failed = "enforce", degraded = "warn") and
#        [tuning] numa = "warn", nccl_p2p = "note": each GPU's health judged,
#        the device nodes of its GPUs checked (stat, /proc/devices), NUMA and
#        P2P judged
#   off  [health] failed = degraded = "off", numa = nccl_p2p = "off"
#
# Both with a warm host facts cache (the health and topology facts ride in
# it), interleaved, medians; then the same two with no cache (NVML in the
# probe child every time: the health and P2P calls' own cost). Prints the
# ratios; goal on/off <= 1.02 warm. With health on, the cache lives at most
# [health] max_age_s (30 s): one cold probe per 30 s at most, shown as the
# cold median.
#
# Usage: integration/bench-health.sh [runs]   (as root: mknod; NO_BUILD=1
#   uses GPU_GUARD / FAKE_NVML_LIB, or target/test-hooks/release, as built)
# Env: PROFILE (default h100x8). Exit: 0 goal met, 1 missed, 2 cannot run.
set -u -o pipefail

runs=${1:-61}
here=$(cd "$(dirname "$0")/.." && pwd)
profile=$here/tests/data/hosts/${PROFILE:-h100x8}.json
[[ ${BASH_VERSINFO[0]} -ge 5 ]] || { echo "bench-health: needs bash 5 (EPOCHREALTIME)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "bench-health: needs root (mknod of the device nodes)" >&2; exit 2; }
command -v jq >/dev/null || { echo "bench-health: needs jq" >&2; exit 2; }

# The stand-in host is reached through the test-only path variables, which
# only a `test-hooks` build reads: its own target dir, as bench-probe.sh.
hooks_target=$here/target/test-hooks
if [[ -z ${GPU_GUARD:-} || -z ${FAKE_NVML_LIB:-} ]] && [[ ${NO_BUILD:-0} != 1 ]]; then
  (cd "$here" && CARGO_TARGET_DIR=$hooks_target cargo build --release --quiet \
    -p gpu-guard -p fake-nvml --features gpu-guard/test-hooks) || exit 2
fi
gg=${GPU_GUARD:-$hooks_target/release/gpu-guard}
lib=${FAKE_NVML_LIB:-$hooks_target/release/libfake_nvml.so}
[[ -x $gg && -f $lib ]] || { echo "bench-health: missing $gg or $lib" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/proc" "$tmp/dev" "$tmp/run" "$tmp/sys"
driver=$(jq -r .driver_version "$profile")
printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n' "$driver" >"$tmp/proc/version"
printf 'Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n' >"$tmp/devices"
echo 11111111-2222-3333-4444-555555555555 >"$tmp/boot_id"
# The profile's GPUs with minor numbers (so each one's /dev/nvidiaN is
# checked), half on NUMA node 0 and half on node 1, and their nodes.
n=$(jq '.gpus | length' "$profile")
jq '.gpus |= (to_entries | map(.value + {minor_number: .key}))' "$profile" >"$tmp/facts.json"
mknod -m 666 "$tmp/dev/nvidiactl" c 195 255
mknod -m 666 "$tmp/dev/nvidia-uvm" c 508 0
for ((i = 0; i < n; i++)); do
  mknod -m 666 "$tmp/dev/nvidia$i" c 195 "$i"
  bus=$(jq -r ".gpus[$i].pci_bus_id" "$profile")
  b=${bus,,}; d="$tmp/sys/bus/pci/devices/${b:4}"
  mkdir -p "$d"
  if ((i < n / 2)); then echo 0 >"$d/numa_node"; echo 0-15,32-47 >"$d/local_cpulist"
  else echo 1 >"$d/numa_node"; echo 16-31,48-63 >"$d/local_cpulist"; fi
done
mkdir -p "$tmp/sys/devices/system/cpu" "$tmp/sys/devices/system/node"
echo 0-63 >"$tmp/sys/devices/system/cpu/online"
echo 0-1 >"$tmp/sys/devices/system/node/has_memory"
export FAKE_NVML_FACTS=$tmp/facts.json
export GPU_GUARD_PROC_NVIDIA=$tmp/proc GPU_GUARD_DEV_DIR=$tmp/dev GPU_GUARD_BOOT_ID_FILE=$tmp/boot_id
export GPU_GUARD_PROC_DEVICES=$tmp/devices GPU_GUARD_SYS_DIR=$tmp/sys
unset FAKE_NVML_FAIL FAKE_NVML_INIT_DELAY_MS GPU_GUARD_CONFIG

OFF='[health]
failed = "off"
degraded = "off"
[tuning]
numa = "off"
nccl_p2p = "off"'
conf() { # name, cache file ("" none), extra tables
  printf '[host]\nnvml_library = "%s"\ncache_file = "%s"\n%s\n[kernel_image]\nseverity = "off"\n[libraries]\nseverity = "off"\n[log]\nsyslog = false\n' \
    "$lib" "$2" "$3" >"$tmp/$1.toml"
}
conf on "$tmp/run/on.json" ""
conf off "$tmp/run/off.json" "$OFF"
conf on-cold "" ""
conf off-cold "" "$OFF"

# A GPU container given GPUs 0 and 1 (one NUMA node), already within the
# security policy, attached by NVIDIA's (stand-in) hook.
mkdir -p "$tmp/bundle/rootfs"
cat >"$tmp/bundle/config.json" <<JSON
{"ociVersion":"1.0.2","process":{"args":["/bin/true"],"cwd":"/","user":{"uid":1000,"gid":1000},
 "env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=0,1","NVIDIA_REQUIRE_CUDA=cuda>=12.0"],
 "noNewPrivileges":true,"capabilities":{"bounding":["CAP_CHOWN"],"effective":["CAP_CHOWN"],"permitted":["CAP_CHOWN"]}},
 "hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}]},
 "root":{"path":"rootfs"},"linux":{"namespaces":[{"type":"pid"}]}}
JSON
printf '{"ociVersion":"1.0.2","id":"bench","status":"creating","pid":1,"bundle":"%s"}\n' "$tmp/bundle" >"$tmp/state.json"

run() { "$gg" --config "$tmp/$1.toml" hook prestart <"$tmp/state.json" >/dev/null 2>&1; }
variants=(on off on-cold off-cold)
for v in "${variants[@]}"; do
  run "$v" || { echo "bench-health: the $v config refused the container:" >&2
    "$gg" --config "$tmp/$v.toml" hook prestart <"$tmp/state.json" >&2; exit 2; }
done
[[ -f $tmp/run/on.json && -f $tmp/run/off.json ]] || { echo "bench-health: no cache written" >&2; exit 2; }
# The on config's cache must hold the facts the checks read.
jq -e '.facts.gpus[0].health.state == "ok" and .facts.gpus[0].numa_node == 0' "$tmp/run/on.json" >/dev/null ||
  { echo "bench-health: the cache lacks health or topology" >&2; exit 2; }

declare -A times
for ((i = 0; i < runs; i++)); do
  for v in "${variants[@]}"; do # interleaved: drift hits all alike
    t0=$EPOCHREALTIME
    run "$v"
    t1=$EPOCHREALTIME
    times[$v]+="$((${t1/./} - ${t0/./})) "
  done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
declare -A m
for v in "${variants[@]}"; do m[$v]=$(median "${times[$v]}"); done
ms() { awk -v t="$1" 'BEGIN{printf "%.2f", t/1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a/b}'; }
r=$(ratio "${m[on]}" "${m[off]}")
rc=$(ratio "${m[on-cold]}" "${m[off-cold]}")
echo "bench-health: hook prestart, $runs rounds interleaved, profile $(basename "$profile") ($n GPUs), container given GPUs 0,1"
echo "  warm cache: on $(ms "${m[on]}") ms, off $(ms "${m[off]}") ms, ratio $r  [goal <= 1.02]"
echo "  no cache (NVML each start): on $(ms "${m[on-cold]}") ms, off $(ms "${m[off-cold]}") ms, ratio $rc"
echo "  with health on, a cold start at most once per [health] max_age_s (30 s)"
awk -v r="$r" 'BEGIN{exit !(r <= 1.02)}'
