#!/usr/bin/env bash
# Benchmark: what one container start pays for gpu-guard's prestart hook,
# above the exec of /bin/true. farm-bench times a shell loop of N hook
# starts against the same loop of /bin/true with the same stdin, A B A B,
# and the difference of the medians over N is the cost of one start:
#  - a non-GPU container under the shipped config (syslog off, as every
#    case here; syslog is a socket write the engine never waits on longer)
#    on a host with NVIDIA's toolkit config (tests/data/nvidia-toolkit);
#  - the same under a two-line config (what the shipped one's size costs);
#  - the same with no parsed config kept (GPU_GUARD_CONFIG_CACHE empty):
#    what every start paid before, and a start after an edit still pays;
#  - `--version` (exec, loader, clap);
#  - a GPU container (nvidia/cuda 12.4.1's env) judged from a facts file.
# Goals: 0.5 ms above /bin/true for a non-GPU container, 1 ms for a GPU one.
# Usage: integration/bench-start.sh [rounds] [starts-per-loop]
#   GG=/path/to/gpu-guard: the binary (default: the release build);
#   farm-bench (the tool library) must be on PATH.
. "$(dirname "$0")/lib.sh"
need_cmd farm-bench jq runc
ROUNDS=${1:-15}
N=${2:-200}
BIN=${GG_START_BIN:-$RELEASE_DIR/gpu-guard}
[ -x "$BIN" ] || { echo "bench-start: no binary at $BIN (packaging/build-release.sh)" >&2; exit 1; }
new_scratch
# A copy: a file the linker wrote sits in the page cache in smaller pieces
# than a copied one and takes more page faults to start (bench-hook.sh).
cp "$BIN" "$T/gpu-guard"
GG=$T/gpu-guard
GG_SYSLOG=false gg_config "$T/shipped.toml" h100x8
# Every GPU host has NVIDIA's toolkit config, which a start reads beside
# gpu-guard's own (detect.nvidia_config).
sed -i "s|^nvidia_config = .*|nvidia_config = \"$REPO_DIR/tests/data/nvidia-toolkit/config.toml\"|" "$T/shipped.toml"
grep -q "^nvidia_config = \"$REPO_DIR/" "$T/shipped.toml" || { echo "bench-start: the config names no NVIDIA toolkit config" >&2; exit 1; }
printf 'mode = "enforce"\n[log]\nsyslog = false\n' >"$T/short.toml"
mapfile -t IMG < "$REPO_DIR/tests/data/images/cuda-12.4.1-base-ubuntu2204.env"
make_bundle "$T/plain" '["true"]' HOME=/root
make_bundle "$T/gpu" '["true"]' "${IMG[@]}" NVIDIA_VISIBLE_DEVICES=all
for b in plain gpu; do
    make_compliant "$T/$b"
    printf '{"ociVersion":"1.0.2","id":"bench","status":"creating","pid":1,"bundle":"%s"}' "$T/$b" >"$T/$b.state"
done

# Each case must do what it is timed for before it is timed.
"$GG" --config "$T/shipped.toml" hook prestart <"$T/plain.state" || { echo "bench-start: the non-GPU start failed" >&2; exit 1; }
"$GG" --config "$T/shipped.toml" hook prestart <"$T/gpu.state" || { echo "bench-start: the GPU start was refused" >&2; exit 1; }
"$GG" --config "$T/shipped.toml" check --bundle "$T/gpu" --json | jq -e '.gpu_container' >/dev/null ||
    { echo "bench-start: the GPU bundle is not a GPU container" >&2; exit 1; }

loop() { # STDIN-FILE ARGS...: N starts, in a shell loop
    local input=$1
    shift
    printf 'i=0; while [ $i -lt %d ]; do %s <%s >/dev/null; i=$((i+1)); done' "$N" "$*" "$input"
}
median_wall() { # the median wall seconds of A or B in farm-bench's report
    awk -v who="$1" '$1 == who && $2 == "wall" { print $4 }'
}
bench() { # NAME STDIN-FILE ARGS...
    local name=$1 input=$2 out a b
    shift 2
    out=$(farm-bench -n "$ROUNDS" --timeout 600 --vs "sh -c '$(loop "$input" /bin/true)'" -- sh -c "$(loop "$input" "$@")")
    a=$(median_wall A <<<"$out")
    b=$(median_wall B <<<"$out")
    awk -v n="$name" -v a="$a" -v b="$b" -v N="$N" \
        'BEGIN { printf "%-48s loop %7.1f ms  /bin/true loop %6.1f ms  per start above /bin/true %.2f ms\n", n, a * 1000, b * 1000, (a - b) * 1000 / N }'
}
echo "binary: $BIN ($(stat -c %s "$BIN") B); $ROUNDS rounds of $N starts each"
bench "non-GPU container, shipped config" "$T/plain.state" "$GG" --config "$T/shipped.toml" hook prestart
bench "non-GPU container, shipped config, none kept" "$T/plain.state" GPU_GUARD_CONFIG_CACHE= "$GG" --config "$T/shipped.toml" hook prestart
bench "non-GPU container, two-line config" "$T/plain.state" "$GG" --config "$T/short.toml" hook prestart
bench "--version (exec, loader, clap)" "$T/plain.state" "$GG" --version
bench "GPU container from a facts file (h100x8)" "$T/gpu.state" "$GG" --config "$T/shipped.toml" hook prestart
