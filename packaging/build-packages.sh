#!/usr/bin/env bash
# Builds the release binary, the gpu-guard(1) man page (rendered from the
# clap definition by the hidden `gpu-guard man`), the .deb and the .rpm,
# and prints their sizes against the targets (binary < 6 MB, .deb < 3 MB).
# Needs: cargo-deb, cargo-generate-rpm (cargo install --locked ...).
# Output: target/debian/*.deb, target/generate-rpm/*.rpm.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in cargo-deb cargo-generate-rpm; do
    command -v "$tool" >/dev/null || { echo "build-packages: $tool is not installed (cargo install --locked $tool)" >&2; exit 1; }
done

cargo build --release --locked -p gpu-guard -p gpu-guard-admission
mkdir -p target/man
target/release/gpu-guard man > target/man/gpu-guard.1
# -n: no name or timestamp in the header, so the package is reproducible.
gzip -9 -n -f target/man/gpu-guard.1

rm -f target/debian/gpu-guard_*.deb target/generate-rpm/gpu-guard-*.rpm
rm -f target/debian/gpu-guard-admission_*.deb
# --no-build: the binaries above are what gets packaged. gpu-guard-admission
# (registry reads, the webhook) is a package of its own.
cargo deb --no-build --locked
cargo deb --no-build --locked -p gpu-guard-admission
cargo generate-rpm
cargo generate-rpm -p crates/admission

deb=$(ls target/debian/gpu-guard_*.deb)
rpm=$(ls target/generate-rpm/gpu-guard-0*.rpm)
net_deb=$(ls target/debian/gpu-guard-admission_*.deb)
net_size=$(stat -c %s target/release/gpu-guard-admission)
bin_size=$(stat -c %s target/release/gpu-guard)
deb_size=$(stat -c %s "$deb")
rpm_size=$(stat -c %s "$rpm")
mb() { awk -v b="$1" 'BEGIN { printf "%.2f MB", b / 1000000 }'; }
printf 'binary  %-45s %s (target < 6 MB, %.0f%% of it)\n' target/release/gpu-guard "$(mb "$bin_size")" "$(awk -v b="$bin_size" 'BEGIN{print b/60000}')"
printf 'deb     %-45s %s (target < 3 MB, %.0f%% of it)\n' "$deb" "$(mb "$deb_size")" "$(awk -v b="$deb_size" 'BEGIN{print b/30000}')"
printf 'rpm     %-45s %s\n' "$rpm" "$(mb "$rpm_size")"
printf 'binary  %-45s %s (gpu-guard-admission: registry reads, webhook)\n' target/release/gpu-guard-admission "$(mb "$net_size")"
printf 'deb     %-45s %s\n' "$net_deb" "$(mb "$(stat -c %s "$net_deb")")"
[ "$bin_size" -lt 6000000 ] || { echo "build-packages: release binary is over 6 MB" >&2; exit 1; }
[ "$deb_size" -lt 3000000 ] || { echo "build-packages: .deb is over 3 MB" >&2; exit 1; }
