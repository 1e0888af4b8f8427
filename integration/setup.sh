#!/usr/bin/env bash
# Installs what gpu-guard's demo and tests need on a fresh Debian 12 machine
# (as root): container engines, busybox-static for test rootfs, jq, rpm
# (rpmbuild; dpkg-deb is dpkg's), the NVIDIA PyPI tools used as reference
# peers, and the release build's zig toolchain (ziglang, cargo-zigbuild).
# Nothing is compiled here: every tool comes as a package or a wheel.
# Idempotent: only what is missing is installed.
set -euo pipefail

want_apt=()
need() { command -v "$1" >/dev/null 2>&1 || want_apt+=("$2"); }
need runc runc
need podman podman
need dockerd docker.io
need containerd containerd
need ctr containerd
need jq jq
need rpm rpm
need rpmbuild rpm
# objdump: the glibc version the .deb depends on (packaging/build-packages.sh).
need objdump binutils
need hyperfine hyperfine
# Registry images: a private distribution 2.8 registry on
# 127.0.0.1 for the tests and benchmarks (its packaged service is not used:
# tests start their own, with their own config), skopeo to push images,
# htpasswd for the registry's basic auth, openssl for test certificates.
need docker-registry docker-registry
need skopeo skopeo
need htpasswd apache2-utils
need openssl openssl
need python3 python3
# kubectl's kustomize renders the kustomize layout (integration/validate-k8s.sh;
# kustomize v4 or later, kubectl 1.21+): the `kubectl` package where an apt
# source has it (Kubernetes' own), else Debian's kubernetes-client.
if ! command -v kubectl >/dev/null 2>&1; then
    if apt-cache policy kubectl 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        want_apt+=(kubectl)
    else
        want_apt+=(kubernetes-client)
    fi
fi
# Go's own encoding/json, the reference tests/decide/spec_go_decoder.rs compares the
# spec reader with (a small program built at test time).
need go golang-go
[ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || want_apt+=(busybox-static)
command -v file >/dev/null 2>&1 || want_apt+=(file)
[ -x /usr/bin/time ] || want_apt+=(time)
command -v gcc >/dev/null 2>&1 || want_apt+=(build-essential)
# The kernel's capability numbering, read by test-cri.sh to decode CapEff.
[ -f /usr/include/linux/capability.h ] || want_apt+=(linux-libc-dev)
# AMD GPUs: the HIP code-object scanner's fixtures and parity peer.
# Debian 12 packages real ROCm 5.2 libraries (librocsparse0: 111 offload
# bundles in one .hip_fatbin; librocrand1), hipcc (HIP on LLVM 15, no GPU
# needed) and LLVM's clang-offload-bundler (clang-tools-15; clang-tools-19
# reads and, with clang-19 and lld-19, writes compressed bundles and knows
# gfx942 and the generic targets). tests/image/amd_scan.rs compares
# gpu-guard's listing with the bundler's; integration/make-hip-fixtures.sh
# rebuilds tests/data/hip; integration/bench-scan-amd.sh times the two
# (zstd builds its compression bomb).
[ -f /usr/lib/x86_64-linux-gnu/librocsparse.so.0.1 ] || want_apt+=(librocsparse0)
[ -f /usr/lib/x86_64-linux-gnu/librocrand.so.1.1 ] || want_apt+=(librocrand1)
need hipcc hipcc
need clang-offload-bundler-15 clang-tools-15
need clang++-19 clang-19
[ -x /usr/lib/llvm-19/bin/clang-offload-bundler ] || want_apt+=(clang-tools-19)
[ -x /usr/lib/llvm-19/bin/ld.lld ] || want_apt+=(lld-19)
need zstd zstd

if [ ${#want_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "setup: need root to install: ${want_apt[*]}" >&2
        exit 1
    fi
    echo "setup: installing ${want_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${want_apt[@]}" >/dev/null
fi

# Debian's docker-registry package starts its own registry on :5000, all
# interfaces, where systemd runs: the tests never use it, so it stays off.
if printf '%s\n' "${want_apt[@]:-}" | grep -qx docker-registry && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi

if [ "${1:-}" = --demo ]; then
    exit 0
fi

# NVIDIA's own tools (reference peers for the fatbin scanner), the
# offline Kubernetes schema validator (it brings PyYAML, which
# test-k8s-image.sh reads the DaemonSet with), and gRPC for the CRI client of
# test-cri.sh / bench-cri.sh (grpcio-tools generates its stubs at test time).
pip_want=()
has_py() { python3 -c 'import importlib.util,sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 1)' "$1" 2>/dev/null; }
has_py kubernetes_validate || pip_want+=(kubernetes-validate)
has_py grpc || pip_want+=(grpcio)
has_py grpc_tools || pip_want+=(grpcio-tools)
has_py yaml || pip_want+=(PyYAML)
# Prometheus' own text parser, which test-metrics.sh reads the metrics textfile with.
has_py prometheus_client || pip_want+=(prometheus-client)
# zig's toolchain (with glibc 2.17's symbol versions) for the release build
# (packaging/build-release.sh), and cargo-zigbuild, which drives it: its
# own project publishes the binary on PyPI (the same 0.24 release
# `cargo install` builds from source in about a minute on two cores).
has_py ziglang || pip_want+=(ziglang)
command -v cargo-zigbuild >/dev/null 2>&1 || pip_want+=(cargo-zigbuild)
for p in nvidia-cuda-nvcc nvidia-cuda-cuobjdump nvidia-curand; do
    python3 -m pip show -q "$p" >/dev/null 2>&1 || pip_want+=("$p")
done
if [ ${#pip_want[@]} -gt 0 ]; then
    echo "setup: pip installing ${pip_want[*]}"
    python3 -m pip --version >/dev/null 2>&1 || apt-get install -y -qq python3-pip >/dev/null
    # Debian's own python refuses global installs (PEP 668) unless told.
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore "${pip_want[@]}" ||
        python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --break-system-packages "${pip_want[@]}"
fi

