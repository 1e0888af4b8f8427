#!/usr/bin/env bash
# gpu-guard under real docker: dockerd started by this test with gpu-guard-runtime
# registered as the default runtime, a stand-in nvidia-container-runtime-hook
# on dockerd's PATH so `docker run --gpus all` works without a GPU, and images
# made with `docker import` of a busybox rootfs with ENV NVIDIA_REQUIRE_CUDA.
#
# GG_INSTALLED=1 (the package test): dockerd reads /etc/docker/daemon.json as
# `gpu-guard install docker` left it, and gpu-guard reads the installed
# /etc/gpu-guard/config.toml (temporarily pointed at a test host profile).
. "$(dirname "$0")/lib.sh"

need_root
need_cmd dockerd docker containerd runc jq python3
[ -x "$GG" ] || skip_or_fail "gpu-guard binary $GG not built"
need_capset

new_scratch
DROOT=$(mktemp -d /var/tmp/gpu-guard-docker.XXXXXX)
SOCK="$DROOT/docker.sock"
D=(docker -H "unix://$SOCK")
mkdir -p "$T/bin"
# The stand-in NVIDIA hook: docker --gpus needs it on PATH at daemon start
# (moby daemon/nvidia_linux.go looks it up); it only drains the state.
printf '#!/bin/sh\ncat >/dev/null\nexit 0\n' > "$T/bin/nvidia-container-runtime-hook"
chmod +x "$T/bin/nvidia-container-runtime-hook"

RUNTIME_FLAG=()
if [ "${GG_INSTALLED:-0}" = 1 ]; then
    SYSCFG=/etc/gpu-guard/config.toml
    cp -p "$SYSCFG" "$T/config.toml.orig"
    gg_config "$T/cfg.toml" geforce-545
    cp "$T/cfg.toml" "$SYSCFG"
    DAEMON_JSON=/etc/docker/daemon.json
    jq -e '.runtimes["gpu-guard"].path' "$DAEMON_JSON" >/dev/null || { fail "daemon.json does not register gpu-guard"; finish; }
    [ "$(jq -r '."default-runtime" // ""' "$DAEMON_JSON")" = gpu-guard ] || RUNTIME_FLAG=(--runtime gpu-guard)
    DOCKERD_ENV=()
else
    # The runtime gpu-guard chains to logs the argv it gets, which is the
    # argv dockerd's shim gave the wrapper (it passes it on unchanged).
    ARGV_LOG="$T/runtime.argv"
    printf '#!/bin/sh\necho "$*" >> %s\nexec runc "$@"\n' "$ARGV_LOG" > "$T/bin/runc-argv"
    chmod +x "$T/bin/runc-argv"
    # docker's own chain (runtime.engines.docker.path), told from the
    # global one by the runtime root dockerd passes, which is under this
    # test's exec-root; and the exception a forged annotation would claim.
    DOCKER_ARGV_LOG="$T/runtime-docker.argv"
    printf '#!/bin/sh\necho "$*" >> %s\nexec runc "$@"\n' "$DOCKER_ARGV_LOG" > "$T/bin/runc-docker"
    chmod +x "$T/bin/runc-docker"
    GG_SYSLOG_SOCKET="$T/log.sock" GG_RUNTIME_PATH="$T/bin/runc-argv" gg_config "$T/cfg.toml" geforce-545
    # /dev/shm and RLIMIT_STACK tuning (tuning.shm_size, tuning.stack).
    sed -i 's/^shm_size = ""/shm_size = "1g"/; s/^stack = ""/stack = 67108864/' "$T/cfg.toml"
    start_syslog "$T/log.sock" "$T/log.txt"
    mkdir -p "$T/config.d"
    printf '[runtime.engines.docker]\nroot = "%s"\npath = "%s"\n[[security.exceptions]]\nnamespace = "gpu-operator"\nprofile = "docker-default"\nallow_privileged = true\n' \
        "$DROOT/exec/runtime-runc" "$T/bin/runc-docker" > "$T/config.d/40-docker.toml"
    ln -sf "$GG" "$T/bin/gpu-guard-runtime"
    DAEMON_JSON="$T/daemon.json"
    jq -n --arg p "$T/bin/gpu-guard-runtime" '{runtimes: {"gpu-guard": {path: $p}}, "default-runtime": "gpu-guard"}' > "$DAEMON_JSON"
    # containerd's shim inherits dockerd's environment, and so does the runtime.
    DOCKERD_ENV=(GPU_GUARD_CONFIG="$T/cfg.toml")
fi

cleanup() {
    "${D[@]}" rm -f gg-exec >/dev/null 2>&1
    if [ -f "$DROOT/docker.pid" ]; then
        kill "$(cat "$DROOT/docker.pid")" 2>/dev/null
        for _ in $(seq 1 30); do [ -e "$DROOT/docker.pid" ] || break; sleep 0.5; done
    fi
    [ -n "${SYSCFG:-}" ] && cp -p "$T/config.toml.orig" "$SYSCFG"
    umount -R "$DROOT/data" 2>/dev/null
    rm -rf "$DROOT" "$T"
}
trap cleanup EXIT

env "${DOCKERD_ENV[@]}" PATH="$T/bin:$PATH" dockerd --config-file "$DAEMON_JSON" \
    --data-root "$DROOT/data" --exec-root "$DROOT/exec" -H "unix://$SOCK" \
    --pidfile "$DROOT/docker.pid" --bridge none --iptables=false >"$T/dockerd.log" 2>&1 &
for _ in $(seq 1 60); do "${D[@]}" info >/dev/null 2>&1 && break; sleep 0.5; done
"${D[@]}" info >/dev/null 2>&1 || { tail -20 "$T/dockerd.log"; fail "dockerd did not start"; finish; }
check_contains "docker: gpu-guard runtime registered" "$("${D[@]}" info 2>/dev/null)" "gpu-guard"

make_rootfs "$T/rootfs"
import_image() { # NAME ENV...
    local name=$1
    shift
    local changes=()
    for e in "$@"; do changes+=(--change "ENV ${e%%=*}=\"${e#*=}\""); done
    tar -C "$T/rootfs" -c . | "${D[@]}" import "${changes[@]}" - "gg-$name:1" >/dev/null
}
import_image refuse "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE" CUDA_VERSION=12.4.1
import_image allow "NVIDIA_REQUIRE_CUDA=cuda>=12.2" CUDA_DEVICE_MAX_CONNECTIONS=8
import_image plain FOO=bar
SHOW='echo RAN; env; grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status'

OUT=$(timeout 120 "${D[@]}" run --rm "${RUNTIME_FLAG[@]}" --gpus all gg-refuse:1 sh -c "$SHOW" 2>&1)
RC=$?
check_eq "docker: unsatisfied image refused" "$([ $RC -ne 0 ] && echo refused)" refused
check_not_contains "docker: refused container never ran" "$OUT" "RAN"
check_contains "docker: error is gpu-guard's" "$OUT" "OCI runtime create failed: gpu-guard refused container"
check_contains "docker: error names the real cause" "$OUT" "cuda>=12.4: driver 545.23.06 provides CUDA 12.3"
check_contains "docker: error names the fix" "$OUT" "install NVIDIA driver 550.54.14 or newer"

OUT=$(timeout 120 "${D[@]}" run --rm "${RUNTIME_FLAG[@]}" --gpus all gg-allow:1 sh -c "$SHOW" 2>&1)
RC=$?
check_eq "docker: satisfied image runs" "$RC" 0
check_contains "docker: injected CUDA_DEVICE_ORDER" "$OUT" "CUDA_DEVICE_ORDER=PCI_BUS_ID"
check_contains "docker: injected TF_GPU_ALLOCATOR" "$OUT" "TF_GPU_ALLOCATOR=cuda_malloc_async"
check_contains "docker: kept the image's value" "$OUT" "CUDA_DEVICE_MAX_CONNECTIONS=8"
check_caps "docker: CapEff equals the allowlist" "$OUT" CapEff
check_caps "docker: CapBnd equals the allowlist" "$OUT" CapBnd
check_contains "docker: NoNewPrivs is 1" "$OUT" "NoNewPrivs:	1"
check_not_contains "docker: nothing from gpu-guard in the container's output" "$OUT" "gpu-guard"

# --privileged is refused by the shipped policy.
OUT=$(timeout 120 "${D[@]}" run --rm "${RUNTIME_FLAG[@]}" --gpus all --privileged gg-allow:1 true 2>&1)
check_contains "docker: privileged GPU container refused" "$OUT" "the container is privileged"

# docker exec into an allowed container: exec passes through the wrapper untouched.
"${D[@]}" run -d --name gg-exec "${RUNTIME_FLAG[@]}" --gpus all gg-allow:1 sleep 120 >/dev/null 2>&1
OUT=$(timeout 60 "${D[@]}" exec gg-exec sh -c 'echo EXEC-OK; grep -E "^(CapEff|NoNewPrivs)" /proc/self/status' 2>&1)
check_contains "docker: exec works" "$OUT" "EXEC-OK"
OUT2=$(timeout 60 "${D[@]}" exec gg-exec env 2>&1)
check_contains "docker: exec'd process gets the tuning env" "$OUT2" "CUDA_DEVICE_ORDER=PCI_BUS_ID"
check_contains "docker: exec keeps the image's value" "$OUT2" "CUDA_DEVICE_MAX_CONNECTIONS=8"
OUT3=$(timeout 60 "${D[@]}" exec -e CUDA_DEVICE_ORDER=FASTEST_FIRST gg-exec env 2>&1)
check_contains "docker: exec -e value kept" "$OUT3" "CUDA_DEVICE_ORDER=FASTEST_FIRST"
check_not_contains "docker: exec -e value not overridden" "$OUT3" "PCI_BUS_ID"
check_contains "docker: exec'd process has no_new_privileges too" "$OUT" "NoNewPrivs:	1"
check_caps "docker: exec'd process is held to the allowlist too" "$OUT" CapEff
OUT=$(timeout 60 "${D[@]}" exec --privileged gg-exec true 2>&1)
check_contains "docker: privileged exec into a GPU container refused" "$OUT" "the container is privileged"
"${D[@]}" rm -f gg-exec >/dev/null 2>&1

OUT=$(timeout 120 "${D[@]}" run --rm "${RUNTIME_FLAG[@]}" gg-plain:1 sh -c "$SHOW" 2>&1)
RC=$?
check_eq "docker: non-GPU container runs" "$RC" 0
check_not_contains "docker: non-GPU gets no tuning" "$OUT" "CUDA_DEVICE_ORDER"
check_contains "docker: non-GPU keeps docker's no_new_privileges" "$OUT" "NoNewPrivs:	0"
check_caps_not "docker: non-GPU capabilities untouched" "$OUT" CapEff

if [ "${GG_INSTALLED:-0}" != 1 ]; then
    # docker's default IPC mode ("private", dockerd --default-ipc-mode)
    # mounts /dev/shm as the container's own tmpfs (size=64m): raised.
    SHMSHOW='grep " /dev/shm " /proc/mounts; echo STACK=$(ulimit -s) HARD=$(ulimit -Hs)'
    OUT=$(timeout 120 "${D[@]}" run --rm "${RUNTIME_FLAG[@]}" --gpus all gg-allow:1 sh -c "$SHMSHOW" 2>&1)
    check_contains "docker shm: the default private /dev/shm is raised to 1 GiB" "$OUT" "size=1048576k"
    check_contains "docker stack: ulimit -s raised" "$OUT" "STACK=65536 "
    check_contains "docker stack: the inherited hard limit is kept" "$OUT" "HARD=$(ulimit -Hs)"
    # --ipc=shareable: docker bind-mounts a per-container /dev/shm it sizes
    # itself (--shm-size, 64 MiB by default) that other containers may
    # join: never changed, a warning while --shm-size is left small.
    : > "$T/log.txt"
    OUT=$(timeout 120 "${D[@]}" run --rm "${RUNTIME_FLAG[@]}" --gpus all --ipc=shareable gg-allow:1 sh -c "$SHMSHOW" 2>&1)
    check_contains "docker shm: a shareable /dev/shm is left as it is" "$OUT" "size=65536k"
    sleep 0.3
    check_contains "docker shm: --shm-size left small gives the warning" "$(cat "$T/log.txt")" "/dev/shm is 64 MiB (a bind mount of"
    # The log line carries the message; the fix is the decision's (check --json).
    check_contains "docker shm: the warning names docker's shm" "$(cat "$T/log.txt")" "/mounts/shm), smaller than"
    : > "$T/log.txt"
    OUT=$(timeout 120 "${D[@]}" run --rm "${RUNTIME_FLAG[@]}" --gpus all --ipc=shareable --shm-size=2g gg-allow:1 sh -c "$SHMSHOW" 2>&1)
    check_contains "docker shm: --shm-size=2g is kept" "$OUT" "size=2097152k"
    sleep 0.3
    check_not_contains "docker shm: no warning with --shm-size=2g" "$(cat "$T/log.txt")" "smaller than tuning.shm_size"
    # A /dev/shm the container mounts as its own tmpfs is raised.
    OUT=$(timeout 120 "${D[@]}" run --rm "${RUNTIME_FLAG[@]}" --gpus all --tmpfs /dev/shm:size=64m gg-allow:1 sh -c "$SHMSHOW" 2>&1)
    check_contains "docker shm: a tmpfs /dev/shm of its own is raised to 1 GiB" "$OUT" "size=1048576k"
    OUT=$(timeout 120 "${D[@]}" run --rm "${RUNTIME_FLAG[@]}" --tmpfs /dev/shm:size=64m gg-plain:1 sh -c "$SHMSHOW" 2>&1)
    check_contains "docker shm: non-GPU tmpfs /dev/shm stays 64 MiB" "$OUT" "size=65536k"
fi

# The runtime root dockerd passes the wrapper (what tells the wrapper docker
# invoked it: runtime.engines.docker.root): <exec-root>/runtime-runc/<namespace
# moby>, for every runtime of daemon.json (moby daemon/runtime_unix.go).
if [ -n "${ARGV_LOG:-}" ]; then
    # The chain that ran is docker's own (runtime.engines.docker.path).
    CREATE=$(grep -m1 -E '(^| )create ' "$DOCKER_ARGV_LOG")
    echo "NOTE docker's wrapper argv: $CREATE"
    check_contains "docker: the wrapper gets --root <exec-root>/runtime-runc/moby" \
        "$CREATE" "--root $DROOT/exec/runtime-runc/moby "
    check_contains "docker: then --log, --log-format json, create --bundle" "$CREATE" \
        "--log-format json create --bundle "
    check_eq "docker: the wrapper execs docker's own chain, not the global one" \
        "$(grep -c -E '(^| )create ' "$ARGV_LOG" 2>/dev/null || true)" 0
fi

# Forged CRI annotations: under docker no exception matches,
# whatever the spec says: the runtime root is docker's.
if [ -n "${ARGV_LOG:-}" ]; then
    FORGE=(--annotation io.kubernetes.cri.container-type=container --annotation io.kubernetes.cri.sandbox-namespace=gpu-operator)
    OUT=$(timeout 120 "${D[@]}" run --rm "${FORGE[@]}" --privileged --gpus all gg-allow:1 sh -c 'echo RAN' 2>&1)
    if printf '%s' "$OUT" | grep -qi "api version\|unknown flag"; then
        echo "NOTE docker: this dockerd cannot set annotations ($(printf '%s' "$OUT" | head -n 1)); tests/test_hooks/wrapper_engines.rs runs the wrapper with docker's argv and forged keys instead"
    else
        check_not_contains "docker: forged annotations: the privileged container never ran" "$OUT" "RAN"
        check_contains "docker: forged annotations select no exception" "$OUT" "the container is privileged"
        OUT=$(timeout 120 "${D[@]}" run --rm "${FORGE[@]}" --cap-add NET_RAW --gpus all gg-allow:1 sh -c "$SHOW" 2>&1)
        check_contains "docker: forged annotations: the GPU container runs" "$OUT" "RAN"
        check_caps "docker: forged annotations: --cap-add NET_RAW does not survive" "$OUT" CapEff
    fi
fi

finish
