#!/usr/bin/env bash
# `gpu-guard check --image` must judge an image as `check --bundle` judges the
# same image unpacked by docker. An image is built here (python3): layer 0
# (gzip) holds two CUDA libraries (fatbin fixtures), layer 1 (plain) replaces
# one and deletes the other with a whiteout, and the config carries an
# official nvidia/cuda env. A private dockerd `docker load`s the archive,
# `docker create` + `docker export` give the rootfs, and a bundle config.json
# gets the image env as `docker run --gpus all` would leave it
# (NVIDIA_VISIBLE_DEVICES=all unless the image sets it, and NVIDIA's hook, as
# `check --image` assumes). Then, on each host profile, the verdicts and the
# findings (check, severity, message with library paths reduced to their file
# names) must be equal; and `--image docker-daemon:` of the loaded image,
# streamed from that dockerd's socket, must give the file's findings.
. "$(dirname "$0")/lib.sh"

need_root
need_cmd dockerd docker containerd jq python3 gzip
[ -x "$GG" ] || skip_or_fail "gpu-guard binary $GG not built"

new_scratch
DROOT=$(mktemp -d /var/tmp/gpu-guard-imgdocker.XXXXXX)
SOCK="$DROOT/docker.sock"
D=(docker -H "unix://$SOCK")
cleanup() {
    "${D[@]}" rm -f gg-imgcheck >/dev/null 2>&1
    if [ -f "$DROOT/docker.pid" ]; then
        kill "$(cat "$DROOT/docker.pid")" 2>/dev/null
        for _ in $(seq 1 30); do [ -e "$DROOT/docker.pid" ] || break; sleep 0.5; done
    fi
    umount -R "$DROOT/data" 2>/dev/null
    rm -rf "$DROOT" "$T"
}
trap cleanup EXIT

# The image.
FIX="$REPO_DIR/tests/data/fatbin"
ENVFILE="$REPO_DIR/tests/data/images/cuda-12.4.1-base-ubuntu2204.env"
python3 - "$T/img.tar" "$FIX" "$ENVFILE" <<'PY'
import gzip, hashlib, io, json, sys, tarfile
out, fix, envfile = sys.argv[1:4]
lib = "usr/lib/x86_64-linux-gnu"
def layer(entries):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, kind, data in entries:
            i = tarfile.TarInfo(name)
            i.mode = 0o755
            if kind == "dir":
                i.type = tarfile.DIRTYPE
                t.addfile(i)
            elif kind == "sym":
                i.type = tarfile.SYMTYPE; i.linkname = data
                t.addfile(i)
            else:
                i.size = len(data)
                t.addfile(i, io.BytesIO(data))
    return b.getvalue()
rd = lambda n: open(f"{fix}/{n}", "rb").read()
l0 = layer([("usr", "dir", None), ("usr/lib", "dir", None), (lib, "dir", None),
            (f"{lib}/libcublas.so.12.4.5", "file", rd("sm90a.so")),
            (f"{lib}/libcublas.so.12", "sym", "libcublas.so.12.4.5"),
            (f"{lib}/libcudnn.so.9.1.0", "file", rd("sm100f.so")),
            (f"{lib}/libcudnn_ops.so.9.1.0", "file", rd("ptx-only.so"))])
l1 = layer([(f"{lib}/libcublas.so.12.4.5", "file", rd("multi-arch.so")),
            (f"{lib}/.wh.libcudnn.so.9.1.0", "file", b"")])
env = [l for l in open(envfile).read().splitlines() if "=" in l]
cfg = json.dumps({"architecture": "amd64", "os": "linux",
    "config": {"Env": env, "Labels": {"test": "gpu-guard"}},
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(l).hexdigest() for l in (l0, l1)]}}).encode()
cname = hashlib.sha256(cfg).hexdigest() + ".json"
blobs = {"l0/layer.tar": gzip.compress(l0, 1), "l1/layer.tar": l1, cname: cfg}
blobs["manifest.json"] = json.dumps([{"Config": cname, "RepoTags": ["gg-imgcheck:1"],
                                      "Layers": ["l0/layer.tar", "l1/layer.tar"]}]).encode()
with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as t:
    for n, d in blobs.items():
        i = tarfile.TarInfo(n); i.size = len(d); t.addfile(i, io.BytesIO(d))
PY
[ -s "$T/img.tar" ] || { fail "image not built"; finish; }

dockerd --data-root "$DROOT/data" --exec-root "$DROOT/exec" -H "unix://$SOCK" \
    --pidfile "$DROOT/docker.pid" --bridge none --iptables=false >"$T/dockerd.log" 2>&1 &
for _ in $(seq 1 60); do "${D[@]}" info >/dev/null 2>&1 && break; sleep 0.5; done
"${D[@]}" info >/dev/null 2>&1 || { tail -20 "$T/dockerd.log"; fail "dockerd did not start"; finish; }

"${D[@]}" load -i "$T/img.tar" >/dev/null || { fail "docker load"; finish; }
"${D[@]}" create --name gg-imgcheck gg-imgcheck:1 /bin/true >/dev/null || { fail "docker create"; finish; }
mkdir -p "$T/bundle/rootfs"
"${D[@]}" export gg-imgcheck | tar -C "$T/bundle/rootfs" -xf - || { fail "docker export"; finish; }
check_eq "docker applied the whiteout" "$([ -e "$T/bundle/rootfs/usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0" ] && echo present || echo gone)" gone
ENV_JSON=$("${D[@]}" image inspect gg-imgcheck:1 | jq -c '.[0].Config.Env')
jq -n --argjson env "$ENV_JSON" '{ociVersion: "1.0.2",
    process: {args: ["/bin/true"], cwd: "/",
              env: (if any($env[]; startswith("NVIDIA_VISIBLE_DEVICES=")) then $env else $env + ["NVIDIA_VISIBLE_DEVICES=all"] end)},
    root: {path: "rootfs"},
    hooks: {prestart: [{path: "/usr/bin/nvidia-container-runtime-hook", args: ["nvidia-container-runtime-hook", "prestart"]}]},
    linux: {}}' > "$T/bundle/config.json"

printf 'mode = "enforce"\n[kernel_image]\nseverity = "enforce"\ncache_dir = ""\n' > "$T/cfg.toml"
# Findings as "check severity message" lines, library paths cut to file names.
norm() { jq -r '.verdict as $v | ("verdict " + $v), (.findings[] | "\(.check) \(.severity) \(.message)")' |
         sed -E 's#[^ `"(]*/(lib[A-Za-z0-9_.+-]*\.so[0-9.]*)#\1#g' | sort; }
for h in a100 h100x8 geforce-545 t4-a10 tesla-535 l4x2-minor; do
    IMG=$("$GG" --config "$T/cfg.toml" check --image "$T/img.tar" --host "$HOSTS_DIR/$h.json" --json 2>&1)
    RI=$?
    BUN=$("$GG" --config "$T/cfg.toml" check --bundle "$T/bundle" --host "$HOSTS_DIR/$h.json" --json 2>&1)
    RB=$?
    check_eq "$h: exit status --image vs --bundle" "$RI" "$RB"
    [ "$h" = t4-a10 ] && check_contains "t4-a10: kernel-image findings present" "$IMG" "kernel-image"
    check_eq "$h: findings --image vs --bundle" "$(printf '%s' "$IMG" | norm)" "$(printf '%s' "$BUN" | norm)"
    # The same image streamed from this dockerd's API socket (docker-daemon:,
    # run by gpu-guard-admission beside $GG), never stored.
    DMN=$(DOCKER_HOST="unix://$SOCK" "$GG" --config "$T/cfg.toml" check --image docker-daemon:gg-imgcheck:1 --host "$HOSTS_DIR/$h.json" --json 2>&1)
    RD=$?
    check_eq "$h: exit status docker-daemon: vs file" "$RD" "$RI"
    check_eq "$h: findings docker-daemon: vs file" "$(printf '%s' "$DMN" | norm)" "$(printf '%s' "$IMG" | norm)"
done
finish
