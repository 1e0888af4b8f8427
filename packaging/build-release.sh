#!/usr/bin/env bash
# The release build: every binary of the workspace, optimised, for
# x86_64 Linux with glibc 2.17 (cargo-zigbuild links against glibc 2.17's
# symbol versions with zig's toolchain). The binaries then run on every
# distribution NVIDIA's container toolkit packages for (Amazon Linux 2:
# glibc 2.26, RHEL/Rocky 8 and Debian 10: 2.28, Ubuntu 20.04: 2.31) and
# older enterprise hosts; NVML is still loaded at run time (dlopen).
#
# This is THE release build: the packages (build-packages.sh), the
# DaemonSet image (kubernetes/build-image.sh) and the integration scripts
# (integration/lib.sh) all use its output, built once:
#   target/x86_64-unknown-linux-gnu/release/
# tests/structure/portable_binary.rs fails if any of them needs a newer
# glibc symbol version. Needs cargo-zigbuild (crates.io) and ziglang
# (PyPI), both installed by integration/setup.sh.
# Prints the output directory on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=x86_64-unknown-linux-gnu
GLIBC=2.17
command -v cargo-zigbuild >/dev/null 2>&1 ||
    { echo "build-release: cargo-zigbuild is not installed (cargo install --locked cargo-zigbuild)" >&2; exit 1; }
# cargo-zigbuild finds zig as $ZIG, `python3 -m ziglang` (the PyPI
# package) or `zig` on PATH.
if [ -z "${ZIG:-}" ] && ! python3 -m ziglang version >/dev/null 2>&1 && ! command -v zig >/dev/null 2>&1; then
    echo "build-release: zig is not installed (python3 -m pip install ziglang)" >&2
    exit 1
fi
# Reproducible: `--version`'s date from the commit (build.rs).
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && epoch=$(git log -1 --format=%ct 2>/dev/null); then
    export SOURCE_DATE_EPOCH="$epoch"
fi
cargo zigbuild --release --locked --workspace --target "$TARGET.$GLIBC" >&2
echo "target/$TARGET/release"
