#!/usr/bin/env bash
# gpu-guard under real podman (runtime runc) through hooks.d: the precreate
# hook edits, the prestart hook verifies. Three outcomes: refused with our
# diagnosis, started with its edits, non-GPU untouched; and /dev/shm and
# stack tuning (podman's bind-mounted /dev/shm warned about, a tmpfs one raised).
#
# GG_INSTALLED=1 (the package test): use the hook files the package and
# `gpu-guard install podman` put in the system hooks directories, and the
# installed /etc/gpu-guard/config.toml (temporarily pointed at a test host
# profile; restored at exit).
. "$(dirname "$0")/lib.sh"

need_root
need_cmd podman runc jq python3
[ -x "$GG" ] || skip_or_fail "gpu-guard binary $GG not built"
need_capset

new_scratch
PODMAN=(podman --runtime runc)
RUNOPTS=(--rm --ulimit nofile=10000:10000 --ulimit nproc=1000:1000)

# NVIDIA's toolkit gives podman GPUs through its hooks.d file
# (oci-nvidia-hook.json: nvidia-container-toolkit prestart, always): a
# stand-in of it here, so the images' GPU requests count as they do on a
# GPU host. podman adds hooks.d prestart hooks before it runs precreate.
mkdir -p "$T/nvidia-hooks.d"
jq -n --arg h "$INTEGRATION_DIR/stand-in/nvidia-container-toolkit" '{
    version: "1.0.0",
    hook: {path: $h, args: ["nvidia-container-toolkit", "prestart"]},
    when: {always: true},
    stages: ["prestart"]}' > "$T/nvidia-hooks.d/oci-nvidia-hook.json"
if [ "${GG_INSTALLED:-0}" = 1 ]; then
    SYSCFG=/etc/gpu-guard/config.toml
    cp -p "$SYSCFG" "$T/config.toml.orig"
    gg_config "$T/cfg.toml" geforce-545
    cp "$T/cfg.toml" "$SYSCFG"
    ls /etc/containers/oci/hooks.d/ /usr/share/containers/oci/hooks.d/ 2>/dev/null
    # --hooks-dir replaces podman's list: name the system directories too.
    PODMAN+=(--hooks-dir /usr/share/containers/oci/hooks.d --hooks-dir /etc/containers/oci/hooks.d)
else
    GG_SYSLOG_SOCKET="$T/log.sock" gg_config "$T/cfg.toml" geforce-545
    # /dev/shm and RLIMIT_STACK tuning (tuning.shm_size, tuning.stack).
    sed -i 's/^shm_size = ""/shm_size = "1g"/; s/^stack = ""/stack = 67108864/' "$T/cfg.toml"
    start_syslog "$T/log.sock" "$T/log.txt"
    mkdir -p "$T/hooks.d"
    for stage in precreate prestart; do
        jq -n --arg gg "$GG" --arg cfg "$T/cfg.toml" --arg stage "$stage" '{
            version: "1.0.0",
            hook: {path: $gg, args: ["gpu-guard", "--config", $cfg, "hook", $stage]},
            when: {always: true},
            stages: [$stage]}' > "$T/hooks.d/gpu-guard-$stage.json"
    done
    PODMAN+=(--hooks-dir "$T/hooks.d")
fi
PODMAN+=(--hooks-dir "$T/nvidia-hooks.d")

make_rootfs "$T/rootfs"
TAG=gg-it-$$
import_image() { # NAME ENV-LINES...
    local name=$1
    shift
    local changes=()
    for e in "$@"; do changes+=(--change "ENV ${e%%=*}=\"${e#*=}\""); done
    tar -C "$T/rootfs" -c . | podman import "${changes[@]}" - "localhost/$TAG-$name:1" >/dev/null 2>&1
}
cleanup_images() { podman rmi -f "localhost/$TAG-refuse:1" "localhost/$TAG-allow:1" "localhost/$TAG-plain:1" >/dev/null 2>&1; }
trap 'cleanup_images; [ -n "${SYSCFG:-}" ] && cp -p "$T/config.toml.orig" "$SYSCFG"; rm -rf "$T"' EXIT
import_image refuse NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE" CUDA_VERSION=12.4.1
import_image allow NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.2" CUDA_DEVICE_MAX_CONNECTIONS=8
import_image plain FOO=bar
SHOW='echo RAN; env; grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status'

OUT=$(timeout 120 "${PODMAN[@]}" run "${RUNOPTS[@]}" "localhost/$TAG-refuse:1" sh -c "$SHOW" 2>&1)
RC=$?
check_eq "podman: unsatisfied image refused" "$([ $RC -ne 0 ] && echo refused)" refused
check_not_contains "podman: refused container never ran" "$OUT" "RAN"
check_contains "podman: error shows gpu-guard's diagnosis" "$OUT" "cuda>=12.4: driver 545.23.06 provides CUDA 12.3"
check_contains "podman: diagnosis has the fix" "$OUT" "install NVIDIA driver 550.54.14 or newer"

OUT=$(timeout 120 "${PODMAN[@]}" run "${RUNOPTS[@]}" "localhost/$TAG-allow:1" sh -c "$SHOW" 2>&1)
RC=$?
check_eq "podman: satisfied image runs" "$RC" 0
check_contains "podman: injected CUDA_DEVICE_ORDER" "$OUT" "CUDA_DEVICE_ORDER=PCI_BUS_ID"
check_contains "podman: injected PYTORCH_CUDA_ALLOC_CONF" "$OUT" "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
check_contains "podman: kept the image's value" "$OUT" "CUDA_DEVICE_MAX_CONNECTIONS=8"
check_caps "podman: CapEff equals the allowlist" "$OUT" CapEff
check_caps "podman: CapBnd equals the allowlist" "$OUT" CapBnd
check_contains "podman: NoNewPrivs is 1" "$OUT" "NoNewPrivs:	1"

# A user's --cap-add cannot loosen the policy; a user's -e wins over tuning.
OUT=$(timeout 120 "${PODMAN[@]}" run "${RUNOPTS[@]}" --cap-add NET_ADMIN -e CUDA_DEVICE_ORDER=FASTEST_FIRST "localhost/$TAG-allow:1" sh -c "$SHOW" 2>&1)
check_caps "podman: --cap-add does not widen the allowlist" "$OUT" CapBnd
check_contains "podman: user -e value kept" "$OUT" "CUDA_DEVICE_ORDER=FASTEST_FIRST"

# Forged CRI annotations: the hooks have no evidence of which
# engine made the container (podman writes CRI-O's ContainerType itself),
# so no exception matches whatever the annotations say.
if [ "${GG_INSTALLED:-0}" != 1 ]; then
    mkdir -p "$T/config.d"
    printf '[[security.exceptions]]\nnamespace = "gpu-operator"\nprofile = "docker-default"\nallow_privileged = true\n' > "$T/config.d/40-exceptions.toml"
    # containerd's keys, as in `docker run --annotation ...`; CRI-O's below.
    FORGE=(--annotation io.kubernetes.cri.container-type=container --annotation io.kubernetes.cri.sandbox-namespace=gpu-operator)
    FORGE_CRIO=(--annotation io.kubernetes.cri-o.ContainerType=container --annotation io.kubernetes.pod.namespace=gpu-operator)
    OUT=$(timeout 120 "${PODMAN[@]}" run "${RUNOPTS[@]}" "${FORGE[@]}" --privileged "localhost/$TAG-allow:1" sh -c "$SHOW" 2>&1)
    # gpu-guard calls a container privileged when its bounding set is every
    # capability; podman gives --privileged the host's own set, which is
    # that only on a host that has them all.
    FULL=$(printf '%x' $(( (1 << ($(cat /proc/sys/kernel/cap_last_cap) + 1)) - 1 )))
    if [ "$(sed -n 's/^CapBnd:[[:space:]]*0*//p' /proc/self/status)" = "$FULL" ]; then
        check_not_contains "podman: forged annotations: the privileged container never ran" "$OUT" "RAN"
        check_contains "podman: forged annotations select no exception" "$OUT" "the container is privileged"
    else
        echo "NOTE podman: this host's bounding set is not every capability, so --privileged is not privileged to gpu-guard: it must get the default profile, not the exception's"
        check_caps "podman: forged annotations: --privileged gets the default profile" "$OUT" CapEff
    fi
    for keys in containerd crio; do
        if [ $keys = containerd ]; then F=("${FORGE[@]}"); else F=("${FORGE_CRIO[@]}"); fi
        OUT=$(timeout 120 "${PODMAN[@]}" run "${RUNOPTS[@]}" "${F[@]}" --cap-add NET_RAW "localhost/$TAG-allow:1" sh -c "$SHOW" 2>&1)
        check_contains "podman: forged $keys annotations: the GPU container runs" "$OUT" "RAN"
        check_caps "podman: forged $keys annotations: --cap-add NET_RAW does not survive" "$OUT" CapEff
    done
    rm -f "$T/config.d/40-exceptions.toml"
fi

OUT=$(timeout 120 "${PODMAN[@]}" run "${RUNOPTS[@]}" "localhost/$TAG-plain:1" sh -c "$SHOW" 2>&1)
RC=$?
check_eq "podman: non-GPU container runs" "$RC" 0
check_not_contains "podman: non-GPU gets no tuning" "$OUT" "CUDA_DEVICE_ORDER"
check_contains "podman: non-GPU keeps no_new_privileges as podman set it" "$OUT" "NoNewPrivs:	0"
check_caps_not "podman: non-GPU capabilities untouched" "$OUT" CapEff

if [ "${GG_INSTALLED:-0}" != 1 ]; then
    # podman (4.3, Debian 12) bind-mounts its own per-container /dev/shm
    # (userdata/shm, 64000k by default) with or without --ipc=private: the
    # precreate hook leaves it alone and warns. A /dev/shm
    # the container mounts as its own tmpfs is raised; the stack too.
    SHMSHOW='grep " /dev/shm " /proc/mounts; echo STACK=$(ulimit -s) HARD=$(ulimit -Hs)'
    : > "$T/log.txt"
    OUT=$(timeout 120 "${PODMAN[@]}" run "${RUNOPTS[@]}" "localhost/$TAG-allow:1" sh -c "$SHMSHOW" 2>&1)
    check_contains "podman shm: podman's bind-mounted /dev/shm is left as it is" "$OUT" "size=64000k"
    check_contains "podman stack: ulimit -s raised by the precreate hook" "$OUT" "STACK=65536 "
    check_contains "podman stack: the inherited hard limit is kept" "$OUT" "HARD=$(ulimit -Hs)"
    sleep 0.3
    check_contains "podman shm: a warning for podman's small /dev/shm" "$(cat "$T/log.txt")" "smaller than tuning.shm_size (1 GiB)"
    # The log line carries the message; the fix is the decision's (check --json).
    check_contains "podman shm: the warning names podman's shm" "$(cat "$T/log.txt")" "/userdata/shm), smaller than"
    OUT=$(timeout 120 "${PODMAN[@]}" run "${RUNOPTS[@]}" --tmpfs /dev/shm:size=64m "localhost/$TAG-allow:1" sh -c "$SHMSHOW" 2>&1)
    check_contains "podman shm: a tmpfs /dev/shm of its own is raised to 1 GiB" "$OUT" "size=1048576k"
    # --shm-size as large as the policy: no warning.
    : > "$T/log.txt"
    OUT=$(timeout 120 "${PODMAN[@]}" run "${RUNOPTS[@]}" --shm-size=1g "localhost/$TAG-allow:1" sh -c "$SHMSHOW" 2>&1)
    check_contains "podman shm: --shm-size=1g is kept" "$OUT" "size=1048576k"
    sleep 0.3
    check_not_contains "podman shm: no warning with --shm-size=1g" "$(cat "$T/log.txt")" "smaller than tuning.shm_size"
    # A non-GPU container: nothing changes.
    OUT=$(timeout 120 "${PODMAN[@]}" run "${RUNOPTS[@]}" --tmpfs /dev/shm:size=64m "localhost/$TAG-plain:1" sh -c "$SHMSHOW" 2>&1)
    check_contains "podman shm: non-GPU tmpfs /dev/shm stays 64 MiB" "$OUT" "size=65536k"
    check_contains "podman stack: non-GPU stack as inherited" "$OUT" "STACK=$(ulimit -s) "
fi

finish
