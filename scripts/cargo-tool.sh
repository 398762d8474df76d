#!/usr/bin/env bash
# Prints the path of a cargo tool from crates.io at a pinned version, installing it first with
# `cargo install --locked` into ${XDG_CACHE_HOME:-~/.cache}/node-csr-approver/cargo-bin/bin as
# NAME-VERSION when missing (reused afterwards; concurrent callers wait for one install).
#
# Usage: scripts/cargo-tool.sh cargo-auditable|cargo-cyclonedx
set -euo pipefail

# The pinned versions: changing one installs that version beside the others.
declare -A versions=([cargo-auditable]=0.7.7 [cargo-cyclonedx]=0.5.9)

(($# == 1)) && [[ -n ${versions[$1]:-} ]] || {
  echo "cargo-tool: usage: $0 $(IFS='|'; echo "${!versions[*]}")" >&2
  exit 2
}
name=$1 version=${versions[$1]}
cache="${XDG_CACHE_HOME:-${HOME}/.cache}/node-csr-approver/cargo-bin"
tool="${cache}/bin/${name}-${version}"
if [[ ! -x ${tool} ]]; then
  mkdir -p "${cache}/bin"
  exec 9>"${cache}/${name}.lock"
  flock 9
  if [[ ! -x ${tool} ]]; then
    echo "cargo-tool: installing ${name} ${version} into ${cache} (cached afterwards)" >&2
    started=${SECONDS}
    build="${cache}/build-${name}.$$"
    trap 'rm -rf "${build}"' EXIT
    cargo install --locked --quiet --root "${build}" --version "${version}" "${name}" >&2
    mv "${build}/bin/${name}" "${tool}"
    echo "cargo-tool: ${name} ${version} installed in $((SECONDS - started)) s" >&2
  fi
fi
echo "${tool}"
