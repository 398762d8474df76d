#!/usr/bin/env bash
# Builds the approver's multi-architecture container image without Docker: an OCI image layout
# directory whose index.json names one image index (linux/amd64 and linux/arm64), each image laid
# out as the Dockerfile's final stage lays it out: the static musl binary at /node-csr-approver,
# user 65532:65532, entrypoint ["/node-csr-approver"], no shell. Beside the layout, a CycloneDX SBOM
# of each architecture's binary (cargo-cyclonedx: its dependency tree for that target). tests/image/
# checks the image against the Dockerfile, that two builds give the same digest and that containerd
# imports it. Push it with `crane push LAYOUT REF` (the whole index), or, with --output, import the
# archive with `ctr -n k8s.io images import ARCHIVE` or push it with `skopeo copy
# oci-archive:ARCHIVE docker://REF`.
#
# Usage:
#   scripts/build-image.sh [--binary-amd64 PATH] [--binary-arm64 PATH] [--name REF] [--layout DIR]
#                          [--output FILE] [--source URL]
#
#   --binary-amd64 PATH  the static x86_64 binary (default: $NODE_CSR_APPROVER_BIN when set, else
#                        the one `scripts/check-static-binary.sh` builds)
#   --binary-arm64 PATH  the static aarch64 binary (default: $NODE_CSR_APPROVER_BIN_ARM64 when set,
#                        else the one `scripts/check-static-binary.sh --target
#                        aarch64-unknown-linux-musl` builds)
#   --name REF           the image's name (default: the chart's default image.repository, the
#                        published ghcr.io/node-csr-approver/node-csr-approver, tagged with the
#                        chart's appVersion: the image its default values pull)
#   --layout DIR         the layout directory (default:
#                        ${CARGO_TARGET_DIR:-target}/image/node-csr-approver-APPVERSION); the SBOMs
#                        sbom-amd64.cdx.json and sbom-arm64.cdx.json go to its parent directory
#   --output FILE        also the layout as an OCI archive (tar) at FILE
#   --source URL         org.opencontainers.image.source (default: $NODE_CSR_APPROVER_SOURCE_URL,
#                        else Cargo.toml's `repository`; without either it is left out)
#
# The index and each manifest carry org.opencontainers.image.title, .version (the appVersion),
# .licenses (Cargo.toml's), .revision (the commit: $NODE_CSR_APPROVER_COMMIT, else git's HEAD; left
# out without either), .source, and .created, the commit's time ($SOURCE_DATE_EPOCH when set), which
# is also each config's `created`: the same commit and binaries give the same digest.
#
# Prints the layout directory's absolute path as the last line of stdout.
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

binary_amd64=${NODE_CSR_APPROVER_BIN:-} binary_arm64=${NODE_CSR_APPROVER_BIN_ARM64:-}
name="" layout="" output="" source=${NODE_CSR_APPROVER_SOURCE_URL:-}
while (($#)); do
  [[ $# -ge 2 ]] || die "$1 needs a value"
  case $1 in
    --binary-amd64) binary_amd64=$2 ;;
    --binary-arm64) binary_arm64=$2 ;;
    --name) name=$2 ;;
    --layout) layout=$2 ;;
    --output) output=$2 ;;
    --source) source=$2 ;;
    *) die "unknown option '$1' (see the header of $0)" ;;
  esac
  shift 2
done

app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "${root}/charts/node-csr-approver/Chart.yaml")
[[ -n ${app_version} ]] || die "no appVersion in charts/node-csr-approver/Chart.yaml"
repository=$(sed -n 's/^  repository: *\([^ ]*\) *$/\1/p' "${root}/charts/node-csr-approver/values.yaml" | head -n 1)
[[ -n ${repository} ]] || die "no image.repository in charts/node-csr-approver/values.yaml"
name=${name:-${repository}:${app_version}}
layout=${layout:-${CARGO_TARGET_DIR:-${root}/target}/image/node-csr-approver-${app_version}}
layout=${layout%/}

# Cargo.toml's value of KEY for the approver's package ([package], or [workspace.package] where
# the package says KEY.workspace = true).
cargo_toml() {
  awk -v key="$1" '
    /^\[/ { section = $0 }
    section == "[package]" && $0 ~ "^" key "\\.workspace *= *true" { inherit = 1 }
    section == "[package]" && $0 ~ "^" key " *= *\"" { own = $0 }
    section == "[workspace.package]" && $0 ~ "^" key " *= *\"" { shared = $0 }
    END { line = inherit ? shared : own; sub(/^[^"]*"/, "", line); sub(/".*$/, "", line); print line }
  ' "${root}/Cargo.toml"
}
licenses=$(cargo_toml license)
[[ -n ${licenses} ]] || die "Cargo.toml gives the package no license"
source=${source:-$(cargo_toml repository)}
revision=${NODE_CSR_APPROVER_COMMIT:-$(git -C "${root}" rev-parse --verify HEAD 2>/dev/null || true)}
epoch=${SOURCE_DATE_EPOCH:-$(git -C "${root}" log -1 --format=%ct 2>/dev/null || true)}

annotations=(
  org.opencontainers.image.title=node-csr-approver
  "org.opencontainers.image.version=${app_version}"
  "org.opencontainers.image.licenses=${licenses}"
)
created=()
if [[ -n ${revision} ]]; then
  annotations+=("org.opencontainers.image.revision=${revision}")
else
  echo "build-image: no commit known (no git, no NODE_CSR_APPROVER_COMMIT): no revision annotation" >&2
fi
if [[ -n ${source} ]]; then
  annotations+=("org.opencontainers.image.source=${source}")
else
  echo "build-image: no source URL (--source, NODE_CSR_APPROVER_SOURCE_URL or Cargo.toml's repository): no source annotation" >&2
fi
if [[ -n ${epoch} ]]; then
  time=$(date -u -d "@${epoch}" +%Y-%m-%dT%H:%M:%SZ) || die "SOURCE_DATE_EPOCH '${epoch}' is not a time"
  annotations+=("org.opencontainers.image.created=${time}")
  created=(--created "${time}")
fi

if [[ -z ${binary_amd64} ]]; then
  binary_amd64=$("${root}/scripts/check-static-binary.sh" | tail -n 1)
fi
if [[ -z ${binary_arm64} ]]; then
  binary_arm64=$("${root}/scripts/check-static-binary.sh" --target aarch64-unknown-linux-musl | tail -n 1)
fi
# The image has no C library: a dynamically linked binary could not start in it, nor one for
# another machine.
for pair in "amd64:${binary_amd64}:Advanced Micro Devices X86-64" "arm64:${binary_arm64}:AArch64"; do
  IFS=: read -r arch binary machine <<<"${pair}"
  [[ -f ${binary} && -x ${binary} ]] || die "${binary} (${arch}) is not an executable file"
  if LC_ALL=C readelf --program-headers --dynamic "${binary}" | grep -qE 'INTERP|\(NEEDED\)'; then
    die "${binary} is dynamically linked (build it with scripts/check-static-binary.sh)"
  fi
  LC_ALL=C readelf --file-header "${binary}" | grep -qE "Machine: +${machine}\$" \
    || die "${binary} is not a ${machine} binary, as --binary-${arch} must be"
done

# Builds of the same layout (tests running side by side) take turns.
mkdir -p "$(dirname "${layout}")"
exec 8>"${layout}.lock"
flock 8
args=()
for annotation in "${annotations[@]}"; do
  args+=(--annotation "${annotation}")
done
[[ -z ${output} ]] || args+=(--output "${output}")
"${root}/scripts/oci-archive.sh" \
  --name "${name}" \
  --layout "${layout}" \
  "${args[@]}" \
  "${created[@]}" \
  --arch amd64 --arch arm64 \
  --file "amd64=${binary_amd64}:/node-csr-approver:0755" \
  --file "arm64=${binary_arm64}:/node-csr-approver:0755" \
  --user 65532:65532 \
  --entrypoint /node-csr-approver \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  >/dev/null

# The SBOMs: cargo-cyclonedx writes one file beside each workspace member's Cargo.toml, under a
# name of this run's own; the approver's is moved beside the layout, the others removed.
cyclonedx=$("${root}/scripts/cargo-tool.sh" cargo-cyclonedx)
stem=".sbom-build-image-$$"
trap 'find "${root}" -maxdepth 2 -name "${stem}-*.json" -delete' EXIT
for pair in amd64:x86_64-unknown-linux-musl arm64:aarch64-unknown-linux-musl; do
  arch=${pair%%:*}
  env ${epoch:+SOURCE_DATE_EPOCH="${epoch}"} CARGO_NET_OFFLINE=true "${cyclonedx}" cyclonedx --quiet \
    --manifest-path "${root}/Cargo.toml" --format json --spec-version 1.5 --target "${pair#*:}" \
    --override-filename "${stem}-${arch}"
  mv "${root}/${stem}-${arch}.json" "$(dirname "${layout}")/sbom-${arch}.cdx.json"
done
echo "build-image: SBOMs $(dirname "${layout}")/sbom-{amd64,arm64}.cdx.json" >&2
realpath "${layout}"
