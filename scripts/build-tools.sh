#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kubelet, kube-scheduler, kube-proxy, helm,
# promtool, kubeconform and actionlint from their published Go modules (tools/*/go.mod), crane and
# cosign (the test registry, pushes and signatures of tests/installed: tools/crane, tools/cosign),
# and the test tools csr-oracle (tools/csr-oracle), fake-cri (tools/fake-cri), go-flags
# (tools/go-flags) and pause (tools/pause,
# the pod sandbox program of testenv's container nodes), into a cache keyed by version, and reuses
# what is already there.
#
# Usage: scripts/build-tools.sh [--kubernetes VERSION] [--only TOOL,...] [--print-dir | --list]
#   (no argument)         build what is missing, then print the tools directory on stdout
#   --only TOOL,...       build and link only these tools (names as in the tools directory below),
#                         e.g. the demo's etcd,kube-apiserver,kube-controller-manager,kubelet,fake-cri
#   --print-dir           print the tools directory without building
#   --kubernetes VERSION  etcd, kube-apiserver, kube-controller-manager and kubelet of that supported
#                         release (tools/versions.env) instead of the newest; the other tools stay
#                         the default ones. Default: $NODE_CSR_APPROVER_KUBERNETES_VERSION, else the
#                         newest
#   --list                print the supported Kubernetes releases, newest first
#
# The tools directory holds `etcd`, `kube-apiserver`, `kube-controller-manager`, `kubelet`,
# `kube-scheduler`, `kube-proxy`, `helm`, `promtool`, `kubeconform`, `actionlint`, `crane`, `cosign`,
# `csr-oracle`, `fake-cri`, `go-flags` and `pause` (symlinks to versioned binaries under
# ${XDG_CACHE_HOME:-~/.cache}/node-csr-approver/bin; the names
# of csr-oracle, fake-cri, go-flags and pause also carry a hash of their sources and the Go version,
# so editing them rebuilds them). kube-scheduler and kube-proxy are always the newest release's:
# only the container-node tests use them, and they run against the newest release. Progress goes to
# stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/tools"
# shellcheck source=../tools/versions.env
source "${tools}/versions.env"

cache="${XDG_CACHE_HOME:-${HOME}/.cache}/node-csr-approver"
bin="${cache}/bin"
# shellcheck disable=SC2206 # a list of words
KUBERNETES_OLDER_RELEASES=(${KUBERNETES_OLDER_RELEASES})

log() { printf 'build-tools: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage="usage: $0 [--kubernetes VERSION] [--only TOOL,...] [--print-dir | --list]"
# The chosen Kubernetes release, its etcd, and its wrapper modules tools/kubernetes/vX.Y{,/etcd}.
kube_version="${NODE_CSR_APPROVER_KUBERNETES_VERSION:-${KUBERNETES_VERSION}}" print_dir=false
all_tools=etcd,kube-apiserver,kube-controller-manager,kubelet,kube-scheduler,kube-proxy,helm,promtool,csr-oracle,fake-cri,go-flags,pause
# The linters (kept apart from the cluster's tools above).
all_tools+=,kubeconform,actionlint
# The registry and signing tools (one build, whatever the Kubernetes release).
all_tools+=,crane,cosign
only="${all_tools}"
while (($# > 0)); do
  case "$1" in
    --kubernetes) (($# > 1)) || die "${usage}"; kube_version="$2"; shift ;;
    --only) (($# > 1)) || die "${usage}"; only="$2"; shift ;;
    --print-dir) print_dir=true ;;
    --list) printf '%s\n' "${KUBERNETES_VERSION}" "${KUBERNETES_OLDER_RELEASES[@]%%:*}"; exit 0 ;;
    *) die "unknown argument '$1' (${usage})" ;;
  esac
  shift
done
etcd_version=""
for release in "${KUBERNETES_VERSION}:${ETCD_VERSION}" "${KUBERNETES_OLDER_RELEASES[@]}"; do
  if [[ "${release%%:*}" == "${kube_version}" ]]; then etcd_version="${release#*:}"; fi
done
[[ -n "${etcd_version}" ]] || die "Kubernetes ${kube_version} is not supported (tools/versions.env:" \
  "${KUBERNETES_VERSION} ${KUBERNETES_OLDER_RELEASES[*]%%:*})"
kube_module="kubernetes/${kube_version%.*}"
set_dir="${cache}/tools-k8s-${kube_version}-etcd-${etcd_version}-helm-${HELM_VERSION}-prometheus-${PROMETHEUS_VERSION}"
# csr-oracle and fake-cri are always the newest release's: an older release's directory names that
# too, so checkouts that differ in their newest release do not re-link each other's directory.
[[ "${kube_version}" == "${KUBERNETES_VERSION}" ]] || set_dir+="-oracle-${KUBERNETES_VERSION}"
if ${print_dir}; then
  printf '%s\n' "${set_dir}"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0

# Checks that module $2 in tools/$1 resolves to version $3.
require_version() {
  local got
  got="$(go -C "${tools}/$1" list -m -f '{{.Version}}' "$2")"
  [[ "${got}" == "$3" ]] || die "tools/$1/go.mod has $2 ${got}, tools/versions.env says $3"
}

# Checks that tools/$1/go.mod replaces every k8s.io staging module by itself at the v0 tag of
# Kubernetes release $2.
require_staging_versions() {
  local want="v0.${2#v1.}" count=0 old arrow new version
  while read -r old arrow new version; do
    [[ "${new}" == "${old}" && "${version}" == "${want}" ]] \
      || die "tools/$1/go.mod: replace ${old} ${arrow} ${new} ${version}, want ${old} ${want}"
    count=$((count + 1))
  done < <(awk '$1 ~ /^k8s\.io\// && $2 == "=>"' "${tools}/$1/go.mod")
  ((count > 0)) || die "tools/$1/go.mod replaces no staging module"
}

for tool in ${only//,/ }; do
  [[ ",${all_tools}," == *",${tool},"* ]] || die "--only: unknown tool '${tool}' (${all_tools})"
done
# Whether tool $1 is wanted (--only).
wanted() { [[ ",${only}," == *",$1,"* ]]; }

# Builds package $4 of tools/$3 into ${bin}/$2 unless it exists, if tool $1 is wanted; $5 is a rough
# first-build time on 2 cores (module downloads included); remaining arguments go to `go build`.
build() {
  local tool="$1" out="${bin}/$2" dir="$3" pkg="$4" estimate="$5"
  shift 5
  wanted "${tool}" || return 0
  if [[ -x "${out}" ]]; then
    log "reusing ${out}"
    return
  fi
  log "building ${tool} from its Go module into ${out} (${estimate} on 2 cores; cached afterwards)"
  local start=${SECONDS}
  go build -C "${tools}/${dir}" -trimpath -o "${out}.tmp" "$@" "${pkg}"
  mv "${out}.tmp" "${out}"
  log "built $(basename "${out}") in $((SECONDS - start)) s"
}

# Each module is checked only when a tool built from it is wanted (`go list` may download it).
if wanted kube-apiserver || wanted kube-controller-manager || wanted kubelet; then
  require_version "${kube_module}" k8s.io/kubernetes "${kube_version}"
  require_staging_versions "${kube_module}" "${kube_version}"
fi
if wanted kube-scheduler || wanted kube-proxy; then
  require_version "kubernetes/${KUBERNETES_VERSION%.*}" k8s.io/kubernetes "${KUBERNETES_VERSION}"
fi
if wanted csr-oracle; then
  require_version csr-oracle k8s.io/kubernetes "${KUBERNETES_VERSION}"
  require_staging_versions csr-oracle "${KUBERNETES_VERSION}"
fi
if wanted fake-cri; then require_version fake-cri k8s.io/cri-client "v0.${KUBERNETES_VERSION#v1.}"; fi
if wanted etcd; then require_version "${kube_module}/etcd" go.etcd.io/etcd/server/v3 "${etcd_version}"; fi
if wanted helm; then require_version helm helm.sh/helm/v4 "${HELM_VERSION}"; fi
if wanted promtool; then
  # Prometheus tags release v3.X.Y as Go module version v0.3XX.Y.
  IFS=. read -r prom_major prom_minor prom_patch <<<"${PROMETHEUS_VERSION#v}"
  require_version promtool github.com/prometheus/prometheus \
    "$(printf 'v0.%d%02d.%d' "${prom_major}" "${prom_minor}" "${prom_patch}")"
fi
if wanted kubeconform; then require_version kubeconform github.com/yannh/kubeconform "${KUBECONFORM_VERSION}"; fi
if wanted actionlint; then require_version actionlint github.com/rhysd/actionlint "${ACTIONLINT_VERSION}"; fi
# The registry and signing tools.
if wanted crane; then require_version crane github.com/google/go-containerregistry "${CRANE_VERSION}"; fi
if wanted cosign; then require_version cosign github.com/sigstore/cosign/v3 "${COSIGN_VERSION}"; fi

mkdir -p "${bin}" "${set_dir}"
# One build at a time: test binaries or CI jobs may start this script concurrently.
exec 9>"${cache}/build.lock"
flock 9

# The version variables the Kubernetes release build sets (hack/lib/version.sh), so /version
# reports the release.
# Prints them for release $1.
version_ldflags() {
  local minor="${1#v1.}" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
      "${pkg}" "$1" "${pkg}" "${pkg}" "${minor%%.*}" "${pkg}"
  done
}
kube_ldflags="$(version_ldflags "${kube_version}")"
newest_ldflags="$(version_ldflags "${KUBERNETES_VERSION}")"

build kube-apiserver "kube-apiserver-${kube_version}" "${kube_module}" k8s.io/kubernetes/cmd/kube-apiserver \
  "3 to 7 minutes, most of it downloading and compiling the Kubernetes modules" \
  -tags selinux,notest -ldflags "-s -w ${kube_ldflags}"
build kube-controller-manager "kube-controller-manager-${kube_version}" "${kube_module}" \
  k8s.io/kubernetes/cmd/kube-controller-manager "1 to 2 minutes" -tags selinux,notest -ldflags "-s -w ${kube_ldflags}"
build kubelet "kubelet-${kube_version}" "${kube_module}" k8s.io/kubernetes/cmd/kubelet "under a minute" \
  -tags selinux,notest -ldflags "-s -w ${kube_ldflags}"
build kube-scheduler "kube-scheduler-${KUBERNETES_VERSION}" "kubernetes/${KUBERNETES_VERSION%.*}" \
  k8s.io/kubernetes/cmd/kube-scheduler "2 to 3 minutes" -tags selinux,notest -ldflags "-s -w ${newest_ldflags}"
build kube-proxy "kube-proxy-${KUBERNETES_VERSION}" "kubernetes/${KUBERNETES_VERSION%.*}" \
  k8s.io/kubernetes/cmd/kube-proxy "under a minute" -tags selinux,notest -ldflags "-s -w ${newest_ldflags}"
build etcd "etcd-${etcd_version}" "${kube_module}/etcd" go.etcd.io/etcd/server/v3 "under a minute" -ldflags "-s -w"
build helm "helm-${HELM_VERSION}" helm helm.sh/helm/v4/cmd/helm "2 to 3 minutes" \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION}"
# Only `check rules` and `test rules` are used: remove_all_sd leaves out every service-discovery
# plugin (the cloud SDKs are most of the build).
build promtool "promtool-${PROMETHEUS_VERSION}" promtool github.com/prometheus/prometheus/cmd/promtool "about a minute" \
  -tags remove_all_sd -ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}"
# The linters.
build kubeconform "kubeconform-${KUBECONFORM_VERSION}" kubeconform github.com/yannh/kubeconform/cmd/kubeconform \
  "under a minute" -ldflags "-s -w"
build actionlint "actionlint-${ACTIONLINT_VERSION}" actionlint github.com/rhysd/actionlint/cmd/actionlint \
  "under a minute" -ldflags "-s -w -X github.com/rhysd/actionlint.version=${ACTIONLINT_VERSION}"

# The registry and signing tools: crane (`crane registry serve` is the test registry) and cosign.
build crane "crane-${CRANE_VERSION}" crane github.com/google/go-containerregistry/cmd/crane "under a minute" \
  -ldflags "-s -w -X github.com/google/go-containerregistry/cmd/crane/cmd.Version=${CRANE_VERSION}"
build cosign "cosign-${COSIGN_VERSION}" cosign github.com/sigstore/cosign/v3/cmd/cosign "5 to 8 minutes" \
  -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=${COSIGN_VERSION}"

# The behaviour of csr-oracle, fake-cri, go-flags and pause is their source and Go's standard library, so
# they are in their names.
source_hash() {
  local hash
  hash="$(cat <(go env GOVERSION) "${tools}/$1/"{go.mod,go.sum,main.go} | sha256sum)"
  printf '%s\n' "${hash:0:12}"
}
oracle="csr-oracle-${KUBERNETES_VERSION}-$(source_hash csr-oracle)"
build csr-oracle "${oracle}" csr-oracle . "seconds" -ldflags "-s -w"
fake_cri="fake-cri-${KUBERNETES_VERSION}-$(source_hash fake-cri)"
build fake-cri "${fake_cri}" fake-cri . "seconds" -ldflags "-s -w"
go_flags="go-flags-$(source_hash go-flags)"
build go-flags "${go_flags}" go-flags . "seconds" -ldflags "-s -w"
pause="pause-$(source_hash pause)"
build pause "${pause}" pause . "seconds" -ldflags "-s -w"

# Links tool $1 of the directory to binary $2, if it is wanted.
link() { if wanted "$1"; then ln -sfn "../bin/$2" "${set_dir}/$1"; fi; }
link kube-apiserver "kube-apiserver-${kube_version}"
link kube-controller-manager "kube-controller-manager-${kube_version}"
link kubelet "kubelet-${kube_version}"
link kube-scheduler "kube-scheduler-${KUBERNETES_VERSION}"
link kube-proxy "kube-proxy-${KUBERNETES_VERSION}"
link etcd "etcd-${etcd_version}"
link helm "helm-${HELM_VERSION}"
link promtool "promtool-${PROMETHEUS_VERSION}"
link csr-oracle "${oracle}"
link fake-cri "${fake_cri}"
link go-flags "${go_flags}"
link pause "${pause}"
link kubeconform "kubeconform-${KUBECONFORM_VERSION}"
link actionlint "actionlint-${ACTIONLINT_VERSION}"
# The registry and signing tools.
link crane "crane-${CRANE_VERSION}"
link cosign "cosign-${COSIGN_VERSION}"

printf '%s\n' "${set_dir}"
