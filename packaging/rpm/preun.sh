# gpu-guard %preun ($1: 0 erase, 1 upgrade). On erase, unregisters gpu-guard
# from every engine `gpu-guard install` registered it with, so no engine is
# left pointing at a missing binary. A failure stops the erase.
if [ "$1" -eq 0 ]; then
    for state in /var/lib/gpu-guard/engines/*.json; do
        [ -e "$state" ] || continue
        engine=$(basename "$state" .json)
        if ! /usr/bin/gpu-guard uninstall "$engine"; then
            echo "gpu-guard: could not unregister gpu-guard from $engine; fix that engine's config and erase again" >&2
            exit 1
        fi
    done
fi
exit 0
