#!/usr/bin/env bash
# Builds the installer DaemonSet's image offline, from this repository only:
#   FROM scratch
#   /usr/bin/gpu-guard                 the release binary (packaging/
#                                      build-release.sh: glibc 2.17, so it runs
#                                      on every host it is copied to; and the
#                                      libraries ldd names, so it runs in the
#                                      image)
#   /usr/bin/gpu-guard-node-agent      the DaemonSet's main container
#   /usr/bin/gpu-guard-admission       the webhook and registry reads
#                                      (webhook.yaml's Deployment runs
#                                      `gpu-guard admission`, which execs it)
#   /etc/gpu-guard/config.toml         the default config (config/config.toml)
#   /usr/bin/gpu-guard-node-install    the init container's script (node-install.sh)
#   /bin/busybox + applets             sh, chroot, nsenter, cp, ... (busybox-static)
# The tag is the one daemonset.yaml references: localhost/gpu-guard:<version
# from Cargo.toml>, or $IMAGE.
#
# Usage: packaging/kubernetes/build-image.sh [--engine docker|podman] [--save FILE.tar]
#   --engine  the builder (default: docker when its daemon answers, else podman)
#   --save    also write the image as a docker-archive tar (`ctr images import`,
#             `podman load`, `docker load`, or `skopeo copy docker-archive:...`)
# NO_BUILD=1 uses the release build's binaries as they are.
# Prints the image reference on its last line.
set -euo pipefail
cd "$(dirname "$0")/../.."

ENGINE=
SAVE=
while [ $# -gt 0 ]; do
    case $1 in
        --engine) ENGINE=$2; shift 2 ;;
        --save) SAVE=$2; shift 2 ;;
        *) echo "build-image: unknown argument $1" >&2; exit 2 ;;
    esac
done
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
IMAGE=${IMAGE:-localhost/gpu-guard:$VERSION}
if [ -z "$ENGINE" ]; then
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then ENGINE=docker
    elif command -v podman >/dev/null 2>&1; then ENGINE=podman
    else echo "build-image: neither a running docker nor podman found" >&2; exit 1
    fi
fi
[ -x /bin/busybox ] && file -L /bin/busybox | grep -q 'statically linked' ||
    { echo "build-image: needs a static /bin/busybox (apt-get install busybox-static)" >&2; exit 1; }
/bin/busybox --list | grep -qx nsenter || { echo "build-image: this busybox has no nsenter applet" >&2; exit 1; }

REL=target/x86_64-unknown-linux-gnu/release
[ "${NO_BUILD:-0}" = 1 ] || REL=$(packaging/build-release.sh | tail -1)
BIN=$REL/gpu-guard
NET=$REL/gpu-guard-admission
AGENT=$REL/gpu-guard-node-agent
for b in "$BIN" "$NET" "$AGENT"; do
    [ -x "$b" ] || { echo "build-image: $b not built" >&2; exit 1; }
done

CTX=$(mktemp -d "${TMPDIR:-/tmp}/gpu-guard-image.XXXXXX")
trap 'rm -rf "$CTX"' EXIT
R="$CTX/rootfs"
mkdir -p "$R/bin" "$R/usr/bin" "$R/etc/gpu-guard" "$R/tmp" "$R/host"
cp /bin/busybox "$R/bin/busybox"
# The applets node-install.sh and the agent use, plus a few for debugging by hand.
for a in sh chroot nsenter timeout cp cmp chmod mv ln mkdir readlink grep sed tr cat echo test [ ls sleep rm; do
    ln -s busybox "$R/bin/$a"
done
install -m 0755 "$BIN" "$R/usr/bin/gpu-guard"
install -m 0755 "$NET" "$R/usr/bin/gpu-guard-admission"
install -m 0755 "$AGENT" "$R/usr/bin/gpu-guard-node-agent"
install -m 0755 packaging/kubernetes/node-install.sh "$R/usr/bin/gpu-guard-node-install"
install -m 0644 config/config.toml "$R/etc/gpu-guard/config.toml"
# Exactly the libraries the binary is linked against, at the paths ldd gives.
ldd "$BIN" "$NET" "$AGENT" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
    [ -e "$lib" ] || continue
    mkdir -p "$R$(dirname "$lib")"
    cp -L "$lib" "$R$lib"
done
echo "root:x:0:0:root:/:/bin/sh" > "$R/etc/passwd"

cat > "$CTX/Containerfile" <<EOF
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/bin:/bin
LABEL org.opencontainers.image.title="gpu-guard" \\
      org.opencontainers.image.version="$VERSION" \\
      org.opencontainers.image.description="gpu-guard node installer and agent (DaemonSet) and admission webhook"
CMD ["/usr/bin/gpu-guard-node-install"]
EOF
cp "$CTX/Containerfile" "$CTX/Dockerfile"

# No network: FROM scratch pulls nothing.
case $ENGINE in
    docker) docker build -q --network none -t "$IMAGE" "$CTX" >&2 ;;
    podman) podman build -q --network none --format docker -t "$IMAGE" "$CTX" >&2 ;;
    *) echo "build-image: unknown engine $ENGINE" >&2; exit 2 ;;
esac
if [ -n "$SAVE" ]; then
    rm -f "$SAVE"
    "$ENGINE" save --format docker-archive -o "$SAVE" "$IMAGE" 2>/dev/null ||
        "$ENGINE" save -o "$SAVE" "$IMAGE"
fi
echo "$IMAGE"
