#!/usr/bin/env bash
# Benchmark: the libraries scan's budgets under hostile root filesystems
# (integration/hostile_libs.py), through the prestart hook on a cold cache
# (the [libraries] cache emptied before every run), as a container start
# pays them: wall time and peak RSS (GNU time's %M) of one hook each.
#
# Inputs:
#  - chain-N: N GPU libraries in a DT_NEEDED chain (each needs the next);
#  - tops-T-N: T GPU libraries that each need the head of an N-deep chain;
#  - selfinclude-N: /etc/ld.so.conf of N lines `include ld.so.conf`;
#  - globlinks-K: `include /*/*/*/*/*/*/*/*` beside K symlinks to `/`;
#  - globwide-K: 100 lines `include /*/*` beside K symlinks to `/` and a
#    directory of 20,000 files.
# The config is the shipped one (time_budget_ms 2000) with the kernel-image
# scan off, severity "enforce" and on_incomplete "refuse": a scan a budget
# stops refuses, saying why (the "stopped early" column).
#
# GG_BASELINE=<another gpu-guard> runs the same hooks with it too (e.g. main's
# release build: the "before" figures); its runs are cut at GG_BASELINE_LIMIT
# seconds (default 300) and shown as "> LIMIT s".
# Usage: integration/bench-libraries-hostile.sh   (NO_BUILD=1 skips the build)
. "$(dirname "$0")/lib.sh"
need_cmd python3 jq /usr/bin/time timeout
[ "${NO_BUILD:-0}" = 1 ] || (cd "$REPO_DIR" && cargo build --release -q --bin gpu-guard) || exit 1
GG="$REPO_DIR/target/release/gpu-guard"
new_scratch
LIMIT=${GG_BASELINE_LIMIT:-300}

gg_config "$T/cfg.toml" h100x8
python3 - "$T/cfg.toml" <<'PY'
import re, sys
p = sys.argv[1]
s = open(p).read()
def set_in(table, key, value):
    global s
    m = re.search(r"(?m)^\[" + re.escape(table) + r"\]\n", s)
    end = re.search(r"(?m)^\[", s[m.end():])
    body = s[m.end(): m.end() + (end.start() if end else len(s))]
    new = re.sub(r"(?m)^" + key + r" = .*$", f"{key} = {value}", body)
    s = s[:m.end()] + new + s[m.end() + len(body):]
set_in("kernel_image", "severity", '"off"')
set_in("libraries", "severity", '"enforce"')
set_in("libraries", "on_incomplete", '"refuse"')
open(p, "w").write(s)
PY
sed -i "s|^syslog = .*|syslog = false|" "$T/cfg.toml"

INPUTS="chain-1000 chain-2000 tops-300-1500 selfinclude-3400 globlinks-16 globwide-4"
export INTEGRATION_DIR
for i in $INPUTS; do
    r="$T/$i/rootfs"
    mkdir -p "$r"
    case $i in
    chain-*) python3 "$INTEGRATION_DIR/hostile_libs.py" chain "$r" "${i#chain-}" --descending ;;
    tops-*)
        n=${i##*-}
        t=${i#tops-}
        t=${t%-*}
        python3 "$INTEGRATION_DIR/hostile_libs.py" chain "$r" "$n" --descending
        python3 - "$r" "$t" "$n" <<'PY'
import sys
sys.path.insert(0, __import__("os").environ["INTEGRATION_DIR"])
from hostile_libs import elf_needing
r, t, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for k in range(t):
    with open(f"{r}/usr/local/lib/libcutop{k:04d}.so", "wb") as f:
        f.write(elf_needing([f"libcu{n - 1:05d}.so"]))
PY
        ;;
    selfinclude-*) python3 "$INTEGRATION_DIR/hostile_libs.py" selfinclude "$r" "${i#selfinclude-}" ;;
    globlinks-*) python3 "$INTEGRATION_DIR/hostile_libs.py" globlinks "$r" "${i#globlinks-}" ;;
    globwide-*) python3 "$INTEGRATION_DIR/hostile_libs.py" globwide "$r" "${i#globwide-}" ;;
    esac
    jq -n --arg root "$r" '{ociVersion: "1.0.2", root: {path: $root},
        process: {args: ["true"], cwd: "/", env: ["NVIDIA_VISIBLE_DEVICES=all"], noNewPrivileges: true},
        hooks: {prestart: [{path: "/usr/bin/nvidia-container-runtime-hook", args: ["nvidia-container-runtime-hook", "prestart"]}]}}' \
        > "$T/$i/config.json"
done

# hook BINARY INPUT: "wall_s peak_kib exit stopped" of one cold-cache hook.
hook() {
    local bin=$1 i=$2 out
    rm -rf "$T/scan-cache"
    out=$(printf '{"ociVersion":"1.0.2","id":"bench","status":"creating","pid":1,"bundle":"%s"}' "$T/$i" |
        /usr/bin/time -f 'TIME %e %M' timeout "$LIMIT" "$bin" --config "$T/cfg.toml" hook prestart 2>&1)
    local rc=$?
    local tm
    tm=$(printf '%s\n' "$out" | sed -n 's/^TIME //p' | tail -1)
    local stopped=no
    printf '%s' "$out" | grep -q "stopped early\|not read whole" && stopped=yes
    [ "$rc" = 124 ] && stopped="killed at ${LIMIT}s"
    echo "$tm $rc $stopped"
}

mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

printf '| input | gpu-guard: wall | peak RSS | exit | stopped early |'
[ -n "${GG_BASELINE:-}" ] && printf ' baseline: wall | peak RSS |'
printf '\n'
for i in $INPUTS; do
    read -r s k rc st <<<"$(hook "$GG" "$i")"
    printf '| %s | %.2f s | %s MiB | %s | %s |' "$i" "$s" "$(mib "$k")" "$rc" "$st"
    if [ -n "${GG_BASELINE:-}" ]; then
        read -r bs bk brc bst <<<"$(hook "$GG_BASELINE" "$i")"
        if [ "$brc" = 124 ]; then
            printf ' > %s s | > %s MiB |' "$LIMIT" "$(mib "$bk")"
        else
            printf ' %.2f s | %s MiB |' "$bs" "$(mib "$bk")"
        fi
    fi
    printf '\n'
done
