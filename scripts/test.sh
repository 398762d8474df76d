#!/usr/bin/env bash
# The project's test command (README, "Two commands"): formatting, lints, the test tools (built once
# and cached), then every test of the workspace against the newest supported Kubernetes release, and
# the integration tests against each older one (docs/supported-versions.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# Which release runs is this script's choice, not the caller's.
unset NODE_CSR_APPROVER_KUBERNETES_VERSION

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== test tools (etcd, kube-apiserver, kube-controller-manager, kubelet, kube-scheduler, kube-proxy, helm, promtool, kubeconform, actionlint, crane, cosign, csr-oracle, fake-cri, go-flags, pause)"
scripts/build-tools.sh

# The container nodes of tests/installed: containerd, runc, the CNI plugins... (as root; without
# root those tests say they skip).
if [[ $(id -u) -eq 0 ]]; then
  echo "== container runtime for the installed-chart tests"
  scripts/install-node-runtime.sh
fi

# shellcheck, for actionlint's check of the workflows' scripts (tests/release.rs).
if [[ $(id -u) -eq 0 ]] && ! command -v shellcheck >/dev/null; then
  echo "== shellcheck"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck; } >&2
fi

echo "== cargo deny check licenses bans sources (deny.toml; installed once into the tools cache)"
scripts/cargo-deny.sh

echo "== static release binaries (amd64, arm64 cross-built and run under QEMU), built as the Dockerfile builds them"
NODE_CSR_APPROVER_BIN="$(scripts/check-static-binary.sh | tail -n 1)"
NODE_CSR_APPROVER_BIN_ARM64="$(scripts/check-static-binary.sh --target aarch64-unknown-linux-musl | tail -n 1)"
export NODE_CSR_APPROVER_BIN NODE_CSR_APPROVER_BIN_ARM64

echo "== the multi-architecture image (OCI layout) and its SBOMs"
NODE_CSR_APPROVER_IMAGE_LAYOUT="$(scripts/build-image.sh | tail -n 1)"
NODE_CSR_APPROVER_SBOM_DIR="$(dirname "${NODE_CSR_APPROVER_IMAGE_LAYOUT}")"
export NODE_CSR_APPROVER_IMAGE_LAYOUT NODE_CSR_APPROVER_SBOM_DIR

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test"
cargo test --workspace --locked --no-fail-fast

# Every older supported release (tools/versions.env): the approver against its apiserver (and its
# kube-controller-manager signer and kubelet), and that the apiserver that ran is that release
# (testenv's tests/admin.rs; the approver's own tests/admin/ comes along). --workspace keeps the
# test binaries of the run above: selecting packages would rebuild them with other features.
status=0
for version in $(scripts/build-tools.sh --list | tail -n +2); do
  echo "== test tools of Kubernetes ${version}"
  scripts/build-tools.sh --kubernetes "${version}" >/dev/null
  echo "== cargo test against Kubernetes ${version}"
  NODE_CSR_APPROVER_KUBERNETES_VERSION="${version}" cargo test --workspace --locked --no-fail-fast \
    --test admin --test controller --test writes --test ha --test rbac --test machine --test chart --test chart_live --test kubelet \
    --test kubelet_netns \
    || status=1
done
exit "${status}"
