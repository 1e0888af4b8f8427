#!/usr/bin/env bash
# Benchmark: the libraries scan of a real image tree, cold and
# warm, against `ldd` over the same files.
#
# The tree: this host's /usr/lib/x86_64-linux-gnu (Debian 12's libraries,
# hard-linked, as a Debian image has them), its python3 site-packages
# (NVIDIA's CUDA 13 wheels nvidia-cuda-runtime, nvidia-curand, nvvm: see
# integration/setup.sh) and the onnxruntime-gpu wheel from PyPI (pip
# download --no-deps, unzipped; GG_ORT_DIR=DIR uses an unpacked one).
# Measured through `gpu-guard check --bundle` (the hooks' decision path:
# walk, ELF facts, ldconfig model, loader model, findings), with the
# kernel-image scan off so only the libraries scan is timed:
#  - cold: an empty [libraries] cache, every ELF file's headers read;
#  - warm: the cache kept (the walk, then one cache file read);
#  - `find TREE -name '*.so*' -type f -exec ldd {} +`, which resolves each
#    file's dependencies against the host, not the tree, and knows nothing
#    of what NVIDIA's runtime injects: the ratio is ldd's time over ours.
# Usage: integration/bench-libraries.sh [rounds]   (NO_BUILD=1 skips the build)
. "$(dirname "$0")/lib.sh"
need_cmd python3 ldd find jq
ROUNDS=${1:-5}
[ "${NO_BUILD:-0}" = 1 ] || (cd "$REPO_DIR" && cargo build --release -q) || exit 1
GG="$REPO_DIR/target/release/gpu-guard"
new_scratch
T_ARCH=x86_64-linux-gnu
R=$T/root
mkdir -p "$R/usr/lib" "$R/lib64" "$R/etc" "$R/usr/local/lib/python3.11"
# Hard links: the tree costs directory entries, not a copy of 700 MB.
cp -al "/usr/lib/$T_ARCH" "$R/usr/lib/" 2>/dev/null || {
    echo "SKIP: cannot hard-link /usr/lib/$T_ARCH into $T (another filesystem?)"
    [ "${GPU_GUARD_CI:-0}" = 1 ] && exit 1
    exit 0
}
ln -s usr/lib "$R/lib"
ln -s "/lib/$T_ARCH/ld-linux-x86-64.so.2" "$R/lib64/ld-linux-x86-64.so.2"
cp -a /etc/ld.so.conf /etc/ld.so.conf.d "$R/etc/"
echo 12 > "$R/etc/debian_version"
SP=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp -al "$SP" "$R/usr/local/lib/python3.11/site-packages"
ORT=${GG_ORT_DIR:-}
if [ -z "$ORT" ]; then
    mkdir -p "$T/whl"
    python3 -m pip download -q onnxruntime-gpu --no-deps -d "$T/whl" || { echo "SKIP: pip download onnxruntime-gpu failed"; exit 0; }
    ORT=$T/ort
    python3 -m zipfile -e "$T"/whl/onnxruntime_gpu-*.whl "$ORT"
    rm -f "$T"/whl/*.whl
fi
cp -al "$ORT/onnxruntime" "$R/usr/local/lib/python3.11/site-packages/" 2>/dev/null \
    || cp -a "$ORT/onnxruntime" "$R/usr/local/lib/python3.11/site-packages/"
echo "tree: $(find "$R" -type d | wc -l) directories, $(find "$R" -name '*.so*' -type f | wc -l) shared objects"

cat > "$T/config.toml" <<EOF
[host]
facts_file = "$HOSTS_DIR/h100x8.json"
cache_file = ""
[kernel_image]
severity = "off"
[libraries]
cache_dir = "$T/cache"
time_budget_ms = 120000
[log]
syslog = false
EOF
mkdir -p "$T/bundle"
jq -n --arg root "$R" '{ociVersion: "1.0.2", root: {path: $root},
    process: {args: ["python3"], cwd: "/", env: ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]},
    hooks: {prestart: [{path: "/usr/bin/nvidia-container-runtime-hook", args: ["nvidia-container-runtime-hook", "prestart"]}]}}' \
    > "$T/bundle/config.json"
CHECK=("$GG" --config "$T/config.toml" check --json --bundle "$T/bundle")
"${CHECK[@]}" > "$T/decision.json" || true
echo "judged: $(jq '.libraries.judged' "$T/decision.json") objects; missing: $(jq '.libraries.missing | length' "$T/decision.json"); CUDA runtimes: $(jq -c '[.libraries.cuda_runtimes[] | .version]' "$T/decision.json"); incomplete: $(jq -r '.libraries.incomplete // "no"' "$T/decision.json")"

INTEGRATION_DIR="$INTEGRATION_DIR" python3 - "$T" "$ROUNDS" "$R" "${CHECK[@]}" <<'PY'
import os, shutil, subprocess, sys, time
sys.path.insert(0, os.environ["INTEGRATION_DIR"])
from benchlib import median, peak_rss_kib
t, rounds, root, check = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def run(argv, **kw):
    s = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return (time.perf_counter() - s) * 1000
cold, warm, ldd = [], [], []
for _ in range(rounds):
    shutil.rmtree(f"{t}/cache", ignore_errors=True)
    cold.append(run(check))
    warm.append(run(check))
    ldd.append(run(f"find '{root}' -name '*.so*' -type f -exec ldd {{}} +", shell=True))
c, w, l = median(cold), median(warm), median(ldd)
shutil.rmtree(f"{t}/cache", ignore_errors=True)
rc = peak_rss_kib(check, runs=1)
rw = peak_rss_kib(check, runs=3)
print(f"libraries scan, cold: median {c:.0f} ms (peak RSS {rc / 1024:.1f} MiB); warm: median {w:.0f} ms (peak RSS {rw / 1024:.1f} MiB)")
print(f"find -exec ldd over the same files: median {l:.0f} ms; ratio ldd/cold {l / c:.1f}x, ldd/warm {l / w:.1f}x ({rounds} rounds)")
PY
