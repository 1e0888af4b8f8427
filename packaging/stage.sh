#!/usr/bin/env bash
# Lays out one package's files under ROOT, as installed: the one place that
# says what each package ships, for the .deb (packaging/build-packages.sh)
# and the .rpm (packaging/rpm/*.spec, %install) alike.
#   packaging/stage.sh PACKAGE deb|rpm RELEASE_DIR ASSETS_DIR ROOT
# PACKAGE: gpu-guard or gpu-guard-admission. The two formats differ only in
# where zsh completions go (Debian's vendor-completions, Fedora's
# site-functions) and in the Debian copyright file.
set -euo pipefail
[ $# -eq 5 ] || { echo "usage: $0 PACKAGE deb|rpm RELEASE_DIR ASSETS_DIR ROOT" >&2; exit 2; }
pkg=$1 format=$2 rel=$3 assets=$4 root=$5
src=$(cd "$(dirname "$0")/.." && pwd)

copyright() { # DEST: Debian's machine-readable copyright file (DEP-5)
    {
        printf 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n'
        printf 'Upstream-Name: gpu-guard\nSource: https://example.invalid/gpu-guard\n\n'
        printf 'Files: *\nCopyright: gpu-guard developers\nLicense: Apache-2.0\n\n'
        cat "$src/LICENSE"
    } >"$1"
    chmod 0644 "$1"
}

case $pkg in
gpu-guard)
    install -D -m 0755 "$rel/gpu-guard" "$root/usr/bin/gpu-guard"
    # The binary tells its role by argv[0] (src/main.rs): the runtime
    # wrapper, and kubectl's plugin name (`kubectl gpu-guard ...`).
    ln -s gpu-guard "$root/usr/bin/gpu-guard-runtime"
    ln -s gpu-guard "$root/usr/bin/kubectl-gpu_guard"
    install -D -m 0644 "$src/config/config.toml" "$root/etc/gpu-guard/config.toml"
    # Inactive: no engine reads this directory; `gpu-guard install
    # podman|crio` activates it.
    install -D -m 0644 "$src/packaging/hooks.d/gpu-guard-prestart.json" \
        "$root/usr/share/gpu-guard/hooks.d/gpu-guard-prestart.json"
    install -d "$root/usr/share/man/man1"
    install -m 0644 "$assets"/man/*.1.gz "$root/usr/share/man/man1/"
    install -D -m 0644 "$assets/completions/gpu-guard.bash" "$root/usr/share/bash-completion/completions/gpu-guard"
    zsh_dir=/usr/share/zsh/vendor-completions
    if [ "$format" = rpm ]; then zsh_dir=/usr/share/zsh/site-functions; fi
    install -D -m 0644 "$assets/completions/_gpu-guard" "$root$zsh_dir/_gpu-guard"
    install -D -m 0644 "$assets/completions/gpu-guard.fish" "$root/usr/share/fish/vendor_completions.d/gpu-guard.fish"
    install -D -m 0644 "$src/README.md" "$root/usr/share/doc/gpu-guard/README.md"
    install -D -m 0644 "$src/LICENSE" "$root/usr/share/doc/gpu-guard/LICENSE"
    if [ "$format" = deb ]; then copyright "$root/usr/share/doc/gpu-guard/copyright"; fi
    ;;
gpu-guard-admission)
    install -D -m 0755 "$rel/gpu-guard-admission" "$root/usr/bin/gpu-guard-admission"
    if [ "$format" = deb ]; then
        install -d "$root/usr/share/doc/gpu-guard-admission"
        copyright "$root/usr/share/doc/gpu-guard-admission/copyright"
    fi
    ;;
*)
    echo "stage: unknown package $pkg" >&2
    exit 2
    ;;
esac
