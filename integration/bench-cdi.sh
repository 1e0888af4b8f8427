#!/usr/bin/env bash
# Benchmark: the CDI check under a hostile spec. A GPU
# container asking for nvidia.com/gpu=all, judged by `gpu-guard hook
# prestart` against /etc/cdi-like and /var/run/cdi-like directories holding
# NVIDIA's 8-GPU spec, and beside it a spec of N nested lists (`[[[...]]]`,
# 2N bytes: libyaml's scanner is quadratic in the depth), root's own
# (trusted) or writable by others (untrusted). Time (median of interleaved
# runs) and peak RSS per start, against the same start without the hostile
# file; with GG_BASELINE=<another gpu-guard binary> (main's), the same for it.
# Usage: integration/bench-cdi.sh [rounds] [depth]   (NO_BUILD=1 skips the build)
. "$(dirname "$0")/lib.sh"
need_cmd jq python3
[ -x /usr/bin/time ] || skip_or_fail "GNU time (/usr/bin/time) is not installed"
ROUNDS=${1:-20}
DEPTH=${2:-60000}
[ "${NO_BUILD:-0}" = 1 ] || (cd "$REPO_DIR" && cargo build --release -q) || exit 1
GG="$REPO_DIR/target/release/gpu-guard"
new_scratch
chmod 755 "$T"
GG_SYSLOG=false gg_config "$T/base.toml" h100x8
mkdir -p "$T/etc-cdi" "$T/run-cdi" && chmod 755 "$T/etc-cdi" "$T/run-cdi"
sed -i "s|^cdi_spec_dirs = .*|cdi_spec_dirs = [\"$T/etc-cdi\", \"$T/run-cdi\"]|" "$T/base.toml"
grep -q "^cdi_spec_dirs = \[\"$T/etc-cdi\"" "$T/base.toml" || fail "the shipped config has no cdi_spec_dirs line"

# NVIDIA's spec for 8 GPUs (devices by index, by UUID, and all), its
# device nodes on /dev/null, its hook a file that exists.
python3 - "$T" <<'PY'
import sys
t = sys.argv[1]
open(f"{t}/nvidia-cdi-hook", "w").close()
y = ["---", "cdiVersion: 0.5.0", "containerEdits:", "  deviceNodes:"]
for n in ("/dev/nvidia-uvm", "/dev/nvidiactl"):
    y += [f"  - path: {n}", "    hostPath: /dev/null"]
y += ["  hooks:", "  - args: [nvidia-cdi-hook, update-ldcache]", "    hookName: createContainer", f"    path: {t}/nvidia-cdi-hook"]
y += ["devices:"]
names = [str(i) for i in range(8)] + [f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(8)]
for i, n in enumerate(names + ["all"]):
    nodes = range(8) if n == "all" else [i % 8]
    y += ["- containerEdits:", "    deviceNodes:"] + sum(([f"    - path: /dev/nvidia{k}", "      hostPath: /dev/null"] for k in nodes), [])
    y += [f"  name: \"{n}\""]
y += ["kind: nvidia.com/gpu", ""]
open(f"{t}/etc-cdi/nvidia.yaml", "w").write("\n".join(y))
PY
python3 -c "import sys; d=int(sys.argv[1]); open(sys.argv[2], 'w').write('['*d + ']'*d)" "$DEPTH" "$T/deep.yaml"

make_bundle "$T/gpu" '["true"]' "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
make_compliant "$T/gpu"
jq '.annotations["cdi.k8s.io/gpu"] = "nvidia.com/gpu=all"' "$T/gpu/config.json" > "$T/c.json" && mv "$T/c.json" "$T/gpu/config.json"
echo "hostile spec: $DEPTH nested lists, $(wc -c < "$T/deep.yaml") bytes"

INTEGRATION_DIR="$INTEGRATION_DIR" python3 - "$GG" "$T" "$ROUNDS" "${GG_BASELINE:-}" <<'PY'
import json, os, shutil, subprocess, sys, time
sys.path.insert(0, os.environ["INTEGRATION_DIR"])
from benchlib import interleave, median, peak_rss_kib
gg, t, rounds, baseline = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
state = json.dumps({"ociVersion": "1.0.2", "id": "bench", "status": "creating", "pid": os.getpid(),
                    "bundle": f"{t}/gpu"}).encode()
deep = f"{t}/run-cdi/deep.yaml"
def setup(case):
    if os.path.exists(deep):
        os.remove(deep)
    if case != "clean":
        shutil.copy(f"{t}/deep.yaml", deep)
        os.chmod(deep, 0o666 if case == "untrusted" else 0o644)
def one(binary, case):
    """One start: wall ms, peak RSS KiB, exit status, the first host error."""
    setup(case)
    argv = [binary, "--config", f"{t}/base.toml", "hook", "prestart"]
    t0 = time.perf_counter_ns()
    p = subprocess.run(["/usr/bin/time", "-f", "%M"] + argv, input=state,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ms = (time.perf_counter_ns() - t0) / 1e6
    lines = p.stderr.decode(errors="replace").strip().splitlines()
    why = next((l.strip() for l in lines if "deep.yaml" in l), "")
    return ms, int(lines[-1]), p.returncode, why
bins = [("this build", gg)] + ([("baseline", baseline)] if baseline else [])
for name, b in bins:
    for case in ("clean", "trusted", "untrusted"):
        # The hostile cases are slow on a binary that parses them: fewer rounds.
        runs = []
        for i in range(rounds if case == "clean" or name == "this build" else max(3, rounds // 5)):
            runs.append(one(b, case))
        ms = median([r[0] for r in runs])
        rss = max(r[1] for r in runs)
        code = runs[-1][2]
        print(f"{name:10} {case:9}: hook {ms:9.2f} ms, peak RSS {rss / 1024:6.1f} MiB, exit {code}"
              + (f"  [{runs[-1][3][:150]}]" if runs[-1][3] else ""))
setup("clean")
PY
finish
