#!/usr/bin/env bash
# Benchmark: what host health and tuning add to a container start,
# as `gpu-guard hook prestart` pays it (interleaved medians, release build):
#  1. [metrics] textfile: the hook with metrics off vs on, for a non-GPU and a
#     GPU container: the cost of one metrics update (the textfile on disk,
#     the state on a tmpfs as the shipped state_dir); and the hook while
#     another process holds the metrics lock (bounded by the 2 ms lock wait).
#  2. CDI: a GPU container asking for nvidia.com/gpu=all with an 8-GPU spec as
#     `nvidia-ctk cdi generate` writes it, against the same container with the
#     check off (host.cdi_spec_dirs = []).
# Usage: integration/bench-tuning.sh [rounds]   (NO_BUILD=1 skips the build)
. "$(dirname "$0")/lib.sh"
need_cmd jq python3
ROUNDS=${1:-200}
[ "${NO_BUILD:-0}" = 1 ] || (cd "$REPO_DIR" && cargo build --release -q) || exit 1
GG="$REPO_DIR/target/release/gpu-guard"
new_scratch
chmod 755 "$T"
GG_SYSLOG=false gg_config "$T/off.toml" h100x8
mkdir -p "$T/prom" && chmod 755 "$T/prom"
cp "$T/off.toml" "$T/on.toml"
# The shipped state_dir is on a tmpfs (/run); so is this one.
SHMSTATE=$(mktemp -d /dev/shm/gg-bench-state.XXXXXX)
chmod 755 "$SHMSTATE"
trap 'rm -rf "$T" "$SHMSTATE"' EXIT
sed -i -e "s|^textfile = \"\"|textfile = \"$T/prom/gpu-guard.prom\"|" -e "s|^state_dir = .*|state_dir = \"$SHMSTATE\"|" "$T/on.toml"

make_bundle "$T/gpu" '["true"]' NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
make_compliant "$T/gpu"
make_bundle "$T/plain" '["true"]'

# An 8-GPU spec as nvidia-ctk writes it, its driver files in a host tree.
DRIVER=$(jq -r .driver_version "$HOSTS_DIR/h100x8.json")
mkdir -p "$T/cdi"
python3 - "$T" "$DRIVER" <<'PY'
import os, sys
t, v = sys.argv[1], sys.argv[2]
root = f"{t}/host"
libs = ["libcuda.so", "libcudadebugger.so", "libnvidia-allocator.so", "libnvidia-cfg.so",
        "libnvidia-gpucomp.so", "libnvidia-ml.so", "libnvidia-nvvm.so", "libnvidia-opencl.so",
        "libnvidia-ptxjitcompiler.so", "libnvidia-nscq.so", "libEGL_nvidia.so", "libGLX_nvidia.so",
        "libGLESv2_nvidia.so", "libnvidia-eglcore.so", "libnvidia-glcore.so", "libnvidia-tls.so"]
paths = [f"/usr/lib/x86_64-linux-gnu/{l}.{v}" for l in libs] + \
        [f"/usr/bin/{b}" for b in ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced")] + \
        [f"/lib/firmware/nvidia/{v}/gsp_ga10x.bin", f"/lib/firmware/nvidia/{v}/gsp_tu10x.bin"]
for p in paths + ["/usr/bin/nvidia-cdi-hook"]:
    os.makedirs(os.path.dirname(root + p), exist_ok=True)
    open(root + p, "w").close()
y = ["---", "cdiVersion: 0.5.0", "containerEdits:", "  deviceNodes:"]
for n in ("/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"):
    y += [f"  - path: {n}", "    hostPath: /dev/null"]
y += ["  hooks:"]
for args in (["enable-cuda-compat", f"--host-driver-version={v}"], ["update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"]):
    y += ["  - args:", "    - nvidia-cdi-hook"] + [f"    - {a}" for a in args] + \
         ["    hookName: createContainer", f"    path: {root}/usr/bin/nvidia-cdi-hook"]
y += ["  mounts:"]
for p in paths:
    y += [f"  - containerPath: {p}", f"    hostPath: {root}{p}", "    options:", "    - ro", "    - nosuid", "    - nodev", "    - bind"]
y += ["devices:"]
names = [str(i) for i in range(8)] + [f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(8)]
for i, n in enumerate(names + ["all"]):
    nodes = range(8) if n == "all" else [i % 8]
    y += ["- containerEdits:", "    deviceNodes:"] + sum(([f"    - path: /dev/nvidia{k}", "      hostPath: /dev/null"] for k in nodes), [])
    y += [f"  name: \"{n}\""]
y += ["kind: nvidia.com/gpu", ""]
open(f"{t}/cdi/nvidia.yaml", "w").write("\n".join(y))
PY
cp "$T/off.toml" "$T/cdi.toml"
cp "$T/off.toml" "$T/nocdi.toml"
sed -i "s|^cdi_spec_dirs = .*|cdi_spec_dirs = [\"$T/cdi\"]|" "$T/cdi.toml"
sed -i "s|^cdi_spec_dirs = .*|cdi_spec_dirs = []|" "$T/nocdi.toml"
make_bundle "$T/cdigpu" '["true"]' "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
make_compliant "$T/cdigpu"
jq '.annotations["cdi.k8s.io/gpu"] = "nvidia.com/gpu=all"' "$T/cdigpu/config.json" > "$T/c.json" && mv "$T/c.json" "$T/cdigpu/config.json"
echo "CDI spec: $(wc -c < "$T/cdi/nvidia.yaml") bytes, $(grep -c '^- containerEdits' "$T/cdi/nvidia.yaml") devices"
"$GG" --config "$T/cdi.toml" check --bundle "$T/cdigpu" >/dev/null || { "$GG" --config "$T/cdi.toml" check --bundle "$T/cdigpu"; fail "the CDI bundle is not allowed"; finish; }

SHMSTATE="$SHMSTATE" INTEGRATION_DIR="$INTEGRATION_DIR" python3 - "$GG" "$T" "$ROUNDS" <<'PY'
import fcntl, json, os, sys
sys.path.insert(0, os.environ["INTEGRATION_DIR"])
from benchlib import interleave, median
gg, t, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def state(b):
    return json.dumps({"ociVersion": "1.0.2", "id": "bench", "status": "creating", "pid": os.getpid(),
                       "bundle": f"{t}/{b}"}).encode()
def hook(cfg, b):
    return dict(argv=[gg, "--config", f"{t}/{cfg}.toml", "hook", "prestart"], stdin=state(b))
import resource, subprocess
def cpu_ms(v, n):
    """CPU time (user + system) of one run, averaged over n: what the
    update costs the host, less noisy than wall time on a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        subprocess.run(v["argv"], input=v["stdin"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000 / n
for b in ("plain", "gpu"):
    r = interleave({"off": hook("off", b), "on": hook("on", b)}, rounds)
    off, on = median(r["off"]), median(r["on"])
    c_off, c_on = cpu_ms(hook("off", b), rounds), cpu_ms(hook("on", b), rounds)
    print(f"metrics, {b} container: hook {off:.3f} ms without, {on:.3f} ms with; one update {on - off:.3f} ms wall "
          f"(ratio {on / off:.3f}), CPU {c_off:.3f} -> {c_on:.3f} ms (+{c_on - c_off:.3f}), {rounds} rounds interleaved")
# The lock held by another process: the hook gives up after the 5 ms wait.
lock = open(os.environ["SHMSTATE"] + "/gpu-guard.prom.lock", "a")
fcntl.flock(lock, fcntl.LOCK_EX)
r = interleave({"off": hook("off", "plain"), "held": hook("on", "plain")}, max(20, rounds // 10))
fcntl.flock(lock, fcntl.LOCK_UN)
print(f"metrics lock held elsewhere: hook {median(r['held']):.3f} ms vs {median(r['off']):.3f} ms without metrics "
      f"(+{median(r['held']) - median(r['off']):.3f} ms; lock wait 2 ms), max {max(r['held']):.3f} ms")
r = interleave({"off": hook("nocdi", "cdigpu"), "on": hook("cdi", "cdigpu")}, rounds)
off, on = median(r["off"]), median(r["on"])
print(f"CDI check, nvidia.com/gpu=all on an 8-GPU spec: hook {off:.3f} ms without, {on:.3f} ms with "
      f"(+{on - off:.3f} ms, ratio {on / off:.3f}), {rounds} rounds interleaved")
PY
cat "$T/prom/gpu-guard.prom" | grep -E '^gpu_guard_(decisions_total|metrics_dropped)'
