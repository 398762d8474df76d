#!/usr/bin/env bash
# Runs cargo-deny (crates.io) with the project's deny.toml, installing it first into
# ${XDG_CACHE_HOME:-~/.cache}/node-csr-approver/cargo-bin when missing (about 3 minutes of one
# core's compiling the first time; reused afterwards).
#
# Usage: scripts/cargo-deny.sh [cargo-deny arguments]
#   (no argument)  check licenses, bans and sources, offline (the dependency tree is Cargo.lock's,
#                  read from the local registry cache the build filled)
#   e.g. scripts/cargo-deny.sh check advisories licenses bans sources   (needs the network)
#        scripts/cargo-deny.sh --config OTHER.toml check licenses   (global options come first)
# Any run that does not name `advisories` is offline.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version=0.20.2
cache="${XDG_CACHE_HOME:-${HOME}/.cache}/node-csr-approver/cargo-bin"
tool="${cache}/bin/cargo-deny-${version}"
if [[ ! -x ${tool} ]]; then
  echo "cargo-deny: installing cargo-deny ${version} into ${cache} (cached afterwards)" >&2
  started=${SECONDS}
  cargo install --locked --quiet --root "${cache}/build" --version "${version}" cargo-deny >&2
  mkdir -p "${cache}/bin"
  mv "${cache}/build/bin/cargo-deny" "${tool}"
  rm -rf "${cache}/build"
  echo "cargo-deny: installed in $((SECONDS - started)) s" >&2
fi
if (($# == 0)); then
  set -- check --hide-inclusion-graph licenses bans sources
fi
offline=()
if [[ " $* " != *" advisories "* ]]; then
  offline=(--offline)
fi
cd "${root}"
exec "${tool}" "${offline[@]}" --manifest-path "${root}/Cargo.toml" --workspace "$@"
