#!/usr/bin/env bash
# Builds the release binaries (packaging/build-release.sh: glibc 2.17, the
# one release build), the man pages and shell completions (rendered
# from the clap definition by crates/assets), the .deb and the .rpm,
# and prints their sizes against the targets (binary < 6 MB, .deb < 3 MB).
# Needs dpkg-deb and rpmbuild (Debian's dpkg and rpm packages); what each
# package ships is packaging/stage.sh. Output:
# target/x86_64-unknown-linux-gnu/debian/*.deb,
# target/x86_64-unknown-linux-gnu/rpm/*.rpm.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in dpkg-deb rpmbuild objdump; do
    command -v "$tool" >/dev/null || { echo "build-packages: $tool is not installed (apt-get install dpkg rpm binutils)" >&2; exit 1; }
done

# Reproducible: file times and `--version`'s date from the commit (build.rs),
# unless the caller sets SOURCE_DATE_EPOCH.
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && epoch=$(git log -1 --format=%ct 2>/dev/null); then
    export SOURCE_DATE_EPOCH="$epoch"
fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(date +%s)}
TARGET=x86_64-unknown-linux-gnu
REL=$(packaging/build-release.sh | tail -1)
# gpu-guard(1), a page per subcommand and the bash, zsh and fish
# completions, from the same command-line definition (crates/assets, built
# by the release build above).
rm -rf target/assets
"$REL/gpu-guard-assets" target/assets >/dev/null
# -n: no name or timestamp in the header, so the package is reproducible.
gzip -9 -n -f target/assets/man/*.1

rm -rf target/$TARGET/debian target/$TARGET/rpm
mkdir -p target/$TARGET/debian
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)

# The libc6 a binary needs: the newest GLIBC_ symbol version it references
# (2.17 for the release build). dpkg-shlibdeps would say libc6 (>= 2.34) on
# Debian 12, where libpthread and libdl moved into libc, and so refuse hosts
# the binary runs on (Debian 11, Ubuntu 20.04).
libc_dep() { # BINARY
    local v
    v=$(objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
    [ -n "$v" ] || { echo "build-packages: no GLIBC symbol versions in $1" >&2; exit 1; }
    echo "libc6 (>= $v)"
}

build_deb() { # PACKAGE BINARY: target/$TARGET/debian/PACKAGE_VERSION-1_amd64.deb
    local pkg=$1 root
    root=$(mktemp -d)
    chmod 0755 "$root"
    packaging/stage.sh "$pkg" deb "$REL" target/assets "$root"
    mkdir -m 0755 "$root/DEBIAN"
    sed -e "s/@VERSION@/$VERSION-1/" \
        -e "s/@INSTALLED_SIZE@/$(du -sk --apparent-size "$root" | cut -f1)/" \
        -e "s/@LIBC@/$(libc_dep "$REL/$2")/" "packaging/deb/$pkg.control" >"$root/DEBIAN/control"
    if [ "$pkg" = gpu-guard ]; then
        echo /etc/gpu-guard/config.toml >"$root/DEBIAN/conffiles"
        install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$root/DEBIAN/"
    fi
    (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
    chmod 0644 "$root"/DEBIAN/control "$root"/DEBIAN/md5sums "$root"/DEBIAN/conffiles 2>/dev/null || true
    # Reproducible: every file time is the commit's.
    find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    dpkg-deb --root-owner-group -Zxz --build "$root" "target/$TARGET/debian/${pkg}_$VERSION-1_amd64.deb" >/dev/null
    rm -rf "$root"
}
# gpu-guard-admission (registry reads, the webhook) is a package of its own.
build_deb gpu-guard gpu-guard
build_deb gpu-guard-admission gpu-guard-admission

build_rpm() { # SPEC: packaging/rpm/SPEC, built from $REL into target/$TARGET/rpm
    local top
    top=$(mktemp -d)
    # Reproducible: build time and file times from SOURCE_DATE_EPOCH, a
    # fixed build host.
    rpmbuild -bb --quiet --target x86_64 \
        --define "_topdir $top" \
        --define "_rpmdir $PWD/target/$TARGET/rpm" \
        --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
        --define "_binary_payload w19.zstdio" \
        --define "gg_version $VERSION" \
        --define "release_dir $PWD/$REL" \
        --define "assets_dir $PWD/target/assets" \
        --define "src_dir $PWD" \
        --define "_buildhost localhost" \
        --define "use_source_date_epoch_as_buildtime 1" \
        --define "clamp_mtime_to_source_date_epoch 1" \
        "packaging/rpm/$1" >&2
    rm -rf "$top"
}
build_rpm gpu-guard.spec
build_rpm gpu-guard-admission.spec

deb=$(ls target/$TARGET/debian/gpu-guard_*.deb)
rpm=$(ls target/$TARGET/rpm/gpu-guard-0*.rpm)
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
