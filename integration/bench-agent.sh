#!/usr/bin/env bash
# Benchmark of the node agent's reconcile bound: how long after NVIDIA's
# containerd drop-in is written, changed or removed does containerd's
# merged configuration (`containerd config dump`, Debian 12's 1.6) run
# gpu-guard again with NVIDIA's current runtimes (or without them once
# NVIDIA's file is gone)?
#
# The agent (gpu-guard-node-agent, the release build if there is one, else
# the debug build) runs against a private host root with the DaemonSet's
# default interval (INTERVAL_MS, 1000) and a stand-in restart command. Each
# round writes NVIDIA's drop-in (sorting after gpu-guard's), rewrites it
# with one more runtime, and removes it, timing each until the dump is
# right. Prints the median and the worst of each, and checks the stated
# bound: every change followed within 2 x INTERVAL_MS + 1 s.
#
# Usage: integration/bench-agent.sh [rounds]   (default 10)
# Exit: 0 the bound held, 1 it did not, 2 cannot run.
set -u -o pipefail
rounds=${1:-10}
interval=${INTERVAL_MS:-1000}
here=$(cd "$(dirname "$0")/.." && pwd)
command -v containerd >/dev/null || { echo "bench-agent: containerd is not installed" >&2; exit 2; }
agent=$here/target/x86_64-unknown-linux-gnu/release/gpu-guard-node-agent
[ -x "$agent" ] || agent=$here/target/debug/gpu-guard-node-agent
[ -x "$agent" ] || { echo "bench-agent: build gpu-guard-node-agent first (packaging/build-release.sh)" >&2; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/gg-bench-agent.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
R=$T/host
mkdir -p "$R/usr/bin" "$R/etc/containerd/conf.d"
printf '#!/bin/sh\n' > "$R/usr/bin/gpu-guard"
ln -s gpu-guard "$R/usr/bin/gpu-guard-runtime"
cat > "$R/etc/containerd/config.toml" <<'EOF'
version = 2
imports = ["conf.d/*.toml"]
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
EOF
"$agent" --host-root "$R" --bin-dir /usr/bin --labels-file "" --api-server "" \
    --restart-command true --interval-ms "$interval" --status-file "$T/status" 2>"$T/agent.log" &
pid=$!

python3 - "$R" "$rounds" "$interval" <<'PY'
import os, subprocess, sys, time, tomllib
root, rounds, interval = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
etc = os.path.join(root, "etc/containerd")
nv = os.path.join(etc, "conf.d/99-nvidia.toml")
CRI = 'plugins."io.containerd.grpc.v1.cri".containerd'
def nvidia(extra):
    s = f'version = 2\n[{CRI}]\n  default_runtime_name = "nvidia"\n[{CRI}.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
    for n in ["nvidia"] + extra:
        s += f'[{CRI}.runtimes.{n}]\n  runtime_type = "io.containerd.runc.v2"\n  [{CRI}.runtimes.{n}.options]\n    BinaryName = "/usr/local/nvidia/toolkit/{n}"\n'
    return s
def dump():
    o = subprocess.run(["containerd", "--config", "config.toml", "config", "dump"], cwd=etc, capture_output=True)
    if o.returncode != 0:
        return None
    return tomllib.loads(o.stdout.decode())["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
def ours(c):
    return c["runtimes"].get("gpu-guard", {}).get("options", {}).get("BinaryName") == "/usr/bin/gpu-guard-runtime"
def until(cond, limit=30.0):
    t = time.monotonic()
    while time.monotonic() - t < limit:
        c = dump()
        if c is not None and cond(c):
            return time.monotonic() - t
        time.sleep(0.02)
    return None
if until(ours) is None:
    print("bench-agent: the agent never registered gpu-guard"); sys.exit(1)
res = {"added": [], "changed": [], "removed": []}
for _ in range(rounds):
    open(nv, "w").write(nvidia([]))
    res["added"].append(until(lambda c: ours(c) and "nvidia" in c["runtimes"]))
    time.sleep(interval / 2000)
    open(nv, "w").write(nvidia(["nvidia-cdi"]))
    res["changed"].append(until(lambda c: ours(c) and "nvidia-cdi" in c["runtimes"]))
    time.sleep(interval / 2000)
    os.remove(nv)
    res["removed"].append(until(lambda c: ours(c) and sorted(c["runtimes"]) == ["gpu-guard", "runc"]))
    time.sleep(interval / 2000)
bound = 2 * interval / 1000 + 1.0
ok = True
print(f"reconcile bound, {rounds} rounds, INTERVAL_MS={interval} (stated bound {bound:.1f} s):")
for k, v in res.items():
    if any(x is None for x in v):
        print(f"  {k:8} never converged in {sum(x is None for x in v)} round(s)"); ok = False; continue
    v = sorted(v)
    med, worst = v[len(v) // 2], v[-1]
    ok &= worst <= bound
    print(f"  NVIDIA drop-in {k:8} median {med:.2f} s  worst {worst:.2f} s")
print("bound held" if ok else "BOUND MISSED")
sys.exit(0 if ok else 1)
PY
