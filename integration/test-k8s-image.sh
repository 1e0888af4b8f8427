#!/usr/bin/env bash
# The installer DaemonSet's image, for real: builds it offline with
# packaging/kubernetes/build-image.sh, then runs its init container as
# daemonset.yaml declares it (image, command, env and hostPath mounts read
# from the manifest) against a fake host root: a temp dir with an
# etc/containerd/config.toml, and a fake nsenter (the script's $NSENTER)
# that records the runtime restart instead of entering PID 1. Checks the node is
# registered and restarted once, and that a second run changes nothing.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/cri_lib.sh"

need_root
need_cmd jq python3 cargo
python3 -c 'import yaml' 2>/dev/null || skip_or_fail "python3 yaml (PyYAML) missing"
if command -v podman >/dev/null 2>&1; then
    ENGINE=podman
    RUNOPTS=(--ulimit nofile=10000:10000 --ulimit nproc=1000:1000)
elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    ENGINE=docker
    RUNOPTS=()
else
    skip_or_fail "needs podman or a running docker to build and run the image"
fi
new_scratch
CUR=
trap '[ -n "$CUR" ] && cri_stop "$CUR"; [ "${KEEP_SCRATCH:-0}" = 1 ] || rm -rf "$T"' EXIT

IMAGE=$("$REPO_DIR/packaging/kubernetes/build-image.sh" --engine "$ENGINE" --save "$T/image.tar" 2>"$T/build.log" | tail -1)
[ -n "$IMAGE" ] || { cat "$T/build.log"; fail "image build"; finish; }
pass "image built: $IMAGE ($(du -k "$T/image.tar" | cut -f1) KiB as a docker-archive)"
MANIFEST="$REPO_DIR/packaging/kubernetes/daemonset.yaml"

# The init container as the manifest declares it.
python3 - "$MANIFEST" > "$T/init.json" <<'PY'
import json, sys, yaml
ds = yaml.safe_load(open(sys.argv[1]))
pod = ds["spec"]["template"]["spec"]
init = pod["initContainers"][0]
vols = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
print(json.dumps({
    "image": init["image"],
    "command": init["command"] + init.get("args", []),
    "env": {e["name"]: e["value"] for e in init.get("env", [])},
    "mounts": [[vols[m["name"]], m["mountPath"]] for m in init["volumeMounts"]],
    "main_images": [c["image"] for c in pod["containers"]],
}))
PY
check_eq "daemonset: init container uses the image the build produces" "$(jq -r .image "$T/init.json")" "$IMAGE"
check_eq "daemonset: init command is the script in the image" "$(jq -r '.command[0]' "$T/init.json")" /usr/bin/gpu-guard-node-install

BIN="$RELEASE_DIR/gpu-guard"
# A host root the init container can chroot into: the loader and the
# libraries the binary needs, at their host paths (node-install.sh runs
# the copied binary there before it registers anything).
host_libs() {
    ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
        mkdir -p "$1$(dirname "$lib")"
        cp -L "$lib" "$1$lib"
    done
}

# The fake node.
H="$T/host"
mkdir -p "$H/etc/containerd" "$T/fake" "$T/record"
host_libs "$H"
cat > "$H/etc/containerd/config.toml" <<'EOF'
# containerd config of a GPU node (kubeadm-style, systemd cgroups)
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
EOF
cp "$H/etc/containerd/config.toml" "$T/config.toml.orig"
cat > "$T/fake/nsenter" <<'EOF'
#!/bin/sh
# Stands in for `nsenter -t 1 ... -- systemctl restart ENGINE`: records it.
echo "nsenter $*" >> /record/restarts
EOF
chmod +x "$T/fake/nsenter"

run_init() {
    local args=(--rm --network none "${RUNOPTS[@]}" -v "$T/fake:/fake:ro" -v "$T/record:/record"
        -e NSENTER=/fake/nsenter "${EXTRA[@]}")
    local k src dst
    while IFS=$'\t' read -r src dst; do
        mkdir -p "$H$src"
        args+=(-v "$H$src:$dst")
    done < <(jq -r '.mounts[] | @tsv' "$T/init.json")
    while IFS=$'\t' read -r k src; do
        args+=(-e "$k=$src")
    done < <(jq -r '.env | to_entries[] | [.key, .value] | @tsv' "$T/init.json")
    mapfile -t cmd < <(jq -r '.command[]' "$T/init.json")
    timeout 120 "$ENGINE" run "${args[@]}" "$IMAGE" "${cmd[@]}" 2>&1
}

EXTRA=()
OUT=$(run_init)
RC=$?
check_eq "first run: init container succeeds" "$RC" 0
printf '%s\n' "$OUT" | sed 's/^/    | /'
if cmp -s "$BIN" "$H/opt/gpu-guard/bin/gpu-guard"; then pass "first run: the release binary is on the host"; else fail "first run: host binary differs from $BIN"; fi
check_eq "first run: host binary is executable" "$([ -x "$H/opt/gpu-guard/bin/gpu-guard" ] && echo yes)" yes
check_eq "first run: gpu-guard-runtime link" "$(readlink "$H/opt/gpu-guard/bin/gpu-guard-runtime")" gpu-guard
if cmp -s "$REPO_DIR/config/config.toml" "$H/etc/gpu-guard/config.toml"; then pass "first run: default config placed"; else fail "first run: default config not placed"; fi
CFG=$(cat "$H/etc/containerd/config.toml")
check_contains "first run: runtime gpu-guard registered" "$CFG" '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpu-guard]'
check_contains "first run: BinaryName is the host path" "$CFG" 'BinaryName = "/opt/gpu-guard/bin/gpu-guard-runtime"'
check_eq "first run: SystemdCgroup carried over" \
    "$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["gpu-guard"]["options"].get("SystemdCgroup"))' "$H/etc/containerd/config.toml")" True
check_contains "first run: default runtime left alone" "$CFG" 'default_runtime_name = "runc"'
check_contains "first run: the admin's comment kept" "$CFG" "# containerd config of a GPU node"
if command -v containerd >/dev/null 2>&1; then
    if containerd --config "$H/etc/containerd/config.toml" config dump >/dev/null 2>"$T/dump.err"; then
        pass "first run: containerd parses the edited config"
    else
        fail "first run: containerd rejects the edited config: $(cat "$T/dump.err")"
    fi
fi
check_eq "first run: runtime restarted once" "$(wc -l < "$T/record/restarts" 2>/dev/null)" 1
check_contains "first run: restart through host PID 1" "$(cat "$T/record/restarts" 2>/dev/null)" "nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl restart containerd"
check_contains "first run: the binary ran in the host's root first" "$OUT" "gpu-guard: on this host: gpu-guard"

# A host whose loader cannot run the binary: nothing registered, the init
# container fails (the pod is not Ready) with the reason in its log.
HG="$H"
H="$T/bare-host"
mkdir -p "$H/etc/containerd"
cp "$T/config.toml.orig" "$H/etc/containerd/config.toml"
OUT=$(run_init)
check_eq "bare host: init container fails" "$?" 1
check_contains "bare host: the reason is logged" "$OUT" "cannot run on this host"
if cmp -s "$T/config.toml.orig" "$H/etc/containerd/config.toml"; then pass "bare host: containerd's config unchanged"; else fail "bare host: containerd's config was edited"; fi
check_eq "bare host: no binary left on the host" "$(ls "$H/opt/gpu-guard/bin" 2>/dev/null)" ""
H="$HG"

SUM1=$(cd "$H" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
MT1=$(stat -c %Y.%i "$H/opt/gpu-guard/bin/gpu-guard")
OUT=$(run_init)
RC=$?
check_eq "second run: init container succeeds" "$RC" 0
check_contains "second run: says already registered" "$OUT" "gpu-guard is already registered with containerd"
check_eq "second run: no second restart" "$(wc -l < "$T/record/restarts")" 1
check_eq "second run: no host file changed" "$(cd "$H" && find . -type f -print0 | sort -z | xargs -0 sha256sum)" "$SUM1"
check_eq "second run: binary not rewritten" "$(stat -c %Y.%i "$H/opt/gpu-guard/bin/gpu-guard")" "$MT1"

# A restart that failed is retried by the next run (kubelet retries a
# failed init container), even though the config is registered by then.
rm -f "$T/record/restarts"
printf '#!/bin/sh\nexit 1\n' > "$T/fake/nsenter.ok" && chmod +x "$T/fake/nsenter.ok"
mv "$T/fake/nsenter" "$T/fake/nsenter.rec" && mv "$T/fake/nsenter.ok" "$T/fake/nsenter"
cp "$T/config.toml.orig" "$H/etc/containerd/config.toml"
OUT=$(run_init)
check_eq "failed restart: init container fails" "$?" 1
check_eq "failed restart: nothing recorded" "$(cat "$T/record/restarts" 2>/dev/null)" ""
mv "$T/fake/nsenter.rec" "$T/fake/nsenter"
OUT=$(run_init)
check_eq "failed restart: the retry restarts" "$(wc -l < "$T/record/restarts" 2>/dev/null)" 1
check_not_contains "failed restart: the retry does not claim nothing to do" "$OUT" "already registered"
run_init >/dev/null
check_eq "failed restart: then nothing more" "$(wc -l < "$T/record/restarts" 2>/dev/null)" 1

# A k3s node: k3s writes its containerd config.toml anew from a template at
# every start, so the template is edited (its k3s base kept), the generated
# file is left alone, and k3s-agent is what restarts.
H="$T/k3s-host"
KD=/var/lib/rancher/k3s/agent/etc/containerd
mkdir -p "$H$KD"
host_libs "$H"
cp "$REPO_DIR/tests/data/install/k3s/config.toml" "$H$KD/config.toml"
rm -f "$T/record/restarts"
# No CONFIG_PATH: install finds k3s's containerd by its rendered config.
EXTRA=(-v "$H$KD:/host$KD" -e RESTART_UNIT=k3s-agent)
OUT=$(run_init)
check_eq "k3s: init container succeeds" "$?" 0
printf '%s\n' "$OUT" | sed 's/^/    | /'
TMPL=$(cat "$H$KD/config.toml.tmpl" 2>/dev/null)
check_contains "k3s: the template keeps k3s's base" "$TMPL" '{{ template "base" . }}'
check_contains "k3s: the template registers gpu-guard" "$TMPL" 'BinaryName = "/opt/gpu-guard/bin/gpu-guard-runtime"'
if cmp -s "$REPO_DIR/tests/data/install/k3s/config.toml" "$H$KD/config.toml"; then pass "k3s: the generated config.toml is left to k3s"; else fail "k3s: the generated config.toml was edited"; fi
check_contains "k3s: k3s-agent restarted" "$(cat "$T/record/restarts" 2>/dev/null)" "systemctl restart k3s-agent"
run_init >/dev/null
check_eq "k3s: second run restarts nothing" "$(wc -l < "$T/record/restarts" 2>/dev/null)" 1
EXTRA=()

# The saved archive is what a node without a registry would load:
# `ctr -n k8s.io images import`, then run by containerd.
if command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1; then
    mkdir -p "$T/ctrd"
    cri_base_config "$T/ctrd/containerd.toml" 2 "$T/ctrd"
    if cri_start "$T/ctrd" "$T/ctrd/containerd.toml" /dev/null; then
        CUR="$T/ctrd"
        C=(ctr -a "$CRI_SOCK" -n k8s.io)
        "${C[@]}" images import "$T/image.tar" >/dev/null 2>&1
        check_contains "containerd: image.tar imports as the manifest's reference" "$("${C[@]}" images ls -q)" "$IMAGE"
        check_eq "containerd: runs the image's gpu-guard" \
            "$(timeout 60 "${C[@]}" run --rm "$IMAGE" gg-image-version /usr/bin/gpu-guard --version 2>&1)" \
            "$("$BIN" --version)"
        cri_stop "$CUR"
        CUR=
    else
        fail "containerd: private instance did not start"
    fi
else
    skip_or_fail "containerd/ctr not installed"
fi

# An admin's own config survives a re-install.
echo '# admin edit' >> "$H/etc/gpu-guard/config.toml"
run_init >/dev/null
check_contains "rerun: the host's gpu-guard config is kept" "$(cat "$H/etc/gpu-guard/config.toml")" "# admin edit"

finish
