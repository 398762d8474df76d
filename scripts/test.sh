#!/usr/bin/env bash
# The project's test command (README, "Two commands"): formatting, lints, the test tools (built once
# and cached), then every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== test tools (etcd, kube-apiserver, kube-controller-manager, kubelet, helm, promtool, csr-oracle, fake-cri)"
scripts/build-tools.sh

echo "== static release binary, built as the Dockerfile builds it"
NODE_CSR_APPROVER_BIN="$(scripts/check-static-binary.sh | tail -n 1)"
export NODE_CSR_APPROVER_BIN

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test"
cargo test --workspace --locked --no-fail-fast
