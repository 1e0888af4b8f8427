#!/usr/bin/env bash
# Builds the release binaries (packaging/build-release.sh: glibc 2.17, the
# one release build), the man pages and shell completions (rendered
# from the clap definition by crates/assets), the .deb and the .rpm,
# and prints their sizes against the targets (binary < 6 MB, .deb < 3 MB).
# Needs: cargo-deb, cargo-generate-rpm (cargo install --locked ...).
# Output: target/x86_64-unknown-linux-gnu/debian/*.deb,
# target/x86_64-unknown-linux-gnu/generate-rpm/*.rpm.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in cargo-deb cargo-generate-rpm; do
    command -v "$tool" >/dev/null || { echo "build-packages: $tool is not installed (cargo install --locked $tool)" >&2; exit 1; }
done

# Reproducible: file times and `--version`'s date from the commit (build.rs),
# unless the caller sets SOURCE_DATE_EPOCH.
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && epoch=$(git log -1 --format=%ct 2>/dev/null); then
    export SOURCE_DATE_EPOCH="$epoch"
fi
TARGET=x86_64-unknown-linux-gnu
REL=$(packaging/build-release.sh | tail -1)
# gpu-guard(1), a page per subcommand and the bash, zsh and fish
# completions, from the same command-line definition (crates/assets, built
# by the release build above).
rm -rf target/assets
"$REL/gpu-guard-assets" target/assets >/dev/null
# -n: no name or timestamp in the header, so the package is reproducible.
gzip -9 -n -f target/assets/man/*.1

rm -f target/$TARGET/debian/gpu-guard_*.deb target/$TARGET/generate-rpm/gpu-guard-*.rpm
rm -f target/$TARGET/debian/gpu-guard-admission_*.deb
# --no-build: the binaries above are what gets packaged; --target makes the
# packagers read `target/release/...` assets from $REL. gpu-guard-admission
# (registry reads, the webhook) is a package of its own.
cargo deb --no-build --locked --target "$TARGET"
cargo deb --no-build --locked --target "$TARGET" -p gpu-guard-admission
cargo generate-rpm --target "$TARGET"
cargo generate-rpm --target "$TARGET" -p crates/admission

deb=$(ls target/$TARGET/debian/gpu-guard_*.deb)
rpm=$(ls target/$TARGET/generate-rpm/gpu-guard-0*.rpm)
net_deb=$(ls target/$TARGET/debian/gpu-guard-admission_*.deb)
net_size=$(stat -c %s "$REL/gpu-guard-admission")
bin_size=$(stat -c %s "$REL/gpu-guard")
deb_size=$(stat -c %s "$deb")
rpm_size=$(stat -c %s "$rpm")
mb() { awk -v b="$1" 'BEGIN { printf "%.2f MB", b / 1000000 }'; }
printf 'binary  %-45s %s (target < 6 MB, %.0f%% of it)\n' "$REL/gpu-guard" "$(mb "$bin_size")" "$(awk -v b="$bin_size" 'BEGIN{print b/60000}')"
printf 'deb     %-45s %s (target < 3 MB, %.0f%% of it)\n' "$deb" "$(mb "$deb_size")" "$(awk -v b="$deb_size" 'BEGIN{print b/30000}')"
printf 'rpm     %-45s %s\n' "$rpm" "$(mb "$rpm_size")"
printf 'binary  %-45s %s (gpu-guard-admission: registry reads, webhook)\n' "$REL/gpu-guard-admission" "$(mb "$net_size")"
printf 'deb     %-45s %s\n' "$net_deb" "$(mb "$(stat -c %s "$net_deb")")"
[ "$bin_size" -lt 6000000 ] || { echo "build-packages: release binary is over 6 MB" >&2; exit 1; }
[ "$deb_size" -lt 3000000 ] || { echo "build-packages: .deb is over 3 MB" >&2; exit 1; }
