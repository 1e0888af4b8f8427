#!/usr/bin/env bash
# Every test gpu-guard has: unit and integration tests (cargo test, the whole
# workspace, including the fake NVML library under real nvml-wrapper and the
# scanner against NVIDIA's cuobjdump; then again without the test-hooks
# feature), the real-engine tests (runc, podman, docker), the Kubernetes
# manifest validation and the package flow (.deb installed, engines
# registered, engine tests against the installed binary, purge; .rpm
# contents). Run as root on Debian 12: sudo integration/test-all.sh
#
# Prints a summary and exits non-zero when anything failed. With
# GPU_GUARD_CI=1 (CI), a test that cannot run is a failure, not a skip.
set -u
cd "$(dirname "$0")/.." || exit 1
[ "$(id -u)" = 0 ] || { echo "test-all: run as root (runc, podman, docker, dpkg need it)" >&2; exit 1; }

integration/setup.sh || { echo "test-all: setup failed" >&2; exit 1; }

results=()
failed=0
step() { # NAME COMMAND...
    local name=$1
    shift
    echo
    echo "=== $name: $*"
    local t0=$SECONDS
    if "$@"; then
        results+=("PASS  $name ($((SECONDS - t0)) s)")
    else
        results+=("FAIL  $name ($((SECONDS - t0)) s)")
        failed=1
    fi
}

# The one release build (glibc 2.17, cargo-zigbuild): what the packages,
# the DaemonSet image and the engine tests below use.
step "release build (glibc 2.17)" packaging/build-release.sh
step "cargo test" cargo test --workspace --features test-hooks --locked
# Plain `cargo test` passes too: every test binary but test_hooks (Cargo.toml
# required-features), built without the feature as a developer builds it.
step "cargo test, no test-hooks" cargo test --workspace --locked
step "runc" integration/test-runc.sh
step "runc spec parity" integration/test-spec-parity.sh
step "podman" integration/test-podman.sh
step "docker" integration/test-docker.sh
step "metrics textfile" integration/test-metrics.sh
step "containerd CRI" integration/test-cri.sh
step "failure modes" integration/test-failure-modes.sh
step "kubernetes image" integration/test-k8s-image.sh
step "check --image vs docker export" integration/test-image-docker.sh
step "kubernetes manifests" integration/validate-k8s.sh
step "packages (.deb install/purge, .rpm)" integration/package-test.sh

echo
echo "=== summary"
printf '%s\n' "${results[@]}"
echo "total: $SECONDS s"
exit $failed
