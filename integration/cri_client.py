#!/usr/bin/env python3
"""A kubelet stand-in for gpu-guard's CRI tests: drives containerd's CRI v1
over its gRPC socket the way kubelet starts a pod (RunPodSandbox, then
CreateContainer and StartContainer), with stubs generated at test time from
the CRI api.proto that the k8s-cri crate ships (no copy is committed).

    cri_client.py gen PROTO STUBS_DIR
    cri_client.py docker-archive OUT.tar TAG ROOTFS [--env K=V]... -- CMD...
    CRI_SOCK=... CRI_STUBS=... cri_client.py pod|exec|status|cleanup|bench ...

Results are one JSON object on stdout; gRPC errors are data, not crashes.
Needs grpcio and grpcio-tools (PyPI).
"""
import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import sys
import tarfile
import time
import uuid


def cmd_gen(a):
    """Generates cri_api_pb2{,_grpc}.py in STUBS_DIR from PROTO."""
    import grpc_tools
    from grpc_tools import protoc

    os.makedirs(os.path.join(a.out, "src"), exist_ok=True)
    # The generated module is named after the file: give it a stable name.
    src = os.path.join(a.out, "src", "cri_api.proto")
    shutil.copyfile(a.proto, src)
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(["protoc", "-I" + os.path.dirname(src), "-I" + well_known,
                      "--python_out=" + a.out, "--grpc_python_out=" + a.out, src])
    if rc != 0:
        sys.exit("protoc failed on %s" % a.proto)
    print(json.dumps({"stubs": a.out}))


def cmd_docker_archive(a):
    """A docker-archive tar (what `docker save` writes) of one layer: ROOTFS.
    `ctr images import` reads it; no docker daemon needed."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name in sorted(os.listdir(a.rootfs)):
            t.add(os.path.join(a.rootfs, name), arcname=name)
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin"] + a.env, "Cmd": a.cmd or ["sh"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "gpu-guard integration/cri_client.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id[7:] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [a.tag], "Layers": [layer_name]}]

    def add(t, name, data):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = 0
        t.addfile(info, io.BytesIO(data))

    with tarfile.open(a.out, mode="w") as t:
        add(t, layer_name, layer_bytes)
        add(t, config_name, config_bytes)
        add(t, "manifest.json", json.dumps(manifest).encode())
    print(json.dumps({"archive": a.out, "tag": a.tag}))


def client():
    import grpc
    stubs = os.environ["CRI_STUBS"]
    sys.path.insert(0, stubs)
    import cri_api_pb2 as pb
    import cri_api_pb2_grpc as pbg
    ch = grpc.insecure_channel("unix://" + os.environ["CRI_SOCK"])
    return grpc, pb, pbg.RuntimeServiceStub(ch)


def kv(pairs):
    out = {}
    for p in pairs or []:
        k, _, v = p.partition("=")
        out[k] = v
    return out


def start_pod(grpc, pb, rt, name, handler, image, cmd, envs=None, annotations=None,
              drop_all=False, nnp=False, namespace="gpu-guard-test", privileged=False,
              pod_annotations=None):
    """kubelet's order: RunPodSandbox, CreateContainer, StartContainer.
    Returns (result dict, timings)."""
    res = {"ok": False, "sandbox": None, "container": None}
    # Host network (no CNI), own PID namespace per container (kubelet's
    # default without shareProcessNamespace), like a plain pod on a node.
    ns = pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER)
    psc = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=str(uuid.uuid4()), namespace=namespace),
        annotations=pod_annotations or {},
        linux=pb.LinuxPodSandboxConfig(
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=ns,
                                                            privileged=privileged)))
    sc = pb.LinuxContainerSecurityContext(namespace_options=ns, no_new_privs=nnp,
                                          privileged=privileged)
    if drop_all:
        sc.capabilities.CopyFrom(pb.Capability(drop_capabilities=["ALL"]))
    cc = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name="main"),
        image=pb.ImageSpec(image=image),
        command=cmd,
        envs=[pb.KeyValue(key=k, value=v) for k, v in (envs or {}).items()],
        annotations=annotations or {},
        linux=pb.LinuxContainerConfig(security_context=sc))
    t = {}
    stage = "RunPodSandbox"
    try:
        t0 = time.perf_counter()
        res["sandbox"] = rt.RunPodSandbox(
            pb.RunPodSandboxRequest(config=psc, runtime_handler=handler), timeout=60).pod_sandbox_id
        t1 = time.perf_counter()
        stage = "CreateContainer"
        res["container"] = rt.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=res["sandbox"], config=cc, sandbox_config=psc), timeout=60).container_id
        t2 = time.perf_counter()
        stage = "StartContainer"
        rt.StartContainer(pb.StartContainerRequest(container_id=res["container"]), timeout=60)
        t3 = time.perf_counter()
        t = {"sandbox_s": t1 - t0, "create_s": t2 - t1, "start_s": t3 - t2, "total_s": t3 - t0}
        res["ok"] = True
    except grpc.RpcError as e:
        res.update(stage=stage, code=e.code().name, error=e.details())
    return res, t


def remove_pod(pb, rt, sandbox):
    rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sandbox), timeout=60)
    rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox), timeout=60)


def cmd_pod(a):
    grpc, pb, rt = client()
    res, _ = start_pod(grpc, pb, rt, a.name, a.handler, a.image, a.cmd, kv(a.env),
                       kv(a.annotation), a.drop_all, a.nnp, a.namespace, a.privileged,
                       kv(a.pod_annotation))
    print(json.dumps(res))


def cmd_exec(a):
    grpc, pb, rt = client()
    try:
        r = rt.ExecSync(pb.ExecSyncRequest(container_id=a.container, cmd=a.cmd, timeout=30), timeout=60)
        print(json.dumps({"ok": True, "exit_code": r.exit_code,
                          "stdout": r.stdout.decode(errors="replace"),
                          "stderr": r.stderr.decode(errors="replace")}))
    except grpc.RpcError as e:
        print(json.dumps({"ok": False, "code": e.code().name, "error": e.details()}))


def cmd_status(a):
    """Status(verbose): containerd 1.6 puts its CRI config, runtimes
    included, in info["config"] (what `crictl info` prints)."""
    grpc, pb, rt = client()
    try:
        r = rt.Status(pb.StatusRequest(verbose=True), timeout=30)
    except grpc.RpcError as e:
        print(json.dumps({"ok": False, "code": e.code().name, "error": e.details()}))
        return
    info = {}
    for k, v in r.info.items():
        try:
            info[k] = json.loads(v)
        except ValueError:
            info[k] = v
    conds = {c.type: c.status for c in r.status.conditions}
    print(json.dumps({"ok": True, "conditions": conds, "info": info}))


def cmd_cleanup(a):
    grpc, pb, rt = client()
    n = 0
    for s in rt.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=60).items:
        try:
            remove_pod(pb, rt, s.id)
            n += 1
        except grpc.RpcError:
            pass
    print(json.dumps({"removed": n}))


def cmd_bench(a):
    """Interleaved pod starts, handler A then B each round (order alternating
    so neither always runs second), pods removed untimed between rounds."""
    grpc, pb, rt = client()
    handlers = a.handlers.split(",")
    times = {h: [] for h in handlers}
    for i in range(a.warmup + a.rounds):
        order = handlers if i % 2 == 0 else list(reversed(handlers))
        for h in order:
            res, t = start_pod(grpc, pb, rt, "bench-%s-%d" % (h, i), h, a.image, a.cmd, kv(a.env))
            if res["sandbox"]:
                remove_pod(pb, rt, res["sandbox"])
            if not res["ok"]:
                sys.exit("bench: %s pod failed at %s: %s" % (h, res.get("stage"), res.get("error")))
            if i >= a.warmup:
                times[h].append(t["total_s"])
    med = {h: statistics.median(v) for h, v in times.items()}
    base = handlers[1]
    print(json.dumps({"rounds": a.rounds,
                      "median_ms": {h: round(m * 1000, 1) for h, m in med.items()},
                      "min_ms": {h: round(min(v) * 1000, 1) for h, v in times.items()},
                      "ratio": round(med[handlers[0]] / med[base], 3),
                      "of": "%s/%s" % (handlers[0], base)}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="sub", required=True)
    s = sub.add_parser("gen")
    s.add_argument("proto")
    s.add_argument("out")
    s.set_defaults(fn=cmd_gen)
    s = sub.add_parser("docker-archive")
    s.add_argument("out")
    s.add_argument("tag")
    s.add_argument("rootfs")
    s.add_argument("--env", action="append", default=[])
    s.add_argument("cmd", nargs="*")
    s.set_defaults(fn=cmd_docker_archive)
    s = sub.add_parser("pod")
    s.add_argument("--name", required=True)
    s.add_argument("--handler", required=True)
    s.add_argument("--image", required=True)
    s.add_argument("--env", action="append")
    s.add_argument("--annotation", action="append")
    s.add_argument("--drop-all", action="store_true")
    s.add_argument("--nnp", action="store_true")
    s.add_argument("--namespace", default="gpu-guard-test")
    s.add_argument("--privileged", action="store_true")
    s.add_argument("--pod-annotation", action="append")
    s.add_argument("cmd", nargs="+")
    s.set_defaults(fn=cmd_pod)
    s = sub.add_parser("exec")
    s.add_argument("container")
    s.add_argument("cmd", nargs="+")
    s.set_defaults(fn=cmd_exec)
    s = sub.add_parser("status")
    s.set_defaults(fn=cmd_status)
    s = sub.add_parser("cleanup")
    s.set_defaults(fn=cmd_cleanup)
    s = sub.add_parser("bench")
    s.add_argument("--rounds", type=int, default=20)
    s.add_argument("--warmup", type=int, default=2)
    s.add_argument("--handlers", default="gpu-guard,runc")
    s.add_argument("--env", action="append")
    s.add_argument("--image", required=True)
    s.add_argument("cmd", nargs="+")
    s.set_defaults(fn=cmd_bench)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
