#!/usr/bin/env bash
# Benchmark: the runtime wrapper against runc itself, interleaved, medians.
#  1. `gpu-guard-runtime run` vs `runc run` of busybox `true` in a GPU
#     container (decision, config.json edit and atomic write included; the
#     pristine config.json is restored before every run of both);
#  2. a pass-through command, `state`, through the wrapper vs runc;
#  3. with GG_BASELINE=/path/to/an/older/gpu-guard: that binary's wrapper
#     against this one's on both, interleaved (a refactor keeps within 5 %).
# Goals: all ratios <= 1.05.
# Usage: sudo integration/bench-wrapper.sh [rounds]   (NO_BUILD=1 skips the build)
. "$(dirname "$0")/lib.sh"
need_root
need_cmd runc jq python3
ROUNDS=${1:-40}
[ "${NO_BUILD:-0}" = 1 ] || (cd "$REPO_DIR" && cargo build --release -q) || exit 1
GG="$REPO_DIR/target/release/gpu-guard"
new_scratch
GG_SYSLOG=false gg_config "$T/config.toml" h100x8
# Copies, not links: a file the linker wrote takes more page faults at
# start-up than a copied one (bench-hook.sh), which would be charged to the code.
mkdir -p "$T/bin" "$T/old" && cp "$GG" "$T/bin/gpu-guard-runtime"
[ -z "${GG_BASELINE:-}" ] || cp "$GG_BASELINE" "$T/old/gpu-guard-runtime"
mapfile -t IMG < "$REPO_DIR/tests/data/images/cuda-12.4.1-base-ubuntu2204.env"
for b in wrap plain; do
    make_bundle "$T/$b" '["true"]' "${IMG[@]}"
    cp "$T/$b/config.json" "$T/$b/config.json.pristine"
done
make_bundle "$T/idle" '["sleep", "600"]'
runc --root "$T/runc" create --bundle "$T/idle" bench-idle >/dev/null

GPU_GUARD_CONFIG="$T/config.toml" INTEGRATION_DIR="$INTEGRATION_DIR" python3 - "$T" "$ROUNDS" "${GG_BASELINE:-}" <<'PY'
import os, shutil, subprocess, sys
sys.path.insert(0, os.environ["INTEGRATION_DIR"])
from benchlib import interleave, median
t, rounds, baseline = sys.argv[1], int(sys.argv[2]), sys.argv[3]
wrap = f"{t}/bin/gpu-guard-runtime"
def reset():
    for b in ("wrap", "plain"):
        subprocess.run(["runc", "--root", f"{t}/runc", "delete", "-f", f"bench-{b}"], stderr=subprocess.DEVNULL)
        shutil.copyfile(f"{t}/{b}/config.json.pristine", f"{t}/{b}/config.json")
r = interleave({
    "wrapper": dict(argv=[wrap, "--root", f"{t}/runc", "run", "--bundle", f"{t}/wrap", "bench-wrap"]),
    "runc": dict(argv=["runc", "--root", f"{t}/runc", "run", "--bundle", f"{t}/plain", "bench-plain"]),
}, rounds, between=reset)
w, p = median(r["wrapper"]), median(r["runc"])
print(f"run busybox true (GPU container, edits written): gpu-guard-runtime {w:.2f} ms, runc {p:.2f} ms, ratio {w / p:.3f}  [goal <= 1.05], {rounds} rounds")
s = interleave({
    "wrapper": dict(argv=[wrap, "--root", f"{t}/runc", "state", "bench-idle"]),
    "runc": dict(argv=["runc", "--root", f"{t}/runc", "state", "bench-idle"]),
}, rounds * 5)
w, p = median(s["wrapper"]), median(s["runc"])
print(f"state (pass-through): gpu-guard-runtime {w:.2f} ms, runc {p:.2f} ms, ratio {w / p:.3f}  [goal <= 1.05], {rounds * 5} rounds")
if baseline:
    old = f"{t}/old/gpu-guard-runtime"
    r = interleave({
        "new": dict(argv=[wrap, "--root", f"{t}/runc", "run", "--bundle", f"{t}/wrap", "bench-wrap"]),
        "old": dict(argv=[old, "--root", f"{t}/runc", "run", "--bundle", f"{t}/plain", "bench-plain"]),
    }, rounds, between=reset)
    a, b = median(r["new"]), median(r["old"])
    print(f"run against {baseline}: this build {a:.2f} ms, baseline {b:.2f} ms, ratio {a / b:.3f}  [goal <= 1.05], {rounds} rounds")
    s = interleave({
        "new": dict(argv=[wrap, "--root", f"{t}/runc", "state", "bench-idle"]),
        "old": dict(argv=[old, "--root", f"{t}/runc", "state", "bench-idle"]),
    }, rounds * 5)
    a, b = median(s["new"]), median(s["old"])
    print(f"state against {baseline}: this build {a:.2f} ms, baseline {b:.2f} ms, ratio {a / b:.3f}  [goal <= 1.05], {rounds * 5} rounds")
PY
rc=$?
runc --root "$T/runc" delete -f bench-idle >/dev/null 2>&1
exit $rc
