"""Helpers for integration/bench-registry.sh and bench-admission.sh: a
private docker-registry on 127.0.0.1, a benchmark image written as an OCI
layout, and a run that reports wall time, peak RSS and bytes written to
disk (the kernel's block-output count from wait4's rusage, which covers the
process and its children)."""
import gzip, hashlib, io, json, os, resource, socket, subprocess, sys, tarfile, time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_registry(tmp):
    port = free_port()
    host = f"127.0.0.1:{port}"
    cfg = f"{tmp}/registry.yml"
    with open(cfg, "w") as f:
        f.write(f"version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: false\n"
                f"storage:\n  filesystem:\n    rootdirectory: {tmp}/registry-data\n"
                f"http:\n  addr: {host}\n")
    p = subprocess.Popen(["docker-registry", "serve", cfg], stdout=open(f"{tmp}/registry.out", "w"),
                         stderr=open(f"{tmp}/registry.log", "w"))
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p, host
        except OSError:
            time.sleep(0.05)
    p.kill()
    sys.exit("bench: the registry did not start")


def _blob(d, b):
    h = hashlib.sha256(b).hexdigest()
    with open(f"{d}/blobs/sha256/{h}", "wb") as f:
        f.write(b)
    return f"sha256:{h}", len(b)


def _layer(files):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as t:
        for path, data in files:
            ti = tarfile.TarInfo(path)
            ti.size = len(data)
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))
    raw = raw.getvalue()
    return gzip.compress(raw, compresslevel=1, mtime=0), "sha256:" + hashlib.sha256(raw).hexdigest()


def oci_layout(d, env, lib, lib_mib):
    """Three layers; the second holds `lib` padded to lib_mib MiB (random
    bytes after the ELF, so the blob does not compress away)."""
    os.makedirs(f"{d}/blobs/sha256", exist_ok=True)
    big = lib + os.urandom(lib_mib * 1024 * 1024 - len(lib))
    layers = [
        _layer([("etc/os-release", b"ID=bench\n"), ("usr/bin/app", os.urandom(4 << 20))]),
        _layer([("usr/local/cuda-12.4/lib64/libcublas.so.12.4.5", big)]),
        _layer([("usr/share/doc/app/README", b"bench\n" * 1000)]),
    ]
    diff_ids = [l[1] for l in layers]
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": env},
                      "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    cd, cs = _blob(d, cfg)
    ls = []
    for gz, _ in layers:
        ld, lsz = _blob(d, gz)
        ls.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": ld, "size": lsz})
    m = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
                    "layers": ls}).encode()
    md, ms = _blob(d, m)
    with open(f"{d}/index.json", "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                                       "digest": md, "size": ms}]}, f)
    with open(f"{d}/oci-layout", "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')
    return md, sum(l["size"] for l in ls)


def measured(argv, env=None):
    """(wall ms, peak RSS KiB, bytes written to disk, exit status, stderr)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, err = p.communicate()
    wall = (time.perf_counter() - t0) * 1000
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, ru.ru_maxrss, p.returncode, err.decode(errors="replace")


def oublock_of(argv, env=None):
    """Block output of one run (512-byte units) via wait4."""
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        try:
            os.execvpe(argv[0], argv, env or os.environ)
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    return ru.ru_oublock * 512, ru.ru_maxrss, os.waitstatus_to_exitcode(status)


class Hostile:
    """A hostile registry on 127.0.0.1 (plain HTTP), one thread per
    connection. `mode(path) -> (kind, arg)`:
      ("stall", None)        read the request, never answer;
      ("drip", (ctype, body, every_s))  the headers, then a byte every every_s;
      ("endless", (prefix, declared))   200 declaring `declared` bytes: prefix, then filler without end;
      ("reply", (status, headers, body)).
    `sent` counts body bytes written."""

    def __init__(self, mode):
        import threading
        self.mode = mode
        self.sent = 0
        self.requests = 0
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _count(self, n):
        with self.lock:
            self.sent += n

    def _serve(self, c):
        try:
            f = c.makefile("rb")
            line = f.readline().decode(errors="replace")
            while f.readline() not in (b"\r\n", b"\n", b""):
                pass
            with self.lock:
                self.requests += 1
            path = line.split(" ")[1] if " " in line else "/"
            kind, arg = self.mode(path)
            if kind == "stall":
                c.settimeout(None)
                while c.recv(1):
                    pass
            elif kind == "drip":
                ctype, body, every = arg
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                          % (ctype.encode(), len(body)))
                for i in range(len(body)):
                    c.sendall(body[i:i + 1])
                    self._count(1)
                    time.sleep(every)
            elif kind == "endless":
                prefix, declared = arg
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % declared)
                c.sendall(prefix)
                self._count(len(prefix))
                filler = b"Z" * (1 << 16)
                while True:
                    c.sendall(filler)
                    self._count(len(filler))
            else:
                status, headers, body = arg
                head = "HTTP/1.1 %d X\r\nContent-Length: %d\r\nConnection: close\r\n" % (status, len(body))
                head += "".join("%s: %s\r\n" % kv for kv in headers)
                c.sendall(head.encode() + b"\r\n" + body)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.sock.close()


def tiny_image(d, env):
    """A one-layer OCI layout; (manifest digest, {digest: bytes}, layer digest)."""
    os.makedirs(f"{d}/blobs/sha256", exist_ok=True)
    gz, diff = _layer([("etc/hello", b"hi\n")])
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": env},
                      "rootfs": {"type": "layers", "diff_ids": [diff]}}).encode()
    cd, cs = _blob(d, cfg)
    ld, ls = _blob(d, gz)
    m = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": ld, "size": ls}]}).encode()
    md, _ = _blob(d, m)
    return md, {cd: cfg, ld: gz, md: m}, ld


def peak_rss_kib(pid):
    """VmHWM of a running process, KiB."""
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmHWM:"):
            return int(l.split()[1])
    return 0


class Throttle:
    """A TCP proxy to `target` sending the server's bytes on at `rate` bytes/s."""

    def __init__(self, target, rate):
        import threading
        self.target, self.rate = target, rate
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            host, port = self.target.rsplit(":", 1)
            s = socket.create_connection((host, int(port)))
            threading.Thread(target=self._pipe, args=(c, s, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, self.rate), daemon=True).start()

    @staticmethod
    def _pipe(src, dst, rate):
        step = max(1, rate // 20) if rate else 1 << 16
        try:
            while True:
                b = src.recv(step)
                if not b:
                    break
                dst.sendall(b)
                if rate:
                    time.sleep(0.05)
        except OSError:
            pass
        finally:
            for x in (src, dst):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
