#!/usr/bin/env bash
# gpu-guard under containerd's CRI, driven like kubelet drives it, without a
# cluster: a private containerd (own root, state and socket under a scratch
# dir, no systemd, stopped on exit) on a config that `gpu-guard install
# containerd` edited, pods started with RunPodSandbox(runtime_handler =
# "gpu-guard", host network) + CreateContainer + StartContainer from a
# Python client whose stubs are generated now from the k8s-cri crate's
# api.proto. gpu-guard chains to a stand-in nvidia-container-runtime that
# logs its argv and execs runc, as NVIDIA's runtime sits behind it on a node.
#
# Checks:
#   install: config versions 1 and 2 (what containerd 1.6 reads) load the
#     handler (CRI Status lists it with its BinaryName) and a pod runs on it;
#   a. the pause container passes untouched (the chained runtime sees two
#      creates per pod; the pause's config.json gets no edits);
#   b. a GPU pod whose image needs CUDA 13.0 on a 535/12.2 host fails at
#      StartContainer with gpu-guard's diagnosis in the gRPC error;
#   c. an allowed GPU pod gets the tuning env, the capability allowlist and
#      NoNewPrivs, in its main process and in ExecSync'd processes, and a
#      `runc exec --process` process keeps its own value of a tuning variable;
#   d. a non-GPU pod keeps containerd's defaults (same as handler runc);
#   e. a GPU pod asking for less (drop ALL, no_new_privs) keeps asking for less;
#   f. a pod with a CDI annotation nvidia.com/gpu=0 is a GPU pod, and
#      install gave gpu-guard's runtime container_annotations cdi.k8s.io/*;
#      the node's CDI spec is read: one left from the previous driver
#      refuses the pod with `nvidia-ctk cdi generate`;
#   g. scoped exceptions (a config.d drop-in beside gg.toml; default
#      profile "restricted", namespace gpu-operator exempt): a root GPU pod
#      in the exempt namespace starts with the exception's profile, the
#      same pod in namespace default is refused with a diagnosis naming
#      [[security.exceptions]]; a pod in "default" that sets
#      io.kubernetes.cri.sandbox-namespace: gpu-operator in its own
#      annotations (pod and container) is still refused, and its spec says
#      "default" (containerd writes its own value over it); the same with
#      privileged pods where the host's bounding set is every capability;
#   h. chaining: install over a config whose default runtime is NVIDIA's
#      writes config.d/50-chain-containerd.toml ([runtime.engines.containerd]
#      path) beside the gpu-guard config, reinstall is a no-op, uninstall
#      removes it;
#   i. NVIDIA's drop-in (conf.d/99-nvidia.toml holding the whole CRI section,
#      as the GPU Operator and `nvidia-ctk runtime configure --drop-in-config`
#      write it): after `install --set-default`, a pod with no runtime handler
#      runs through gpu-guard's runtime (containerd's merged default), seen
#      by the root it passes.
# Throughout, install registers the runtime with options.Root from the
# gpu-guard config (runtime.engines.containerd.root, here under the scratch
# dir), and the wrapper's argv is checked to carry --root ROOT/k8s.io.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/cri_lib.sh"

cri_need
new_scratch
CUR=
cleanup() {
    [ -n "$CUR" ] && cri_stop "$CUR"
    [ "${KEEP_SCRATCH:-0}" = 1 ] || rm -rf "$T"
}
trap cleanup EXIT

cri_stubs "$T/stubs"
cri_images "$T/img" || skip_or_fail "cannot build the test images"

# The binaries as a node has them, and the stand-in NVIDIA runtime.
mkdir -p "$T/bin"
ln -sf "$GG" "$T/bin/gpu-guard"
ln -sf gpu-guard "$T/bin/gpu-guard-runtime"
ARGV_LOG="$T/nvidia-runtime.argv"
cat > "$T/bin/nvidia-container-runtime" <<EOF
#!/bin/sh
echo "\$*" >> "$ARGV_LOG"
exec runc "\$@"
EOF
chmod +x "$T/bin/nvidia-container-runtime"
GG_SYSLOG=false GG_RUNTIME_PATH="$T/bin/nvidia-container-runtime" gg_config "$T/gg.toml" tesla-535
# The node's CDI specs (host.cdi_spec_dirs), in this test's own directory:
# a spec as `nvidia-ctk cdi generate` writes it for the running driver
# (tesla-535: 535.104.05), whose driver library exists on this "host".
mkdir -p "$T/cdi" "$T/driver"
: > "$T/driver/libcuda.so.535.104.05"
cdi_spec() { # DRIVER_VERSION: the spec written for that driver
    cat > "$T/cdi/nvidia.yaml" <<EOF
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      type: c
      major: 195
      minor: 0
containerEdits:
  mounts:
  - hostPath: $T/driver/libcuda.so.$1
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.$1
    options: [ro, nosuid, nodev, bind]
EOF
}
cdi_spec 535.104.05
sed -i "s|^cdi_spec_dirs = .*|cdi_spec_dirs = [\"$T/cdi\"]|" "$T/gg.toml"

# Capability names of a /proc/PID/status mask, numbered as the kernel
# headers number them (linux-libc-dev), sorted, space-separated.
capnames() {
    python3 - "$1" <<'PY'
import re, sys
if not sys.argv[1]:
    sys.exit(print("(no capability mask read)"))
mask = int(sys.argv[1], 16)
nums = {}
for line in open("/usr/include/linux/capability.h"):
    m = re.match(r"#define\s+(CAP_[A-Z_]+)\s+(\d+)\s*$", line)
    if m:
        nums[int(m.group(2))] = m.group(1)
names = [nums.get(b, "CAP_%d" % b) for b in range(64) if mask >> b & 1]
print(" ".join(sorted(names)))
PY
}
ALLOW_SORTED=$(printf '%s\n' $ALLOWLIST_CAPS | sort | tr '\n' ' ' | sed 's/ $//')
[ -f /usr/include/linux/capability.h ] || skip_or_fail "/usr/include/linux/capability.h missing (apt-get install linux-libc-dev)"

field() { printf '%s\n' "$1" | sed -n "s/^$2:[[:space:]]*//p" | head -1; }
cexec() { local c=$1; shift; cri exec "$c" -- "$@"; }
jget() { printf '%s' "$1" | jq -r "$2"; }

# start_instance VERSION: a private containerd on a version-VERSION config
# with gpu-guard installed; sets CUR.
start_instance() {
    local v=$1 dir="$T/v$1"
    mkdir -p "$dir"
    cri_base_config "$dir/containerd.toml" "$v" "$dir"
    # No CDI pass-through on runc here: install must add it to gpu-guard's
    # runtime (f checks a CDI pod is seen as one).
    sed -i '/container_annotations/d' "$dir/containerd.toml"
    cp "$dir/containerd.toml" "$dir/base.toml"
    local out
    out=$("$GG" --config "$T/gg.toml" install containerd --config-path "$dir/containerd.toml" \
        --bin-dir "$T/bin" --state-dir "$dir/gg-state" 2>&1)
    check_contains "install v$v: config updated" "$out" "updated $dir/containerd.toml"
    CUR=$dir
    if ! cri_start "$dir" "$dir/containerd.toml" "$T/gg.toml"; then
        fail "install v$v: containerd does not start on the installed config"
        finish
    fi
    cri_import "$T/img" || { fail "install v$v: image import"; finish; }
    local st
    st=$(cri status)
    check_eq "install v$v: CRI runtime ready" "$(jget "$st" '.conditions.RuntimeReady')" true
    check_eq "install v$v: CRI lists handler gpu-guard with its BinaryName" \
        "$(jget "$st" '.info.config.containerd.runtimes["gpu-guard"].options.BinaryName')" "$T/bin/gpu-guard-runtime"
    check_eq "install v$v: handler gpu-guard is runc.v2" \
        "$(jget "$st" '.info.config.containerd.runtimes["gpu-guard"].runtimeType')" io.containerd.runc.v2
    check_eq "install v$v: handler gpu-guard has the engine's runtime root" \
        "$(jget "$st" '.info.config.containerd.runtimes["gpu-guard"].options.Root')" "$CTD_ROOT"
}

stop_instance() { cri_stop "$CUR"; CUR=; }

# pause_pod_checks VERSION: (a) on this instance.
pause_pod_checks() {
    local v=$1 r sid cid
    r=$(cri pod --name plain-v$v --handler gpu-guard --image localhost/gg-busybox:1 -- sleep 1000)
    check_eq "v$v a: pod with handler gpu-guard starts" "$(jget "$r" .ok)" true
    sid=$(jget "$r" .sandbox)
    cid=$(jget "$r" .container)
    check_eq "v$v a: the chained runtime saw the pause create" \
        "$(grep -c " create .* $sid\$" "$ARGV_LOG")" 1
    check_eq "v$v a: the chained runtime saw the workload create" \
        "$(grep -c " create .* $cid\$" "$ARGV_LOG")" 1
    local line
    line=$(grep -m1 " create .* $cid\$" "$ARGV_LOG")
    echo "NOTE v$v containerd's wrapper argv: $line"
    check_contains "v$v a: the wrapper gets --root <options.Root>/<namespace>" "$line" "--root $CTD_ROOT/k8s.io "
    check_contains "v$v a: then --log, --log-format json, create --bundle" "$line" "--log-format json create --bundle "
    check_eq "v$v a: docker's chain never ran for containerd's pods" "$(cat "$DOCKER_CHAIN_LOG" 2>/dev/null | wc -l)" 0
    local pcfg="$CUR/state/io.containerd.runtime.v2.task/k8s.io/$sid/config.json"
    check_eq "v$v a: pause config.json has no tuning env" \
        "$(jq -r '[.process.env[] | select(startswith("CUDA_"))] | length' "$pcfg" 2>/dev/null)" 0
    check_not_contains "v$v a: no gpu-guard decision for the pause" \
        "$(cat "$CUR/state/io.containerd.runtime.v2.task/k8s.io/$sid/log.json" 2>/dev/null)" "gpu-guard"
}

# The runtime root install gives gpu-guard's runtime (options.Root), from
# the gpu-guard config; private to this test (the default is under /run).
mkdir -p "$T/config.d"
CTD_ROOT="$T/ctd-root"
# docker's chain is another runtime: containerd's pods must
# never reach it, only the global chain (the stand-in NVIDIA runtime).
DOCKER_CHAIN_LOG="$T/docker-chain.argv"
printf '#!/bin/sh\necho "$*" >> %s\nexec runc "$@"\n' "$DOCKER_CHAIN_LOG" > "$T/bin/runc-docker-only"
chmod +x "$T/bin/runc-docker-only"
printf '[runtime.engines.containerd]\nroot = "%s"\n[runtime.engines.docker]\npath = "%s"\n' "$CTD_ROOT" "$T/bin/runc-docker-only" \
    > "$T/config.d/40-engine-roots.toml"

# ---- config version 1: install + handler loaded + (a)
start_instance 1
pause_pod_checks 1
stop_instance

# ---- config version 2: install + everything else
start_instance 2
pause_pod_checks 2

# b. refused at StartContainer with the diagnosis.
r=$(cri pod --name refuse --handler gpu-guard --image localhost/gg-cuda13:1 --env NVIDIA_VISIBLE_DEVICES=all -- sleep 1000)
check_eq "b: GPU pod needing CUDA 13.0 is refused" "$(jget "$r" .ok)" false
check_eq "b: refusal shows at StartContainer" "$(jget "$r" .stage)" StartContainer
ERR=$(jget "$r" .error)
check_contains "b: error is the runtime's create failure" "$ERR" "OCI runtime create failed: gpu-guard refused container"
check_contains "b: error names the failed clause and host value" "$ERR" "cuda>=13.0"
check_contains "b: error names the host driver" "$ERR" "535.104.05"
check_eq "b: the chained runtime never created it" "$(grep -c " create .* $(jget "$r" .container)\$" "$ARGV_LOG")" 0
printf '\n--- what kubelet gets from StartContainer (kubectl describe pod shows it):\n%s\n---\n\n' "$ERR"

# c. allowed GPU pod: main process and exec'd processes.
MAINCMD='tr "\0" "\n" < /proc/1/environ; grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/1/status'
SELFCMD='env; grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status'
r=$(cri pod --name gpu --handler gpu-guard --image localhost/gg-busybox:1 \
    --env NVIDIA_VISIBLE_DEVICES=all --env CUDA_DEVICE_MAX_CONNECTIONS=8 -- sleep 1000)
check_eq "c: allowed GPU pod starts" "$(jget "$r" .ok)" true
GPU_CID=$(jget "$r" .container)
M=$(jget "$(cexec "$GPU_CID" sh -c "$MAINCMD")" .stdout)
check_contains "c: main process got CUDA_DEVICE_ORDER" "$M" "CUDA_DEVICE_ORDER=PCI_BUS_ID"
check_contains "c: main process got TF_GPU_ALLOCATOR" "$M" "TF_GPU_ALLOCATOR=cuda_malloc_async"
check_contains "c: main process kept the pod's CUDA_DEVICE_MAX_CONNECTIONS" "$M" "CUDA_DEVICE_MAX_CONNECTIONS=8"
check_not_contains "c: main process: pod's value not overridden" "$M" "CUDA_DEVICE_MAX_CONNECTIONS=32"
check_eq "c: main CapEff is the allowlist" "$(capnames "$(field "$M" CapEff)")" "$ALLOW_SORTED"
check_eq "c: main CapBnd is the allowlist" "$(capnames "$(field "$M" CapBnd)")" "$ALLOW_SORTED"
check_eq "c: main NoNewPrivs" "$(field "$M" NoNewPrivs)" 1
E=$(jget "$(cexec "$GPU_CID" sh -c "$SELFCMD")" .stdout)
check_contains "c: ExecSync process got CUDA_DEVICE_ORDER" "$E" "CUDA_DEVICE_ORDER=PCI_BUS_ID"
check_contains "c: ExecSync process got TF_GPU_ALLOCATOR" "$E" "TF_GPU_ALLOCATOR=cuda_malloc_async"
check_contains "c: ExecSync process kept CUDA_DEVICE_MAX_CONNECTIONS=8" "$E" "CUDA_DEVICE_MAX_CONNECTIONS=8"
check_not_contains "c: ExecSync process: not overridden" "$E" "CUDA_DEVICE_MAX_CONNECTIONS=32"
check_eq "c: ExecSync CapEff is the allowlist" "$(capnames "$(field "$E" CapEff)")" "$ALLOW_SORTED"
check_eq "c: ExecSync NoNewPrivs" "$(field "$E" NoNewPrivs)" 1
# runc exec --process FILE (what docker exec and the shim run), straight at
# the wrapper: a variable the exec process sets keeps its value.
jq -n '{terminal: false, user: {uid: 0, gid: 0}, cwd: "/", args: ["sh", "-c", "env"],
        env: ["PATH=/bin", "CUDA_DEVICE_ORDER=FASTEST_FIRST"],
        capabilities: {bounding: ["CAP_CHOWN"], effective: ["CAP_CHOWN"], permitted: ["CAP_CHOWN"]}}' > "$T/process.json"
X=$(GPU_GUARD_CONFIG="$T/gg.toml" timeout 30 "$T/bin/gpu-guard-runtime" --root "$CTD_ROOT/k8s.io" \
    exec --process "$T/process.json" "$GPU_CID" 2>&1)
check_contains "c: runc exec --process: own CUDA_DEVICE_ORDER kept" "$X" "CUDA_DEVICE_ORDER=FASTEST_FIRST"
check_not_contains "c: runc exec --process: not overridden" "$X" "CUDA_DEVICE_ORDER=PCI_BUS_ID"
check_contains "c: runc exec --process: other tuning added" "$X" "TF_GPU_ALLOCATOR=cuda_malloc_async"

# d. non-GPU pod: containerd's defaults, the same as under handler runc.
r=$(cri pod --name cpu --handler gpu-guard --image localhost/gg-busybox:1 -- sleep 1000)
check_eq "d: non-GPU pod starts" "$(jget "$r" .ok)" true
D=$(jget "$(cexec "$(jget "$r" .container)" sh -c "$MAINCMD")" .stdout)
r=$(cri pod --name cpu-runc --handler runc --image localhost/gg-busybox:1 -- sleep 1000)
check_eq "d: the same pod under handler runc starts" "$(jget "$r" .ok)" true
DR=$(jget "$(cexec "$(jget "$r" .container)" sh -c "$MAINCMD")" .stdout)
check_not_contains "d: non-GPU pod gets no tuning" "$D" "CUDA_DEVICE_ORDER"
check_eq "d: non-GPU NoNewPrivs stays 0" "$(field "$D" NoNewPrivs)" 0
check_eq "d: non-GPU CapEff is containerd's default (as under runc)" \
    "$(capnames "$(field "$D" CapEff)")" "$(capnames "$(field "$DR" CapEff)")"
check_contains "d: containerd's default keeps CAP_NET_RAW" "$(capnames "$(field "$D" CapEff)")" "CAP_NET_RAW"

# e. a GPU pod that asks for less keeps asking for less.
r=$(cri pod --name gpu-less --handler gpu-guard --image localhost/gg-busybox:1 \
    --env NVIDIA_VISIBLE_DEVICES=all --drop-all --nnp -- sleep 1000)
check_eq "e: GPU pod dropping ALL starts" "$(jget "$r" .ok)" true
L=$(jget "$(cexec "$(jget "$r" .container)" sh -c "$MAINCMD")" .stdout)
check_eq "e: CapEff stays empty" "$(capnames "$(field "$L" CapEff)")" ""
check_eq "e: CapBnd stays empty" "$(capnames "$(field "$L" CapBnd)")" ""
check_eq "e: NoNewPrivs stays 1" "$(field "$L" NoNewPrivs)" 1
check_contains "e: still tuned" "$L" "CUDA_DEVICE_ORDER=PCI_BUS_ID"

# f. CDI annotation (what the NVIDIA device plugin's cdi-annotations
# strategy returns; kubelet puts it on the container).
CDI='cdi.k8s.io/nvidia-device-plugin_main=nvidia.com/gpu=0'
r=$(cri pod --name cdi --handler gpu-guard --image localhost/gg-busybox:1 --annotation "$CDI" -- sleep 1000)
check_eq "f: CDI GPU pod starts" "$(jget "$r" .ok)" true
F=$(jget "$(cexec "$(jget "$r" .container)" sh -c "$MAINCMD")" .stdout)
check_contains "f: CDI pod is tuned as a GPU pod" "$F" "CUDA_DEVICE_ORDER=PCI_BUS_ID"
check_eq "f: CDI pod gets NoNewPrivs" "$(field "$F" NoNewPrivs)" 1
check_eq "f: CDI pod CapEff is the allowlist" "$(capnames "$(field "$F" CapEff)")" "$ALLOW_SORTED"
r=$(cri pod --name cdi-refuse --handler gpu-guard --image localhost/gg-cuda13:1 --annotation "$CDI" -- sleep 1000)
check_eq "f: CDI pod needing CUDA 13.0 refused at StartContainer" "$(jget "$r" .ok)/$(jget "$r" .stage)" false/StartContainer
check_contains "f: CDI refusal is gpu-guard's" "$(jget "$r" .error)" "gpu-guard refused container"
# The driver upgraded, the spec not regenerated: it mounts the previous
# driver's library, and the pod is refused with the command that fixes it.
cdi_spec 535.54.03
r=$(cri pod --name cdi-stale --handler gpu-guard --image localhost/gg-busybox:1 --annotation "$CDI" -- sleep 1000)
check_eq "f: CDI pod with a stale spec refused at StartContainer" "$(jget "$r" .ok)/$(jget "$r" .stage)" false/StartContainer
check_contains "f: the stale spec's refusal names the regeneration" "$(jget "$r" .error)" "nvidia-ctk cdi generate --output=$T/cdi/nvidia.yaml"
cdi_spec 535.104.05
check_eq "f: install passes CDI annotations through for handler gpu-guard" \
    "$(jget "$(cri status)" '.info.config.containerd.runtimes["gpu-guard"] | any(.. | strings; . == "cdi.k8s.io/*")')" true

# g. scoped exceptions, chosen by what containerd records (gpu-guard reads
# config.d beside $T/gg.toml at every container start). The default
# profile becomes "restricted" (uid 0 refused); namespace gpu-operator is
# exempt with docker-default.
mkdir -p "$T/config.d"
EXC='[[security.exceptions]]\nnamespace = "gpu-operator"\nprofile = "docker-default"\nallow_privileged = true\n'
printf "[security]\nprofile = \"restricted\"\n$EXC" > "$T/config.d/60-exceptions.toml"
DOCKER_SORTED=$(printf '%s\n' CAP_CHOWN CAP_DAC_OVERRIDE CAP_FSETID CAP_FOWNER CAP_MKNOD CAP_NET_RAW CAP_SETGID \
    CAP_SETUID CAP_SETFCAP CAP_SETPCAP CAP_NET_BIND_SERVICE CAP_SYS_CHROOT CAP_KILL CAP_AUDIT_WRITE | sort | tr '\n' ' ' | sed 's/ $//')
r=$(cri pod --name op-toolkit --namespace gpu-operator --handler gpu-guard \
    --image localhost/gg-busybox:1 --env NVIDIA_VISIBLE_DEVICES=all -- sleep 1000)
check_eq "g: root GPU pod in the exempt namespace starts" "$(jget "$r" .ok)" true
G=$(jget "$(cexec "$(jget "$r" .container)" sh -c "$MAINCMD")" .stdout)
check_eq "g: exempt pod's CapEff is the exception's profile (docker-default)" \
    "$(capnames "$(field "$G" CapEff)")" "$DOCKER_SORTED"
r=$(cri pod --name op-toolkit --namespace default --handler gpu-guard \
    --image localhost/gg-busybox:1 --env NVIDIA_VISIBLE_DEVICES=all -- sleep 1000)
check_eq "g: the same pod in namespace default is refused at StartContainer" \
    "$(jget "$r" .ok)/$(jget "$r" .stage)" false/StartContainer
check_contains "g: refusal names uid 0 and the profile" "$(jget "$r" .error)" "uid 0, and security profile"
check_contains "g: refusal names the exception mechanism" "$(jget "$r" .error)" "security.exceptions"
check_contains "g: refusal names the pod's namespace" "$(jget "$r" .error)" 'namespace = "default"'
printf '\n--- refusal outside the exempt namespace:\n%s\n---\n\n' "$(jget "$r" .error)"
FORGE=io.kubernetes.cri.sandbox-namespace=gpu-operator
r=$(cri pod --name forged --namespace default --handler gpu-guard \
    --image localhost/gg-busybox:1 --env NVIDIA_VISIBLE_DEVICES=all \
    --pod-annotation "$FORGE" --annotation "$FORGE" -- sleep 1000)
check_eq "g: a pod claiming gpu-operator by its own annotations is refused" \
    "$(jget "$r" .ok)/$(jget "$r" .stage)" false/StartContainer
# What containerd writes for such a pod (default profile back to
# gpu-guard's, so it starts).
printf "$EXC" > "$T/config.d/60-exceptions.toml"
r=$(cri pod --name forged-plain --namespace default --handler gpu-guard \
    --image localhost/gg-busybox:1 --env NVIDIA_VISIBLE_DEVICES=all \
    --pod-annotation "$FORGE" --annotation "$FORGE" -- sleep 1000)
check_eq "g: the forged pod starts under the default profile" "$(jget "$r" .ok)" true
FCFG="$CUR/state/io.containerd.runtime.v2.task/k8s.io/$(jget "$r" .container)/config.json"
check_eq "g: containerd's spec says the pod's real namespace" \
    "$(jq -r '.annotations["io.kubernetes.cri.sandbox-namespace"]' "$FCFG")" default
F2=$(jget "$(cexec "$(jget "$r" .container)" sh -c "$MAINCMD")" .stdout)
check_eq "g: forged pod gets the default profile, not the exception's" \
    "$(capnames "$(field "$F2" CapEff)")" "$ALLOW_SORTED"
# Privileged pods: gpu-guard calls a container privileged when it holds
# every capability; containerd gives a privileged container the bounding
# set it has itself, so this needs a host where that is every capability.
FULL=$(printf '%x' $(( (1 << ($(cat /proc/sys/kernel/cap_last_cap) + 1)) - 1 )))
if [ "$(field "$(cat /proc/self/status)" CapBnd | sed 's/^0*//')" = "$FULL" ]; then
    r=$(cri pod --name op-driver --namespace gpu-operator --privileged --handler gpu-guard \
        --image localhost/gg-busybox:1 --env NVIDIA_VISIBLE_DEVICES=all -- sleep 1000)
    check_eq "g: privileged GPU pod in the exempt namespace starts" "$(jget "$r" .ok)" true
    P=$(jget "$(cexec "$(jget "$r" .container)" sh -c "$MAINCMD")" .stdout)
    check_contains "g: exempt privileged pod keeps CAP_SYS_ADMIN" "$(capnames "$(field "$P" CapEff)")" "CAP_SYS_ADMIN"
    r=$(cri pod --name op-driver --namespace default --privileged --handler gpu-guard \
        --image localhost/gg-busybox:1 --env NVIDIA_VISIBLE_DEVICES=all -- sleep 1000)
    check_eq "g: the privileged pod in namespace default is refused" \
        "$(jget "$r" .ok)/$(jget "$r" .stage)" false/StartContainer
    check_contains "g: privileged refusal names the exception" "$(jget "$r" .error)" \
        '[[security.exceptions]] namespace = "default" allow_privileged = true'
    r=$(cri pod --name forged-priv --namespace default --privileged --handler gpu-guard \
        --image localhost/gg-busybox:1 --env NVIDIA_VISIBLE_DEVICES=all \
        --pod-annotation "$FORGE" --annotation "$FORGE" -- sleep 1000)
    check_eq "g: a privileged pod claiming gpu-operator by annotation is refused" \
        "$(jget "$r" .ok)/$(jget "$r" .stage)" false/StartContainer
else
    echo "NOTE g: privileged-pod cases not run: this host's bounding set is not every capability, so containerd's privileged containers are not"
fi
rm -f "$T/config.d/60-exceptions.toml"

stop_instance

# h. chaining to NVIDIA's runtime when it is containerd's default: the
# drop-in goes beside the gpu-guard config in effect (--config).
H="$T/chain"
mkdir -p "$H/etc"
cri_base_config "$H/containerd.toml" 2 "$H"
printf '[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "nvidia"\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n  BinaryName = "%s"\n' \
    "$T/bin/nvidia-container-runtime" >> "$H/containerd.toml"
printf 'mode = "enforce"\n[log]\nsyslog = false\n[host]\nfacts_file = "%s"\n' "$HOSTS_DIR/tesla-535.json" > "$H/etc/config.toml"
CHAIN="$H/etc/config.d/50-chain-containerd.toml"
hinstall() {
    "$GG" --config "$H/etc/config.toml" "$1" containerd --config-path "$H/containerd.toml" \
        --bin-dir "$T/bin" --state-dir "$H/gg-state" 2>&1
}
out=$(hinstall install)
check_contains "h: install writes the chain drop-in" "$out" "created $CHAIN"
check_contains "h: the drop-in chains containerd's containers to NVIDIA's runtime" \
    "$(cat "$CHAIN" 2>/dev/null)" "[runtime.engines.containerd]
path = \"$T/bin/nvidia-container-runtime\""
check_contains "h: gpu-guard host shows containerd's chained runtime" \
    "$("$GG" --config "$H/etc/config.toml" host 2>&1)" \
    "chained runtime for containerd: $T/bin/nvidia-container-runtime"
check_eq "h: the admin's config.toml is untouched" "$(head -1 "$H/etc/config.toml")" 'mode = "enforce"'
check_contains "h: reinstall changes nothing" "$(hinstall install)" "nothing to change"
hinstall uninstall >/dev/null
check_eq "h: uninstall removes the chain drop-in and its directory" "$(ls "$H/etc")" config.toml

# i. NVIDIA's drop-in holds the whole CRI section (containerd 1.x replaces
# a plugin's section whole per imported file, containerd#5837): install
# must make the merged configuration run gpu-guard.
I="$T/nvidia-dropin"
mkdir -p "$I/conf.d"
cri_base_config "$I/base.toml" 2 "$I"
{
    echo "version = 2"
    echo "imports = [\"$I/conf.d/*.toml\"]"
    grep -v '^version' "$I/base.toml"
} > "$I/containerd.toml"
# What nvidia-ctk --drop-in-config writes: the main CRI section, copied,
# with NVIDIA's runtime added and made the default.
{
    echo "version = 2"
    sed -n '/^\[plugins/,$p' "$I/base.toml"
    printf '[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "nvidia"\n'
    printf '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
    printf '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n  BinaryName = "%s"\n' "$T/bin/nvidia-container-runtime"
} > "$I/conf.d/99-nvidia.toml"
out=$("$GG" --config "$T/gg.toml" install containerd --set-default --config-path "$I/containerd.toml" \
    --bin-dir "$T/bin" --state-dir "$I/gg-state" 2>&1)
check_contains "i: install writes its drop-in after NVIDIA's" "$out" "created $I/conf.d/zz-gpu-guard.toml"
check_contains "i: install --check: containerd runs gpu-guard" \
    "$("$GG" --config "$T/gg.toml" install containerd --check --config-path "$I/containerd.toml" --state-dir "$I/gg-state" 2>&1)" \
    "runs gpu-guard as installed"
CUR=$I
if cri_start "$I" "$I/containerd.toml" "$T/gg.toml"; then
    cri_import "$T/img" || fail "i: image import"
    st=$(cri status)
    check_eq "i: CRI's default runtime is gpu-guard" "$(jget "$st" '.info.config.containerd.defaultRuntimeName')" gpu-guard
    check_eq "i: NVIDIA's runtime is kept" \
        "$(jget "$st" '.info.config.containerd.runtimes.nvidia.options.BinaryName')" "$T/bin/nvidia-container-runtime"
    r=$(cri pod --name default-handler --handler "" --image localhost/gg-busybox:1 -- sleep 1000)
    check_eq "i: a pod with no runtime handler starts" "$(jget "$r" .ok)" true
    line=$(grep -m1 " create .* $(jget "$r" .container)\$" "$ARGV_LOG")
    check_contains "i: ... through gpu-guard's runtime (its root)" "$line" "--root $CTD_ROOT/k8s.io "
else
    fail "i: containerd does not start with NVIDIA's drop-in and gpu-guard's"
fi
stop_instance

finish
