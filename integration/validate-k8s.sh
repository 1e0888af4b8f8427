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

# The affinities `gpu-guard check --affinity` prints, in a Pod: the
# label-only ones of official nvidia/cuda requirements, and --nodes ones
# (name patches, "admits none"). The API server's value-count rules are
# tested in tests/fleet_affinity_exact.rs; this checks the schema.
cargo build --quiet
BIN=target/debug/gpu-guard
work=$(mktemp -d)
trap 'rm -f "$bad"; rm -rf "$work"' EXIT
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
