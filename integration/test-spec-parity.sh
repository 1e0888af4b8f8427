#!/usr/bin/env bash
# The Go-compatible spec reader under real runc: spec files that Go's encoding/json reads
# differently from serde (deep nesting, 1e99999, a lone surrogate, a file
# over 64 MiB, case-variant keys, duplicate "process" keys, a key that
# folds to "process" only under Unicode folding) are first run by
# runc alone (proving runc accepts them and what it would run: NoNewPrivs 0,
# capabilities outside the allowlist), then through gpu-guard-runtime: the
# container's own /proc/self/status and env must show gpu-guard's decision
# (the allowlist, NoNewPrivs 1, the tuning env) or the container must not
# exist. A type error that a later duplicate hides from a merge fails
# through the wrapper exactly as under runc alone. Then exec:
# --process files with the same tricks (and a hidden type error), --cap and
# --no-new-privs=false on the command line, every spelling of an empty
# --process (runc runs the bundle's process with the flags), an invalid
# config, `-u` as runc reads it under a profile that refuses root; an
# unreadable GPU spec is refused with the parse error in the --log file.
. "$(dirname "$0")/lib.sh"

need_root
need_cmd runc jq python3
[ -x "$GG" ] || skip_or_fail "gpu-guard binary $GG not built"
need_capset

new_scratch
SHOW=$(jq -nc '["sh", "-c", "echo RAN; env; grep -E \"^(CapEff|CapBnd|NoNewPrivs)\" /proc/self/status; grep \"^Max open files\" /proc/self/limits"]')
ROOT="$T/runc-root"
mkdir -p "$T/bin"
ln -sf "$GG" "$T/bin/gpu-guard-runtime"
WRAP="$T/bin/gpu-guard-runtime"
gg_config "$T/a100.toml" a100
export GPU_GUARD_CONFIG="$T/a100.toml"

# trick DIR KIND: rewrites DIR/config.json (made by make_bundle, GPU env,
# NVIDIA's stand-in hook, docker's default capabilities, noNewPrivileges
# false) into a form serde reads differently from runc. In every form runc
# runs the container with all of docker's capabilities plus CAP_SYS_ADMIN
# and NoNewPrivs 0 unless something edits it.
trick() {
    python3 - "$1/config.json" "$2" <<'PY'
import json, sys
path, kind = sys.argv[1], sys.argv[2]
spec = json.load(open(path))
proc = spec["process"]
caps = proc["capabilities"]
for s in ("bounding", "effective", "permitted"):
    caps[s] = caps[s] + ["CAP_SYS_ADMIN"]
def dump(obj):
    return json.dumps(obj)
body = dump(spec)[:-1]   # without the closing brace
if kind == "deep":
    out = body + ', "zdeep": ' + "[" * 1000 + "]" * 1000 + "}"
elif kind == "bignum":
    out = body + ', "zbig": 1e99999}'
elif kind == "surrogate":
    out = body + ', "zlone": "\\ud800"}'
    out = out.replace('"PATH=/bin"', '"LONE=\\ud800", "PATH=/bin"', 1)
elif kind == "huge":
    out = body + ', "zpad": "' + "x" * (65 << 20) + '"}'
elif kind == "case":
    env = proc.pop("env")
    nnp = proc.pop("noNewPrivileges")
    c = proc.pop("capabilities")
    pdump = dump(proc)[:-1]
    # canonical keys first, then the spellings Go reads last
    pdump += ', "env": ["PATH=/bin"], "noNewPrivileges": true'
    pdump += ', "capabilities": {"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"], "permitted": ["CAP_CHOWN"]}'
    pdump += ', "Env": ' + dump(env) + ', "NoNewPrivileges": false'
    pdump += ', "Capabilities": {"Bounding": ' + dump(c["bounding"]) + ', "Effective": ' + dump(c["effective"]) + ', "Permitted": ' + dump(c["permitted"]) + '}}'
    del spec["process"]
    out = dump(spec)[:-1] + ', "process": ' + pdump + '}'
elif kind == "dup":
    # rlimits: Go decodes the second list into the first one's elements,
    # so RLIMIT_NOFILE keeps its type and soft limit and takes hard 2048
    p2 = {"capabilities": proc.pop("capabilities"), "noNewPrivileges": False, "rlimits": [{"hard": 2048}]}
    proc["noNewPrivileges"] = True
    proc["capabilities"] = {"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"], "permitted": ["CAP_CHOWN"]}
    out = dump(spec)[:-1] + ', "process": ' + dump(p2) + '}'
elif kind == "fold":
    # U+017F (long s) folds to "s" in Go's key matching (bytes.EqualFold)
    p2 = {"noNewPrivileges": False, "capabilities": proc.pop("capabilities")}
    proc["noNewPrivileges"] = True
    proc["capabilities"] = {"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"], "permitted": ["CAP_CHOWN"]}
    out = dump(spec)[:-1] + ', "proce\u017f\u017f": ' + dump(p2) + '}'
else:
    raise SystemExit("unknown kind " + kind)
open(path, "w").write(out)
PY
}

run_direct() { # DIR ID: runc alone
    OUT=$(cd "$1" && timeout 120 runc --root "$ROOT" run "$2" 2>&1)
    RC=$?
    runc --root "$ROOT" delete -f "$2" >/dev/null 2>&1 || true
}
run_wrapped() { # DIR ID: through gpu-guard-runtime
    OUT=$(timeout 120 "$WRAP" --root "$ROOT" --log "$1/log.json" run -b "$1" "$2" 2>&1)
    RC=$?
    runc --root "$ROOT" delete -f "$2" >/dev/null 2>&1 || true
}

echo "== tricky config.json: runc alone, then through the wrapper =="
for kind in deep bignum surrogate huge case dup fold; do
    make_bundle "$T/d-$kind" "$SHOW" NVIDIA_VISIBLE_DEVICES=all
    trick "$T/d-$kind" "$kind"
    run_direct "$T/d-$kind" "ggp-d-$kind"
    check_eq "$kind: runc alone runs it" "$RC" 0
    check_contains "$kind: runc alone: NoNewPrivs 0" "$OUT" "NoNewPrivs:	0"
    check_caps_not "$kind: runc alone: CapEff is not the allowlist" "$OUT" CapEff

    make_bundle "$T/w-$kind" "$SHOW" NVIDIA_VISIBLE_DEVICES=all
    trick "$T/w-$kind" "$kind"
    run_wrapped "$T/w-$kind" "ggp-w-$kind"
    check_eq "$kind: wrapper runs it" "$RC" 0
    check_contains "$kind: wrapper: the container ran" "$OUT" "RAN"
    check_contains "$kind: wrapper: NoNewPrivs 1" "$OUT" "NoNewPrivs:	1"
    check_caps "$kind: wrapper: CapEff is the allowlist" "$OUT" CapEff
    check_caps "$kind: wrapper: CapBnd is the allowlist" "$OUT" CapBnd
    check_contains "$kind: wrapper: the GPU request is kept" "$OUT" "NVIDIA_VISIBLE_DEVICES=all"
    check_contains "$kind: wrapper: tuning env injected" "$OUT" "CUDA_DEVICE_ORDER=PCI_BUS_ID"
    if [ "$kind" = dup ]; then
        NOFILE=$(printf '%s\n' "$OUT" | sed -n 's/^Max open files *\([0-9]*\) *\([0-9]*\).*/\1 \2/p')
        check_eq "$kind: rlimits of both process objects merged as runc merges them" "$NOFILE" "1024 2048"
        DIRECT=$(cd "$T/d-$kind" && timeout 120 runc --root "$ROOT" run "ggp-d2-$kind" 2>&1 | sed -n 's/^Max open files *\([0-9]*\) *\([0-9]*\).*/\1 \2/p')
        runc --root "$ROOT" delete -f "ggp-d2-$kind" >/dev/null 2>&1 || true
        check_eq "$kind: runc alone reads the same rlimits" "$DIRECT" "1024 2048"
    fi
    if [ "$kind" = surrogate ]; then
        check_contains "$kind: runc reads the lone surrogate as U+FFFD" "$OUT" "LONE=$(printf '\xef\xbf\xbd')"
    fi
    if [ "$kind" = bignum ]; then
        check_contains "$kind: wrapper kept the unknown field" "$(cat "$T/w-$kind/config.json")" '"zbig":1e99999'
    fi
done

echo "== a type error hidden by a later duplicate: refused as runc alone refuses it =="
# Go's decoder reports a value it cannot store even when a later duplicate
# replaces it: runc refuses such a spec. The wrapper must not
# merge the duplicates into a spec runc would start; it leaves the file as
# it is and runc reports its own error, the same as without the wrapper.
hide() {
    python3 - "$1/config.json" "$2" <<'PY'
import json, sys
path, kind = sys.argv[1], sys.argv[2]
spec = json.load(open(path))
proc = spec.pop("process")
good = {
    "cwd": ("cwd", 5, "/"),
    "gid": ("user", {"uid": 0, "gid": "0"}, {"uid": 0, "gid": 0}),
    "terminal": ("terminal", "false", False),
    "args": ("args", proc["args"][0], proc["args"]),
    "oom": ("oomScoreAdj", "0", 0),
    "console": ("consoleSize", {"height": -1}, None),
    "env": ("env", "PATH=/bin", proc["env"]),
}
d = lambda o: json.dumps(o)
if kind == "inline":
    # the bad value and its replacement inside one process object
    body = d(proc)[:-1] + ', "cwd": 5, "cwd": "/"}'
    out = d(spec)[:-1] + ', "process": ' + body + '}'
else:
    field, bad, fix = good[kind]
    proc[field] = bad
    out = d(spec)[:-1] + ', "process": ' + d(proc) + ', "process": ' + d({field: fix}) + '}'
open(path, "w").write(out)
PY
}
unmarshal() { printf '%s\n' "$1" | grep -o 'json: cannot unmarshal.*' | sed 's/".*//' | head -n 1; }
for kind in cwd gid terminal args oom console inline env; do
    make_bundle "$T/hd-$kind" "$SHOW" NVIDIA_VISIBLE_DEVICES=all
    hide "$T/hd-$kind" "$kind"
    run_direct "$T/hd-$kind" "ggp-hd-$kind"
    DIRECT_RC=$RC DIRECT_ERR=$(unmarshal "$OUT")
    check_not_contains "hidden $kind: runc alone never runs it" "$OUT" "RAN"
    [ "$DIRECT_RC" != 0 ] && [ -n "$DIRECT_ERR" ] && pass "hidden $kind: runc alone refuses it ($DIRECT_ERR)" ||
        fail "hidden $kind: runc alone should refuse it: rc $DIRECT_RC: $OUT"

    make_bundle "$T/hw-$kind" "$SHOW" NVIDIA_VISIBLE_DEVICES=all
    hide "$T/hw-$kind" "$kind"
    cp "$T/hw-$kind/config.json" "$T/hw-$kind.orig.json"
    run_wrapped "$T/hw-$kind" "ggp-hw-$kind"
    check_not_contains "hidden $kind: wrapper never runs it" "$OUT" "RAN"
    check_eq "hidden $kind: container does not exist" "$(runc --root "$ROOT" state "ggp-hw-$kind" >/dev/null 2>&1 && echo exists || echo absent)" absent
    if [ "$kind" = env ]; then
        # gpu-guard reads env itself: it refuses the GPU spec it cannot
        # read, naming Go's rule, before runc sees it.
        check_eq "hidden $kind: wrapper refuses it" "$RC" 1
        check_contains "hidden $kind: the log names the field" "$(tail -n 1 "$T/hw-$kind/log.json")" "process.env"
    else
        check_eq "hidden $kind: wrapper fails with runc's exit status" "$RC" "$DIRECT_RC"
        check_eq "hidden $kind: wrapper fails with runc's own error" "$(unmarshal "$OUT")" "$DIRECT_ERR"
        cmp -s "$T/hw-$kind/config.json" "$T/hw-$kind.orig.json" && pass "hidden $kind: config.json left as it was" ||
            fail "hidden $kind: config.json was rewritten: $(cat "$T/hw-$kind/config.json")"
    fi
done

echo "== a hidden type error in a field runc 1.1 does not know =="
# runtime-spec 1.1 added process.scheduler: runc 1.1 skips it unread, a
# later runc decodes it and refuses a value of the wrong type. The wrapper
# edits such a spec and keeps that value where it was, so either runc does
# with the wrapper what it does alone.
newer_field() {
    python3 - "$1/config.json" <<'PY'
import json, sys
path = sys.argv[1]
spec = json.load(open(path))
proc = spec.pop("process")
proc["scheduler"] = {"nice": "x"}
out = json.dumps(spec)[:-1] + ', "process": ' + json.dumps(proc) + ', "process": {"scheduler": {"nice": 1}}}'
open(path, "w").write(out)
PY
}
make_bundle "$T/nd" "$SHOW" NVIDIA_VISIBLE_DEVICES=all
newer_field "$T/nd"
run_direct "$T/nd" ggp-nd
DIRECT_RC=$RC DIRECT_ERR=$(unmarshal "$OUT")
make_bundle "$T/nw" "$SHOW" NVIDIA_VISIBLE_DEVICES=all
newer_field "$T/nw"
run_wrapped "$T/nw" ggp-nw
if [ "$DIRECT_RC" = 0 ]; then
    check_contains "newer field: wrapper runs what runc alone runs" "$OUT" "RAN"
    check_contains "newer field: wrapper: NoNewPrivs 1" "$OUT" "NoNewPrivs:	1"
    check_caps "newer field: wrapper: CapEff is the allowlist" "$OUT" CapEff
    check_contains "newer field: the value a later runc refuses is kept" "$(cat "$T/nw/config.json")" '"scheduler":{"nice": "x"}'
else
    check_not_contains "newer field: wrapper refuses what runc alone refuses" "$OUT" "RAN"
    check_eq "newer field: runc's own error" "$(unmarshal "$OUT")" "$DIRECT_ERR"
fi

echo "== unreadable GPU spec: refused with the parse error =="
make_bundle "$T/bad" "$SHOW" NVIDIA_VISIBLE_DEVICES=all
head -c -2 "$T/bad/config.json" > "$T/bad/c" && mv "$T/bad/c" "$T/bad/config.json"
run_wrapped "$T/bad" ggp-bad
check_eq "unreadable GPU spec: wrapper exits 1" "$RC" 1
check_not_contains "unreadable GPU spec: never ran" "$OUT" "RAN"
check_contains "unreadable GPU spec: log names the parse error" "$(tail -n 1 "$T/bad/log.json")" "cannot read the container's spec"
check_eq "unreadable GPU spec: container does not exist" "$(runc --root "$ROOT" state ggp-bad >/dev/null 2>&1 && echo exists || echo absent)" absent

echo "== exec into a running GPU container =="
make_bundle "$T/x" '["sleep","300"]' NVIDIA_VISIBLE_DEVICES=all
"$WRAP" --root "$ROOT" --log "$T/x/log.json" create -b "$T/x" ggp-x >/dev/null 2>&1 </dev/null
runc --root "$ROOT" start ggp-x
check_eq "exec: container running" "$(runc --root "$ROOT" state ggp-x | jq -r .status)" running
STATUS='grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status'
OUT=$("$WRAP" --root "$ROOT" exec ggp-x sh -c "$STATUS" 2>&1)
check_caps "exec: plain exec: CapEff is the allowlist" "$OUT" CapEff
check_contains "exec: plain exec: NoNewPrivs 1" "$OUT" "NoNewPrivs:	1"
OUT=$("$WRAP" --root "$ROOT" --log "$T/x/log.json" exec --cap CAP_SYS_ADMIN ggp-x sh -c "$STATUS" 2>&1)
RC=$?
check_eq "exec --cap CAP_SYS_ADMIN: refused" "$RC" 1
check_contains "exec --cap CAP_SYS_ADMIN: one-line diagnosis in the log" "$(tail -n 1 "$T/x/log.json")" "--cap CAP_SYS_ADMIN"
OUT=$("$WRAP" --root "$ROOT" --log "$T/x/log.json" exec --no-new-privs=false ggp-x sh -c "$STATUS" 2>&1)
RC=$?
check_eq "exec --no-new-privs=false: refused" "$RC" 1
check_contains "exec --no-new-privs=false: diagnosis in the log" "$(tail -n 1 "$T/x/log.json")" "--no-new-privs=false"
OUT=$("$WRAP" --root "$ROOT" exec --cap CAP_CHOWN ggp-x sh -c "$STATUS" 2>&1)
check_caps "exec --cap CAP_CHOWN (allowlisted): runs with the allowlist" "$OUT" CapEff
# --process files with case variants and duplicates
for kind in case dup; do
    # shellcheck disable=SC2086 # one word per capability
    python3 - "$T/x/config.json" "$T/p-$kind.json" "$kind" "$STATUS" $ALLOWLIST_CAPS <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
kind, status = sys.argv[3], sys.argv[4]
# the allowlist plus what it leaves out: only the allowlist may remain
allcaps = sys.argv[5:] + ["CAP_NET_RAW", "CAP_MKNOD", "CAP_SYS_ADMIN"]
p = {"args": ["sh", "-c", status], "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}}
if kind == "case":
    body = json.dumps(p)[:-1] + ', "noNewPrivileges": true, "capabilities": {"bounding": ["CAP_CHOWN"]}, "NoNewPrivileges": false, "Capabilities": {"Bounding": %s, "Effective": %s, "Permitted": %s}}' % ((json.dumps(allcaps),) * 3)
else:
    body = json.dumps(p)[:-1] + ', "noNewPrivileges": false, "capabilities": {"bounding": %s, "effective": %s, "permitted": %s}, "noNewPrivileges": true, "noNewPrivileges": false}' % ((json.dumps(allcaps),) * 3)
open(sys.argv[2], "w").write(body)
PY
    cp "$T/p-$kind.json" "$T/p-$kind.direct.json"
    OUT=$(runc --root "$ROOT" exec --process "$T/p-$kind.direct.json" ggp-x 2>&1)
    check_contains "exec --process $kind: runc alone: NoNewPrivs 0" "$OUT" "NoNewPrivs:	0"
    OUT=$("$WRAP" --root "$ROOT" exec --process "$T/p-$kind.json" ggp-x 2>&1)
    check_caps "exec --process $kind: CapEff is the allowlist" "$OUT" CapEff
    check_contains "exec --process $kind: NoNewPrivs 1" "$OUT" "NoNewPrivs:	1"
done
# exec --process with a hidden type error: runc refuses it, through the
# wrapper too, with the same error.
printf '{"args": ["sh", "-c", "echo RAN"], "cwd": 5, "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}}' > "$T/p-hidden.json"
cp "$T/p-hidden.json" "$T/p-hidden.direct.json"
OUT=$(runc --root "$ROOT" exec --process "$T/p-hidden.direct.json" ggp-x 2>&1)
DIRECT_RC=$? DIRECT_ERR=$(unmarshal "$OUT")
[ "$DIRECT_RC" != 0 ] && [ -n "$DIRECT_ERR" ] && pass "exec --process hidden type error: runc alone refuses it ($DIRECT_ERR)" ||
    fail "exec --process hidden type error: runc alone should refuse it: rc $DIRECT_RC: $OUT"
OUT=$("$WRAP" --root "$ROOT" exec --process "$T/p-hidden.json" ggp-x 2>&1)
RC=$?
check_not_contains "exec --process hidden type error: never runs" "$OUT" "RAN"
check_eq "exec --process hidden type error: runc's exit status" "$RC" "$DIRECT_RC"
check_eq "exec --process hidden type error: runc's own error" "$(unmarshal "$OUT")" "$DIRECT_ERR"
cmp -s "$T/p-hidden.json" "$T/p-hidden.direct.json" && pass "exec --process hidden type error: file left as it was" ||
    fail "exec --process hidden type error: file rewritten: $(cat "$T/p-hidden.json")"

echo "== exec, every spelling: an empty --process is no process file =="
# runc exec.go getProcess tests `--process` with != "": empty (or an empty
# last one) means the bundle's process with --cap and --no-new-privs on top.
FLAGS=(--cap CAP_SYS_ADMIN --cap CAP_NET_RAW --no-new-privs=false)
for i in 1 2 3; do
    case $i in
        1) EMPTY=(--process=) ;;
        2) EMPTY=(-p "") ;;
        3) EMPTY=(--process "$T/p-case.json" --process=) ;;
    esac
    WHAT="exec ${EMPTY[*]} ${FLAGS[*]}"
    OUT=$(runc --root "$ROOT" exec "${EMPTY[@]}" "${FLAGS[@]}" ggp-x sh -c "$STATUS" 2>&1)
    check_contains "$WHAT: runc alone runs the bundle's process with the flags: NoNewPrivs 0" "$OUT" "NoNewPrivs:	0"
    check_contains "$WHAT: runc alone: CapEff gains CAP_SYS_ADMIN" "$(caps_in CapEff "$OUT")" "CAP_SYS_ADMIN"
    OUT=$("$WRAP" --root "$ROOT" --log "$T/x/log.json" exec "${EMPTY[@]}" "${FLAGS[@]}" ggp-x sh -c "$STATUS" 2>&1)
    RC=$?
    check_eq "$WHAT: wrapper refuses" "$RC" 1
    check_not_contains "$WHAT: wrapper: nothing ran" "$OUT" "NoNewPrivs"
    check_contains "$WHAT: wrapper: the log names the flag" "$(tail -n 1 "$T/x/log.json")" "--cap CAP_SYS_ADMIN"
done

echo "== exec under an invalid config: refused as create is =="
printf '[tuning]\nenabeld = true\n' > "$T/broken.toml"
OUT=$(GPU_GUARD_CONFIG="$T/broken.toml" "$WRAP" --root "$ROOT" --log "$T/x/log.json" exec --cap CAP_SYS_ADMIN ggp-x sh -c "$STATUS" 2>&1)
RC=$?
check_eq "exec --cap with an invalid config: refused" "$RC" 1
check_contains "exec --cap with an invalid config: the log names the config error" "$(tail -n 1 "$T/x/log.json")" "enabeld"
OUT=$(GPU_GUARD_CONFIG="$T/broken.toml" "$WRAP" --root "$ROOT" exec ggp-x sh -c "$STATUS" 2>&1)
check_contains "plain exec with an invalid config: the bundle's process, as edited at create" "$OUT" "NoNewPrivs:	1"
"$WRAP" --root "$ROOT" delete -f ggp-x >/dev/null 2>&1

echo "== exec --user, as runc reads it, held to restricted_refuse_root =="
mkdir -p "$T/restricted/config.d"
gg_config "$T/restricted/config.toml" a100
printf '[security]\nprofile = "restricted"\n' > "$T/restricted/config.d/60-restricted.toml"
make_bundle "$T/u" '["sleep","300"]' NVIDIA_VISIBLE_DEVICES=all
jq '.process.user = {uid: 1000, gid: 1000}' "$T/u/config.json" > "$T/u/c" && mv "$T/u/c" "$T/u/config.json"
GPU_GUARD_CONFIG="$T/restricted/config.toml" "$WRAP" --root "$ROOT" --log "$T/u/log.json" create -b "$T/u" ggp-u >/dev/null 2>&1 </dev/null
runc --root "$ROOT" start ggp-u
check_eq "exec -u: container running" "$(runc --root "$ROOT" state ggp-u 2>/dev/null | jq -r .status)" running
for user in 0 0:0 +0 4294967296; do
    # strconv.Atoi, then uint32(): each of these is uid 0 to runc.
    OUT=$(runc --root "$ROOT" exec -u "$user" ggp-u id -u 2>&1)
    check_eq "exec -u $user: runc alone runs it as uid 0" "$OUT" 0
    OUT=$(GPU_GUARD_CONFIG="$T/restricted/config.toml" "$WRAP" --root "$ROOT" --log "$T/u/log.json" exec -u "$user" ggp-u id -u 2>&1)
    RC=$?
    check_eq "exec -u $user: wrapper refuses (profile restricted refuses root)" "$RC" 1
    check_contains "exec -u $user: the log says why" "$(tail -n 1 "$T/u/log.json")" "uid 0"
done
OUT=$(GPU_GUARD_CONFIG="$T/restricted/config.toml" "$WRAP" --root "$ROOT" exec -u 1000 ggp-u id -u 2>&1)
check_eq "exec -u 1000: runs as uid 1000" "$OUT" 1000
"$WRAP" --root "$ROOT" delete -f ggp-u >/dev/null 2>&1

finish
