#!/usr/bin/env bash
# The webhook's TLS without cert-manager: makes a CA and a serving
# certificate for the Service (gpu-guard-admission.gpu-guard.svc), stores
# them as the Secret gpu-guard-admission-tls, and patches the CA into the
# MutatingWebhookConfiguration's caBundle. Rerun it to renew (the CA is
# made anew each time; the Deployment reads the Secret at start, so restart
# it: kubectl -n gpu-guard rollout restart deployment gpu-guard-admission).
#
# Usage: packaging/kubernetes/webhook-certs.sh [--dir DIR] [--days N] [--offline]
#   --dir      where the PEM files are written (default: a temp dir, removed)
#   --offline  write the files and print the kubectl commands, run nothing
# Needs: openssl; kubectl (unless --offline).
set -euo pipefail

NS=gpu-guard
SVC=gpu-guard-admission
SECRET=gpu-guard-admission-tls
WEBHOOK=gpu-guard
DAYS=365
DIR=
OFFLINE=0
while [ $# -gt 0 ]; do
    case $1 in
        --dir) DIR=$2; shift 2 ;;
        --days) DAYS=$2; shift 2 ;;
        --offline) OFFLINE=1; shift ;;
        *) echo "webhook-certs: unknown argument $1" >&2; exit 2 ;;
    esac
done
command -v openssl >/dev/null || { echo "webhook-certs: openssl is not installed" >&2; exit 1; }
if [ -z "$DIR" ]; then
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu-guard-certs.XXXXXX")
    trap 'rm -rf "$DIR"' EXIT
fi
mkdir -p "$DIR"
umask 077

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days "$DAYS" \
    -subj "/CN=gpu-guard-admission-ca" -keyout "$DIR/ca.key" -out "$DIR/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=$SVC.$NS.svc" -keyout "$DIR/tls.key" -out "$DIR/tls.csr" 2>/dev/null
printf 'subjectAltName=DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' \
    "$SVC" "$NS" "$SVC" "$NS" > "$DIR/ext.cnf"
openssl x509 -req -days "$DAYS" -in "$DIR/tls.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" \
    -CAcreateserial -extfile "$DIR/ext.cnf" -out "$DIR/tls.crt" 2>/dev/null
openssl verify -CAfile "$DIR/ca.crt" "$DIR/tls.crt" >/dev/null

CA_BUNDLE=$(base64 -w0 < "$DIR/ca.crt")
PATCH="[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$CA_BUNDLE\"}]"
run() {
    if [ "$OFFLINE" = 1 ]; then printf '%q ' "$@"; echo; else "$@"; fi
}
run kubectl -n "$NS" delete secret "$SECRET" --ignore-not-found
run kubectl -n "$NS" create secret tls "$SECRET" --cert "$DIR/tls.crt" --key "$DIR/tls.key"
run kubectl patch mutatingwebhookconfiguration "$WEBHOOK" --type json -p "$PATCH"
echo "webhook-certs: certificate for $SVC.$NS.svc in $DIR (valid $DAYS days)" >&2
