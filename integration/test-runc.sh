#!/usr/bin/env bash
# gpu-guard under real runc: the prestart hook (refuse / run / non-GPU /
# hook-only policy verification) and the runtime wrapper (refuse with a --log
# JSON line / edits visible inside the container / non-GPU untouched /
# pass-through argv / parallel creates / unparseable config.json / memlock,
# stack and /dev/shm tuning).
. "$(dirname "$0")/lib.sh"

need_root
need_cmd runc jq python3 sha256sum
[ -x "$GG" ] || skip_or_fail "gpu-guard binary $GG not built"
need_capset

new_scratch
SHOW=$(jq -nc '["sh", "-c", "echo RAN; env; grep -E \"^(CapEff|CapBnd|NoNewPrivs)\" /proc/self/status"]')

run_bundle() { # DIR ID -> stdout+stderr in $OUT, exit status in $RC
    OUT=$(cd "$1" && timeout 60 runc run "$2" 2>&1)
    RC=$?
    runc delete -f "$2" >/dev/null 2>&1 || true
}

echo "== prestart hook under runc =="
gg_config "$T/a100.toml" a100
gg_config "$T/h100.toml" h100x8
gg_config "$T/tesla535.toml" tesla-535
gg_config "$T/geforce.toml" geforce-545

# 1. An image requiring more than the host: refused, runc's error carries our diagnosis.
make_bundle "$T/h1" "$SHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE" CUDA_VERSION=12.4.1
make_compliant "$T/h1"
add_prestart_hook "$T/h1" "$T/geforce.toml"
run_bundle "$T/h1" gg-h1
check_eq "hook: unsatisfied image is refused (runc exit)" "$([ $RC -ne 0 ] && echo refused)" refused
check_not_contains "hook: refused container never ran" "$OUT" "RAN"
check_contains "hook: runc error names gpu-guard" "$OUT" "gpu-guard refused to start container gg-h1"
check_contains "hook: diagnosis names the real cause with host values" "$OUT" "cuda>=12.4: driver 545.23.06 provides CUDA 12.3"
check_contains "hook: diagnosis accounts for the brand alternatives" "$OUT" "27 alternatives for other GPU brands"
check_contains "hook: diagnosis names the GPU" "$OUT" "GPU 0 (NVIDIA GeForce RTX 4090, compute capability 8.9)"
check_contains "hook: fix names the minimum driver" "$OUT" "install NVIDIA driver 550.54.14 or newer"

# 2. The same image on a host that satisfies it runs.
make_bundle "$T/h2" "$SHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE"
make_compliant "$T/h2"
add_prestart_hook "$T/h2" "$T/h100.toml"
run_bundle "$T/h2" gg-h2
check_eq "hook: satisfied image runs (exit)" "$RC" 0
check_contains "hook: satisfied image ran" "$OUT" "RAN"

# 3. Forward compatibility: a CUDA 12.4 image on a 535 Tesla host runs.
make_bundle "$T/h3" '["true"]' NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE"
make_compliant "$T/h3"
add_prestart_hook "$T/h3" "$T/tesla535.toml"
run_bundle "$T/h3" gg-h3
check_eq "hook: forward-compatible alternative admits 12.4 image on 535 Tesla" "$RC" 0

# 4. A non-GPU container runs, even with capabilities the GPU policy would refuse.
make_bundle "$T/h4" '["sh","-c","echo RAN"]'
add_prestart_hook "$T/h4" "$T/a100.toml"
run_bundle "$T/h4" gg-h4
check_eq "hook: non-GPU container runs" "$RC" 0
check_contains "hook: non-GPU container ran" "$OUT" "RAN"

# 5. Hook-only host: a GPU container that lacks no_new_privileges and holds
#    capabilities outside the allowlist is refused, naming the spec fields.
make_bundle "$T/h5" '["true"]' NVIDIA_VISIBLE_DEVICES=all
add_prestart_hook "$T/h5" "$T/h100.toml"
run_bundle "$T/h5" gg-h5
check_eq "hook-only: non-compliant GPU container refused" "$([ $RC -ne 0 ] && echo refused)" refused
check_contains "hook-only: names noNewPrivileges" "$OUT" "process.noNewPrivileges is not true"
check_contains "hook-only: names the capability fields" "$OUT" "process.capabilities.{bounding,effective,permitted} hold CAP_MKNOD, CAP_NET_RAW"
check_contains "hook-only: names the install command" "$OUT" "gpu-guard install"

# 6. warn mode: the same container starts.
GG_MODE=warn gg_config "$T/warn.toml" a100
make_bundle "$T/h6" '["sh","-c","echo RAN"]' NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.4"
add_prestart_hook "$T/h6" "$T/warn.toml"
run_bundle "$T/h6" gg-h6
check_eq "hook: warn mode starts a container enforce would refuse" "$RC" 0

# 7. An invalid gpu-guard config refuses GPU containers naming file and key; non-GPU still run.
printf 'mode = "enforce"\n[tuning]\nenabeld = true\n' > "$T/bad.toml"
make_bundle "$T/h7" '["true"]' NVIDIA_VISIBLE_DEVICES=all
make_compliant "$T/h7"
add_prestart_hook "$T/h7" "$T/bad.toml"
run_bundle "$T/h7" gg-h7
check_contains "hook: invalid config names the file" "$OUT" "$T/bad.toml"
check_contains "hook: invalid config names the key" "$OUT" "enabeld"
make_bundle "$T/h8" '["sh","-c","echo RAN"]'
add_prestart_hook "$T/h8" "$T/bad.toml"
run_bundle "$T/h8" gg-h8
check_eq "hook: invalid config still starts non-GPU containers" "$RC" 0

echo "== runtime wrapper under runc =="
mkdir -p "$T/bin"
ln -sf "$GG" "$T/bin/gpu-guard-runtime"
WRAP="$T/bin/gpu-guard-runtime"
export GPU_GUARD_CONFIG="$T/geforce.toml"

# Refused: never starts, last line of --log is our JSON error.
make_bundle "$T/w1" "$SHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE"
echo '{"level":"info","msg":"earlier line","time":"2026-01-01T00:00:00Z"}' > "$T/w1/log.json"
OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" --log "$T/w1/log.json" --log-format json run --bundle "$T/w1" gg-w1 2>&1)
RC=$?
check_eq "wrapper: refused run exits 1" "$RC" 1
check_not_contains "wrapper: refused container never ran" "$OUT" "RAN"
check_contains "wrapper: diagnosis on stderr" "$OUT" "cuda>=12.4: driver 545.23.06 provides CUDA 12.3"
LAST=$(tail -n 1 "$T/w1/log.json")
check_eq "wrapper: last log line is level error" "$(printf '%s' "$LAST" | jq -r .level)" error
check_contains "wrapper: last log line carries the diagnosis" "$(printf '%s' "$LAST" | jq -r .msg)" "gpu-guard refused container gg-w1: [requirement] NVIDIA_REQUIRE_CUDA is not satisfied"
check_contains "wrapper: log time is RFC 3339" "$(printf '%s' "$LAST" | jq -r .time)" "T"
check_eq "wrapper: refused container does not exist" "$(runc --root "$T/runc-root" state gg-w1 >/dev/null 2>&1 && echo exists || echo absent)" absent

# Allowed: env injected (image values kept), caps reduced, no_new_privileges.
export GPU_GUARD_CONFIG="$T/a100.toml"
make_bundle "$T/w2" "$SHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0" CUDA_DEVICE_MAX_CONNECTIONS=8
OUT=$(cd "$T/w2" && timeout 60 "$WRAP" --root "$T/runc-root" run gg-w2 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-w2 >/dev/null 2>&1
check_eq "wrapper: allowed run exits 0 (bundle = cwd)" "$RC" 0
check_contains "wrapper: injected CUDA_DEVICE_ORDER" "$OUT" "CUDA_DEVICE_ORDER=PCI_BUS_ID"
check_contains "wrapper: injected TF_GPU_ALLOCATOR" "$OUT" "TF_GPU_ALLOCATOR=cuda_malloc_async"
check_contains "wrapper: injected TF32 on compute capability 8.0" "$OUT" "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1"
check_contains "wrapper: kept the image's own value" "$OUT" "CUDA_DEVICE_MAX_CONNECTIONS=8"
check_not_contains "wrapper: did not override the image's value" "$OUT" "CUDA_DEVICE_MAX_CONNECTIONS=32"
check_caps "wrapper: CapEff equals the allowlist" "$OUT" CapEff
check_caps "wrapper: CapBnd equals the allowlist" "$OUT" CapBnd
check_contains "wrapper: NoNewPrivs is 1" "$OUT" "NoNewPrivs:	1"
check_eq "wrapper: unknown fields kept" "$(jq -r '.annotations["org.example.keep"]' "$T/w2/config.json")" me
check_not_contains "wrapper: no gpu-guard output in the container's stderr" "$OUT" "gpu-guard"

# Non-GPU: config.json byte-identical before and after, container runs.
make_bundle "$T/w3" '["sh","-c","echo RAN"]'
BEFORE=$(sha256sum < "$T/w3/config.json")
OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/w3" gg-w3 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-w3 >/dev/null 2>&1
check_eq "wrapper: non-GPU runs" "$RC" 0
check_contains "wrapper: non-GPU ran" "$OUT" "RAN"
check_eq "wrapper: non-GPU config.json byte-identical" "$(sha256sum < "$T/w3/config.json")" "$BEFORE"

# A CPU-only job in a CUDA image (a build step, a test) under plain runc:
# it asks for GPUs by env, but no NVIDIA hook, runtime or device attaches
# them, so it gets none. The default rule (detect.env_requests =
# "when-attached") leaves it alone instead of refusing it for a driver it
# never uses; "always" judges it as before.
export GPU_GUARD_CONFIG="$T/geforce.toml"
GG_NO_NVIDIA_HOOK=1 make_bundle "$T/w4" '["sh","-c","echo RAN"]' NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE" CUDA_VERSION=12.4.1
BEFORE=$(sha256sum < "$T/w4/config.json")
OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/w4" gg-w4 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-w4 >/dev/null 2>&1
check_eq "wrapper: env request with nothing attaching GPUs runs" "$RC" 0
check_contains "wrapper: the CPU-only job ran" "$OUT" "RAN"
check_eq "wrapper: its config.json is byte-identical" "$(sha256sum < "$T/w4/config.json")" "$BEFORE"
OUT=$("$GG" check --bundle "$T/w4" 2>&1)
check_contains "check: says why it is not a GPU container" "$OUT" "no NVIDIA hook, runtime or device will attach them"
GG_ENV_REQUESTS=always gg_config "$T/always.toml" geforce-545
OUT=$(GPU_GUARD_CONFIG="$T/always.toml" timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/w4" gg-w4b 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-w4b >/dev/null 2>&1
check_eq "wrapper: env_requests = always refuses it as before" "$RC" 1
check_not_contains "wrapper: refused under always never ran" "$OUT" "RAN"

# Pass-through: a recording stand-in runtime proves argv is byte-identical.
cat > "$T/bin/recorder" <<EOF
#!/usr/bin/env python3
import os, sys
with open("$T/recorded", "wb") as f:
    f.write(b"\0".join(os.fsencode(a) for a in sys.argv[1:]))
EOF
chmod +x "$T/bin/recorder"
GG_RUNTIME_PATH="$T/bin/recorder" gg_config "$T/rec.toml" a100
export GPU_GUARD_CONFIG="$T/rec.toml"
WEIRD=$(printf 'we ird\nline\x01')
for argv in "state gg-x" "--root=/r --log /l --log-format json kill gg-x KILL" "--debug exec --process /p.json gg-x" \
            "features" "delete --force gg-x" "ps gg-x" "events --stats gg-x" "update --memory 1G gg-x" \
            "pause gg-x" "resume gg-x" "checkpoint --image-path /i gg-x" "restore --bundle /b gg-x" "start gg-x"; do
    rm -f "$T/recorded"
    # shellcheck disable=SC2086
    "$WRAP" $argv "$WEIRD" $'\xff\xfe' >/dev/null 2>&1
    # shellcheck disable=SC2086
    EXPECT=$(python3 -c 'import os,sys; sys.stdout.buffer.write(b"\0".join(os.fsencode(a) for a in sys.argv[1:]).hex().encode())' $argv "$WEIRD" $'\xff\xfe')
    GOT=$(python3 -c 'import sys; print(open(sys.argv[1],"rb").read().hex(), end="")' "$T/recorded" 2>/dev/null)
    check_eq "wrapper: pass-through argv byte-identical: ${argv%% *}" "$GOT" "$EXPECT"
done

# Unparseable config.json: the real runtime is exec'd untouched.
mkdir -p "$T/w4" && echo '{"process": {' > "$T/w4/config.json"
rm -f "$T/recorded"
OUT=$("$WRAP" create --bundle "$T/w4" gg-w4 2>&1)
check_eq "wrapper: unparseable config.json goes to the real runtime" "$(tr '\0' ' ' < "$T/recorded")" "create --bundle $T/w4 gg-w4"
check_contains "wrapper: says why it stood aside (stderr without --log)" "$OUT" "standing aside for container gg-w4"
OUT=$("$WRAP" --log "$T/w4/log.json" create --bundle "$T/w4" gg-w4 2>&1)
check_contains "wrapper: says why it stood aside (in the --log file)" "$(cat "$T/w4/log.json")" "standing aside for container gg-w4"
check_not_contains "wrapper: nothing on the container's stderr with --log" "$OUT" "standing aside"
check_eq "wrapper: unparseable config.json untouched" "$(cat "$T/w4/config.json")" '{"process": {'

# Ten containers created in parallel through the wrapper.
export GPU_GUARD_CONFIG="$T/h100.toml"
for i in $(seq 1 10); do
    make_bundle "$T/p$i" '["sleep","30"]' NVIDIA_VISIBLE_DEVICES=$((i % 8)) "NVIDIA_REQUIRE_CUDA=cuda>=12.0" "MARK=$i"
done
for i in $(seq 1 10); do
    "$WRAP" --root "$T/runc-root" create --bundle "$T/p$i" "gg-p$i" >"$T/p$i.out" 2>&1 &
done
wait
OK=0
for i in $(seq 1 10); do
    if jq -e --arg m "MARK=$i" '(.process.env | index($m)) and (.process.env | index("CUDA_DEVICE_ORDER=PCI_BUS_ID")) and .process.noNewPrivileges == true
          and (.process.capabilities.bounding | index("CAP_NET_RAW") | not) and .annotations["org.example.keep"] == "me"' \
          "$T/p$i/config.json" >/dev/null \
        && [ "$(runc --root "$T/runc-root" state "gg-p$i" | jq -r .status)" = created ]; then
        OK=$((OK + 1))
    else
        echo "bundle p$i:"; cat "$T/p$i.out"
    fi
    runc --root "$T/runc-root" delete -f "gg-p$i" >/dev/null 2>&1
done
check_eq "wrapper: 10 parallel creates, all config.json correct and created" "$OK" 10
check_eq "wrapper: no temp files left in bundles" "$(ls -a "$T"/p*/ | grep -c 'gpu-guard.*tmp')" 0

# mode = "audit": everything decided, nothing refused or
# changed. A container enforce refuses runs, and one enforce edits keeps
# its capabilities and no_new_privileges; both config.json byte-identical;
# the runtime log says what enforce would have done, at warning level, as
# the key=value record every mode writes (core::logfmt).
GG_MODE=audit gg_config "$T/audit.toml" geforce-545
export GPU_GUARD_CONFIG="$T/audit.toml"
for kind in refused edited; do
    if [ $kind = refused ]; then
        make_bundle "$T/a-$kind" "$SHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE"
        WOULD="verdict=would_refuse mode=audit container=gg-a-$kind"
    else
        make_bundle "$T/a-$kind" "$SHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
        WOULD='would_edit="env+=CUDA_DEVICE_ORDER=PCI_BUS_ID'
    fi
    BEFORE=$(sha256sum < "$T/a-$kind/config.json")
    OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" --log "$T/a-$kind/log.json" --log-format json run -b "$T/a-$kind" "gg-a-$kind" 2>&1)
    RC=$?
    runc --root "$T/runc-root" delete -f "gg-a-$kind" >/dev/null 2>&1
    check_eq "audit: the container enforce would have $kind runs" "$RC/$(printf '%s' "$OUT" | grep -c RAN)" 0/1
    check_eq "audit: its config.json is byte-identical ($kind)" "$(sha256sum < "$T/a-$kind/config.json")" "$BEFORE"
    check_caps_not "audit: its capabilities are untouched ($kind)" "$OUT" CapEff
    check_contains "audit: no_new_privileges untouched ($kind)" "$OUT" "NoNewPrivs:	0"
    check_not_contains "audit: no tuning env ($kind)" "$OUT" "CUDA_DEVICE_ORDER"
    LAST=$(tail -n 1 "$T/a-$kind/log.json")
    check_eq "audit: the runtime log line is a warning ($kind)" "$(printf '%s' "$LAST" | jq -r .level)" warning
    check_contains "audit: it says what enforce would do ($kind)" "$(printf '%s' "$LAST" | jq -r .msg)" "$WOULD"
done
check_contains "audit: check shows what enforce would do, and says audit" \
    "$("$GG" check --bundle "$T/a-refused" 2>&1)" 'mode = "audit": this is what enforce would do'

# mode = "warn": the container enforce refuses starts, and the runtime log
# gets the same record (verdict=would_refuse), as audit's does.
GG_MODE=warn gg_config "$T/warnw.toml" geforce-545
make_bundle "$T/ww" "$SHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=$CUDA_12_4_REQUIRE"
OUT=$(GPU_GUARD_CONFIG="$T/warnw.toml" timeout 60 "$WRAP" --root "$T/runc-root" --log "$T/ww/log.json" --log-format json run -b "$T/ww" gg-ww 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-ww >/dev/null 2>&1
check_eq "warn: the container enforce would refuse runs" "$RC/$(printf '%s' "$OUT" | grep -c RAN)" 0/1
WARNREC=$(jq -r 'select(.msg | test("verdict=")) | .level + " " + .msg' "$T/ww/log.json")
check_contains "warn: the runtime log has the record, at warning level" "$WARNREC" "warning verdict=would_refuse mode=warn container=gg-ww"

# RLIMIT_MEMLOCK for RDMA (tuning.memlock): raised in the container the
# wrapper starts, never lowered below what the container set. Raising a
# hard limit past ours needs CAP_SYS_RESOURCE; without it (unprivileged VMs,
# sandboxes) the test raises up to our own hard limit instead.
if prlimit --memlock=unlimited:unlimited true 2>/dev/null; then
    LIM=1073741824; HIGH_SOFT=2147483648; HIGH_HARD=4294967296; UNLIMITED=1
else
    HARD_KIB=$(ulimit -Hl)
    LIM=$((HARD_KIB * 1024)); HIGH_SOFT=$LIM; HIGH_HARD=$LIM; UNLIMITED=0
fi
gg_config "$T/memlock.toml" a100
sed -i "s/^memlock = \"\"/memlock = $LIM/" "$T/memlock.toml"
export GPU_GUARD_CONFIG="$T/memlock.toml"
ULIM=$(jq -nc '["sh", "-c", "echo RAN; echo MEMLOCK=$(ulimit -l)"]')
make_bundle "$T/m1" "$ULIM" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
jq '.process.rlimits = [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}, {"type": "RLIMIT_MEMLOCK", "hard": 65536, "soft": 65536}]' \
    "$T/m1/config.json" > "$T/m1/c.json" && mv "$T/m1/c.json" "$T/m1/config.json"
OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/m1" gg-m1 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-m1 >/dev/null 2>&1
check_eq "wrapper memlock: runs" "$RC" 0
check_contains "wrapper memlock: ulimit -l raised from 64 KiB" "$OUT" "MEMLOCK=$((LIM / 1024))"
check_eq "wrapper memlock: other rlimits kept" "$(jq -c '.process.rlimits[0]' "$T/m1/config.json")" '{"type":"RLIMIT_NOFILE","hard":1024,"soft":1024}'
# Two entries of one type: runc applies every entry in order,
# so the last one is in force. runc alone shows it; the wrapper raises that
# one, not the first.
make_bundle "$T/m4" "$ULIM" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
jq --argjson l "$LIM" '.process.rlimits = [{"type": "RLIMIT_MEMLOCK", "hard": $l, "soft": $l}, {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}, {"type": "RLIMIT_MEMLOCK", "hard": 65536, "soft": 65536}]' \
    "$T/m4/config.json" > "$T/m4/c.json" && mv "$T/m4/c.json" "$T/m4/config.json"
OUT=$(cd "$T/m4" && timeout 60 runc --root "$T/runc-root" run gg-m4d 2>&1)
runc --root "$T/runc-root" delete -f gg-m4d >/dev/null 2>&1
check_contains "runc alone: the last RLIMIT_MEMLOCK entry is in force" "$OUT" "MEMLOCK=64"
OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/m4" gg-m4 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-m4 >/dev/null 2>&1
check_eq "wrapper memlock, duplicate entries: runs" "$RC" 0
check_contains "wrapper memlock, duplicate entries: the entry runc applies is raised" "$OUT" "MEMLOCK=$((LIM / 1024))"
check_eq "wrapper memlock, duplicate entries: the last entry holds the limit" "$(jq -c '[.process.rlimits[] | select(.type == "RLIMIT_MEMLOCK")][-1] | [.soft, .hard]' "$T/m4/config.json")" "[$LIM,$LIM]"
# A container that set a higher limit keeps it.
sed -i "s/^memlock = .*/memlock = $((LIM / 2))/" "$T/memlock.toml"
make_bundle "$T/m2" "$ULIM" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
jq --argjson s "$HIGH_SOFT" --argjson h "$HIGH_HARD" '.process.rlimits = [{"type": "RLIMIT_MEMLOCK", "hard": $h, "soft": $s}]' \
    "$T/m2/config.json" > "$T/m2/c.json" && mv "$T/m2/c.json" "$T/m2/config.json"
OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/m2" gg-m2 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-m2 >/dev/null 2>&1
check_eq "wrapper memlock: higher limit runs" "$RC" 0
check_contains "wrapper memlock: the container's higher limit is kept" "$OUT" "MEMLOCK=$((HIGH_SOFT / 1024))"
check_eq "wrapper memlock: config.json not lowered" "$(jq -c '.process.rlimits[0] | [.soft, .hard]' "$T/m2/config.json")" "[$HIGH_SOFT,$HIGH_HARD]"
if [ "$UNLIMITED" = 1 ]; then
    sed -i 's/^memlock = .*/memlock = "unlimited"/' "$T/memlock.toml"
    make_bundle "$T/m3" "$ULIM" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
    OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/m3" gg-m3 2>&1)
    RC=$?
    runc --root "$T/runc-root" delete -f gg-m3 >/dev/null 2>&1
    check_eq "wrapper memlock: unlimited runs" "$RC" 0
    check_contains "wrapper memlock: ulimit -l unlimited" "$OUT" "MEMLOCK=unlimited"
else
    echo "note: no CAP_SYS_RESOURCE here; memlock = \"unlimited\" not run (hard limit $(ulimit -Hl) KiB)"
fi

echo "== /dev/shm and RLIMIT_STACK (tuning.shm_size, tuning.stack) =="
# runc's default spec mounts /dev/shm as the container's own tmpfs, 64 MiB
# (size=65536k): gpu-guard raises it. A bind-mounted /dev/shm (docker's,
# a pod's) is the engine's: left alone, with a warning when it is smaller.
GG_SYSLOG_SOCKET="$T/shm-log.sock" gg_config "$T/shm.toml" a100
sed -i 's/^shm_size = ""/shm_size = "1g"/; s/^stack = ""/stack = 67108864/' "$T/shm.toml"
grep -q '^shm_size = "1g"' "$T/shm.toml" && grep -q '^stack = 67108864' "$T/shm.toml" ||
    fail "the shipped config has no shm_size or stack line"
start_syslog "$T/shm-log.sock" "$T/shm-log.txt"
export GPU_GUARD_CONFIG="$T/shm.toml"
SHMSHOW=$(jq -nc '["sh", "-c", "echo RAN; grep \" /dev/shm \" /proc/mounts; echo STACK=$(ulimit -s) HARD=$(ulimit -Hs)"]')
shm_opts() { jq -c '[.mounts[] | select(.destination == "/dev/shm")][-1] | [.type, .source, .options]' "$1/config.json"; }
make_bundle "$T/s0" "$SHMSHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
check_eq "runc spec: /dev/shm is its own 64 MiB tmpfs" "$(shm_opts "$T/s0")" '["tmpfs","shm",["nosuid","noexec","nodev","mode=1777","size=65536k"]]'
D=$("$GG" check --json --bundle "$T/s0")
check_eq "check: the decision shows the /dev/shm edit" "$(printf '%s' "$D" | jq -c '.edits.mounts')" '{"/dev/shm":{"size":1073741824}}'
check_eq "check: the decision shows the stack edit" "$(printf '%s' "$D" | jq -c '.edits.rlimits.RLIMIT_STACK.soft')" 67108864
OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/s0" gg-s0 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-s0 >/dev/null 2>&1
check_eq "wrapper shm: runs" "$RC" 0
check_contains "wrapper shm: /proc/mounts shows /dev/shm raised to 1 GiB" "$OUT" "size=1048576k"
check_contains "wrapper stack: ulimit -s shows 64 MiB" "$OUT" "STACK=65536 "
check_contains "wrapper stack: the inherited hard limit is not lowered" "$OUT" "HARD=$(ulimit -Hs)"
check_eq "wrapper shm: every other option kept" "$(shm_opts "$T/s0")" '["tmpfs","shm",["nosuid","noexec","nodev","mode=1777","size=1048576k"]]'
# A non-GPU container: its config.json byte for byte, its /dev/shm and stack as they were.
make_bundle "$T/s1" "$SHMSHOW"
BEFORE=$(sha256sum < "$T/s1/config.json")
OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/s1" gg-s1 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-s1 >/dev/null 2>&1
check_eq "wrapper shm: non-GPU runs" "$RC" 0
check_contains "wrapper shm: non-GPU /dev/shm stays 64 MiB" "$OUT" "size=65536k"
check_contains "wrapper stack: non-GPU stack as inherited" "$OUT" "STACK=$(ulimit -s) "
check_eq "wrapper shm: non-GPU config.json byte-identical" "$(sha256sum < "$T/s1/config.json")" "$BEFORE"
# A bind-mounted /dev/shm of 64 MiB (as docker makes one): no edit, a warning.
mkdir -p "$T/shmsrc"
if mount -t tmpfs -o size=64m gg-test-shm "$T/shmsrc"; then
    make_bundle "$T/s2" "$SHMSHOW" NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
    jq --arg src "$T/shmsrc" '.mounts = [.mounts[] | if .destination == "/dev/shm"
        then {destination: "/dev/shm", type: "bind", source: $src, options: ["rbind", "rprivate"]} else . end]' \
        "$T/s2/config.json" > "$T/s2/c.json" && mv "$T/s2/c.json" "$T/s2/config.json"
    D=$("$GG" check --json --bundle "$T/s2")
    check_eq "check: no /dev/shm edit for a bind mount" "$(printf '%s' "$D" | jq -c '.edits.mounts // "none"')" '"none"'
    check_contains "check: a tuning warning for the small bind mount" "$(printf '%s' "$D" | jq -r '.findings[] | select(.check == "tuning") | .message')" "/dev/shm is 64 MiB (a bind mount of $T/shmsrc), smaller than tuning.shm_size (1 GiB)"
    check_contains "check: the fix names --shm-size and the emptyDir" "$(printf '%s' "$D" | jq -r '.findings[] | select(.check == "tuning") | .fix')" "--shm-size=1g; Kubernetes: mount an emptyDir volume with medium: Memory"
    BEFORE=$(shm_opts "$T/s2")
    : > "$T/shm-log.txt"
    OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/s2" gg-s2 2>&1)
    RC=$?
    runc --root "$T/runc-root" delete -f gg-s2 >/dev/null 2>&1
    check_eq "wrapper shm: bind-mounted /dev/shm runs" "$RC" 0
    check_contains "wrapper shm: the bind mount stays 64 MiB" "$OUT" "size=65536k"
    check_eq "wrapper shm: the bind mount entry is unchanged" "$(shm_opts "$T/s2")" "$BEFORE"
    sleep 0.3
    check_contains "wrapper shm: the warning is logged" "$(cat "$T/shm-log.txt")" "smaller than tuning.shm_size"
    check_contains "wrapper stack: still raised" "$OUT" "STACK=65536 "
    umount "$T/shmsrc"
else
    fail "cannot mount a tmpfs for the bind-mounted /dev/shm test"
fi

echo "== fail closed: an invalid config keeps the chain; GPUs found by device number =="
# A node as `gpu-guard install containerd` leaves it: the chain drop-in names
# NVIDIA's runtime (a stand-in that records its argv, then runs real runc).
# The config gains a key this binary does not know (a rollback). A pod whose
# only GPU request is NVIDIA_VISIBLE_DEVICES=all (the device plugin's envvar
# strategy: only NVIDIA's runtime acts on it) is refused naming the file and
# the key; a pod without GPUs runs through NVIDIA's runtime, not plain runc.
mkdir -p "$T/fc/etc/config.d" "$T/fc/bin"
chmod 755 "$T/fc" "$T/fc/etc" "$T/fc/etc/config.d" "$T/fc/bin"
printf '#!/bin/sh\necho "nvidia-container-runtime: $*" >> "%s"\nexec %s "$@"\n' "$T/fc/calls" "$(command -v runc)" > "$T/fc/bin/nvidia-container-runtime"
printf '#!/bin/sh\necho "plain runc: $*" >> "%s"\nexit 0\n' "$T/fc/calls" > "$T/fc/bin/runc"
chmod 755 "$T/fc/bin/nvidia-container-runtime" "$T/fc/bin/runc"
GG_SYSLOG_SOCKET="$T/fc-log.sock" gg_config "$T/fc/etc/config.toml" a100
sed -i -e "s|^\[runtime.engines.containerd\]\$|&\nroot = \"$T/fc-run\"|" -e 's|^\[tuning\]$|&\nnew_future_key = 1|' "$T/fc/etc/config.toml"
grep -q '^new_future_key = 1' "$T/fc/etc/config.toml" && grep -q "^root = \"$T/fc-run\"" "$T/fc/etc/config.toml" ||
    fail "the shipped config has no [tuning] or [runtime.engines.containerd] table"
printf '[runtime.engines.containerd]\npath = "%s"\n' "$T/fc/bin/nvidia-container-runtime" > "$T/fc/etc/config.d/50-chain-containerd.toml"
start_syslog "$T/fc-log.sock" "$T/fc-log.txt"
fc_create() { # BUNDLE ID -> exit status in RC; argv as containerd's shim passes it
    PATH="$T/fc/bin:$PATH" GPU_GUARD_CONFIG="$T/fc/etc/config.toml" timeout 60 "$WRAP" --root "$T/fc-run/k8s.io" \
        --log "$1/log.json" --log-format json create --bundle "$1" --pid-file "$1/init.pid" "$2" >/dev/null 2>&1
    RC=$?
}
GG_NO_NVIDIA_HOOK=1 make_bundle "$T/fc1" '["true"]' NVIDIA_VISIBLE_DEVICES=all
fc_create "$T/fc1" gg-fc1
runc --root "$T/fc-run/k8s.io" delete -f gg-fc1 >/dev/null 2>&1
check_eq "invalid config: env-only GPU pod refused" "$RC" 1
check_eq "invalid config: no runtime ran for it" "$(cat "$T/fc/calls" 2>/dev/null)" ""
LAST=$(tail -n 1 "$T/fc1/log.json")
check_contains "invalid config: --log names the file" "$(printf '%s' "$LAST" | jq -r .msg)" "$T/fc/etc/config.toml"
check_contains "invalid config: --log names the key" "$(printf '%s' "$LAST" | jq -r .msg)" "new_future_key"
sleep 0.3
check_contains "invalid config: syslog names the key" "$(cat "$T/fc-log.txt")" "new_future_key"
OUT=$(GPU_GUARD_CONFIG="$T/fc/etc/config.toml" PATH="$T/fc/bin:$PATH" "$GG" check --bundle "$T/fc1" --engine containerd 2>&1)
check_contains "invalid config: check --engine containerd refuses it" "$OUT" "REFUSE: container (GPU container"
check_not_contains "invalid config: check does not skip it" "$OUT" "SKIP"
make_bundle "$T/fc2" '["true"]'
BEFORE=$(sha256sum < "$T/fc2/config.json")
fc_create "$T/fc2" gg-fc2
check_eq "invalid config: pod without GPUs created" "$RC" 0
check_eq "invalid config: ... by real runc" "$(runc --root "$T/fc-run/k8s.io" state gg-fc2 2>/dev/null | jq -r .status)" created
runc --root "$T/fc-run/k8s.io" delete -f gg-fc2 >/dev/null 2>&1
check_contains "invalid config: ... through NVIDIA's runtime" "$(cat "$T/fc/calls")" "nvidia-container-runtime: --root $T/fc-run/k8s.io"
check_not_contains "invalid config: ... never plain runc from PATH" "$(cat "$T/fc/calls")" "plain runc"
check_eq "invalid config: ... config.json byte-identical" "$(sha256sum < "$T/fc2/config.json")" "$BEFORE"

# A GPU node renamed, and a cgroup rule for NVIDIA's major with CAP_MKNOD:
# GPU containers by what they get. The policy is in force inside them.
export GPU_GUARD_CONFIG="$T/a100.toml"
DEVSHOW=$(jq -nc '["sh", "-c", "grep CapEff /proc/self/status; echo ORDER=$CUDA_DEVICE_ORDER; busybox mknod /dev/g9 c 195 9 && echo MKNOD=ok || echo MKNOD=refused"]')
with_devices() { # DIR NODES_JSON RULES_JSON
    jq --argjson n "$2" --argjson r "$3" '.linux.devices = $n | .linux.resources.devices = ([{"allow": false, "access": "rwm"}] + $r)' \
        "$1/config.json" > "$1/c.json" && mv "$1/c.json" "$1/config.json"
}
for kind in renamed rule; do
    make_bundle "$T/d-$kind" "$DEVSHOW"
    if [ $kind = renamed ]; then
        with_devices "$T/d-$kind" '[{"path": "/dev/g0", "type": "c", "major": 195, "minor": 0, "fileMode": 438}]' '[{"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm"}]'
    else
        with_devices "$T/d-$kind" '[]' '[{"allow": true, "type": "c", "major": 195, "access": "rwm"}]'
    fi
    OUT=$(timeout 60 runc --root "$T/runc-root" run -b "$T/d-$kind" "gg-dp-$kind" 2>&1)
    runc --root "$T/runc-root" delete -f "gg-dp-$kind" >/dev/null 2>&1
    check_contains "device $kind: plain runc lets it make a GPU node" "$OUT" "MKNOD=ok"
    OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/d-$kind" "gg-d-$kind" 2>&1)
    RC=$?
    runc --root "$T/runc-root" delete -f "gg-d-$kind" >/dev/null 2>&1
    check_eq "device $kind: runs through the wrapper" "$RC" 0
    check_contains "device $kind: tuned as a GPU container" "$OUT" "ORDER=PCI_BUS_ID"
    check_contains "device $kind: CAP_MKNOD dropped" "$OUT" "MKNOD=refused"
    check_caps "device $kind: CapEff equals the allowlist" "$OUT" CapEff
    # The same container again (the wrapper edited this one's config.json:
    # no CAP_MKNOD there now), asking for more CUDA than the host has.
    make_bundle "$T/d-$kind-r" "$DEVSHOW" "NVIDIA_REQUIRE_CUDA=cuda>=12.4"
    jq --slurpfile d "$T/d-$kind/config.json" '.linux.devices = $d[0].linux.devices | .linux.resources.devices = $d[0].linux.resources.devices' \
        "$T/d-$kind-r/config.json" > "$T/c.json" && mv "$T/c.json" "$T/d-$kind-r/config.json"
    OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/d-$kind-r" "gg-dr-$kind" 2>&1)
    RC=$?
    runc --root "$T/runc-root" delete -f "gg-dr-$kind" >/dev/null 2>&1
    check_eq "device $kind: the requirement check refuses CUDA 12.4" "$RC" 1
    check_not_contains "device $kind: ... and it never ran" "$OUT" "ORDER="
done
make_bundle "$T/d-fuse" '["sh", "-c", "ls -l /dev/fuse; echo ORDER=$CUDA_DEVICE_ORDER."]'
with_devices "$T/d-fuse" '[{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438}]' '[{"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rwm"}]'
BEFORE=$(sha256sum < "$T/d-fuse/config.json")
OUT=$(timeout 60 "$WRAP" --root "$T/runc-root" run -b "$T/d-fuse" gg-d-fuse 2>&1)
RC=$?
runc --root "$T/runc-root" delete -f gg-d-fuse >/dev/null 2>&1
check_eq "device fuse: runs" "$RC" 0
check_contains "device fuse: has its node" "$OUT" "229"
check_contains "device fuse: not tuned" "$OUT" "ORDER=."
check_eq "device fuse: config.json byte-identical" "$(sha256sum < "$T/d-fuse/config.json")" "$BEFORE"
unset GPU_GUARD_CONFIG

finish
