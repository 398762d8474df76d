#!/usr/bin/env bash
# Builds the approver's container image without Docker, as an OCI image archive laid out as the
# Dockerfile's final stage lays it out: the static musl binary at /node-csr-approver, user
# 65532:65532, entrypoint ["/node-csr-approver"], no shell. tests/image.rs checks the two agree and
# that containerd imports the archive. Import it with `ctr -n k8s.io images import ARCHIVE`, or push
# it with `skopeo copy oci-archive:ARCHIVE docker://REF` (or unpack it into a directory DIR and
# `crane push DIR REF`: crane reads an OCI layout from a directory only).
#
# Usage:
#   scripts/build-image.sh [--binary PATH] [--name REF] [--output FILE]
#
#   --binary PATH  the static binary (default: $NODE_CSR_APPROVER_BIN when set, else the one
#                  scripts/check-static-binary.sh builds)
#   --name REF     the image's name (default: registry.example.com/node-csr-approver:APPVERSION,
#                  the chart's appVersion, which its default values pull)
#   --output FILE  the archive (default: ${CARGO_TARGET_DIR:-target}/image/node-csr-approver-APPVERSION.oci.tar)
#
# Prints the archive's absolute path as the last line of stdout.
#
# What the Dockerfile's base image (distroless static, nonroot) adds and this image leaves out,
# because the approver never uses it: /tmp (it writes no file, and the chart mounts the root
# filesystem read-only), CA certificates (it trusts the cluster CA of its ServiceAccount or
# kubeconfig and the files its flags name, never the system's roots, unless a kubeconfig names no
# CA at all), /etc/passwd and /etc/group (it runs as a numeric user and looks up no name: without
# an entry the runtime sets HOME=/, where no kubeconfig is found either), tzdata (it logs in UTC).
# Its Env keeps the base image's PATH.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() {
  echo "build-image: $*" >&2
  exit 1
}

binary=${NODE_CSR_APPROVER_BIN:-} name="" output=""
while (($#)); do
  [[ $# -ge 2 ]] || die "$1 needs a value"
  case $1 in
    --binary) binary=$2 ;;
    --name) name=$2 ;;
    --output) output=$2 ;;
    *) die "unknown option '$1' (see the header of $0)" ;;
  esac
  shift 2
done

app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "${root}/charts/node-csr-approver/Chart.yaml")
[[ -n ${app_version} ]] || die "no appVersion in charts/node-csr-approver/Chart.yaml"
name=${name:-registry.example.com/node-csr-approver:${app_version}}
output=${output:-${CARGO_TARGET_DIR:-${root}/target}/image/node-csr-approver-${app_version}.oci.tar}

if [[ -z ${binary} ]]; then
  binary=$("${root}/scripts/check-static-binary.sh" | tail -n 1)
fi
[[ -f ${binary} && -x ${binary} ]] || die "${binary} is not an executable file"
# The image has no C library: a dynamically linked binary could not start in it.
if ! ldd "${binary}" 2>&1 | grep -qE 'statically linked|not a dynamic executable'; then
  die "${binary} is dynamically linked (build it with scripts/check-static-binary.sh)"
fi

"${root}/scripts/oci-archive.sh" \
  --name "${name}" \
  --output "${output}" \
  --file "${binary}:/node-csr-approver:0755" \
  --user 65532:65532 \
  --entrypoint /node-csr-approver \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  | tail -n 1
