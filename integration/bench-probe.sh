#!/usr/bin/env bash
# Benchmark of the host probe on the container-start path (the "Speed" goal).
#
# A slow NVML is stood in for by the fake libnvidia-ml with
# FAKE_NVML_INIT_DELAY_MS (default 100 ms, as a real nvmlInit on a big
# host). Three variants of the same command, run interleaved:
#   warm     host.cache_file set and already written (no NVML call)
#   nocache  cache_file = "" (NVML every time)
#   facts    host.facts_file = the profile (never probes)
# Prints each median and the ratios, and checks the targets:
#   warm / nocache <= 0.05        warm / facts <= 1.10
#
# Usage: integration/bench-probe.sh [hook|host] [runs]
#   hook (default): `gpu-guard hook prestart` with OCI State on stdin and a
#                   GPU container's bundle (needs the hook from main)
#   host:           `gpu-guard host --json`
# Env: GPU_GUARD (binary, built with --features test-hooks), FAKE_NVML_LIB
#      (library), DELAY_MS (default 100),
#      PROFILE (default h100x8), NO_BUILD=1 (use the binaries as they are).
# Exit: 0 targets met, 1 a target missed, 2 cannot run.
set -u -o pipefail

mode=${1:-hook}
runs=${2:-31}
delay=${DELAY_MS:-100}
here=$(cd "$(dirname "$0")/.." && pwd)
profile=$here/tests/data/hosts/${PROFILE:-h100x8}.json

case $mode in hook|host) ;; *) echo "usage: $0 [hook|host] [runs]" >&2; exit 2 ;; esac
[[ ${BASH_VERSINFO[0]} -ge 5 ]] || { echo "bench-probe: needs bash 5 (EPOCHREALTIME)" >&2; exit 2; }

# The stand-in host below is reached through the test-only path variables
# (GPU_GUARD_PROC_NVIDIA, ...), which only a build with the `test-hooks`
# feature reads. It goes to its own target dir so target/release/gpu-guard,
# the binary packages ship and the engine tests use, stays without them.
# A GPU_GUARD given from outside must be built the same way.
hooks_target=$here/target/test-hooks
if [[ -z ${GPU_GUARD:-} || -z ${FAKE_NVML_LIB:-} ]] && [[ ${NO_BUILD:-0} != 1 ]]; then
  (cd "$here" && CARGO_TARGET_DIR=$hooks_target cargo build --release --quiet \
    -p gpu-guard -p fake-nvml --features gpu-guard/test-hooks) || exit 2
fi
gg=${GPU_GUARD:-$hooks_target/release/gpu-guard}
lib=${FAKE_NVML_LIB:-$hooks_target/release/libfake_nvml.so}
[[ -x $gg && -f $lib ]] || { echo "bench-probe: missing $gg or $lib" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A stand-in host: /proc/driver/nvidia/version, device nodes, boot id.
mkdir -p "$tmp/proc" "$tmp/dev" "$tmp/run"
driver=$(jq -r .driver_version "$profile")
printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n' "$driver" >"$tmp/proc/version"
# The driver's character devices, as /proc/devices registers them: a GPU
# container start checks the nodes it will use (core::device_nodes), and a
# regular file there would refuse it. mknod needs root.
if [[ $mode == hook ]]; then
  mknod -m 666 "$tmp/dev/nvidiactl" c 195 255 && mknod -m 666 "$tmp/dev/nvidia-uvm" c 508 0 ||
    { echo "bench-probe: hook mode makes device nodes with mknod: run as root" >&2; exit 2; }
else
  touch "$tmp/dev/nvidiactl" "$tmp/dev/nvidia-uvm"
fi
printf 'Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n' >"$tmp/devices"
echo 11111111-2222-3333-4444-555555555555 >"$tmp/boot_id"
export FAKE_NVML_FACTS=$profile FAKE_NVML_INIT_DELAY_MS=$delay
export GPU_GUARD_PROC_NVIDIA=$tmp/proc GPU_GUARD_DEV_DIR=$tmp/dev GPU_GUARD_BOOT_ID_FILE=$tmp/boot_id
export GPU_GUARD_PROC_DEVICES=$tmp/devices
unset FAKE_NVML_FAIL GPU_GUARD_CONFIG

conf() { # name, extra [host] lines
  printf '[host]\nnvml_library = "%s"\nprobe_timeout_ms = 5000\n%s\n[log]\nsyslog = false\n' "$lib" "$2" >"$tmp/$1.toml"
}
conf warm "cache_file = \"$tmp/run/host-facts.json\""
conf nocache 'cache_file = ""'
conf facts "cache_file = \"\"
facts_file = \"$profile\""

# A GPU container the profile satisfies and that already meets the security
# policy (as the runtime wrapper leaves it), so every variant allows it.
# NVIDIA's prestart hook in the spec attaches the GPUs (docker --gpus).
mkdir -p "$tmp/bundle/rootfs"
cat >"$tmp/bundle/config.json" <<JSON
{"ociVersion":"1.0.2","process":{"args":["/bin/true"],"cwd":"/",
 "env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=all","NVIDIA_REQUIRE_CUDA=cuda>=12.0"],
 "noNewPrivileges":true,"capabilities":{"bounding":["CAP_CHOWN"],"effective":["CAP_CHOWN"],"permitted":["CAP_CHOWN"]}},
 "hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}]},
 "root":{"path":"rootfs"}}
JSON
printf '{"ociVersion":"1.0.2","id":"bench","status":"creating","pid":1,"bundle":"%s"}\n' "$tmp/bundle" >"$tmp/state.json"

run() { # variant
  if [[ $mode == hook ]]; then
    "$gg" --config "$tmp/$1.toml" hook prestart <"$tmp/state.json" >/dev/null 2>&1
  else
    "$gg" --config "$tmp/$1.toml" host --json >/dev/null 2>&1
  fi
}

# Each variant must succeed (and the warm run fills the cache).
for v in warm nocache facts; do
  if ! run "$v"; then
    echo "bench-probe: '$mode' with the $v config failed:" >&2
    if [[ $mode == hook ]]; then
      "$gg" --config "$tmp/$v.toml" hook prestart <"$tmp/state.json" >&2
    else
      "$gg" --config "$tmp/$v.toml" host --json >&2
    fi
    exit 2
  fi
done
[[ -f $tmp/run/host-facts.json ]] || { echo "bench-probe: the warm config wrote no cache" >&2; exit 2; }

declare -A times
for ((i = 0; i < runs; i++)); do
  for v in warm nocache facts; do   # interleaved: drift hits all alike
    t0=$EPOCHREALTIME
    run "$v"
    t1=$EPOCHREALTIME
    times[$v]+="$(( (${t1/./} - ${t0/./}) )) "
  done
done

median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mw=$(median "${times[warm]}"); mn=$(median "${times[nocache]}"); mf=$(median "${times[facts]}")
r1=$(awk -v a="$mw" -v b="$mn" 'BEGIN {printf "%.4f", a/b}')
r2=$(awk -v a="$mw" -v b="$mf" 'BEGIN {printf "%.3f", a/b}')
echo "bench-probe: mode=$mode runs=$runs FAKE_NVML_INIT_DELAY_MS=$delay profile=$(basename "$profile")"
printf '  median warm cache   %8.2f ms\n' "$(awk -v t="$mw" 'BEGIN{print t/1000}')"
printf '  median no cache     %8.2f ms\n' "$(awk -v t="$mn" 'BEGIN{print t/1000}')"
printf '  median facts file   %8.2f ms\n' "$(awk -v t="$mf" 'BEGIN{print t/1000}')"
ok=1
v1=$(awk -v r="$r1" 'BEGIN{print (r <= 0.05) ? "ok" : "MISSED"}')
v2=$(awk -v r="$r2" 'BEGIN{print (r <= 1.10) ? "ok" : "MISSED"}')
echo "  warm / no cache  = $r1  (target <= 0.05: $v1)"
echo "  warm / facts     = $r2  (target <= 1.10: $v2)"
[[ $v1 == ok && $v2 == ok ]] || ok=0
((ok)) && exit 0 || exit 1
