#!/usr/bin/env bash
# gpu-guard's decision metrics ([metrics] textfile): 40 prestart hooks run 8
# at a time leave exact counts that Prometheus' own text parser (the
# prometheus-client package's text_string_to_metric_families) reads; a
# reader looping during the writes never sees a half-written file; an
# unwritable path changes no decision. No engine: the hooks are run as runc
# runs them (OCI state on stdin), so no lock on the engines is needed.
. "$(dirname "$0")/lib.sh"

need_cmd jq python3 xargs
[ -x "$GG" ] || skip_or_fail "gpu-guard binary $GG not built"
python3 -c 'import prometheus_client' 2>/dev/null ||
    skip_or_fail "the prometheus-client python package is not installed (integration/setup.sh)"

new_scratch
mkdir -p "$T/prom"
chmod 755 "$T" "$T/prom"
PROM="$T/prom/gpu-guard.prom"
gg_config "$T/cfg.toml" a100
sed -i "s|^textfile = \"\"|textfile = \"$PROM\"|" "$T/cfg.toml"
grep -q "^textfile = \"$PROM\"" "$T/cfg.toml" || { fail "the shipped config has no textfile line"; finish; }
gg_config "$T/plain.toml" a100

# Three bundles: allowed (compliant, satisfied), refused (requirement), skipped (no GPU).
make_bundle "$T/allow" '["true"]' NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
make_compliant "$T/allow"
make_bundle "$T/refuse" '["true"]' NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=13.0"
make_compliant "$T/refuse"
make_bundle "$T/skip" '["true"]'
state() { printf '{"ociVersion":"1.0.2","id":"gg-%s","status":"creating","pid":1,"bundle":"%s"}' "$2" "$T/$1"; }
hook() { # CONFIG KIND N -> exit status, stderr in $T/out/KIND-N
    state "$2" "$3" | "$GG" --config "$1" hook prestart >/dev/null 2>"$T/out/$2-$3"
}
export -f hook state
export GG T
mkdir -p "$T/out"

# A reader that parses the file over and over while the hooks write it.
python3 - "$PROM" "$T/stop" "$T/ready" > "$T/reader.txt" 2>&1 <<'PY' &
import os, sys
from prometheus_client.parser import text_string_to_metric_families
path, stop = sys.argv[1], sys.argv[2]
open(sys.argv[3], "w").close()
reads = bad = 0
while not os.path.exists(stop):
    try:
        text = open(path).read()
    except FileNotFoundError:
        continue
    reads += 1
    try:
        fams = list(text_string_to_metric_families(text))
        # The last family is written last: a cut file lacks it.
        if not text.endswith("\n") or fams[-1].name != "gpu_guard_metrics_dropped":
            raise ValueError("cut short")
    except Exception as e:
        bad += 1
        print("BAD READ", repr(e), repr(text[-80:]))
print("READS", reads, "BAD", bad)
PY
READER=$!
for _ in $(seq 1 100); do [ -e "$T/ready" ] && break; sleep 0.1; done

# 40 hooks, 8 at a time: 16 allowed, 14 refused, 10 skipped.
{
    for i in $(seq 1 16); do echo "allow $i"; done
    for i in $(seq 1 14); do echo "refuse $i"; done
    for i in $(seq 1 10); do echo "skip $i"; done
} | shuf > "$T/jobs"
xargs -P 8 -L 1 bash -c 'hook "$T/cfg.toml" "$0" "$1"; echo "$0 $?" >> "$T/codes"' < "$T/jobs"
touch "$T/stop"
wait "$READER"

check_eq "metrics: every allowed hook exits 0" "$(grep -c '^allow 0$' "$T/codes")" 16
check_eq "metrics: every refused hook exits 1" "$(grep -c '^refuse 1$' "$T/codes")" 14
check_eq "metrics: every skipped hook exits 0" "$(grep -c '^skip 0$' "$T/codes")" 10

COUNTS=$(python3 - "$PROM" <<'PY'
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
d = fams["gpu_guard_decisions"]
assert d.type == "counter", d.type
for s in sorted(d.samples, key=lambda s: sorted(s.labels.items())):
    l = s.labels
    print("decisions", l["verdict"], l["check"], l["entry"], l["mode"], int(s.value))
h = fams["gpu_guard_decision_seconds"]
assert h.type == "histogram", h.type
for s in h.samples:
    if s.name.endswith("_count"):
        print("seconds_count", s.labels["entry"], int(s.value))
    if s.name.endswith("_bucket") and s.labels["le"] == "+Inf":
        print("seconds_inf", s.labels["entry"], int(s.value))
i = fams["gpu_guard_host_info"]
for s in i.samples:
    print("host_info", s.labels["driver"], s.labels["cuda"], int(s.value))
print("dropped", int(fams["gpu_guard_metrics_dropped"].samples[0].value))
PY
)
echo "$COUNTS"
DROPPED=$(printf '%s\n' "$COUNTS" | sed -n 's/^dropped //p')
check_eq "metrics: Prometheus' parser reads the file" "$([ -n "$DROPPED" ] && echo parsed)" parsed
# A hook that finds the lock busy past its 2 ms leaves its decision in the
# pending file for the holder: nothing is lost, nothing dropped.
check_eq "metrics: no update dropped" "$DROPPED" 0
check_contains "metrics: 16 allowed" "$COUNTS" "decisions allow none prestart enforce 16"
check_contains "metrics: 14 refused, by requirement" "$COUNTS" "decisions refuse requirement prestart enforce 14"
check_contains "metrics: 10 skipped" "$COUNTS" "decisions skip none prestart enforce 10"
check_contains "metrics: the histogram counts 40" "$COUNTS" "seconds_count prestart 40"
check_contains "metrics: +Inf bucket is the count" "$COUNTS" "seconds_inf prestart 40"
check_eq "metrics: nothing left pending" "$(ls -A "$T/prom" | grep -c -E 'pending|folding')" 0
check_contains "metrics: host info from the facts" "$COUNTS" "host_info 535.104.05 12.2 1"
check_eq "metrics: the file has no container id" "$(grep -c 'gg-' "$PROM")" 0
READ=$(cat "$T/reader.txt")
echo "$READ" | tail -3
check_contains "metrics: the reader never saw a half-written file" "$READ" " BAD 0"
check_not_contains "metrics: the reader read it while it changed" "$READ" "READS 0 "
check_eq "metrics: only one *.prom file in the directory" "$(find "$T/prom" -name '*.prom' | wc -l)" 1

# Every check a finding names is counted (no list of checks in the
# metrics): refusals whose first error is `library` (a GPU library needs
# one the image lacks) or `cuda-runtime` (the image ships CUDA 13's runtime;
# the host has CUDA 12.2), under [libraries] severity = "enforce". Audit and
# warn count what enforce would refuse as would_refuse, under their mode.
counts() {
    python3 - "$PROM" <<'PY'
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
for s in fams["gpu_guard_decisions"].samples:
    l = s.labels
    print("decisions", l["verdict"], l["check"], l["entry"], l["mode"], int(s.value))
PY
}
libs_config() { # FILE MODE
    GG_MODE=$2 gg_config "$1" a100
    sed -i -e "s|^textfile = \"\"|textfile = \"$PROM\"|" \
        -e '/^\[libraries\]/,/^\[/ s/^severity = .*/severity = "enforce"/' "$1"
}
libs_config "$T/libs.toml" enforce
libs_config "$T/libs-audit.toml" audit
libs_config "$T/libs-warn.toml" warn
make_bundle "$T/library" '["true"]' NVIDIA_VISIBLE_DEVICES=all
make_compliant "$T/library"
make_bundle "$T/cudart" '["true"]' NVIDIA_VISIBLE_DEVICES=all
make_compliant "$T/cudart"
INTEGRATION_DIR="$INTEGRATION_DIR" python3 - "$T/library/rootfs/usr/local/lib" "$T/cudart/rootfs/usr/local/lib" <<'PY'
import os, sys
sys.path.insert(0, os.environ["INTEGRATION_DIR"])
from hostile_libs import elf_needing
lib, rt = sys.argv[1], sys.argv[2]
os.makedirs(lib, exist_ok=True)
os.makedirs(rt, exist_ok=True)
open(f"{lib}/libcuapp.so", "wb").write(elf_needing(["libcudnn.so.9"]))
open(f"{rt}/libcudart.so.13", "wb").write(elf_needing([]))
PY
export INTEGRATION_DIR
hook "$T/libs.toml" library 1; check_eq "metrics: a missing GPU library refuses" "$?" 1
hook "$T/libs.toml" cudart 1; check_eq "metrics: a CUDA 13 runtime on CUDA 12.2 refuses" "$?" 1
hook "$T/libs-audit.toml" library 2; check_eq "metrics: audit starts it" "$?" 0
hook "$T/libs-warn.toml" library 3; check_eq "metrics: warn starts it" "$?" 0
C=$(counts)
echo "$C"
check_contains "metrics: a library refusal is counted" "$C" "decisions refuse library prestart enforce 1"
check_contains "metrics: a cuda-runtime refusal is counted" "$C" "decisions refuse cuda-runtime prestart enforce 1"
check_contains "metrics: audit counts what enforce would refuse, apart" "$C" "decisions would_refuse library prestart audit 1"
check_contains "metrics: warn counts what enforce would refuse, apart" "$C" "decisions would_refuse library prestart warn 1"

# A damaged state costs only its bad lines: one non-UTF-8 byte in the line
# of the library refusals, and counting goes on for every other series.
STATE="$T/metrics-state/gpu-guard.prom.state"
python3 - "$STATE" <<'PY'
import sys
p = sys.argv[1]
b = open(p, "rb").read()
at = b.index(b"d refuse library prestart enforce")
open(p, "wb").write(b[:at + 2] + b"\xff" + b[at + 3:])
PY
hook "$T/libs.toml" cudart 2
C=$(counts)
check_contains "metrics: after a damaged line, counting goes on" "$C" "decisions refuse cuda-runtime prestart enforce 2"
check_contains "metrics: the other series are kept" "$C" "decisions refuse requirement prestart enforce 14"
check_not_contains "metrics: only the damaged line is lost" "$C" "decisions refuse library prestart enforce"
check_eq "metrics: the damaged state is gone after the update" "$(grep -c $'\xff' "$STATE")" 0

# An unwritable path changes no decision: the same exit status and diagnosis
# as without metrics, and the start is not held up.
for bad in "$T/nodir/gpu-guard.prom" "$T/prom" "$T/open/gpu-guard.prom"; do
    mkdir -p "$T/open" && chmod 777 "$T/open"
    gg_config "$T/bad.toml" a100
    sed -i "s|^textfile = \"\"|textfile = \"$bad\"|" "$T/bad.toml"
    for kind in allow refuse skip; do
        hook "$T/plain.toml" "$kind" p; RC_PLAIN=$?
        hook "$T/bad.toml" "$kind" b; RC_BAD=$?
        check_eq "metrics at $bad: $kind decides the same" "$RC_BAD" "$RC_PLAIN"
        check_eq "metrics at $bad: $kind diagnosis the same" \
            "$(grep -v 'metrics' "$T/out/$kind-b" | sed 's/gg-b/gg-X/g')" "$(sed 's/gg-p/gg-X/g' "$T/out/$kind-p")"
    done
    check_eq "metrics at $bad: nothing written there" "$(find "$T/open" "$T/prom" -newer "$T/bad.toml" -name '*.prom' | wc -l)" 0
done

finish
