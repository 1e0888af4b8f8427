#!/usr/bin/env bash
# Benchmark: how long `cargo test` takes to build and run.
#  1. cold, dependencies included: a fresh target directory;
#  2. cold for the project only: `cargo clean -p gpu-guard`, dependencies kept;
#  3. warm: one comment line appended to src/core/decide.rs (a one-line
#     change to the library every test binary links);
#  4. the test run alone, everything built;
#  5. plain `cargo test` (no test-hooks) built after the feature build, and run.
# Each of 2-4 is repeated RUNS times (min and median printed: other builds may
# share the cores). Works on `git archive` of REV (default HEAD) in a temp
# directory with its own target dir: this checkout's sources and target/ are
# never touched. The test runs start podman and containerd: on a machine
# shared with other engine tests they take the lock GG_ENGINE_LOCK names
# (default /tmp/gg-engines.lock; the build steps do not) and are timed once
# it is held.
# Usage: integration/bench-test-build.sh [RUNS]   (REV=<commit>, COLD_FULL=0 skips 1)
set -euo pipefail
RUNS=${1:-3}
REV=${REV:-HEAD}
REPO_DIR=${REPO_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
W=$(mktemp -d /tmp/gg-bench-testbuild.XXXXXX)
trap 'rm -rf "$W"' EXIT
trap 'exit 1' TERM
git -C "$REPO_DIR" archive "$REV" | tar -x -C "$W"
cd "$W"
export CARGO_TARGET_DIR="$W/target" CARGO_TERM_COLOR=never
FEAT=(--workspace --features test-hooks --locked)

now() { date +%s.%N; }
# timed NAME CMD...: runs CMD quietly (output kept in $W/NAME.log), prints seconds.
timed() {
    local name=$1 t0 t1
    shift
    t0=$(now)
    local rc=0
    "$@" >"$W/$name.log" 2>&1 || rc=$?
    t1=$(now)
    echo "$t0 $t1" | awk '{ printf "%.1f", $2 - $1 }'
    if [ $rc != 0 ]; then
        printf ' (FAILED, exit %s)' "$rc"
        { echo "$name failed:"; grep -E '^(test .* FAILED|error)' "$W/$name.log" | head -20; } >&2
        [ "${ALLOW_FAIL:-0}" = 1 ] || kill -TERM $$
    fi
    echo
}
stats() { # NAME VALUES...: min and median
    local name=$1
    shift
    printf '%s\n' "$@" | sort -n | awk -v n="$name" '{ v[NR] = $1 }
        END { printf "%-40s min %6.1f s  median %6.1f s  (%s)\n", n, v[1], v[int((NR + 1) / 2)], NR " runs" }'
}
load() { cut -d' ' -f1-3 /proc/loadavg; }
tests_in() { # LOG: passed and ignored tests, and test binaries run
    awk '/^test result:/ { p += $4; i += $8 } /Running (tests|unittests)/ { b++ }
        END { printf "%d passed, %d ignored, %d test executables run\n", p, i, b }' "$1"
}
# locked NAME CARGO-TEST-ARGS...: `cargo test` under the engine lock, timed
# once the lock is held (waiting for another helper's engine test is not
# test time); prints seconds like `timed`.
locked() {
    local name=$1 rc=0
    shift
    flock -o "${GG_ENGINE_LOCK:-/tmp/gg-engines.lock}" bash -c 'date +%s.%N; cargo test "$@" >"$0" 2>&1; rc=$?; date +%s.%N; exit $rc' \
        "$W/$name.log" "$@" >"$W/$name.times" || rc=$?
    tr '\n' ' ' <"$W/$name.times" | awk '{ printf "%.1f", $2 - $1 }'
    if [ $rc != 0 ]; then
        printf ' (FAILED, exit %s)' "$rc"
        { echo "$name failed:"; grep -E '^(test .* FAILED|error)' "$W/$name.log" | head -20; } >&2
        [ "${ALLOW_FAIL:-0}" = 1 ] || kill -TERM $$
    fi
    echo
}

echo "tree: $(git -C "$REPO_DIR" rev-parse --short "$REV")"
if [ "${COLD_FULL:-1}" = 1 ]; then
    echo "load before cold build: $(load)"
    echo "cold, dependencies included: $(timed cold-full cargo test "${FEAT[@]}" --no-run) s"
else
    cargo test "${FEAT[@]}" --no-run >"$W/cold-full.log" 2>&1
fi
echo "integration-test executables: $(grep -c 'Executable tests/' "$W/cold-full.log")"
echo "their total size: $(grep 'Executable tests/' "$W/cold-full.log" | sed 's/.*(\(.*\))/\1/' | xargs du -cb | tail -1 | cut -f1) bytes"

cold=() warm=() runs=()
for i in $(seq 1 "$RUNS"); do
    cargo clean -p gpu-guard >/dev/null 2>&1
    echo "run $i: load $(load)"
    cold+=("$(timed cold-project cargo test "${FEAT[@]}" --no-run)")
    echo "// bench-test-build: one-line change $i" >>src/core/decide.rs
    warm+=("$(timed warm cargo test "${FEAT[@]}" --no-run)")
    runs+=("$(locked test-run "${FEAT[@]}")")
    echo "  cold project ${cold[-1]} s, warm ${warm[-1]} s, test run ${runs[-1]} s"
done
echo
stats "cold, project only (deps built)" "${cold[@]}"
stats "warm, one-line change in src/" "${warm[@]}"
stats "test run (all built)" "${runs[@]}"
echo "tests: $(tests_in "$W/test-run.log")"

echo
echo "plain cargo test (no test-hooks), after the feature build: load $(load)"
echo "  build: $(timed plain-build cargo test --workspace --locked --no-run) s"
echo "  run:   $(ALLOW_FAIL=1 locked plain-run --workspace --locked) s"
echo "  tests: $(tests_in "$W/plain-run.log")"
echo "  back to the feature build (no change): $(timed feature-again cargo test "${FEAT[@]}" --no-run) s"
