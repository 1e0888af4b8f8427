#!/usr/bin/env bash
# gpu-guard's main job, on a machine without a GPU: real containers under real
# runc, through gpu-guard-runtime (the OCI runtime wrapper docker, containerd
# and CRI-O call), against an example host: a GeForce RTX 4090 with driver
# 545.23.06, which provides CUDA 12.3 (tests/data/hosts/geforce-545.json).
#
#  1. the official nvidia/cuda:12.4.1 image's requirement: refused, with the
#     diagnosis docker would print and the fix;
#  2. a CUDA 12.2 image: started, with tuning variables injected, capabilities
#     reduced and no_new_privileges set (read back from inside the container);
#  3. a container without GPUs: started untouched.
set -u
cd "$(dirname "$0")/.." || exit 1
[ "$(id -u)" = 0 ] || { echo "demo: run as root (runc needs it): sudo $0" >&2; exit 1; }
integration/setup.sh --demo || exit 1
if [ -z "${GPU_GUARD_BIN:-}" ]; then
    cargo build --release -q || exit 1
fi
. integration/lib.sh
need_capset
new_scratch

bold() { printf '\n\033[1m%s\033[0m\n' "$*"; }
GG_SYSLOG=false gg_config "$T/config.toml" geforce-545
export GPU_GUARD_CONFIG="$T/config.toml"
mkdir -p "$T/bin" && ln -s "$GG" "$T/bin/gpu-guard-runtime"
RUNTIME="$T/bin/gpu-guard-runtime"
SHOW=$(jq -nc '["sh", "-c", "echo \"container says: hello\"; env | grep -E \"^(CUDA_|TF_|PYTORCH_|TORCH_)\" | sort; grep -E \"^(CapEff|NoNewPrivs)\" /proc/self/status"]')

bold "The host, as gpu-guard sees it"

jq -r '"driver \(.driver_version), CUDA \(.cuda_driver_version); " + ([.gpus[] | "GPU \(.index): \(.name) (\(.brand), compute capability \(.compute_capability))"] | join(", "))' "$HOSTS_DIR/geforce-545.json"

bold "1. nvidia/cuda:12.4.1 (NVIDIA_REQUIRE_CUDA with 31 alternatives) -> refused"
make_bundle "$T/refused" "$SHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE" CUDA_VERSION=12.4.1
echo "\$ gpu-guard-runtime --log log.json run --bundle refused demo-refused"
"$RUNTIME" --root "$T/runc" --log "$T/refused/log.json" --log-format json run --bundle "$T/refused" demo-refused
echo "(exit status $?; the container never started)"
echo "Last line of the runtime log, which containerd turns into docker's 'OCI runtime create failed: ...':"
tail -n 1 "$T/refused/log.json" | jq -c '{level, msg: (.msg[0:160] + "...")}'
echo "NVIDIA's own hook would have said only: unsatisfied condition: cuda>=12.4"

bold "2. a CUDA 12.2 image -> started, with gpu-guard's edits"
make_bundle "$T/allowed" "$SHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.2" CUDA_DEVICE_MAX_CONNECTIONS=8
echo "\$ gpu-guard check --bundle allowed   # what gpu-guard will do, changing nothing"
"$GG" check --bundle "$T/allowed"
echo "\$ gpu-guard-runtime run --bundle allowed demo-allowed"
"$RUNTIME" --root "$T/runc" run --bundle "$T/allowed" demo-allowed
echo "(exit status $?; CUDA_DEVICE_MAX_CONNECTIONS=8 is the image's own value and was kept;"
echo " CapEff $("$GG_CAPSET" encode $ALLOWLIST_CAPS) is the allowlist: $ALLOWLIST_NAMES)"
runc --root "$T/runc" delete -f demo-allowed >/dev/null 2>&1

bold "3. a container without GPUs -> started untouched"
make_bundle "$T/plain" "$SHOW"
before=$(sha256sum < "$T/plain/config.json")
"$RUNTIME" --root "$T/runc" run --bundle "$T/plain" demo-plain
after=$(sha256sum < "$T/plain/config.json")
[ "$before" = "$after" ] && echo "(config.json byte-identical before and after)"
runc --root "$T/runc" delete -f demo-plain >/dev/null 2>&1
