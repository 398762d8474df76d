#!/usr/bin/env bash
# Regenerates examples/csrs.yaml: real PKCS#10 requests (openssl) wrapped in
# CertificateSigningRequest objects as `kubectl get csr -o yaml` prints them.
# The decisions they get are documented in docs/check.md and asserted by tests/cli.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# csr NAME NODE SANS [SUBJECT]: prints a base64 PKCS#10 request for system:node:NODE.
csr() {
  local node=$2 sans=$3 subject=${4:-/O=system:nodes/CN=system:node:$2}
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/$1.key" \
    -subj "$subject" ${sans:+-addext "subjectAltName=$sans"} -out "$work/$1.csr" 2>/dev/null
  base64 -w0 < "$work/$1.csr"
}

# object NAME USERNAME SIGNER USAGES REQUEST [EXPIRATION]
object() {
  cat <<YAML
- apiVersion: certificates.k8s.io/v1
  kind: CertificateSigningRequest
  metadata:
    name: $1
    creationTimestamp: "2026-01-01T00:00:00Z"
  spec:
    signerName: $3
    username: $2
    groups: [system:nodes, system:authenticated]
    usages: [$4]
    request: $5${6:+
    expirationSeconds: $6}
  status: {}
YAML
}

serving="digital signature, key encipherment, server auth"
{
  echo "apiVersion: v1"
  echo "kind: List"
  echo "items:"
  object legit-n1 system:node:n1 kubernetes.io/kubelet-serving "$serving" \
    "$(csr legit-n1 n1 DNS:n1.nodes.example.com,IP:10.0.0.11)"
  object forged-hostname system:node:n1 kubernetes.io/kubelet-serving "$serving" \
    "$(csr forged-hostname n1 DNS:auth.evil.io,IP:10.0.0.11)"
  object ip-outside-prefixes system:node:n2 kubernetes.io/kubelet-serving "$serving" \
    "$(csr ip-outside-prefixes n2 DNS:n2.nodes.example.com,IP:192.168.7.7)"
  object client-usages system:node:n2 kubernetes.io/kubelet-serving "digital signature, client auth" \
    "$(csr client-usages n2 DNS:n2.nodes.example.com,IP:10.0.0.12)"
  object extra-organization system:node:n2 kubernetes.io/kubelet-serving "$serving" \
    "$(csr extra-organization n2 DNS:n2.nodes.example.com "/O=system:nodes/O=system:masters/CN=system:node:n2")"
  object too-long system:node:n2 kubernetes.io/kubelet-serving "$serving" \
    "$(csr too-long n2 DNS:n2.nodes.example.com,IP:10.0.0.12)" 63072000
  object not-our-signer system:node:n2 kubernetes.io/kube-apiserver-client-kubelet "digital signature, client auth" \
    "$(csr not-our-signer n2 "")"
} > examples/csrs.yaml
echo "wrote examples/csrs.yaml"
