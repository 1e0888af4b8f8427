#!/usr/bin/env bash
# Benchmark: the cold label-only node affinity (`check --affinity` without
# --nodes: fleet::label_affinity::place, what the admission webhook writes
# on its first review of an image), its time and its size, for every
# official nvidia/cuda requirement string
# (tests/data/requirements/nvidia-cuda-official.tsv) with a multi-
# architecture image: NVIDIA's env for that tag (NVIDIA_REQUIRE_CUDA,
# CUDA_VERSION) and two libraries of the real fat-binary fixtures
# (tests/data/fatbin/multi-arch.so: SASS sm_75, sm_80, sm_90a and PTX
# compute_90; sm100f.so: SASS sm_100f, sm_103f, sm_120f and PTX
# compute_100f), where the shipped kernel_image.libraries find them; and
# the requirement string alone (--env).
# Each run is a new process (nothing cached): best of 5 wall-clock runs.
# Prints per case the time, the terms, the YAML bytes and the exit status;
# with a baseline binary (GG_BASELINE=/path/to/gpu-guard) its time too and
# the ratio (its output differs where its labels did).
# Goals: every case well under 1 s (the webhook's read deadline is 8 s),
# at most 16 terms and 32 KB of YAML.
# Usage: integration/bench-affinity.sh   (NO_BUILD=1 skips the build)
. "$(dirname "$0")/lib.sh"
need_cmd python3
[ "${NO_BUILD:-0}" = 1 ] || (cd "$REPO_DIR" && cargo build --release -q -p gpu-guard --bin gpu-guard) || exit 1
new_scratch
cp "$REPO_DIR/target/release/gpu-guard" "$T/gpu-guard" || exit 1
printf '[host]\ncache_file = ""\n[log]\nsyslog = false\n[kernel_image]\ncache_dir = ""\n[libraries]\ncache_dir = ""\n' >"$T/config.toml"

REPO_DIR="$REPO_DIR" python3 - "$T/gpu-guard" "$T" "${GG_BASELINE:-}" <<'PY'
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

fat = f"{repo}/tests/data/fatbin"
libs = [("usr/local/cuda/lib64/libcublas.so.12", open(f"{fat}/multi-arch.so", "rb").read()),
        ("usr/local/cuda/lib64/libcudnn.so.9", open(f"{fat}/sm100f.so", "rb").read())]
official = []
for line in open(f"{repo}/tests/data/requirements/nvidia-cuda-official.tsv"):
    if line.strip() and not line.startswith("#"):
        f = line.rstrip("\n").split("\t")
        official.append((f[0], f[2]))
cases = []
for tag, req in official:
    env = [f"CUDA_VERSION={tag.split('-')[0]}", f"NVIDIA_REQUIRE_CUDA={req}",
           "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
    layout(f"{t}/img-{tag}", env, libs)
    n = len(req.split())
    cases.append((f"{tag} image ({n} alternatives, multi-architecture libraries)", ["--image", f"{t}/img-{tag}"]))
    cases.append((f"{tag} alone", ["--env", "NVIDIA_VISIBLE_DEVICES=all", "--env", f"NVIDIA_REQUIRE_CUDA={req}"]))

def best(binary, args, runs):
    argv = [binary, "--config", f"{t}/config.toml", "check", *args, "--affinity"]
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
worst = (0, 0, 0)
for name, args in cases:
    ms, out = best(gg, args, 5)
    terms = out[1].count(b"- matchExpressions:")
    size = len(out[1])
    line = f"{name}: {ms:.0f} ms, {terms} terms, {size} bytes of YAML, exit {out[0]}"
    if baseline:
        bms, _ = best(baseline, args, 3)
        line += f"; baseline {bms:.0f} ms, ratio {ms / bms:.3f}"
    if ms >= 1000 or terms > 16 or size > 32 * 1024 or b"not exact" in out[1]:
        line += "  FAIL: goal well under 1 s, at most 16 terms and 32 KB, exact"
        failed = True
    worst = (max(worst[0], ms), max(worst[1], terms), max(worst[2], size))
    print(line)
print(f"worst: {worst[0]:.0f} ms, {worst[1]} terms, {worst[2]} bytes")
sys.exit(1 if failed else 0)
PY
