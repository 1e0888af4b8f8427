# gpu-guard %postun ($1: 0 erase, 1 upgrade). On erase, removes what gpu-guard
# wrote at run time: install state and backups, and the caches in /run.
if [ "$1" -eq 0 ]; then
    rm -rf /run/gpu-guard /var/lib/gpu-guard
fi
exit 0
