#!/usr/bin/env bash
# Mutation testing of the request parser and the decision core: every mutant of src/csr.rs,
# src/csr/, src/policy.rs and src/policy/ must be caught by the fast tests (mutants.toml). Installs cargo-mutants
# when missing; fails on any missed mutant.
#
# Usage: scripts/mutants.sh                 every mutant (about 14 s each on 2 cores)
#        scripts/mutants.sh --in-diff REV   only mutants in lines changed since REV
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo mutants --version >/dev/null 2>&1; then
  cargo install --locked cargo-mutants@27.1.0
fi

args=(--config mutants.toml -f src/csr.rs -f 'src/csr/**/*.rs' -f src/policy.rs -f 'src/policy/**/*.rs' --no-shuffle)
case "${1:-}" in
  --in-diff)
    diff_file="$(mktemp)"
    trap 'rm -f "${diff_file}"' EXIT
    git diff "${2:?--in-diff needs a revision}" -- src/csr.rs src/csr src/policy.rs src/policy >"${diff_file}"
    if [[ ! -s "${diff_file}" ]]; then
      echo "mutants: no change to src/csr.rs, src/csr/, src/policy.rs or src/policy/ since $2"
      exit 0
    fi
    args+=(--in-diff "${diff_file}")
    ;;
  "") ;;
  *) echo "usage: $0 [--in-diff REV]" >&2; exit 2 ;;
esac

# No debug info: linking the test binaries of every mutant is most of the time.
export CARGO_PROFILE_DEV_DEBUG=0
cargo mutants "${args[@]}"
