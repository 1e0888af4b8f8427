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
manifests=(packaging/kubernetes/*.yaml)
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
echo "validate-k8s: ${#manifests[@]} manifests, $failed failed"
[ "$failed" -eq 0 ]
