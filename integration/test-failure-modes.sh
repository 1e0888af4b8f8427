#!/usr/bin/env bash
# The failure modes of docs/failure-modes.md, run for real: for each entry
# point (the runtime wrapper in front of runc, the prestart hook under
# runc, podman's precreate hook), what happens when the gpu-guard config is
# invalid, NVML hangs (the fake NVML library, FAKE_NVML_FAIL=hang), the
# chained runtime is missing, gpu-guard itself crashes (SIGABRT while it
# waits on NVML) or the hook runs past its timeout; then the emergency
# bypass (a `mode = "off"` drop-in) and `mode = "audit"`. Each case prints
# a NOTE line with what the user sees. Run under the engine lock:
#   flock /tmp/gg-engines.lock integration/test-failure-modes.sh
. "$(dirname "$0")/lib.sh"

need_root
need_cmd runc podman jq python3 pgrep sha256sum
[ -x "$GG" ] || skip_or_fail "gpu-guard binary $GG not built"

new_scratch
# The fake NVML library of the release build (the whole workspace), else
# of a debug build.
FAKE_LIB="$RELEASE_DIR/libfake_nvml.so"
if [ ! -f "$FAKE_LIB" ]; then
    need_cmd cargo
    (cd "$REPO_DIR" && cargo build -q -p fake-nvml) >&2 || { fail "cannot build the fake NVML library"; finish; }
    FAKE_LIB="$REPO_DIR/target/debug/libfake_nvml.so"
fi
[ -f "$FAKE_LIB" ] || { fail "no $FAKE_LIB"; finish; }
FACTS="$HOSTS_DIR/a100.json"
mkdir -p "$T/bin"
ln -sf "$GG" "$T/bin/gpu-guard-runtime"
WRAP="$T/bin/gpu-guard-runtime"
SHOW=$(jq -nc '["sh", "-c", "echo RAN"]')
GPU_ENV=(NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0")

# nvml_config FILE TIMEOUT_MS ON_FAILURE [extra...]: NVML from the fake
# library (answering from a100.json unless FAKE_NVML_FAIL says otherwise).
nvml_config() {
    local f=$1 ms=$2 onf=$3
    shift 3
    printf '[host]\nnvml_library = "%s"\ncache_file = ""\nprobe_timeout_ms = %s\non_probe_failure = "%s"\n[kernel_image]\nseverity = "off"\n[log]\nsyslog = false\n' \
        "$FAKE_LIB" "$ms" "$onf" > "$f"
    for l in "$@"; do echo "$l" >> "$f"; done
}
export FAKE_NVML_FACTS="$FACTS"

# with_hook DIR CFG [TIMEOUT] [ENV...]: the prestart hook, with its own env
# (runc gives a hook only the env its entry names) and timeout.
with_hook() {
    local dir=$1 cfg=$2 timeout=${3:-0}
    shift 3
    local env
    env=$(printf '%s\n' "FAKE_NVML_FACTS=$FACTS" "$@" | jq -R . | jq -sc .)
    jq --arg gg "$GG" --arg cfg "$cfg" --argjson env "$env" --argjson t "$timeout" '
        .hooks.prestart = ((.hooks.prestart // []) + [{path: $gg, args: ["gpu-guard", "--config", $cfg, "hook", "prestart"], env: $env}
            + (if $t > 0 then {timeout: $t} else {} end)])' \
        "$dir/config.json" > "$dir/c.json" && mv "$dir/c.json" "$dir/config.json"
}

runc_run() { # DIR ID -> OUT, RC
    OUT=$(cd "$1" && timeout 60 runc --root "$T/runc" run "$2" 2>&1)
    RC=$?
    runc --root "$T/runc" delete -f "$2" >/dev/null 2>&1 || true
}

wrap_run() { # DIR ID CFG -> OUT, RC (the wrapper's --log in DIR/log.json)
    rm -f "$1/log.json"
    OUT=$(GPU_GUARD_CONFIG=$3 timeout 60 "$WRAP" --root "$T/runc" --log "$1/log.json" --log-format json run --bundle "$1" "$2" 2>&1)
    RC=$?
    runc --root "$T/runc" delete -f "$2" >/dev/null 2>&1 || true
    LOGMSG=$(tail -n 1 "$1/log.json" 2>/dev/null | jq -r .msg 2>/dev/null)
}

# ---- podman with gpu-guard's precreate hook alone (so its own behaviour shows)
PODMAN=(podman --runtime runc)
RUNOPTS=(--rm --ulimit nofile=10000:10000 --ulimit nproc=1000:1000)
mkdir -p "$T/nvidia-hooks.d"
jq -n --arg h "$INTEGRATION_DIR/stand-in/nvidia-container-toolkit" '{version: "1.0.0",
    hook: {path: $h, args: ["nvidia-container-toolkit", "prestart"]}, when: {always: true}, stages: ["prestart"]}' \
    > "$T/nvidia-hooks.d/oci-nvidia-hook.json"
precreate_hooks() { # DIR CFG [TIMEOUT] [ENV...]
    local dir=$1 cfg=$2 timeout=${3:-0}
    shift 3
    mkdir -p "$dir"
    local env
    env=$(printf '%s\n' "FAKE_NVML_FACTS=$FACTS" "$@" | jq -R . | jq -sc .)
    jq -n --arg gg "$GG" --arg cfg "$cfg" --argjson env "$env" --argjson t "$timeout" '{version: "1.0.0",
        hook: ({path: $gg, args: ["gpu-guard", "--config", $cfg, "hook", "precreate"], env: $env}
            + (if $t > 0 then {timeout: $t} else {} end)),
        when: {always: true}, stages: ["precreate"]}' > "$dir/gpu-guard-precreate.json"
}
podman_run() { # HOOKDIR IMAGE -> OUT, RC
    OUT=$(timeout 120 "${PODMAN[@]}" --hooks-dir "$1" --hooks-dir "$T/nvidia-hooks.d" run "${RUNOPTS[@]}" "$2" sh -c 'echo RAN' 2>&1)
    RC=$?
}
make_rootfs "$T/rootfs"
TAG=gg-fm-$$
tar -C "$T/rootfs" -c . | podman import --change 'ENV NVIDIA_VISIBLE_DEVICES=all' --change 'ENV NVIDIA_REQUIRE_CUDA=cuda>=12.0' - "localhost/$TAG-gpu:1" >/dev/null 2>&1
tar -C "$T/rootfs" -c . | podman import - "localhost/$TAG-plain:1" >/dev/null 2>&1
trap 'podman rmi -f "localhost/$TAG-gpu:1" "localhost/$TAG-plain:1" >/dev/null 2>&1; rm -rf "$T"' EXIT

echo "== 1. the gpu-guard config is invalid (a typo in a key)"
printf 'mode = "enforce"\n[tuning]\nenabeld = true\n' > "$T/bad.toml"
make_bundle "$T/i-gpu" "$SHOW" "${GPU_ENV[@]}"
make_bundle "$T/i-cpu" "$SHOW"
wrap_run "$T/i-gpu" fm-i1 "$T/bad.toml"
check_eq "invalid config, wrapper: GPU container refused" "$RC" 1
check_contains "invalid config, wrapper: --log names the file and key" "$LOGMSG" "enabeld"
echo "NOTE invalid config, wrapper, GPU: exit $RC; --log: $LOGMSG"
wrap_run "$T/i-cpu" fm-i2 "$T/bad.toml"
check_eq "invalid config, wrapper: non-GPU container runs" "$RC/$(printf '%s' "$OUT" | grep -c RAN)" 0/1
make_bundle "$T/i-gpu2" "$SHOW" "${GPU_ENV[@]}"
make_compliant "$T/i-gpu2"
with_hook "$T/i-gpu2" "$T/bad.toml" 0
runc_run "$T/i-gpu2" fm-i3
check_eq "invalid config, prestart: GPU container refused" "$([ $RC -ne 0 ] && echo refused)" refused
check_contains "invalid config, prestart: runc shows the file and key" "$OUT" "enabeld"
echo "NOTE invalid config, prestart, GPU: $(printf '%s' "$OUT" | head -c 300)"
make_bundle "$T/i-cpu2" "$SHOW"
with_hook "$T/i-cpu2" "$T/bad.toml" 0
runc_run "$T/i-cpu2" fm-i4
check_eq "invalid config, prestart: non-GPU container runs" "$RC" 0
precreate_hooks "$T/pc-bad" "$T/bad.toml" 0
podman_run "$T/pc-bad" "localhost/$TAG-gpu:1"
check_eq "invalid config, precreate: GPU container refused" "$([ $RC -ne 0 ] && echo refused)" refused
check_not_contains "invalid config, precreate: never ran" "$OUT" "RAN"
echo "NOTE invalid config, precreate alone, GPU: $(printf '%s' "$OUT" | tail -n 2 | head -c 300)"
podman_run "$T/pc-bad" "localhost/$TAG-plain:1"
check_eq "invalid config, precreate: non-GPU container runs" "$RC" 0

echo "== 2. NVML hangs (probe_timeout_ms = 1500)"
nvml_config "$T/hang.toml" 1500 refuse
nvml_config "$T/hang-allow.toml" 1500 allow
export FAKE_NVML_FAIL=hang
make_bundle "$T/h-gpu" "$SHOW" "${GPU_ENV[@]}"
t0=$(date +%s%N)
wrap_run "$T/h-gpu" fm-h1 "$T/hang.toml"
ms=$((($(date +%s%N) - t0) / 1000000))
check_eq "NVML hangs, wrapper: GPU container refused" "$RC" 1
check_eq "NVML hangs, wrapper: within the deadline (+slack)" "$([ "$ms" -lt 6000 ] && echo bounded)" bounded
echo "NOTE NVML hangs, wrapper, GPU: exit $RC after $ms ms; --log: $LOGMSG"
make_bundle "$T/h-gpu2" "$SHOW" "${GPU_ENV[@]}"
wrap_run "$T/h-gpu2" fm-h2 "$T/hang-allow.toml"
check_eq "NVML hangs, wrapper, on_probe_failure = allow: GPU container runs" "$RC" 0
make_bundle "$T/h-cpu" "$SHOW"
t0=$(date +%s%N)
wrap_run "$T/h-cpu" fm-h3 "$T/hang.toml"
ms=$((($(date +%s%N) - t0) / 1000000))
check_eq "NVML hangs, wrapper: non-GPU container runs" "$RC" 0
echo "NOTE NVML hangs, wrapper, non-GPU: runs in $ms ms (never probes)"
make_bundle "$T/h-gpu3" "$SHOW" "${GPU_ENV[@]}"
make_compliant "$T/h-gpu3"
with_hook "$T/h-gpu3" "$T/hang.toml" 0 FAKE_NVML_FAIL=hang
runc_run "$T/h-gpu3" fm-h4
check_eq "NVML hangs, prestart: GPU container refused" "$([ $RC -ne 0 ] && echo refused)" refused
echo "NOTE NVML hangs, prestart, GPU: $(printf '%s' "$OUT" | head -c 300)"
precreate_hooks "$T/pc-hang" "$T/hang.toml" 0 FAKE_NVML_FAIL=hang
podman_run "$T/pc-hang" "localhost/$TAG-gpu:1"
check_eq "NVML hangs, precreate: GPU container refused" "$([ $RC -ne 0 ] && echo refused)" refused
podman_run "$T/pc-hang" "localhost/$TAG-plain:1"
check_eq "NVML hangs, precreate: non-GPU container runs" "$RC" 0
unset FAKE_NVML_FAIL

echo "== 3. the chained runtime is missing"
GG_RUNTIME_PATH="$T/no-such/runc" gg_config "$T/missing.toml" a100
for kind in gpu cpu; do
    if [ $kind = gpu ]; then make_bundle "$T/m-$kind" "$SHOW" "${GPU_ENV[@]}"; else make_bundle "$T/m-$kind" "$SHOW"; fi
    wrap_run "$T/m-$kind" "fm-m-$kind" "$T/missing.toml"
    check_eq "missing chained runtime, wrapper: $kind container fails with 127" "$RC" 127
    check_contains "missing chained runtime, wrapper: --log names it ($kind)" "$LOGMSG" "$T/no-such/runc does not exist"
done
echo "NOTE missing chained runtime, wrapper: exit $RC; --log: $LOGMSG"
HOST_OUT=$("$GG" --config "$T/missing.toml" host 2>&1)
check_eq "missing chained runtime: gpu-guard host exits 1" "$?" 1
check_contains "missing chained runtime: gpu-guard host names it" "$HOST_OUT" "does not exist"

echo "== 4. gpu-guard crashes (SIGABRT, as an abort or a panic under panic=abort ends it, while it waits on a hung NVML)"
nvml_config "$T/crash.toml" 30000 refuse
# kill_gg PATTERN: SIGABRT to the gpu-guard process whose command line has
# PATTERN (this test's own config path), SIGKILL to its probe child.
kill_gg() {
    local pid child
    for _ in $(seq 1 100); do
        pid=$(pgrep -f -- "$1" | head -n 1)
        [ -n "$pid" ] && child=$(pgrep -P "$pid" | head -n 1) && [ -n "$child" ] && break
        sleep 0.1
    done
    [ -n "$pid" ] || return 1
    kill -ABRT "$pid"
    [ -n "$child" ] && kill -KILL "$child" 2>/dev/null
    return 0
}
make_bundle "$T/c-gpu" "$SHOW" "${GPU_ENV[@]}"
(FAKE_NVML_FAIL=hang GPU_GUARD_CONFIG="$T/crash.toml" "$WRAP" --root "$T/runc" --log "$T/c-gpu/log.json" run --bundle "$T/c-gpu" fm-c1 > "$T/c1.out" 2>&1; echo $? > "$T/c1.rc") &
kill_gg "^$WRAP .*--bundle $T/c-gpu " || fail "crash, wrapper: no gpu-guard process found"
wait
check_eq "crash, wrapper: the runtime dies by SIGABRT (128+6)" "$(cat "$T/c1.rc")" 134
check_eq "crash, wrapper: no container was created" "$(runc --root "$T/runc" state fm-c1 >/dev/null 2>&1 && echo exists || echo absent)" absent
echo "NOTE crash, wrapper: exit $(cat "$T/c1.rc"), no container; --log: $(cat "$T/c-gpu/log.json" 2>/dev/null)"
make_bundle "$T/c-gpu2" "$SHOW" "${GPU_ENV[@]}"
make_compliant "$T/c-gpu2"
with_hook "$T/c-gpu2" "$T/crash.toml" 0 FAKE_NVML_FAIL=hang
(cd "$T/c-gpu2" && timeout 60 runc --root "$T/runc" run fm-c2 > "$T/c2.out" 2>&1; echo $? > "$T/c2.rc") &
kill_gg "^gpu-guard --config $T/crash.toml hook prestart" || fail "crash, prestart: no gpu-guard process found"
wait
runc --root "$T/runc" delete -f fm-c2 >/dev/null 2>&1
check_eq "crash, prestart: runc fails the container" "$([ "$(cat "$T/c2.rc")" -ne 0 ] && echo failed)" failed
check_not_contains "crash, prestart: it never ran" "$(cat "$T/c2.out")" "RAN"
echo "NOTE crash, prestart: $(head -c 300 "$T/c2.out")"
precreate_hooks "$T/pc-crash" "$T/crash.toml" 0 FAKE_NVML_FAIL=hang
("${PODMAN[@]}" --hooks-dir "$T/pc-crash" --hooks-dir "$T/nvidia-hooks.d" run "${RUNOPTS[@]}" "localhost/$TAG-gpu:1" sh -c 'echo RAN' > "$T/c3.out" 2>&1; echo $? > "$T/c3.rc") &
kill_gg "^gpu-guard --config $T/crash.toml hook precreate" || fail "crash, precreate: no gpu-guard process found"
wait
check_eq "crash, precreate: podman fails the container" "$([ "$(cat "$T/c3.rc")" -ne 0 ] && echo failed)" failed
check_not_contains "crash, precreate: it never ran" "$(cat "$T/c3.out")" "RAN"
echo "NOTE crash, precreate: $(tail -n 2 "$T/c3.out" | head -c 300)"

echo "== 5. the hook runs past its timeout (NVML hangs, probe_timeout_ms 20000, hook timeout 2 s)"
nvml_config "$T/slow.toml" 20000 refuse
make_bundle "$T/t-gpu" "$SHOW" "${GPU_ENV[@]}"
make_compliant "$T/t-gpu"
with_hook "$T/t-gpu" "$T/slow.toml" 2 FAKE_NVML_FAIL=hang
t0=$SECONDS
runc_run "$T/t-gpu" fm-t1
check_eq "hook timeout, prestart: runc fails the container" "$([ $RC -ne 0 ] && echo failed)" failed
check_contains "hook timeout, prestart: runc says it timed out" "$OUT" "timeout"
echo "NOTE hook timeout, prestart: after $((SECONDS - t0)) s: $(printf '%s' "$OUT" | head -c 300)"
# The probe child runc's kill left behind, hung in the fake nvmlInit.
for p in $(pgrep -f -- "__probe.*$FAKE_LIB"); do kill -KILL "$p" 2>/dev/null; done
precreate_hooks "$T/pc-slow" "$T/slow.toml" 2 FAKE_NVML_FAIL=hang
t0=$SECONDS
podman_run "$T/pc-slow" "localhost/$TAG-gpu:1"
check_eq "hook timeout, precreate: podman fails the container" "$([ $RC -ne 0 ] && echo failed)" failed
echo "NOTE hook timeout, precreate: after $((SECONDS - t0)) s: $(printf '%s' "$OUT" | tail -n 2 | head -c 300)"
for p in $(pgrep -f -- "__probe.*$FAKE_LIB"); do kill -KILL "$p" 2>/dev/null; done

echo "== 6. the emergency bypass: a mode = \"off\" drop-in"
mkdir -p "$T/etc/config.d"
chmod 0755 "$T/etc" "$T/etc/config.d"
gg_config "$T/etc/config.toml" geforce-545
make_bundle "$T/b-gpu" "$SHOW" "${GPU_ENV[@]}" "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE"
wrap_run "$T/b-gpu" fm-b1 "$T/etc/config.toml"
check_eq "bypass: enforce refuses it first" "$RC" 1
(umask 022; echo 'mode = "off"' > "$T/etc/config.d/99-off.toml")
BEFORE=$(sha256sum < "$T/b-gpu/config.json")
wrap_run "$T/b-gpu" fm-b2 "$T/etc/config.toml"
check_eq "bypass: with 99-off.toml it runs" "$RC/$(printf '%s' "$OUT" | grep -c RAN)" 0/1
check_eq "bypass: config.json untouched" "$(sha256sum < "$T/b-gpu/config.json")" "$BEFORE"
check_contains "bypass: host and check name the drop-in" "$("$GG" --config "$T/etc/config.toml" check --env A=1 2>&1)" "99-off.toml"
chmod 0666 "$T/etc/config.d/99-off.toml"
wrap_run "$T/b-gpu" fm-b3 "$T/etc/config.toml"
check_eq "bypass: a drop-in others can write is refused (GPU refused)" "$RC" 1
check_contains "bypass: ... naming it and the fix" "$LOGMSG" "chmod go-w"
rm -f "$T/etc/config.d/99-off.toml"

finish
