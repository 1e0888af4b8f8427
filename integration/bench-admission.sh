#!/usr/bin/env bash
# Benchmark (issue 19): the admission webhook's latency for a cached image.
# gpu-guard admission serves TLS on 127.0.0.1; the GPU pod's image sits in a
# private docker-registry (127.0.0.1, plain HTTP). The first review reads the
# image; then:
#  1. one client, 400 reviews in a row: p50 and p99 (goal p99 < 20 ms);
#  2. 8 concurrent clients x 200 reviews: p50, p99, and errors (goal: none).
# Every answer must be allowed with a patch.
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
