#!/usr/bin/env bash
# Benchmark of `gpu-guard scan` on HIP code objects against LLVM's
# clang-offload-bundler. Prints figures and ratios; exits non-zero when a
# target is missed.
#
#  1. `gpu-guard scan LIB` (every bundle the .hipFatBinSegment wrappers
#     point at) vs `clang-offload-bundler --list` over the same bundles
#     (LIB's bundles cut out beforehand, not timed: the bundler lists one
#     bundle file at a time and nothing of a linked library), after checking
#     that both list the same targets, bundle by bundle; interleaved rounds,
#     median ratio (target <= 0.1).
#  2. Peak RSS of `gpu-guard scan LIB` (GNU time; target < 16 MB), and of a
#     compressed bundle claiming 1 TiB uncompressed (a bomb: target < 16 MB).
#
# Needs: python3, GNU time, Debian's librocsparse0 and clang-tools-19 or
# clang-tools-15 (integration/setup.sh). Env: GPU_GUARD (binary, default
# target/release/gpu-guard), BUNDLER, BENCH_LIB (default librocsparse),
# ROUNDS (default 5).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
GG=${GPU_GUARD:-$here/target/release/gpu-guard}
ROUNDS=${ROUNDS:-5}
[[ -x "$GG" ]] || { echo "build first: cargo build --release ($GG missing)" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "GNU time missing (apt-get install time)" >&2; exit 2; }
BUNDLER=${BUNDLER:-$(ls /usr/lib/llvm-19/bin/clang-offload-bundler /usr/bin/clang-offload-bundler-15 2>/dev/null | head -1 || true)}
[[ -x "$BUNDLER" ]] || { echo "clang-offload-bundler missing (apt-get install clang-tools-19)" >&2; exit 2; }
LIB=${BENCH_LIB:-$(ls /usr/lib/x86_64-linux-gnu/librocsparse.so.0.* 2>/dev/null | head -1 || true)}
[[ -f "$LIB" ]] || { echo "no HIP library (apt-get install librocsparse0, or BENCH_LIB=)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "library: $LIB ($(du -h "$LIB" | cut -f1))"
echo "gpu-guard: $GG"
echo "bundler: $BUNDLER ($("$BUNDLER" --version | grep -i version | head -1))"

# Cut out each bundle the wrappers point at (ELF64: section headers,
# .hipFatBinSegment records { u32 magic, u32 version, u64 address, u64 }).
python3 - "$LIB" "$tmp/bundles" <<'EOF'
import os, struct, sys
path, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
f = open(path, 'rb')
def rd(o, n): f.seek(o); return f.read(n)
h = rd(0, 64)
shoff, = struct.unpack_from('<Q', h, 0x28); shnum, shstrndx = struct.unpack_from('<HH', h, 0x3c)
secs = [struct.unpack('<IIQQQQIIQQ', rd(shoff + i * 64, 64)) for i in range(shnum)]
names = rd(secs[shstrndx][4], secs[shstrndx][5])
name = lambda s: names[s[0]:names.index(b'\0', s[0])].decode()
seg = next(s for s in secs if name(s) == '.hipFatBinSegment')
def to_off(va):
    for s in secs:
        if s[1] != 8 and s[2] & 2 and s[3] <= va < s[3] + s[5]:
            return s[4] + va - s[3]
n = 0
for i in range(0, seg[5], 24):
    magic, _, va, _ = struct.unpack('<IIQQ', rd(seg[4] + i, 24))
    if magic != 0x48495046: continue
    at = to_off(va); hd = rd(at, 32)
    if hd[:4] == b'CCOB':
        size, = struct.unpack_from('<Q' if struct.unpack_from('<H', hd, 4)[0] == 3 else '<I', hd, 8)
    else:
        cnt, = struct.unpack_from('<Q', hd, 24); p = at + 32; size = 0
        for _ in range(cnt):
            o, s, l = struct.unpack('<QQQ', rd(p, 24)); p += 24 + l; size = max(size, o + s)
    open(os.path.join(out, '%04d.bin' % n), 'wb').write(rd(at, size)); n += 1
print('%d bundles' % n)
EOF

# --- 1. same targets, bundle by bundle ---------------------------------------
for b in "$tmp"/bundles/*.bin; do
    "$BUNDLER" --list --type=o --input="$b" | sed -n 's/^hip\(v4\)\{0,1\}-amdgcn-amd-amdhsa--//p' | sort
    echo "--"
done > "$tmp/theirs"
for b in "$tmp"/bundles/*.bin; do
    "$GG" scan --json "$b" | python3 -c 'import json,sys; [print(a) for a in sorted(e["arch"] for e in json.load(sys.stdin)["files"][0]["entries"])]'
    echo "--"
done > "$tmp/ours"
if diff -q "$tmp/theirs" "$tmp/ours" > /dev/null; then
    echo "targets: identical in all $(ls "$tmp"/bundles | wc -l) bundles ($(grep -vc -- -- "$tmp/ours") code objects)"
else
    echo "targets DIFFER:"; diff -u "$tmp/theirs" "$tmp/ours" | head -20; fail=1
fi
whole=$("$GG" scan --json "$LIB" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["files"][0]["entries"]))')
[[ "$whole" == "$(grep -vc -- -- "$tmp/ours")" ]] || { echo "  the whole library lists $whole code objects"; fail=1; }

# --- 1. speed ----------------------------------------------------------------
list_all() { for b in "$tmp"/bundles/*.bin; do "$BUNDLER" --list --type=o --input="$b"; done > /dev/null; }
"$GG" scan "$LIB" > /dev/null; list_all   # warm the page cache
: > "$tmp/gg"; : > "$tmp/bu"
for _ in $(seq "$ROUNDS"); do
    t0=$(now_ns); "$GG" scan "$LIB" > /dev/null; t1=$(now_ns)
    list_all; t2=$(now_ns)
    echo $((t1 - t0)) >> "$tmp/gg"; echo $((t2 - t1)) >> "$tmp/bu"
done
gg_med=$(median < "$tmp/gg"); bu_med=$(median < "$tmp/bu")
ratio=$(awk -v a="$gg_med" -v b="$bu_med" 'BEGIN {printf "%.4f", a / b}')
printf 'scan: gpu-guard median %.2f ms, clang-offload-bundler --list median %.2f ms, ratio %s (target <= 0.1, %d interleaved rounds)\n' \
    "$(awk -v v="$gg_med" 'BEGIN{print v/1e6}')" "$(awk -v v="$bu_med" 'BEGIN{print v/1e6}')" "$ratio" "$ROUNDS"
awk -v r="$ratio" 'BEGIN {exit !(r <= 0.1)}' || { echo "  MISSED: ratio > 0.1"; fail=1; }

# --- 2. peak RSS ---------------------------------------------------------------
rss_kb() { { /usr/bin/time -v "$@" 2>&1 >/dev/null || true; } | awk -F': ' '/Maximum resident set size/ {print $2}'; }
rss_lib=$(rss_kb "$GG" scan "$LIB")
# A zstd bomb: 1 GiB of zeros in a CCOB v3 claiming 1 TiB.
if command -v zstd > /dev/null; then
    head -c 1073741824 /dev/zero | zstd -q -c > "$tmp/zeros.zst"
    python3 - "$tmp/zeros.zst" "$tmp/bomb.ccob" <<'EOF'
import struct, sys
data = open(sys.argv[1], 'rb').read()
hdr = b'CCOB' + struct.pack('<HHQQQ', 3, 1, 32 + len(data), 1 << 40, 0)
open(sys.argv[2], 'wb').write(hdr + data)
EOF
    rss_bomb=$(rss_kb "$GG" scan "$tmp/bomb.ccob")
    echo "peak RSS: $rss_lib KiB on $(basename "$LIB"), $rss_bomb KiB on a zstd bomb (1 GiB of zeros claiming 1 TiB) (target < 16384 KiB)"
    (( rss_bomb < 16384 )) || { echo "  MISSED: bomb RSS $rss_bomb KiB"; fail=1; }
else
    echo "peak RSS: $rss_lib KiB on $(basename "$LIB") (target < 16384 KiB; zstd missing: no bomb run)"
fi
(( rss_lib < 16384 )) || { echo "  MISSED: RSS $rss_lib KiB"; fail=1; }
exit $fail
