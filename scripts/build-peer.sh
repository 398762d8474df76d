#!/usr/bin/env bash
# Builds the Go kubelet-csr-approver (PEER_VERSION in tools/versions.env), the tool the bench runs
# beside node-csr-approver, into the tools cache, and reuses it when already there.
#
# Usage: scripts/build-peer.sh [SOURCE_DIR]   build (if missing), print the binary's path
#        scripts/build-peer.sh --print-path   print where the binary goes, build nothing
#
# It first asks the Go module proxy for github.com/postfinance/kubelet-csr-approver@PEER_VERSION.
# Where the proxy does not serve that module, give SOURCE_DIR: a checkout of the release tag (e.g.
# `git clone --branch v1.2.14 https://github.com/postfinance/kubelet-csr-approver`); its own
# go.mod and go.sum pin the dependencies, which the proxy serves. Progress goes to stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../tools/versions.env
source "${root}/tools/versions.env"
module=github.com/postfinance/kubelet-csr-approver
bin="${XDG_CACHE_HOME:-${HOME}/.cache}/node-csr-approver/bin"
out="${bin}/kubelet-csr-approver-${PEER_VERSION}"

log() { printf 'build-peer: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

case "${1:-}" in
  --print-path) printf '%s\n' "${out}"; exit 0 ;;
  -*) die "usage: $0 [SOURCE_DIR | --print-path]" ;;
esac
source_dir="${1:-}"
if [[ -x "${out}" ]]; then
  log "reusing ${out}"
  printf '%s\n' "${out}"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "${bin}"
staging="$(mktemp -d)"
trap 'rm -rf "${staging}"' EXIT
flags=(-trimpath -ldflags "-s -w")
if GOBIN="${staging}" go install "${flags[@]}" "${module}/cmd/kubelet-csr-approver@${PEER_VERSION}" 2>"${staging}/proxy.log"; then
  log "built ${module}@${PEER_VERSION} from the module proxy"
elif [[ -n "${source_dir}" ]]; then
  log "the module proxy did not serve ${module}@${PEER_VERSION}; building ${source_dir}"
  [[ "$(go -C "${source_dir}" list -m)" == "${module}" ]] || die "${source_dir} is not ${module}"
  tag="$(git -C "${source_dir}" describe --tags --exact-match HEAD 2>/dev/null || true)"
  [[ "${tag}" == "${PEER_VERSION}" ]] || die "${source_dir} is not a git checkout of the tag ${PEER_VERSION}"
  [[ -z "$(git -C "${source_dir}" status --porcelain)" ]] || die "${source_dir} has local changes"
  go build -C "${source_dir}" -mod=readonly "${flags[@]}" -o "${staging}/kubelet-csr-approver" ./cmd/kubelet-csr-approver
else
  cat "${staging}/proxy.log" >&2
  die "the module proxy did not serve ${module}@${PEER_VERSION}; pass a checkout of that tag as SOURCE_DIR"
fi
mv "${staging}/kubelet-csr-approver" "${out}"
log "built ${out}"
printf '%s\n' "${out}"
