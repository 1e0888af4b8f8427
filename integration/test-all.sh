#!/usr/bin/env bash
# Every test gpu-guard has: unit and integration tests (cargo test, the whole
# workspace, including the fake NVML library under real nvml-wrapper and the
# scanner against NVIDIA's cuobjdump), the real-engine tests (runc, podman,
# docker, containerd's CRI), the Kubernetes manifest validation and the
# package flow (.deb installed, engines registered, engine tests against
# the installed binary, purge; .rpm contents). Run as root on Debian 12:
# sudo integration/test-all.sh
#
# Built once, run side by side (two cores are enough):
#   1. the release build (glibc 2.17: what the packages, the DaemonSet image
#      and every test below but test_hooks run) and cargo's test build
#      (with test-hooks), at the same time: the release build's LTO links
#      run on one thread and leave the other core to the test build;
#   2. four lanes at once of cargo's test executables (run as `cargo test`
#      runs them) and engine scripts, no two of which share a daemon or an
#      engine config; then the package step alone. The integration tests run against the
#      release build (GPU_GUARD_TEST_BIN_DIR, tests/support), which has no
#      test-hooks, so the shipped binaries pass the same tests; test_hooks
#      runs cargo's test-hooks build. The engine scripts run the release
#      build too.
#
# Prints each step's time and a summary; exits non-zero when anything
# failed. With GPU_GUARD_CI=1 (CI), a test that cannot run is a failure,
# not a skip.
set -u
cd "$(dirname "$0")/.." || exit 1
[ "$(id -u)" = 0 ] || { echo "test-all: run as root (runc, podman, docker, dpkg need it)" >&2; exit 1; }

integration/setup.sh || { echo "test-all: setup failed" >&2; exit 1; }

RELEASE_DIR=$PWD/target/x86_64-unknown-linux-gnu/release
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/gpu-guard-test-all.XXXXXX")
RESULTS=$LOGS/results
: >"$RESULTS"
exec 3>&1 # the terminal, for one line per finished step from any lane

step() { # NAME COMMAND...: runs it, records PASS or FAIL with its time
    local name=$1 t0=$SECONDS verdict=PASS
    shift
    echo
    echo "=== $name: $*"
    "$@" || verdict=FAIL
    printf '%s  %s (%d s)\n' "$verdict" "$name" $((SECONDS - t0)) | tee -a "$RESULTS" >&3
}

lane_pids=()
lane_names=()
lane() { # NAME FUNCTION: runs FUNCTION in the background, its output in a log
    "$2" >"$LOGS/$1.log" 2>&1 </dev/null &
    lane_pids+=($!)
    lane_names+=("$1")
}
wait_lanes() { # prints each lane's log once it has ended
    local i
    for i in "${!lane_pids[@]}"; do
        wait "${lane_pids[$i]}"
        echo
        echo "##### ${lane_names[$i]}"
        cat "$LOGS/${lane_names[$i]}.log"
    done
    lane_pids=()
    lane_names=()
}

# --- 1. the two builds ------------------------------------------------------
release_build() { step "release build (glibc 2.17)" packaging/build-release.sh; }
# The test executables, one line each: target name, kind, path, package dir.
build_tests() {
    (
        set -o pipefail
        cargo test --workspace --features test-hooks --locked --no-run --message-format=json-render-diagnostics |
            jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
                | [.target.name, .target.kind[0], .executable, (.manifest_path | sub("/Cargo.toml$"; ""))]
                | @tsv' >"$LOGS/test-binaries"
    )
}
test_build() { step "test build" build_tests; }
lane release release_build
lane test-build test_build
wait_lanes

# --- 2. tests and engines ---------------------------------------------------
# The test executables run as `cargo test` runs them (in their package's
# directory), but two at a time: cargo holds its build lock while tests
# run, so two `cargo test`s would take turns. Unit tests are `unit`; a
# step after the lanes checks that each executable the build made ran.
run_tests() { # TARGET...: every test executable of these targets
    local want=" $* " name kind exe dir key rc=0 ran=0 line
    local -a list
    # Read whole first: a test reading its stdin must not eat the list.
    mapfile -t list <"$LOGS/test-binaries"
    for line in "${list[@]}"; do
        IFS=$'\t' read -r name kind exe dir <<<"$line"
        key=$name
        [ "$kind" = test ] || key=unit
        [[ $want == *" $key "* ]] || continue
        echo "--- $name ($kind): $exe"
        (cd "$dir" && GPU_GUARD_TEST_BIN_DIR=$RELEASE_DIR "$exe" </dev/null) || rc=1
        ran=$((ran + 1))
        echo "$exe" >>"$LOGS/ran"
    done
    echo "--- $ran test executables run for: $*"
    [ "$ran" -gt 0 ] || rc=1
    return $rc
}
TESTS_A="decide install it"
TESTS_B="unit image"
TESTS_C="test_hooks"
every_test_executable_ran() { # each one the build made, once
    diff <(cut -f3 "$LOGS/test-binaries" | sort) <(sort "$LOGS/ran" 2>/dev/null) &&
        [ -s "$LOGS/test-binaries" ]
}
# Four lanes of about the same length here (two cores): the tests are
# CPU-bound, the engine scripts mostly wait on their engines.
lane_1() {
    # `it`: the admission and node-agent crates' integration tests.
    step "cargo tests: $TESTS_A" run_tests $TESTS_A
}
lane_2() {
    step "cargo tests: $TESTS_B" run_tests $TESTS_B
    step "kubernetes manifests" integration/validate-k8s.sh
    step "metrics textfile" integration/test-metrics.sh
}
lane_3() {
    step "runc" integration/test-runc.sh
    step "runc spec parity" integration/test-spec-parity.sh
    step "failure modes" integration/test-failure-modes.sh
}
lane_4() {
    step "podman" integration/test-podman.sh
    step "docker" integration/test-docker.sh
    step "containerd CRI" integration/test-cri.sh
    step "kubernetes image" integration/test-k8s-image.sh
    step "check --image vs docker export" integration/test-image-docker.sh
    step "cargo tests: $TESTS_C" run_tests $TESTS_C
}
# The engine scripts run the release build (integration/lib.sh would take
# the newer of it and cargo's debug build, which has test-hooks).
export GPU_GUARD_BIN=$RELEASE_DIR/gpu-guard
if grep -q '^FAIL' "$RESULTS"; then
    echo "test-all: a build failed; no tests run" >&2
else
    lane lane-1 lane_1
    lane lane-2 lane_2
    lane lane-3 lane_3
    lane lane-4 lane_4
    wait_lanes
    step "every test executable ran once" every_test_executable_ran
    # Alone: it installs gpu-guard into this host's own docker and podman
    # configs, and checks that purging leaves nothing of gpu-guard's in
    # /etc, /run, /usr and /var/lib, which any other gpu-guard run could
    # write meanwhile.
    step "packages (.deb install/purge, .rpm)" integration/package-test.sh
fi

echo
echo "=== summary"
cat "$RESULTS"
echo "total: $SECONDS s"
status=0
grep -q '^FAIL' "$RESULTS" && status=1
rm -rf "$LOGS"
exit $status
