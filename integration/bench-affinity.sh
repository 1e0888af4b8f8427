#!/usr/bin/env bash
# Benchmark: the cold label-only node affinity (`check --affinity` without
# --nodes: fleet::affinity::label_terms, what the admission webhook writes
# on its first review of an image) of this build against main's.
# Cases, for the official nvidia/cuda 12.4.1, 12.8.0 and 13.0 requirement
# strings (tests/data/requirements/nvidia-cuda-official.tsv: 12.8.0 carries
# the 12.8.1 string, 13.0 is 13.0.2's):
#  - "image": the image of integration/bench-admission.sh (NVIDIA's CUDA
#    12.4.1 base env, a cuBLAS-like library with SASS sm_75, sm_80, sm_90a
#    and PTX compute_90 where the shipped kernel_image.libraries find it,
#    kernel_image.severity "enforce") with that requirement;
#  - "alone": the requirement string alone (--env).
# Each run is a new process (nothing cached): best of 5 wall-clock runs
# for this build, of 3 for main's. Prints both, the ratio this/main and
# whether both printed the same (stdout, stderr, exit status).
# Goal: every case well under 1 s (the webhook's read deadline is 8 s).
# Main's binary: GG_BASELINE=/path/to/gpu-guard, or else built here from
# BASELINE_REF (default main) with `git archive` into the scratch dir, in
# target/bench-baseline: a target dir of its own, as cargo would otherwise
# take the baseline's library for this tree's (its fingerprint names the
# baseline's sources, which do not change) and link it into this build.
# Usage: integration/bench-affinity.sh   (NO_BUILD=1 skips this build's build)
. "$(dirname "$0")/lib.sh"
need_cmd python3
[ "${NO_BUILD:-0}" = 1 ] || (cd "$REPO_DIR" && cargo build --release -q -p gpu-guard --bin gpu-guard) || exit 1
new_scratch
cp "$REPO_DIR/target/release/gpu-guard" "$T/gpu-guard" || exit 1
if [ -z "${GG_BASELINE:-}" ]; then
    ref=${BASELINE_REF:-main}
    mkdir "$T/base" && git -C "$REPO_DIR" archive "$ref" | tar -x -C "$T/base" || exit 1
    echo "bench-affinity: building $ref ($(git -C "$REPO_DIR" rev-parse --short "$ref")) for the baseline" >&2
    base_target="$REPO_DIR/target/bench-baseline"
    (cd "$T/base" && CARGO_TARGET_DIR="$base_target" cargo build --release -q -p gpu-guard --bin gpu-guard) || exit 1
    cp "$base_target/release/gpu-guard" "$T/gpu-guard-base" || exit 1
    GG_BASELINE="$T/gpu-guard-base"
fi
printf '[host]\ncache_file = ""\n[log]\nsyslog = false\n[kernel_image]\nseverity = "enforce"\ncache_dir = ""\n' >"$T/config.toml"

REPO_DIR="$REPO_DIR" python3 - "$T/gpu-guard" "$T" "$GG_BASELINE" <<'PY'
import gzip, hashlib, io, json, os, subprocess, sys, tarfile, time
gg, t, baseline = sys.argv[1], sys.argv[2], sys.argv[3]
repo = os.environ["REPO_DIR"]

def blob(d, b):
    h = hashlib.sha256(b).hexdigest()
    with open(f"{d}/blobs/sha256/{h}", "wb") as f:
        f.write(b)
    return {"mediaType": "application/octet-stream", "digest": f"sha256:{h}", "size": len(b)}

def layout(d, env, files):
    os.makedirs(f"{d}/blobs/sha256")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for path, data in files:
            ti = tarfile.TarInfo(path)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    raw = raw.getvalue()
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": env},
                      "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]}})
    m = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
         "config": blob(d, cfg.encode()), "layers": [blob(d, gzip.compress(raw, mtime=0))]}
    with open(f"{d}/index.json", "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [blob(d, json.dumps(m).encode())]}, f)
    with open(f"{d}/oci-layout", "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')

env = [l.strip() for l in open(f"{repo}/tests/data/images/cuda-12.4.1-base-ubuntu2204.env") if "=" in l]
lib = open(f"{repo}/tests/data/fatbin/multi-arch.so", "rb").read()
layout(f"{t}/img", env, [("usr/local/cuda-12.4/lib64/libcublas.so.12.4.5", lib)])
official = {}
for line in open(f"{repo}/tests/data/requirements/nvidia-cuda-official.tsv"):
    if line.strip() and not line.startswith("#"):
        f = line.rstrip("\n").split("\t")
        official[f[0]] = f[2]
cases = []
for name, tag in [("12.4.1", "12.4.1"), ("12.8.0", "12.8.1"), ("13.0", "13.0.2")]:
    req = f"NVIDIA_REQUIRE_CUDA={official[tag]}"
    n = len(official[tag].split())
    cases.append((f"{name} image ({n} alternatives, scanned GPU code)", ["--image", f"{t}/img", "--env", req]))
    cases.append((f"{name} alone", ["--env", "NVIDIA_VISIBLE_DEVICES=all", "--env", req]))

def best(binary, args, runs):
    argv = [binary, "--config", f"{t}/config.toml", "check", *args, "--affinity", "--json"]
    out, b = None, None
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run(argv, capture_output=True)
        ms = (time.perf_counter() - t0) * 1000
        if p.returncode not in (0, 1):
            sys.exit(f"bench-affinity: {argv} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
        out = (p.returncode, p.stdout, p.stderr)
        b = ms if b is None else min(b, ms)
    return b, out

failed = False
for name, args in cases:
    ms, out = best(gg, args, 5)
    bms, bout = best(baseline, args, 3)
    terms = out[1].count(b'"matchExpressions"')
    same = "same output" if bout == out else "OUTPUT DIFFERS"
    line = (f"{name}: this build {ms:.0f} ms, main {bms:.0f} ms, ratio {ms / bms:.3f}; "
            f"{terms} terms, exit {out[0]}; {same}")
    if ms >= 1000:
        line += "  FAIL: goal well under 1 s"
        failed = True
    failed |= bout != out
    print(line)
sys.exit(1 if failed else 0)
PY
