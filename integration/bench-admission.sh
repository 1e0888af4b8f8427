#!/usr/bin/env bash
# Benchmark: the admission webhook's latency for a cached image.
# gpu-guard admission serves TLS on 127.0.0.1; the GPU pod's image sits in a
# private docker-registry (127.0.0.1, plain HTTP). The first review reads the
# image; then:
#  1. one client, 400 reviews in a row: p50 and p99 (goal p99 < 20 ms);
#  2. 8 concurrent clients x 200 reviews: p50, p99, and errors (goal: none).
# Every answer must be allowed with a patch.
# Then the budgets under hostile input, against a
# second webhook with read_timeout_ms = 3000 (the shipped 8000 scales the
# times, not the bounds):
#  3. 100 TLS connections each sending all but the last byte of a 3 MiB
#     body: the webhook's peak RSS and when the last is let go;
#  4. a pod with 3,000 GPU containers on a registry that never answers, then
#     a healthy pod: both answer times (goal: each by its deadline, the
#     healthy one placed);
#  5. two reviews of a stalled image a second apart: each one's answer time;
#  6. a big image behind a 512 KiB/s link: the first review, when the
#     background read has cached it, and the next review.
# Usage: flock /tmp/gg-engines.lock integration/bench-admission.sh
#   (NO_BUILD=1 uses the release binaries as they are)
. "$(dirname "$0")/lib.sh"
need_cmd docker-registry skopeo python3 openssl
[ "${NO_BUILD:-0}" = 1 ] || (cd "$REPO_DIR" && cargo build --release -q -p gpu-guard -p gpu-guard-admission) || exit 1
GG="$REPO_DIR/target/release/gpu-guard"
new_scratch
GG_SYSLOG=false gg_config "$T/config.toml" h100x8
(cd "$T" &&
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=bench-ca -keyout ca.key -out ca.pem 2>/dev/null &&
    openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout tls.key -out tls.csr 2>/dev/null &&
    printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > ext.cnf &&
    openssl x509 -req -days 1 -in tls.csr -CA ca.pem -CAkey ca.key -CAcreateserial -extfile ext.cnf -out tls.pem 2>/dev/null) ||
    { echo "bench-admission: cannot make certificates" >&2; exit 1; }

INTEGRATION_DIR="$INTEGRATION_DIR" REPO_DIR="$REPO_DIR" python3 - "$GG" "$T" <<'PY'
import http.client, json, os, socket, ssl, statistics, subprocess, sys, threading, time
sys.path.insert(0, os.environ["INTEGRATION_DIR"])
from regbench import start_registry, oci_layout, free_port
gg, t = sys.argv[1], sys.argv[2]
repo = os.environ["REPO_DIR"]
reg, host = start_registry(t)
hook = None
try:
    env = [l.strip() for l in open(f"{repo}/tests/data/images/cuda-12.4.1-base-ubuntu2204.env") if "=" in l]
    lib = open(f"{repo}/tests/data/fatbin/multi-arch.so", "rb").read()
    oci_layout(f"{t}/layout", env, lib, 8)
    subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{t}/layout",
                    f"docker://{host}/bench/cuda:v1"], check=True)
    cfg = open(f"{t}/config.toml").read()
    if "\nplain_http_registries = []\n" not in cfg:
        sys.exit("bench-admission: the shipped config has no plain_http_registries line")
    with open(f"{t}/config.toml", "w") as f:
        f.write(cfg.replace("\nplain_http_registries = []\n", f'\nplain_http_registries = ["{host}"]\n'))
    port = free_port()
    hook = subprocess.Popen([gg, "--config", f"{t}/config.toml", "admission", "--listen", f"127.0.0.1:{port}",
                             "--tls-cert", f"{t}/tls.pem", "--tls-key", f"{t}/tls.key"],
                            stderr=open(f"{t}/hook.log", "w"))
    ctx = ssl.create_default_context(cafile=f"{t}/ca.pem")
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "train", "image": f"{host}/bench/cuda:v1",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    def body(i):
        return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": f"u{i}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "name": "p", "namespace": "default",
            "operation": "CREATE", "userInfo": {}, "object": pod, "dryRun": False}}).encode()
    def client(n, lat, errs):
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=15)
        for i in range(n):
            b = body(i)
            t0 = time.perf_counter()
            try:
                c.request("POST", "/mutate", body=b, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                ms = (time.perf_counter() - t0) * 1000
                resp = json.loads(data)["response"]
                if r.status != 200 or not resp["allowed"] or not resp.get("patch") or resp["uid"] != f"u{i}":
                    errs.append(f"status {r.status}: {data[:200]!r}")
                lat.append(ms)
            except Exception as e:
                errs.append(repr(e))
                c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=15)
    first, e0 = [], []
    client(1, first, e0)
    if e0:
        sys.exit(f"bench-admission: the first review failed: {e0[0]}; log: {open(f'{t}/hook.log').read()[-500:]}")
    def pct(xs, p):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
    serial, es = [], []
    client(400, serial, es)
    print(f"first review (reads the image from the registry): {first[0]:.1f} ms")
    print(f"cached, one client, 400 reviews: p50 {pct(serial, 50):.2f} ms, p99 {pct(serial, 99):.2f} ms  [goal p99 < 20 ms]; errors {len(es)}")
    lat, errs = [], []
    th = [threading.Thread(target=client, args=(200, lat, errs)) for _ in range(8)]
    t0 = time.perf_counter()
    for x in th:
        x.start()
    for x in th:
        x.join()
    wall = time.perf_counter() - t0
    print(f"cached, 8 clients x 200 reviews: p50 {pct(lat, 50):.2f} ms, p99 {pct(lat, 99):.2f} ms, "
          f"{len(lat) / wall:.0f} reviews/s, errors {len(errs)}  [goal: no errors]")
    if errs or es:
        print(f"bench-admission: errors: {(errs + es)[:3]}", file=sys.stderr)
        sys.exit(1)
finally:
    if hook:
        hook.terminate()
        hook.wait(timeout=10)
    reg.kill()
PY

INTEGRATION_DIR="$INTEGRATION_DIR" REPO_DIR="$REPO_DIR" python3 - "$GG" "$T" <<'PY'
import http.client, json, os, re, socket, ssl, subprocess, sys, threading, time
sys.path.insert(0, os.environ["INTEGRATION_DIR"])
from regbench import Hostile, Throttle, start_registry, oci_layout, free_port, peak_rss_kib
gg, t = sys.argv[1], sys.argv[2]
repo = os.environ["REPO_DIR"]
os.makedirs(f"{t}/r2", exist_ok=True)
reg, host = start_registry(f"{t}/r2")
stall = Hostile(lambda p: ("stall", None))
env = [l.strip() for l in open(f"{repo}/tests/data/images/cuda-12.4.1-base-ubuntu2204.env") if "=" in l]
lib = open(f"{repo}/tests/data/fatbin/multi-arch.so", "rb").read()
oci_layout(f"{t}/small", env, lib, 1)
oci_layout(f"{t}/big", env, lib, 12)
for name, tag in (("small", "ok"), ("big", "big")):
    subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{t}/{name}",
                    f"docker://{host}/bench/{tag}:v1"], check=True)
slow = Throttle(host, 512 << 10)
cfg = open(f"{t}/config.toml").read()
# The first webhook's run already listed its own registry: replace the line
# whatever it holds, and stop if the config no longer has it.
cfg, n1 = re.subn(r"\nplain_http_registries = \[[^\]\n]*\]\n",
                  f'\nplain_http_registries = ["{host}", "{stall.addr}", "{slow.addr}"]\n', cfg)
cfg, n2 = re.subn(r"\nread_timeout_ms = \d+\n", "\nread_timeout_ms = 3000\n", cfg)
if (n1, n2) != (1, 1):
    sys.exit(f"bench-admission: the config's plain_http_registries/read_timeout_ms lines not found ({n1}, {n2})")
open(f"{t}/hostile.toml", "w").write(cfg)
port = free_port()
hook = subprocess.Popen([gg, "--config", f"{t}/hostile.toml", "admission", "--listen", f"127.0.0.1:{port}",
                         "--tls-cert", f"{t}/tls.pem", "--tls-key", f"{t}/tls.key"], stderr=open(f"{t}/hook2.log", "w"))
ctx = ssl.create_default_context(cafile=f"{t}/ca.pem")
failed = []
def ready():
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
def review(pod):
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "default",
        "operation": "CREATE", "userInfo": {}, "object": pod, "dryRun": False}}).encode()
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=60)
    t0 = time.perf_counter()
    c.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
    r = json.loads(c.getresponse().read())["response"]
    return r, time.perf_counter() - t0
def placed(r):
    import base64
    return b"nodeAffinity" in base64.b64decode(r.get("patch") or "")
def pod(images):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": f"c{i}", "image": im, "resources": {"limits": {"nvidia.com/gpu": "1"}}} for i, im in enumerate(images)]}}
try:
    ready()
    base = peak_rss_kib(hook.pid)
    # 3. Bodies one byte short.
    ends = []
    def slow_body():
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
        t0 = time.perf_counter()
        try:
            s.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (3 << 20))
            s.sendall(b" " * ((3 << 20) - 1))
            s.settimeout(120)
            s.recv(1)
        except OSError:
            pass
        ends.append(time.perf_counter() - t0)
    th = [threading.Thread(target=slow_body) for _ in range(100)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    peak = peak_rss_kib(hook.pid)
    ok = peak < base + 96 * 1024 and max(ends) < 30
    print(f"100 bodies one byte short: peak RSS {peak / 1024:.0f} MiB (idle {base / 1024:.0f} MiB), "
          f"all let go after {max(ends):.1f} s  [goal: < idle + 96 MiB, within 30 s]")
    ok or failed.append("bodies")
    # 4. 3,000 containers on a registry that never answers, then a healthy pod.
    r, took = review(pod([f"{stall.addr}/s/i{i}:1" for i in range(3000)]))
    time.sleep(1)
    r2, took2 = review(pod([f"{host}/bench/ok:v1"]))
    ok = took < 3.6 and took2 < 3.6 and placed(r2)
    print(f"3,000 containers on a stalled registry: answered in {took:.2f} s; a healthy pod 1 s later in "
          f"{took2:.2f} s, {'placed' if placed(r2) else 'NOT placed'}  [goal: each by the 3 s deadline, placed]")
    ok or failed.append("3000")
    # 5. Two reviews of one stalled image, a second apart.
    out = []
    a = threading.Thread(target=lambda: out.append(review(pod([f"{stall.addr}/s/one:1"]))[1]))
    a.start()
    time.sleep(1)
    out.append(review(pod([f"{stall.addr}/s/one:1"]))[1])
    a.join()
    ok = max(out) < 3.6
    print(f"two reviews of a stalled image 1 s apart: answered in {out[1]:.2f} s and {out[0]:.2f} s  "
          f"[goal: each within its own 3 s deadline]")
    ok or failed.append("two")
    # 6. A big image behind a slow link.
    big = pod([f"{slow.addr}/bench/big:v1"])
    r, first = review(big)
    t0 = time.perf_counter()
    while True:
        r, took = review(big)
        if placed(r) or time.perf_counter() - t0 > 120:
            break
        time.sleep(1)
    cached_after = time.perf_counter() - t0 + first
    r, again = review(big)
    ok = first < 3.6 and placed(r) and again < 0.1
    print(f"a big image behind 512 KiB/s: first review {first:.2f} s (no affinity), placed from the cache after "
          f"{cached_after:.1f} s, next review {again * 1000:.1f} ms  [goal: first by the deadline, next < 100 ms, placed]")
    ok or failed.append("big")
    print(f"webhook peak RSS over all of the above: {peak_rss_kib(hook.pid) / 1024:.0f} MiB  [limit in webhook.yaml: 512 MiB]")
finally:
    hook.terminate()
    hook.wait(timeout=10)
    reg.kill()
if failed:
    print(f"bench-admission: hostile cases out of bounds: {failed}", file=sys.stderr)
    sys.exit(1)
PY
