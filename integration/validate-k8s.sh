#!/usr/bin/env bash
# Validates every manifest in packaging/kubernetes against the Kubernetes
# OpenAPI schemas that the PyPI package kubernetes-validate bundles (no
# network), strictly: unknown fields are errors. Any failure fails.
# Needs: pip install kubernetes-validate.
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION=${K8S_VERSION:-1.30.0}
command -v kubernetes-validate >/dev/null || {
    echo "validate-k8s: kubernetes-validate is not installed (pip install kubernetes-validate)" >&2
    exit 1
}
shopt -s nullglob
manifests=()
for m in packaging/kubernetes/*.yaml; do
    # kustomization.yaml is kustomize's, not a Kubernetes object: rendered below.
    [ "$(basename "$m")" = kustomization.yaml ] || manifests+=("$m")
done
[ ${#manifests[@]} -gt 0 ] || { echo "validate-k8s: no manifests found" >&2; exit 1; }

# The validator must reject a broken manifest, or a pass below means nothing.
bad=$(mktemp --suffix=.yaml)
trap 'rm -f "$bad"' EXIT
sed 's/^handler:/handlr:/' packaging/kubernetes/runtimeclass.yaml > "$bad"
if kubernetes-validate --strict -k "$K8S_VERSION" "$bad" >/dev/null 2>&1; then
    echo "validate-k8s: FAIL: kubernetes-validate accepted a RuntimeClass without handler" >&2
    exit 1
fi

failed=0
for m in "${manifests[@]}"; do
    # kubernetes-validate exits non-zero on any invalid resource.
    if out=$(kubernetes-validate --strict -k "$K8S_VERSION" "$m" 2>&1); then
        echo "validate-k8s: ok: $m"
    else
        echo "validate-k8s: FAIL: $m" >&2
        echo "$out" >&2
        failed=$((failed + 1))
    fi
    # Warnings (e.g. a schema it cannot find) are failures too.
    if grep -qiE 'warn|could not' <<<"$out"; then
        echo "validate-k8s: FAIL (warning): $m: $out" >&2
        failed=$((failed + 1))
    fi
done
# The kustomize layout: the base (packaging/kubernetes) and each overlay
# (packaging/kustomize/*) rendered by kubectl's kustomize and validated like
# the plain manifests (cert-manager's custom resources are shape-checked
# below, not here: their schemas are not Kubernetes').
command -v kubectl >/dev/null || {
    echo "validate-k8s: kubectl is not installed (integration/setup.sh installs it)" >&2
    exit 1
}
kver=$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')
if [ -z "$kver" ] || [ "$kver" -lt 4 ]; then
    echo "validate-k8s: FAIL: kubectl's kustomize is older than v4 (kubectl >= 1.21 renders directory resources and patches)" >&2
    failed=$((failed + 1))
fi
rendered=$(mktemp -d)
trap 'rm -f "$bad"; rm -rf "$rendered"' EXIT
for k in packaging/kubernetes packaging/kustomize/*/; do
    k=${k%/}
    name=$(echo "$k" | tr '/' '-')
    if ! kubectl kustomize "$k" >"$rendered/$name.all.yaml" 2>"$rendered/$name.err" || [ -s "$rendered/$name.err" ]; then
        echo "validate-k8s: FAIL: kubectl kustomize $k: $(cat "$rendered/$name.err")" >&2
        failed=$((failed + 1))
        continue
    fi
    python3 - "$rendered/$name.all.yaml" "$rendered/$name.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
keep = [d for d in docs if not d["apiVersion"].startswith("cert-manager.io/")]
yaml.safe_dump_all(keep, open(sys.argv[2], "w"), sort_keys=False)
PY
    if out=$(kubernetes-validate --strict -k "$K8S_VERSION" "$rendered/$name.yaml" 2>&1) && ! grep -qiE 'warn|could not' <<<"$out"; then
        echo "validate-k8s: ok: kustomize $k ($(grep -c '^kind:' "$rendered/$name.all.yaml") objects)"
    else
        echo "validate-k8s: FAIL: kustomize $k: $out" >&2
        failed=$((failed + 1))
    fi
done
# The webhook: what issue-level rules fix beyond the schema, the
# cert-manager resources (custom resources: shape only), and the fallback
# certificate script run offline.
tmpd=$(mktemp -d)
trap 'rm -f "$bad"; rm -rf "$tmpd" "$rendered"' EXIT
if packaging/kubernetes/webhook-certs.sh --offline --dir "$tmpd" > "$tmpd/commands" 2>/dev/null; then
    echo "validate-k8s: ok: webhook-certs.sh --offline"
else
    echo "validate-k8s: FAIL: webhook-certs.sh --offline" >&2
    failed=$((failed + 1))
fi
if out=$(python3 - "$tmpd" <<'PY' 2>&1
import subprocess, sys, yaml
tmp = sys.argv[1]
docs = list(yaml.safe_load_all(open("packaging/kubernetes/webhook.yaml")))
by = {d["kind"]: d for d in docs}
errs = []
def need(cond, msg):
    if not cond:
        errs.append(msg)
dep, svc, mwc = by["Deployment"], by["Service"], by["MutatingWebhookConfiguration"]
need(dep["spec"]["replicas"] == 2, "Deployment: 2 replicas")
w = mwc["webhooks"][0]
need(w["failurePolicy"] == "Ignore", "failurePolicy Ignore")
need(w["sideEffects"] == "None", "sideEffects None")
need(w["admissionReviewVersions"] == ["v1"], "admissionReviewVersions [v1]")
toml_text = by["ConfigMap"]["data"]["config.toml"]
read_ms = int([l.split("=")[1] for l in toml_text.splitlines() if l.startswith("read_timeout_ms")][0])
need(read_ms < w["timeoutSeconds"] * 1000, "read_timeout_ms below timeoutSeconds")
ns = {e["key"]: e for e in w["namespaceSelector"]["matchExpressions"]}
sel = ns.get("kubernetes.io/metadata.name", {})
need(sel.get("operator") == "NotIn" and {"kube-system", "gpu-guard", "gpu-operator"} <= set(sel.get("values", [])), "namespaceSelector leaves kube-system, gpu-guard and the GPU Operator's namespace alone")
optout = {"key": "gpu-guard.io/admission", "operator": "NotIn", "values": ["disabled"]}
need(optout in w["namespaceSelector"]["matchExpressions"], "namespaces opt out with gpu-guard.io/admission=disabled")
need(optout in w.get("objectSelector", {}).get("matchExpressions", []), "pods opt out with gpu-guard.io/admission=disabled")
tmpl = dep["spec"]["template"]
need(tmpl["metadata"]["labels"].get("gpu-guard.io/admission") == "disabled", "the webhook's own pods are never reviewed")
# Every [admission] key of the shipped config is in the ConfigMap, and nothing else.
import re
shipped = open("config/config.toml").read().split("\n[admission]\n", 1)[1].split("\n[", 1)[0]
keys = lambda t: {m.group(1) for m in re.finditer(r"^([a-z_]+) = ", t, re.M)}
need(keys(shipped) == keys(toml_text), f"ConfigMap [admission] keys match config/config.toml: {sorted(keys(shipped) ^ keys(toml_text))}")
tls_mounts = [m for m in tmpl["spec"]["containers"][0]["volumeMounts"] if m["name"] == "tls"]
need(tls_mounts and "subPath" not in tls_mounts[0], "the TLS Secret is mounted whole (updated in place, loaded again)")
need("--metrics-listen" in tmpl["spec"]["containers"][0]["command"], "the Deployment serves /metrics")
over = [d for d in yaml.safe_load_all(open("packaging/kustomize/protect-gpu-pods/admission-config.yaml"))][0]
need('runtime_class = "gpu-guard"' in over["data"]["config.toml"], "protect-gpu-pods sets runtime_class")
need(keys(over["data"]["config.toml"]) == keys(toml_text), "protect-gpu-pods' config has the same keys")
cc = w["clientConfig"]["service"]
need(cc["name"] == svc["metadata"]["name"] and cc["namespace"] == svc["metadata"]["namespace"] and cc["path"] == "/mutate", "clientConfig names the Service and /mutate")
need(w["rules"][0]["resources"] == ["pods"] and w["rules"][0]["operations"] == ["CREATE"], "rules: pods CREATE")
c = dep["spec"]["template"]["spec"]["containers"][0]
need(c["command"][:1] == ["/usr/bin/gpu-guard"] and "admission" in c["command"], "the Deployment runs gpu-guard admission")
secret = [v["secret"]["secretName"] for v in dep["spec"]["template"]["spec"]["volumes"] if "secret" in v][0]
cm_docs = list(yaml.safe_load_all(open("packaging/kubernetes/cert-manager/webhook-certificate.yaml")))
for d in cm_docs:
    need(d["apiVersion"] == "cert-manager.io/v1" and d["kind"] in ("Issuer", "Certificate"), "cert-manager resources only")
cert = [d for d in cm_docs if d["kind"] == "Certificate" and not d["spec"].get("isCA")][0]
inject = mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
need(inject == f'{cert["metadata"]["namespace"]}/{cert["metadata"]["name"]}', "inject-ca-from names the serving Certificate")
need(cert["spec"]["secretName"] == secret, "the Certificate writes the Deployment's Secret")
host = f'{svc["metadata"]["name"]}.{svc["metadata"]["namespace"]}.svc'
need(host in cert["spec"]["dnsNames"], "the Certificate names the Service")
issuers = {d["metadata"]["name"] for d in cm_docs if d["kind"] == "Issuer"}
need(all(d["spec"]["issuerRef"]["name"] in issuers for d in cm_docs if d["kind"] == "Certificate"), "issuerRefs resolve")
# The fallback script's certificate: signed by its CA, for the Service's name.
v = subprocess.run(["openssl", "verify", "-CAfile", f"{tmp}/ca.crt", f"{tmp}/tls.crt"], capture_output=True, text=True)
need(v.returncode == 0, "webhook-certs.sh: tls.crt verifies against ca.crt")
t = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", f"{tmp}/tls.crt"], capture_output=True, text=True).stdout
need(f"DNS:{host}" in t, "webhook-certs.sh: SAN names the Service")
cmds = open(f"{tmp}/commands").read()
need("/webhooks/0/clientConfig/caBundle" in cmds and mwc["metadata"]["name"] in cmds and secret in cmds, "webhook-certs.sh patches caBundle and writes the Secret")
for e in errs:
    print("webhook:", e)
sys.exit(1 if errs else 0)
PY
); then
    echo "validate-k8s: ok: webhook rules, cert-manager resources"
else
    echo "validate-k8s: FAIL: webhook rules: $out" >&2
    failed=$((failed + 1))
fi
echo "validate-k8s: ${#manifests[@]} manifests, $failed failed"

# The affinities `gpu-guard check --affinity` prints, in a Pod: the
# label-only ones of official nvidia/cuda requirements, and --nodes ones
# (name patches, "admits none"). The API server's value-count rules are
# tested in tests/image/fleet_affinity_exact.rs; this checks the schema.
# The binary: $GPU_GUARD_BIN, else the release build's, else a debug build.
BIN=${GPU_GUARD_BIN:-target/x86_64-unknown-linux-gnu/release/gpu-guard}
if [ ! -x "$BIN" ]; then
    cargo build --quiet
    BIN=target/debug/gpu-guard
fi
work=$(mktemp -d)
trap 'rm -f "$bad"; rm -rf "$tmpd" "$rendered" "$work"' EXIT
printf '[host]\ncache_file = ""\n[log]\nsyslog = false\n' >"$work/config.toml"
pods=0
affinity_pod() { # name, check args...
    local name=$1
    shift
    { printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  containers:\n  - name: c\n    image: nvidia/cuda:12.4.1-base-ubuntu22.04\n  affinity:\n' "$name"
      # exit 1 is "admits none": the manifest is validated all the same.
      { "$BIN" --config "$work/config.toml" check "$@" --affinity 2>/dev/null || true; } | grep -v '^#' | sed 's/^/    /'
    } >"$work/$name.yaml"
    if out=$(kubernetes-validate --strict -k "$K8S_VERSION" "$work/$name.yaml" 2>&1) && ! grep -qiE 'warn|could not' <<<"$out"; then
        echo "validate-k8s: ok: affinity $name"
    else
        echo "validate-k8s: FAIL: affinity $name: $out" >&2
        failed=$((failed + 1))
    fi
    pods=$((pods + 1))
}
while IFS=$'\t' read -r tag _ req; do
    case "$tag" in '#'*|'') continue ;; esac
    affinity_pod "cuda-${tag//./-}" --env "NVIDIA_REQUIRE_CUDA=$req"
done <tests/data/requirements/nvidia-cuda-official.tsv
affinity_pod nodes-fleet --env 'NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=535,driver<536' --nodes tests/data/nodes/fleet.json
affinity_pod nodes-none --env 'NVIDIA_REQUIRE_CUDA=cuda>=99.0' --nodes tests/data/nodes/fleet.json
echo "validate-k8s: $pods affinities, $failed failed in all"
[ "$failed" -eq 0 ]
