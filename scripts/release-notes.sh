#!/usr/bin/env bash
# Prints CHANGELOG.md's section for a release (its lines between `## [VERSION]` and the next
# `## ` heading), the notes of the GitHub release (.github/workflows/release.yml).
#
# Usage: scripts/release-notes.sh [--check-chart] VERSION
#   --check-chart  first check that charts/node-csr-approver/Chart.yaml's version and appVersion
#                  are VERSION (a release tag names both)
# Fails, naming what is missing, when CHANGELOG.md has no section for VERSION or it is empty.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() {
  echo "release-notes: $*" >&2
  exit 1
}

check_chart=false
if [[ ${1:-} == --check-chart ]]; then
  check_chart=true
  shift
fi
(($# == 1)) || die "usage: $0 [--check-chart] VERSION"
version=$1
[[ ${version} =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "'${version}' is not a semantic version X.Y.Z"

if ${check_chart}; then
  chart="${root}/charts/node-csr-approver/Chart.yaml"
  chart_version=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "${chart}")
  app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "${chart}")
  [[ ${chart_version} == "${version}" ]] || die "Chart.yaml's version is '${chart_version}', not ${version}"
  [[ ${app_version} == "${version}" ]] || die "Chart.yaml's appVersion is '${app_version}', not ${version}"
fi

notes=$(awk -v heading="## [${version}]" '
  index($0, heading) == 1 { inside = 1; next }
  inside && /^## / { exit }
  inside { print }
' "${root}/CHANGELOG.md")
[[ -n ${notes//[[:space:]]/} ]] || die "CHANGELOG.md has no section '## [${version}]' with notes"
printf '%s\n' "${notes}" | sed -e '/./,$!d'
