# gpu-guard %post ($1: 1 first install, 2 upgrade). Never edits an engine's
# configuration and activates no hook (the prestart hook is shipped in
# /usr/share/gpu-guard/hooks.d, which no engine reads): it only says which
# `gpu-guard install ENGINE` commands apply.
if [ "$1" -eq 1 ]; then
    hint=""
    for pair in dockerd:docker containerd:containerd crio:crio podman:podman; do
        bin=${pair%%:*}
        engine=${pair#*:}
        if command -v "$bin" >/dev/null 2>&1; then
            hint="$hint $engine"
        fi
    done
    if [ -n "$hint" ]; then
        echo "gpu-guard: container engines found on this host; to register gpu-guard with one, run:"
        for engine in $hint; do
            echo "  gpu-guard install $engine"
        done
        echo "gpu-guard: nothing is enforced until then"
    fi
fi
exit 0
