#!/usr/bin/env bash
# The package flow, as CI runs it (root, on the CI machine itself):
#   build the .deb and .rpm (packaging/build-packages.sh); dpkg -i the .deb;
#   gpu-guard install docker / install podman from the package; dockerd
#   loads the runtime; the lead's integration/test-docker.sh and
#   integration/test-podman.sh run against the INSTALLED /usr/bin/gpu-guard
#   (GPU_GUARD_BIN=/usr/bin/gpu-guard); dpkg -r, then dpkg --purge, checking
#   that no engine names gpu-guard and nothing is left behind; finally the
#   .rpm's file list, conffile flags and scriptlets.
#
# dockerd: if one is running it is sent SIGHUP after `install docker`
# (runtimes and default-runtime are reloadable); if none is, this script
# starts one and stops it at the end. test-docker.sh may rely on a running
# dockerd that knows the gpu-guard runtime.
#
# GPU_GUARD_CI=1: a missing tool or lead script is a failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

CI_STRICT=${GPU_GUARD_CI:-0}
fail() { echo "package-test: FAIL: $*" >&2; exit 1; }
pass() { echo "package-test: ok: $*"; }
skip() {
    [ "$CI_STRICT" = 1 ] && fail "$* (GPU_GUARD_CI=1 allows no skip)"
    echo "SKIP: $*"
}

[ "$(id -u)" = 0 ] || fail "must run as root (dpkg -i)"
for tool in dpkg dpkg-deb rpm rpmbuild jq; do
    command -v "$tool" >/dev/null || fail "$tool is not installed"
done
if dpkg -s gpu-guard >/dev/null 2>&1; then
    fail "gpu-guard is already installed on this machine; remove it first"
fi

packaging/build-packages.sh
deb=$(ls target/x86_64-unknown-linux-gnu/debian/gpu-guard_*.deb)
rpmfile=$(ls target/x86_64-unknown-linux-gnu/rpm/gpu-guard-0*.rpm)
net_deb=$(ls target/x86_64-unknown-linux-gnu/debian/gpu-guard-admission_*.deb)

work=$(mktemp -d)
daemon_json=/etc/docker/daemon.json
if [ -e "$daemon_json" ]; then cp -p "$daemon_json" "$work/daemon.json.orig"; fi
podman_hooks=/etc/containers/oci/hooks.d
had_podman_hooks=0
[ -d "$podman_hooks" ] && had_podman_hooks=1
started_dockerd=""

cleanup() {
    local rc=$?
    if [ -n "$started_dockerd" ]; then
        kill "$started_dockerd" 2>/dev/null || true
        wait "$started_dockerd" 2>/dev/null || true
    fi
    # Never leave the package (and its hooks) on the machine for later tests.
    if dpkg -s gpu-guard-admission >/dev/null 2>&1; then
        dpkg --purge gpu-guard-admission >/dev/null 2>&1 || true
    fi
    if dpkg -s gpu-guard >/dev/null 2>&1; then
        dpkg --purge gpu-guard >/dev/null 2>&1 || true
    fi
    command -v podman >/dev/null && podman rmi -f "localhost/gg-pkg-gpu-$$:1" >/dev/null 2>&1 || true
    if [ -e "$work/daemon.json.orig" ]; then
        cp -p "$work/daemon.json.orig" "$daemon_json"
    fi
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT

# --- what a GPU container does under podman, as its user runs it -------------
# NVIDIA's toolkit gives podman GPUs through a hooks.d file of its own (a
# stand-in here), so the container counts as a GPU container; podman reads
# /usr/share/containers/oci/hooks.d (and /etc/containers/oci/hooks.d once
# install podman adds it). Installing the package alone must not change what
# happens: the old package's always-on prestart hook refused it.
podman_gpu_run() {
    command -v podman >/dev/null || return 0
    local out rc=0
    out=$(timeout 120 podman --runtime runc --hooks-dir /usr/share/containers/oci/hooks.d \
        --hooks-dir /etc/containers/oci/hooks.d --hooks-dir "$work/nvidia-hooks.d" \
        run --rm --ulimit nofile=10000:10000 --ulimit nproc=1000:1000 \
        "localhost/gg-pkg-gpu-$$:1" sh -c 'echo RAN; grep -E "^(CapEff|NoNewPrivs)" /proc/self/status' 2>&1) || rc=$?
    printf 'rc=%s\n%s\n' "$rc" "$out"
}
podman_gpu_setup() {
    command -v podman >/dev/null || { skip "podman not installed: no podman behaviour check"; return 0; }
    mkdir -p "$work/rootfs/bin" "$work/nvidia-hooks.d"
    cp /bin/busybox "$work/rootfs/bin/busybox"
    for a in sh echo grep cat; do ln -sf busybox "$work/rootfs/bin/$a"; done
    tar -C "$work/rootfs" -c . | podman import --change 'ENV NVIDIA_VISIBLE_DEVICES=all' \
        --change 'ENV NVIDIA_REQUIRE_CUDA=cuda>=12.0' - "localhost/gg-pkg-gpu-$$:1" >/dev/null
    jq -n --arg h "$PWD/integration/stand-in/nvidia-container-toolkit" '{version: "1.0.0",
        hook: {path: $h, args: ["nvidia-container-toolkit", "prestart"]},
        when: {always: true}, stages: ["prestart"]}' > "$work/nvidia-hooks.d/oci-nvidia-hook.json"
}
podman_gpu_setup
podman_before=$(podman_gpu_run)

# --- what the packages need ---------------------------------------------------
# The release build needs glibc 2.17's symbols and no newer, so the .deb
# must install on every distribution that has them (Debian 10, Ubuntu 20.04).
[ "$(dpkg-deb -f "$deb" Depends)" = "libc6 (>= 2.17)" ] || fail "gpu-guard .deb Depends: $(dpkg-deb -f "$deb" Depends)"
version=$(dpkg-deb -f "$deb" Version)
[ "$(dpkg-deb -f "$net_deb" Depends)" = "gpu-guard (= $version), libc6 (>= 2.17)" ] \
    || fail "gpu-guard-admission .deb Depends: $(dpkg-deb -f "$net_deb" Depends)"
pass ".deb dependencies: libc6 (>= 2.17); gpu-guard-admission on this very gpu-guard"

# --- install -----------------------------------------------------------------
# What the state directory held before: an earlier install, or another test,
# may have left it. postinst is judged by what it changes, not by the path.
engines_state() { { find /var/lib/gpu-guard/engines -mindepth 1 -printf '%P %s %T@\n' 2>/dev/null || true; } | sort; }
engines_before=$(engines_state)
dpkg -i "$deb" | tee "$work/dpkg-i.log"
dpkg-query -L gpu-guard > "$work/files"
[ -x /usr/bin/gpu-guard ] || fail "/usr/bin/gpu-guard missing"
[ "$(readlink /usr/bin/gpu-guard-runtime)" = gpu-guard ] || fail "/usr/bin/gpu-guard-runtime is not a link to gpu-guard"
grep -qx /usr/bin/gpu-guard-runtime "$work/files" || fail "dpkg -L does not list gpu-guard-runtime"
dpkg-query -W -f='${Conffiles}\n' gpu-guard | grep -q '^ /etc/gpu-guard/config.toml ' || fail "config.toml is not a conffile"
jq -e '.stages == ["prestart"] and .hook.path == "/usr/bin/gpu-guard"' \
    /usr/share/gpu-guard/hooks.d/gpu-guard-prestart.json >/dev/null || fail "packaged hook file"
# The hook is shipped inactive: in no directory podman or CRI-O reads.
for d in /usr/share/containers/oci/hooks.d /etc/containers/oci/hooks.d; do
    [ ! -e "$d/gpu-guard-prestart.json" ] && [ ! -e "$d/gpu-guard-precreate.json" ] || fail "dpkg -i put a gpu-guard hook in $d"
done
podman_after=$(podman_gpu_run)
[ "$podman_after" = "$podman_before" ] || fail "dpkg -i changed what podman does with a GPU container:
before: $podman_before
after:  $podman_after"
[ -z "$podman_after" ] || echo "$podman_after" | grep -qx RAN || fail "the GPU container did not run before or after dpkg -i: $podman_after"
[ -s /usr/share/man/man1/gpu-guard.1.gz ] || fail "man page missing"
zcat /usr/share/man/man1/gpu-guard.1.gz | grep -q '^.TH gpu-guard' || fail "man page is not roff for gpu-guard"
[ -s /usr/share/doc/gpu-guard/LICENSE ] && [ -s /usr/share/doc/gpu-guard/README.md ] || fail "docs missing"
# A man page per subcommand, generated from the command line (crates/assets).
for sub in check hook runtime host scan install uninstall doctor admission; do
    page=/usr/share/man/man1/gpu-guard-$sub.1.gz
    [ -s "$page" ] || fail "man page gpu-guard-$sub(1) missing"
    zcat "$page" | grep -q "^.TH gpu-guard-$sub 1" || fail "$page is not roff for gpu-guard-$sub"
done
# Completions where Debian's bash-completion, zsh and fish look; bash's
# offers the subcommands, never the hidden ones.
comp=/usr/share/bash-completion/completions/gpu-guard
complete_word() {  # what bash offers for `gpu-guard WORD<TAB>`
    bash -c "source $comp && f=\$(complete -p gpu-guard | sed -n 's/.*-F \([^ ]*\).*/\1/p') && COMP_WORDS=(gpu-guard $1) COMP_CWORD=1 && \$f gpu-guard $1 gpu-guard && printf '%s\n' \"\${COMPREPLY[@]}\""
}
words=$(complete_word d) || fail "bash completion does not load"
echo "$words" | grep -qx doctor || fail "bash completion does not offer doctor: $words"
complete_word _ | grep -q __probe && fail "bash completion offers the hidden __probe"
grep -q '^#compdef gpu-guard' /usr/share/zsh/vendor-completions/_gpu-guard || fail "zsh completion missing"
if command -v zsh >/dev/null; then zsh -n /usr/share/zsh/vendor-completions/_gpu-guard || fail "zsh completion does not parse"; fi
grep -q '^complete -c gpu-guard' /usr/share/fish/vendor_completions.d/gpu-guard.fish || fail "fish completion missing"
if command -v fish >/dev/null; then fish -n /usr/share/fish/vendor_completions.d/gpu-guard.fish || fail "fish completion does not parse"; fi
# kubectl's plugin name runs gpu-guard.
[ "$(readlink /usr/bin/kubectl-gpu_guard)" = gpu-guard ] || fail "/usr/bin/kubectl-gpu_guard is not a link to gpu-guard"
/usr/bin/kubectl-gpu_guard check --help | grep -q '^Usage: kubectl gpu-guard check' || fail "kubectl-gpu_guard does not say kubectl gpu-guard"
if command -v kubectl >/dev/null; then
    kubectl gpu-guard --version | grep -q '^gpu-guard ' || fail "kubectl gpu-guard --version"
fi
/usr/bin/gpu-guard --version | grep -Eqx 'gpu-guard [0-9.]+ \(commit ([0-9a-f]{12}|unknown), built ([0-9]{4}-[0-9]{2}-[0-9]{2}|unknown)\)' \
    || fail "--version lacks the commit and the build date: $(/usr/bin/gpu-guard --version)"
# postinst never edits engine configs; it only prints hints.
if [ -e "$work/daemon.json.orig" ]; then
    cmp -s "$daemon_json" "$work/daemon.json.orig" || fail "postinst changed daemon.json"
else
    [ ! -e "$daemon_json" ] || fail "postinst created daemon.json"
fi
[ "$(engines_state)" = "$engines_before" ] || fail "postinst registered an engine: /var/lib/gpu-guard/engines changed during dpkg -i"
pass "dpkg -i: files, links, conffile, inactive hook, man pages, completions, docs; no engine touched, podman runs a GPU container as before"

# --- register with docker and podman from the package ---------------------------
gpu-guard install docker
out=$(gpu-guard install docker)
echo "$out" | grep -q "nothing to change" || fail "second install docker changed something: $out"
jq -e '.runtimes["gpu-guard"].path == "/usr/bin/gpu-guard-runtime"' "$daemon_json" >/dev/null || fail "daemon.json lacks the runtime"
gpu-guard install podman
[ -f /etc/containers/oci/hooks.d/gpu-guard-precreate.json ] || fail "precreate hook missing"
[ -f /etc/containers/oci/hooks.d/gpu-guard-prestart.json ] || fail "install podman did not activate the prestart hook"
pass "gpu-guard install docker/podman"

# doctor from the package sees both registrations as the engines merge them
# (no GPU here: its host checks are errors, so it exits 1).
set +e
doctor=$(gpu-guard doctor --json)
doctor_rc=$?
set -e
[ "$doctor_rc" = 1 ] || fail "doctor on a host without a GPU exited $doctor_rc, not 1"
for c in engine.docker engine.podman hooks.podman config; do
    echo "$doctor" | jq -e --arg c "$c" '.checks[] | select(.name == $c) | .status == "ok"' >/dev/null \
        || fail "doctor: $c is not ok: $(echo "$doctor" | jq -c --arg c "$c" '.checks[] | select(.name == $c)')"
done
echo "$doctor" | jq -e '.checks[] | select(.name == "host.driver") | .status == "error"' >/dev/null || fail "doctor: no driver is not an error"
pass "gpu-guard doctor: docker and podman run gpu-guard as installed"

if command -v dockerd >/dev/null && command -v docker >/dev/null; then
    if pid=$(pidof dockerd); then
        kill -HUP $pid
        sleep 2
    else
        dockerd >"$work/dockerd.log" 2>&1 &
        started_dockerd=$!
        for _ in $(seq 1 60); do
            docker info >/dev/null 2>&1 && break
            kill -0 "$started_dockerd" 2>/dev/null || { cat "$work/dockerd.log" >&2; fail "dockerd exited"; }
            sleep 0.5
        done
    fi
    docker info --format '{{json .Runtimes}}' | jq -e 'has("gpu-guard")' >/dev/null \
        || fail "dockerd does not list the gpu-guard runtime"
    pass "dockerd loaded the gpu-guard runtime from daemon.json"
else
    skip "dockerd/docker not installed"
fi

for engine in docker podman; do
    script=integration/test-$engine.sh
    if [ -f "$script" ]; then
        GG_INSTALLED=1 GPU_GUARD_BIN=/usr/bin/gpu-guard bash "$script" || fail "$script against the installed binary"
        pass "$script against /usr/bin/gpu-guard"
    else
        skip "$script does not exist yet"
    fi
done

if [ -n "$started_dockerd" ]; then
    kill "$started_dockerd"; wait "$started_dockerd" 2>/dev/null || true
    started_dockerd=""
fi

# --- the network package on top, and its dependency honoured ----------------
dpkg -i "$net_deb" >/dev/null
[ -x /usr/bin/gpu-guard-admission ] || fail "/usr/bin/gpu-guard-admission missing after dpkg -i"
/usr/bin/gpu-guard check --image docker://127.0.0.1:9/none:1 --plain-http >/dev/null 2>"$work/net.err" || true
grep -q '^gpu-guard: cannot run ' "$work/net.err" && fail "gpu-guard cannot exec the installed gpu-guard-admission: $(cat "$work/net.err")"
if dpkg -r gpu-guard >/dev/null 2>&1; then fail "dpkg -r gpu-guard went through with gpu-guard-admission installed"; fi
dpkg --purge gpu-guard-admission >/dev/null
pass "gpu-guard-admission installs on gpu-guard, runs under it, and holds it installed"

# --- remove, then purge -------------------------------------------------------
dpkg -r gpu-guard
if [ -e "$daemon_json" ]; then
    ! jq -e 'tostring | test("gpu-guard")' "$daemon_json" >/dev/null || fail "daemon.json still names gpu-guard after dpkg -r"
fi
[ ! -e /etc/containers/oci/hooks.d/gpu-guard-precreate.json ] || fail "precreate hook left after dpkg -r"
[ ! -e /etc/containers/oci/hooks.d/gpu-guard-prestart.json ] || fail "prestart hook left after dpkg -r"
[ ! -e /var/lib/gpu-guard/engines/docker.json ] || fail "docker state left after dpkg -r"
[ -f /etc/gpu-guard/config.toml ] || fail "dpkg -r removed the conffile (only purge may)"
pass "dpkg -r: engines unregistered, conffile kept"

dpkg --purge gpu-guard
if [ -e "$work/daemon.json.orig" ]; then
    cmp -s "$daemon_json" "$work/daemon.json.orig" || fail "daemon.json differs from before the test"
else
    [ ! -e "$daemon_json" ] || fail "daemon.json created by install was not removed"
fi
while read -r f; do
    [ -d "$f" ] && continue
    if [ -e "$f" ] || [ -L "$f" ]; then fail "$f (from dpkg -L) is still there after purge"; fi
done < "$work/files"
if [ "$had_podman_hooks" = 0 ] && [ -e "$podman_hooks" ]; then
    fail "$podman_hooks, created by install podman, is still there"
fi
for d in /etc/gpu-guard /var/lib/gpu-guard /run/gpu-guard; do
    [ ! -e "$d" ] || fail "$d is still there after purge"
done
# Container engines' own storage (image layers, e.g. the DaemonSet image that
# integration/test-k8s-image.sh builds, with its /etc/gpu-guard) is theirs,
# not the package's.
left=$(find /etc /var/lib /usr /run -name '*gpu-guard*' -not -path '*/target/*' \
    -not -path '/var/lib/containers/*' -not -path '/var/lib/docker/*' -not -path '/var/lib/containerd/*' \
    -not -path '/run/containerd/*' -not -path '/run/containers/*' 2>/dev/null | grep -v "^$PWD" || true)
[ -z "$left" ] || fail "files left after purge: $left"
pass "dpkg --purge: no engine names gpu-guard, nothing left behind"

# --- rpm -----------------------------------------------------------------------
expected=$(printf '%s\n' /etc/gpu-guard/config.toml /usr/bin/gpu-guard /usr/bin/gpu-guard-runtime \
    /usr/bin/kubectl-gpu_guard /usr/share/doc/gpu-guard/LICENSE /usr/share/doc/gpu-guard/README.md \
    /usr/share/gpu-guard/hooks.d/gpu-guard-prestart.json /usr/share/man/man1/gpu-guard.1.gz \
    /usr/share/bash-completion/completions/gpu-guard /usr/share/zsh/site-functions/_gpu-guard \
    /usr/share/fish/vendor_completions.d/gpu-guard.fish \
    $(for s in admission check doctor hook host install runtime scan uninstall; do echo "/usr/share/man/man1/gpu-guard-$s.1.gz"; done) | sort)
[ "$(rpm -qpl "$rpmfile" | sort)" = "$expected" ] || fail "rpm -qpl: $(rpm -qpl "$rpmfile")"
rpm -qp --qf '[%{FILENAMES} %{FILEFLAGS:fflags}\n]' "$rpmfile" | grep -qx '/etc/gpu-guard/config.toml cn' \
    || fail "config.toml is not %config(noreplace) in the rpm"
scripts=$(rpm -qp --scripts "$rpmfile")
for want in "postinstall scriptlet" "preuninstall scriptlet" "postuninstall scriptlet" \
    'gpu-guard uninstall "$engine"' 'gpu-guard install $engine' "rm -rf /run/gpu-guard /var/lib/gpu-guard"; do
    grep -qF "$want" <<<"$scripts" || fail "rpm scriptlets lack: $want"
done
links=$(rpm -qp --qf '[%{FILENAMES} -> %{FILELINKTOS}\n]' "$rpmfile" | grep -v -- '-> $' | sort)
[ "$links" = "$(printf '%s\n' '/usr/bin/gpu-guard-runtime -> gpu-guard' '/usr/bin/kubectl-gpu_guard -> gpu-guard')" ] \
    || fail "rpm symlinks: $links"
pass "rpm: file list, noreplace conffile, scriptlets, argv[0] names linked to the binary"
echo "package-test: all checks passed"
