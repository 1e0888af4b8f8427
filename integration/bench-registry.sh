#!/usr/bin/env bash
# Benchmark: `gpu-guard check --image docker://...` of a
# three-layer image holding a 256 MiB library, against
# `skopeo copy docker://... oci:DIR` of the same image from the same private
# registry (docker-registry on 127.0.0.1, plain HTTP), interleaved, medians.
# Prints the ratio (goal <= 1.0), gpu-guard's peak RSS (goal < 64 MiB) and the
# bytes each wrote to disk (goal for gpu-guard: 0; the kernel's block-output
# count of the process and its children, after a sync of what came before).
# Then the budgets under hostile registries, each a run of
# `check --image docker://` against a Python server on 127.0.0.1: one that
# never answers (no --read-timeout: the 30 s response timeout), a token
# realm that hangs and a manifest sent a byte a second (--read-timeout 10),
# a layer that goes on past its declared size (10 GB declared, filler sent
# without end): wall time, peak RSS, bytes the server sent.
# Usage: flock /tmp/gg-engines.lock integration/bench-registry.sh [rounds]
#   (NO_BUILD=1 uses the release binaries as they are)
. "$(dirname "$0")/lib.sh"
need_cmd docker-registry skopeo python3 sync
ROUNDS=${1:-5}
[ "${NO_BUILD:-0}" = 1 ] || (cd "$REPO_DIR" && cargo build --release -q -p gpu-guard -p gpu-guard-admission) || exit 1
GG="$REPO_DIR/target/release/gpu-guard"
new_scratch
GG_SYSLOG=false gg_config "$T/config.toml" h100x8

INTEGRATION_DIR="$INTEGRATION_DIR" REPO_DIR="$REPO_DIR" python3 - "$GG" "$T" "$ROUNDS" <<'PY'
import os, shutil, subprocess, sys
sys.path.insert(0, os.environ["INTEGRATION_DIR"])
from benchlib import median
from regbench import start_registry, oci_layout, oublock_of
gg, t, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
repo = os.environ["REPO_DIR"]
reg, host = start_registry(t)
try:
    env = [l.strip() for l in open(f"{repo}/tests/data/images/cuda-12.4.1-base-ubuntu2204.env") if "=" in l]
    lib = open(f"{repo}/tests/data/fatbin/multi-arch.so", "rb").read()
    digest, blob_bytes = oci_layout(f"{t}/layout", env, lib, 256)
    subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{t}/layout",
                    f"docker://{host}/bench/cuda:v1"], check=True)
    ref = f"docker://{host}/bench/cuda:v1"
    check = [gg, "--config", f"{t}/config.toml", "check", "--image", ref, "--plain-http", "--json"]
    def skopeo():
        shutil.rmtree(f"{t}/copy", ignore_errors=True)
        return ["skopeo", "copy", "--quiet", "--src-tls-verify=false", ref, f"oci:{t}/copy"]
    out = subprocess.run(check, capture_output=True, text=True)
    if out.returncode not in (0, 1):
        sys.exit(f"bench-registry: check failed: {out.stderr}")
    g, s, rss, gw, sw = [], [], [], [], []
    for i in range(rounds):
        for name in (("gg", "skopeo") if i % 2 == 0 else ("skopeo", "gg")):
            subprocess.run(["sync"])
            argv = check if name == "gg" else skopeo()
            import time
            t0 = time.perf_counter()
            written, maxrss, code = oublock_of(argv)
            ms = (time.perf_counter() - t0) * 1000
            if code not in (0, 1) if name == "gg" else code != 0:
                sys.exit(f"bench-registry: {name} exited {code}")
            (g if name == "gg" else s).append(ms)
            (gw if name == "gg" else sw).append(written)
            if name == "gg":
                rss.append(maxrss)
    a, b = median(g), median(s)
    print(f"image: 3 layers, {blob_bytes / 2**20:.0f} MiB of blobs, a 256 MiB library; registry {host} (plain HTTP)")
    print(f"check --image docker://: median {a:.0f} ms; skopeo copy docker:// oci:DIR: median {b:.0f} ms; "
          f"ratio {a / b:.3f}  [goal <= 1.0], {rounds} rounds interleaved")
    print(f"check peak RSS {max(rss) / 1024:.1f} MiB  [goal < 64 MiB]; bytes written to disk: check {max(gw)}, "
          f"skopeo {median(sw):.0f}  [goal for check: 0]")
    if max(gw) != 0:
        print("bench-registry: check wrote to disk", file=sys.stderr)
        sys.exit(1)
finally:
    reg.kill()
PY

INTEGRATION_DIR="$INTEGRATION_DIR" python3 - "$GG" "$T" <<'PY'
import os, subprocess, sys, time
sys.path.insert(0, os.environ["INTEGRATION_DIR"])
from regbench import Hostile, tiny_image
def measured(argv):
    """(wall ms, this run's peak RSS KiB, exit status, stderr)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    return (time.perf_counter() - t0) * 1000, ru.ru_maxrss, os.waitstatus_to_exitcode(status), err.decode(errors="replace")
gg, t = sys.argv[1], sys.argv[2]
md, blobs, layer = tiny_image(f"{t}/tiny", ["NVIDIA_REQUIRE_CUDA=cuda>=12.4"])
manifest = blobs[md]
MT = "application/vnd.oci.image.manifest.v1+json"
def image_or(path, hostile):
    for d, b in blobs.items():
        if path.endswith(d):
            return hostile if d == layer and hostile else ("reply", (200, [], b))
    if "/manifests/" in path:
        return ("reply", (200, [("Content-Type", MT), ("Docker-Content-Digest", md)], manifest))
    return ("reply", (404, [], b""))
realm = Hostile(lambda p: ("stall", None))
cases = [
    ("never answers (default timeouts)", Hostile(lambda p: ("stall", None)), []),
    ("token realm hangs (--read-timeout 10)", Hostile(lambda p: ("reply", (401, [("WWW-Authenticate", f'Bearer realm="http://{realm.addr}/token",service="x"')], b""))), ["--read-timeout", "10"]),
    ("manifest a byte a second (--read-timeout 10)", Hostile(lambda p: ("drip", (MT, manifest, 1.0))), ["--read-timeout", "10"]),
    ("layer past its declared size (10 GB declared)", Hostile(lambda p: image_or(p, ("endless", (blobs[layer], 10 << 30))) if p.endswith(layer) else image_or(p, None)), []),
]
failed = False
for name, h, extra in cases:
    argv = [gg, "--config", f"{t}/config.toml", "check", "--image", f"docker://{h.addr}/bench/app:1", "--plain-http"] + extra
    ms, rss, code, err = measured(argv)
    ok = code == 2 and ms < 45000 and rss < 64 * 1024 and h.sent < 64 << 20
    failed |= not ok
    print(f"hostile: {name}: exit {code} after {ms / 1000:.1f} s, peak RSS {rss / 1024:.1f} MiB, "
          f"{h.sent / 2**20:.2f} MiB sent  [goal: exit 2 within the bound, RSS < 64 MiB, < 64 MiB read]"
          + ("" if ok else f"  FAIL: {err.strip()[:200]}"))
sys.exit(1 if failed else 0)
PY
