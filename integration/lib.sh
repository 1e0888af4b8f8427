# Shared helpers for gpu-guard's real-engine tests. Source it; don't run it.
# shellcheck shell=bash

set -u

INTEGRATION_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$INTEGRATION_DIR/.." && pwd)
HOSTS_DIR="$REPO_DIR/tests/data/hosts"

# The release build's output (packaging/build-release.sh: glibc 2.17, the
# build the packages and the image ship).
RELEASE_DIR="$REPO_DIR/target/x86_64-unknown-linux-gnu/release"

# The binary under test: $GPU_GUARD_BIN (the installed /usr/bin/gpu-guard in
# the package test), else the newer of the release and debug builds.
gg_bin() {
    local rel="$RELEASE_DIR/gpu-guard" dbg="$REPO_DIR/target/debug/gpu-guard"
    if [ -n "${GPU_GUARD_BIN:-}" ]; then
        echo "$GPU_GUARD_BIN"
    elif [ -x "$rel" ] && { [ ! -x "$dbg" ] || [ "$rel" -nt "$dbg" ]; }; then
        echo "$rel"
    else
        echo "$dbg"
    fi
}
GG=$(gg_bin)

FAILS=0
PASSES=0
pass() { PASSES=$((PASSES + 1)); printf 'PASS %s\n' "$*"; }
fail() { FAILS=$((FAILS + 1)); printf 'FAIL %s\n' "$*"; }

# A test that cannot run here says why. Under CI (GPU_GUARD_CI=1) that is a
# failure: CI installs everything, so a skip there would hide a broken setup.
skip_or_fail() {
    if [ "${GPU_GUARD_CI:-0}" = 1 ]; then
        fail "cannot run: $* (GPU_GUARD_CI=1 forbids skipping)"
        finish
    fi
    printf 'SKIP %s\n' "$*"
    exit 0
}

finish() {
    printf '%s: %d passed, %d failed\n' "$(basename "$0")" "$PASSES" "$FAILS"
    [ "$FAILS" -eq 0 ]
    exit $?
}

need_root() {
    [ "$(id -u)" = 0 ] || skip_or_fail "needs root"
}

need_cmd() {
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || skip_or_fail "$c is not installed"
    done
}

# check_contains NAME HAYSTACK NEEDLE
check_contains() {
    if printf '%s' "$2" | grep -qF -- "$3"; then pass "$1"; else fail "$1: expected to find [$3] in: $2"; fi
}
check_not_contains() {
    if printf '%s' "$2" | grep -qF -- "$3"; then fail "$1: did not expect [$3] in: $2"; else pass "$1"; fi
}
check_eq() {
    if [ "$2" = "$3" ]; then pass "$1"; else fail "$1: expected [$3], got [$2]"; fi
}

# new_scratch: sets T to a fresh scratch directory removed at exit (unless
# KEEP_SCRATCH=1, for debugging).
new_scratch() {
    T=$(mktemp -d "${TMPDIR:-/tmp}/gpu-guard-it.XXXXXX")
    if [ "${KEEP_SCRATCH:-0}" != 1 ]; then
        # shellcheck disable=SC2064
        trap "rm -rf '$T'" EXIT
    fi
}

# make_rootfs DIR: a busybox-static root filesystem.
make_rootfs() {
    local root=$1
    mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/etc"
    cp /bin/busybox "$root/bin/busybox"
    for a in sh env cat true sleep grep echo ls id; do
        ln -sf busybox "$root/bin/$a"
    done
    echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
}

# gg_config FILE PROFILE [extra TOML lines...]: the shipped config with host
# facts read from tests/data/hosts/PROFILE.json and caches in FILE's directory.
# GG_MODE overrides `mode`, GG_RUNTIME_PATH `runtime.path`. Extra lines are appended (give their [table]).
# `detect.env_requests` stays the shipped "when-attached" (GG_ENV_REQUESTS
# overrides): GPU bundles carry NVIDIA's (stand-in) hook, see make_bundle.
gg_config() {
    local file=$1 profile=$2
    shift 2
    local dir
    dir=$(cd "$(dirname "$file")" && pwd)
    sed -e "s|^mode = .*|mode = \"${GG_MODE:-enforce}\"|" \
        -e "s|^facts_file = .*|facts_file = \"$HOSTS_DIR/$profile.json\"|" \
        -e "s|^cache_file = .*|cache_file = \"$dir/host-cache.json\"|" \
        -e "s|^cache_dir = .*|cache_dir = \"$dir/scan-cache\"|" \
        -e "s|^state_dir = .*|state_dir = \"$dir/metrics-state\"|" \
        -e "s|^syslog = .*|syslog = ${GG_SYSLOG:-true}|" \
        -e "s|^syslog_socket = .*|syslog_socket = \"${GG_SYSLOG_SOCKET:-}\"|" \
        -e "s|^path = \"\"|path = \"${GG_RUNTIME_PATH:-}\"|" \
        -e "s|^env_requests = .*|env_requests = \"${GG_ENV_REQUESTS:-when-attached}\"|" \
        "$REPO_DIR/config/config.toml" > "$file"
    for l in "$@"; do echo "$l" >> "$file"; done
    grep -q "^facts_file = \"$HOSTS_DIR" "$file" || { echo "gg_config: shipped config has no facts_file line" >&2; return 1; }
}

# start_syslog SOCK FILE: a datagram socket at SOCK (for gpu-guard's
# log.syslog_socket, GG_SYSLOG_SOCKET) whose every message is appended to FILE
# as one line; the listener ends when this script does. For decisions whose
# log line is the only witness: warnings of a container that starts, from a
# hook whose stderr the engine drops.
start_syslog() {
    python3 - "$1" "$2" "$$" <<'PY' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(1.0)
parent = int(sys.argv[3])
with open(sys.argv[2], "ab", buffering=0) as f:
    while True:
        try:
            f.write(s.recv(65536).rstrip(b"\n") + b"\n")
        except socket.timeout:
            try:
                os.kill(parent, 0)
            except OSError:
                break
PY
    for _ in $(seq 1 50); do [ -S "$1" ] && return 0; sleep 0.1; done
    fail "start_syslog: no socket at $1"
}

# make_bundle DIR ARGS_JSON ENV... : a runc bundle over DIR/rootfs running
# ARGS_JSON (a JSON array), with the given KEY=VALUE env entries, Docker's
# default capability set, and noNewPrivileges unset (as docker leaves it).
# A bundle whose env asks for GPUs (NVIDIA_VISIBLE_DEVICES, CUDA_VERSION)
# gets NVIDIA's prestart hook, as `docker run --gpus` gives it (a stand-in
# that attaches nothing), so the request counts under gpu-guard's default
# rule; GG_NO_NVIDIA_HOOK=1 leaves it out (a CPU-only job in a CUDA image).
NVIDIA_HOOK_STAND_IN="$INTEGRATION_DIR/stand-in/nvidia-container-runtime-hook"
make_bundle() {
    local dir=$1 args=$2
    shift 2
    mkdir -p "$dir"
    make_rootfs "$dir/rootfs"
    (cd "$dir" && runc spec)
    local env_json
    env_json=$(printf '%s\n' "PATH=/bin" "$@" | jq -R . | jq -s .)
    local caps='["CAP_CHOWN","CAP_DAC_OVERRIDE","CAP_FSETID","CAP_FOWNER","CAP_MKNOD","CAP_NET_RAW","CAP_SETGID","CAP_SETUID","CAP_SETFCAP","CAP_SETPCAP","CAP_NET_BIND_SERVICE","CAP_SYS_CHROOT","CAP_KILL","CAP_AUDIT_WRITE"]'
    jq --argjson args "$args" --argjson env "$env_json" --argjson caps "$caps" '
        .process.terminal = false
        | .process.args = $args
        | .process.env = $env
        | .process.noNewPrivileges = false
        | .process.capabilities = {bounding: $caps, effective: $caps, permitted: $caps, inheritable: [], ambient: []}
        | .root.readonly = true
        | .hostname = "gpu-guard-test"
        | .annotations = {"org.example.keep": "me"}' "$dir/config.json" > "$dir/config.json.new"
    mv "$dir/config.json.new" "$dir/config.json"
    if [ "${GG_NO_NVIDIA_HOOK:-0}" != 1 ] && printf '%s\n' "$@" | grep -qE '^(NVIDIA_VISIBLE_DEVICES|CUDA_VERSION)='; then
        jq --arg h "$NVIDIA_HOOK_STAND_IN" '
            .hooks.prestart = ((.hooks.prestart // []) + [{path: $h, args: ["nvidia-container-runtime-hook", "prestart"]}])' \
            "$dir/config.json" > "$dir/config.json.new"
        mv "$dir/config.json.new" "$dir/config.json"
    fi
}

# add_prestart_hook DIR CONFIG: run `gpu-guard --config CONFIG hook prestart`.
add_prestart_hook() {
    local dir=$1 cfg=$2
    jq --arg gg "$GG" --arg cfg "$cfg" '
        .hooks.prestart = ((.hooks.prestart // []) + [{path: $gg, args: ["gpu-guard", "--config", $cfg, "hook", "prestart"]}])' \
        "$dir/config.json" > "$dir/config.json.new"
    mv "$dir/config.json.new" "$dir/config.json"
}

# The official nvidia/cuda 12.4.1 requirement (gitlab.com/nvidia/container-images/cuda dist/12.4.1).
CUDA_12_4_REQUIRE='cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 brand=geforcertx,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=titan,driver>=470,driver<471 brand=titanrtx,driver>=470,driver<471 brand=tesla,driver>=525,driver<526 brand=unknown,driver>=525,driver<526 brand=nvidia,driver>=525,driver<526 brand=nvidiartx,driver>=525,driver<526 brand=geforce,driver>=525,driver<526 brand=geforcertx,driver>=525,driver<526 brand=quadro,driver>=525,driver<526 brand=quadrortx,driver>=525,driver<526 brand=titan,driver>=525,driver<526 brand=titanrtx,driver>=525,driver<526 brand=tesla,driver>=535,driver<536 brand=unknown,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536 brand=nvidiartx,driver>=535,driver<536 brand=geforce,driver>=535,driver<536 brand=geforcertx,driver>=535,driver<536 brand=quadro,driver>=535,driver<536 brand=quadrortx,driver>=535,driver<536 brand=titan,driver>=535,driver<536 brand=titanrtx,driver>=535,driver<536'

# gg-capset (crates/capset, a workspace member): the kernel's capability
# table (the caps crate), to read the CapEff/CapBnd masks a container prints
# as names. $GG_CAPSET_BIN names a prebuilt one; else need_capset builds it
# from the release build (packaging/build-release.sh: a no-op once the
# workspace is built). It also sets ALLOWLIST_NAMES: the shipped allowlist,
# canonical and sorted as `gg-capset decode` prints a set.
GG_CAPSET=${GG_CAPSET_BIN:-$RELEASE_DIR/gg-capset}
need_capset() {
    if [ -z "${GG_CAPSET_BIN:-}" ]; then
        "$REPO_DIR/packaging/build-release.sh" >/dev/null ||
            { fail "cannot build gg-capset (packaging/build-release.sh)"; finish; }
    fi
    [ -x "$GG_CAPSET" ] || { fail "gg-capset $GG_CAPSET is missing"; finish; }
    # shellcheck disable=SC2086 # one word per capability
    ALLOWLIST_NAMES=$("$GG_CAPSET" names $ALLOWLIST_CAPS) ||
        { fail "the shipped allowlist names an unknown capability: $ALLOWLIST_CAPS"; finish; }
    [ -n "$ALLOWLIST_NAMES" ] || { fail "the shipped allowlist is empty"; finish; }
}

# caps_in FIELD TEXT: the capabilities of TEXT's first "FIELD:<tab>HEX" line
# (a /proc/PID/status excerpt), decoded, sorted, space separated. Fails,
# saying why, when the line is absent or the mask has an unknown bit.
caps_in() {
    local hex
    hex=$(printf '%s\n' "$2" | tr -d '\r' | sed -n "s/^$1:[[:space:]]*\([0-9a-fA-F]\{1,16\}\)\$/\1/p" | head -n 1)
    [ -n "$hex" ] || { echo "no $1 line"; return 1; }
    "$GG_CAPSET" decode "$hex" 2>&1
}

# set_diff A B: the words of A that B lacks.
set_diff() {
    comm -23 <(printf '%s\n' $1 | sort) <(printf '%s\n' $2 | sort) | xargs
}

# check_caps NAME TEXT FIELD: FIELD (CapEff, CapBnd) in TEXT is exactly the
# allowlist, compared as sets of names.
check_caps() {
    local got
    got=$(caps_in "$3" "$2") || { fail "$1: $got in: $2"; return; }
    if [ "$got" = "$ALLOWLIST_NAMES" ]; then
        pass "$1"
    else
        fail "$1: $3 is not the allowlist: extra [$(set_diff "$got" "$ALLOWLIST_NAMES")], missing [$(set_diff "$ALLOWLIST_NAMES" "$got")]; got [$got]"
    fi
}

# check_caps_not NAME TEXT FIELD: FIELD is in TEXT and is not the allowlist.
check_caps_not() {
    local got
    got=$(caps_in "$3" "$2") || { fail "$1: $got in: $2"; return; }
    if [ "$got" = "$ALLOWLIST_NAMES" ]; then fail "$1: $3 is the allowlist [$got]"; else pass "$1"; fi
}

# The shipped capability allowlist, read from the shipped config.
# The shipped allowlist: security.capabilities when set, else the list of
# the profile security.profile names (src/core/profiles.rs; tests/decide/profiles.rs
# holds the two together).
ALLOWLIST_CAPS=$(python3 - "$REPO_DIR/config/config.toml" <<'PY'
import sys, tomllib
sec = tomllib.load(open(sys.argv[1], "rb"))["security"]
gg = "CHOWN DAC_OVERRIDE FOWNER FSETID KILL NET_BIND_SERVICE SETGID SETPCAP SETUID SYS_CHROOT"
profiles = {
    "gpu-guard": gg,
    "docker-default": gg + " MKNOD NET_RAW SETFCAP AUDIT_WRITE",
    "baseline": gg + " MKNOD SETFCAP AUDIT_WRITE",
    "restricted": "NET_BIND_SERVICE",
}
caps = sec["capabilities"] if "capabilities" in sec else ["CAP_" + c for c in profiles[sec.get("profile", "gpu-guard")].split()]
print(" ".join(caps))
PY
)

# make_compliant DIR: the bundle already meets the shipped security policy
# (what the runtime wrapper would produce), for hook-only tests and
# benchmarks whose subject is not the policy.
make_compliant() {
    local caps
    caps=$(printf '%s\n' $ALLOWLIST_CAPS | jq -R . | jq -sc .)
    jq --argjson caps "$caps" '.process.noNewPrivileges = true
        | .process.capabilities = {bounding: $caps, effective: $caps, permitted: $caps, inheritable: [], ambient: []}' \
        "$1/config.json" > "$1/config.json.new" && mv "$1/config.json.new" "$1/config.json"
}
