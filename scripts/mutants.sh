#!/usr/bin/env bash
# Mutation testing of the request parser and the decision core: every mutant of the core crate
# (core/src/), of src/kubernetes/csr_object.rs (what the cache keeps of a CSR, its decided and
# approved states), of src/kubernetes/csr_name.rs (a CSR's name as kept) and of src/kubernetes/csr_cache.rs (the CSR cache the controller reads) must be caught by
# the fast tests (mutants.toml). Installs cargo-mutants
# when missing; fails on any missed mutant.
#
# Usage: scripts/mutants.sh                 every mutant (about 14 s each on 2 cores)
#        scripts/mutants.sh --in-diff REV   only mutants in lines changed since REV
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo mutants --version >/dev/null 2>&1; then
  cargo install --locked cargo-mutants@27.1.0
fi

paths=(core/src src/kubernetes/csr_object.rs src/kubernetes/csr_name.rs src/kubernetes/csr_cache.rs)
# The tests that hold the core live in the shell's package (mutants.toml: test_package), which
# cargo-mutants's baseline would not build for mutants of the core alone; the baseline is skipped
# (scripts/test.sh has run those tests on the unmutated tree) and the timeouts are set instead: the
# first mutant builds the whole workspace from scratch.
args=(--config mutants.toml --workspace -f 'core/src/**/*.rs' -f src/kubernetes/csr_object.rs -f src/kubernetes/csr_name.rs -f src/kubernetes/csr_cache.rs --no-shuffle
  --baseline skip --build-timeout 1800 --timeout 600)
case "${1:-}" in
  --in-diff)
    diff_file="$(mktemp)"
    trap 'rm -f "${diff_file}"' EXIT
    git diff "${2:?--in-diff needs a revision}" -- "${paths[@]}" >"${diff_file}"
    if [[ ! -s "${diff_file}" ]]; then
      echo "mutants: no change to ${paths[*]} since $2"
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
