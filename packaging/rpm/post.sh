# gpu-guard %post ($1: 1 first install, 2 upgrade). Never edits an engine's
# configuration: it only says which `gpu-guard install ENGINE` commands apply.
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
    fi
fi
exit 0
