#!/usr/bin/env bash
# Cost of `gpu-guard check --image`:
# - an OCI layout with one 1 GiB library layer (a real ELF: the multi-arch
#   fatbin fixture with a 1 GiB `.gg_pad` section added by objcopy after its
#   `.nv_fatbin`, filled with base64 of random bytes so gzip keeps ~3/4 of
#   it, as real libraries compress) and 20 small layers, all gzip -1;
# - wall time of `check --image` against `gzip -dc BLOB | tar -xOf -` over
#   every layer blob (decompress and read everything once): goal <= 1.2;
# - peak RSS of `check --image` (/usr/bin/time %M): goal < 64 MiB;
# - the added cost per host of a 1,000-host `--hosts` run once the image
#   is read (as integration/bench-fleet.sh): goal < 1 ms.
# Needs about 3 GiB of scratch (removed at exit). Usage:
#   integration/bench-image.sh [PAD_MIB]   (default 1024; builds the release binary)
set -euo pipefail
PAD_MIB=${1:-1024}
cd "$(dirname "$0")/.."
cargo build --release --quiet
BIN=$PWD/target/release/gpu-guard
W=$(mktemp -d "${TMPDIR:-/var/tmp}/gg-bench-image.XXXXXX")
trap 'rm -rf "$W"' EXIT
L=$W/layout
mkdir -p "$L/blobs/sha256" "$W/root/usr/lib/x86_64-linux-gnu"
printf '{"imageLayoutVersion":"1.0.0"}' >"$L/oci-layout"

# The 1 GiB library.
head -c $((PAD_MIB * 3 / 4 * 1048576)) /dev/urandom | base64 -w0 | head -c $((PAD_MIB * 1048576)) >"$W/pad"
LIB=$W/root/usr/lib/x86_64-linux-gnu/libcublasLt.so.12
objcopy --add-section .gg_pad="$W/pad" --set-section-flags .gg_pad=readonly,contents \
    tests/data/fatbin/multi-arch.so "$LIB"
rm -f "$W/pad"
echo "library: $(stat -c %s "$LIB") bytes"

blob() { # FILE -> moves it into the layout, prints "digest size"
  local d s
  d=$(sha256sum "$1" | cut -d' ' -f1)
  s=$(stat -c %s "$1")
  mv "$1" "$L/blobs/sha256/$d"
  echo "sha256:$d $s"
}
layers=()
diffs=()
add_layer() { # DIR PATHS...
  local dir=$1; shift
  tar -C "$dir" -cf - "$@" | tee >(sha256sum | cut -d' ' -f1 >"$W/diff") | gzip -1 >"$W/blob"
  sleep 0.2
  diffs+=("sha256:$(cat "$W/diff")")
  layers+=("$(blob "$W/blob")")
}
t0=$(date +%s)
add_layer "$W/root" usr
rm -rf "$W/root"
for i in $(seq 1 20); do
  mkdir -p "$W/small/etc/layer$i"
  head -c 65536 /dev/urandom | base64 >"$W/small/etc/layer$i/data"
  add_layer "$W/small" "etc/layer$i"
done
rm -rf "$W/small"
python3 - "$L" "${layers[*]}" "${diffs[*]}" <<'PY'
import hashlib, json, os, sys
L, layers, diffs = sys.argv[1], sys.argv[2].split(" "), sys.argv[3].split()
ls = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layers[i], "size": int(layers[i + 1])}
      for i in range(0, len(layers), 2)]
env = ["NVIDIA_REQUIRE_CUDA=cuda>=12.2", "CUDA_VERSION=12.2.0"]
cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": env},
                  "rootfs": {"type": "layers", "diff_ids": diffs}}).encode()
def blob(b):
    d = hashlib.sha256(b).hexdigest()
    open(f"{L}/blobs/sha256/{d}", "wb").write(b)
    return {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + d, "size": len(b)}
m = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": blob(cfg), "layers": ls}).encode()
md = blob(m)
md["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
json.dump({"schemaVersion": 2, "manifests": [md]}, open(f"{L}/index.json", "w"))
PY
echo "image built in $(($(date +%s) - t0)) s: $(du -sm "$L" | cut -f1) MiB in 21 gzip layers"

printf '[host]\ncache_file = ""\n[log]\nsyslog = false\n[kernel_image]\ncache_dir = ""\n' >"$W/config.toml"
H=tests/data/hosts/h100x8.json
now() { date +%s%N; }
best3() { # CMD... : best of 3, ns
  local b=0 t0 t
  for _ in 1 2 3; do t0=$(now); "$@" >/dev/null 2>&1 || true; t=$(($(now) - t0)); if [ "$b" = 0 ] || [ "$t" -lt "$b" ]; then b=$t; fi; done
  echo "$b"
}
baseline() {
  for l in $(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]+"/index.json"))["manifests"][0]["digest"][7:]; print(" ".join(x["digest"][7:] for x in json.load(open(sys.argv[1]+"/blobs/sha256/"+m))["layers"]))' "$L"); do
    gzip -dc "$L/blobs/sha256/$l" | tar -xOf - >/dev/null
  done
}
ours() { "$BIN" --config "$W/config.toml" check --image "$L" --host "$H" --json; }
"$BIN" --config "$W/config.toml" check --image "$L" --host "$H" --host "$H" --json |
  python3 -c 'import json,sys; v=json.load(sys.stdin); print("libraries scanned:", v["image"]["libraries"]); print("verdict:", v["results"][0]["decision"]["verdict"])'
tb=$(best3 baseline)
to=$(best3 ours)
rss=$( { /usr/bin/time -f '%M' "$BIN" --config "$W/config.toml" check --image "$L" --host "$H" --json >/dev/null; } 2>&1 | tail -1)
echo "gzip -dc | tar -xOf (all layers): $((tb / 1000000)) ms"
echo "check --image:                     $((to / 1000000)) ms"
echo "ratio: $(awk "BEGIN{printf \"%.2f\", $to/$tb}") (goal <= 1.2)"
echo "peak RSS of check --image: $((rss / 1024)) MiB (goal < 64)"

# Per host, once the image is read. With the 1 GiB image the read (seconds)
# drowns the per-host cost in noise: run `bench-image.sh 1` for that figure.
N=1000
mkdir -p "$W/all" "$W/two"
for i in $(seq 1 $N); do
  printf '{"driver_version":"550.54.15","cuda_driver_version":"12.4","gpus":[{"index":0,"uuid":"GPU-%08d","name":"NVIDIA H100 80GB HBM3","brand":"tesla","compute_capability":"9.0"}]}\n' \
    "$i" >"$W/all/host-$(printf %05d "$i").json"
done
cp "$W/all/host-00001.json" "$W/all/host-00002.json" "$W/two/"
fleet() { "$BIN" --config "$W/config.toml" check --image "$L" --hosts "$1" --json; }
t2=$(best3 fleet "$W/two")
tn=$(best3 fleet "$W/all")
per=$(((tn - t2) / (N - 2)))
echo "hosts: 2 -> $((t2 / 1000000)) ms; $N -> $((tn / 1000000)) ms; per host: $(awk "BEGIN{printf \"%.3f\", $per/1e6}") ms (goal < 1)"
