#!/usr/bin/env bash
# The project's test command (README, "Two commands"): formatting, lints, the test tools (built once
# and cached), then every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== test tools (etcd, kube-apiserver, helm)"
scripts/build-tools.sh

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test"
cargo test --workspace --locked --no-fail-fast
