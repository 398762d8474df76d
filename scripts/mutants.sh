#!/usr/bin/env bash
# Mutation testing of the request parser and the decision core: every mutant of the core crate
# (core/src/), of src/kubernetes/csr_object.rs (what the cache keeps of a CSR, its decided and
# approved states), of src/kubernetes/csr_name.rs (a CSR's name as kept), of
# src/kubernetes/csr_cache.rs (the CSR cache the controller reads) and of the controller's
# src/controller/memory.rs, phase.rs, work_queue.rs and reconcile.rs (the table of what it knows of
# each CSR, its phases and their backoffs, the queue's order and its workers, the reconcile against fakes of its apiserver calls) must be caught by the fast tests of its package
# (mutants.toml). Installs cargo-mutants when missing; fails on any missed mutant.
#
# Usage: scripts/mutants.sh                 every mutant
#        scripts/mutants.sh --in-diff REV   only mutants in lines changed since REV
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo mutants --version >/dev/null 2>&1; then
  cargo install --locked cargo-mutants@27.1.0
fi

core_paths=(core/src)
shell_paths=(src/kubernetes/csr_object.rs src/kubernetes/csr_name.rs src/kubernetes/csr_cache.rs
  src/controller/memory.rs src/controller/phase.rs src/controller/work_queue.rs src/controller/reconcile.rs)
# The core: its own package's tests only (its unit tests and core/tests/), so a mutant rebuilds the
# core and its tests, never the shell.
core_args=(--config mutants.toml -p node-csr-approver-core --no-shuffle --output target/mutants/core)
# The shell's files: the shell's unit tests and its fast test targets (the evaluations through the
# real ports, the CLI and the rules' start-up warnings). The baseline is skipped (scripts/test.sh
# has run those tests on the unmutated tree) and the timeouts are set instead: the first mutant
# builds the shell from scratch.
shell_args=(--config mutants.toml -p node-csr-approver --no-shuffle --output target/mutants/shell
  --baseline skip --build-timeout 1800 --timeout 600
  --cargo-arg=--lib --cargo-arg=--test=evaluate --cargo-arg=--test=renewal_evidence --cargo-arg=--test=cli
  --cargo-arg=--test=rules)
for path in "${shell_paths[@]}"; do
  shell_args+=(-f "${path}")
done

# Runs cargo-mutants with the arguments given, over the mutants of `paths` changed since `since`
# (all of them when `since` is empty); nothing when none of those lines changed.
run() {
  local since="$1" paths_name="$2"
  shift 2
  local -n paths="${paths_name}"
  local args=("$@")
  if [[ -n "${since}" ]]; then
    local diff_file
    diff_file="$(mktemp)"
    git diff "${since}" -- "${paths[@]}" >"${diff_file}"
    if [[ ! -s "${diff_file}" ]]; then
      echo "mutants: no change to ${paths[*]} since ${since}"
      rm -f "${diff_file}"
      return 0
    fi
    args+=(--in-diff "${diff_file}")
  fi
  cargo mutants "${args[@]}"
}

since=""
case "${1:-}" in
  --in-diff) since="${2:?--in-diff needs a revision}" ;;
  "") ;;
  *) echo "usage: $0 [--in-diff REV]" >&2; exit 2 ;;
esac

# No debug info: linking the test binaries of every mutant is most of the time.
export CARGO_PROFILE_DEV_DEBUG=0
# cargo-mutants creates its output directory but not that directory's parent: the shell's run may
# come first (no change to the core).
mkdir -p target/mutants
run "${since}" core_paths "${core_args[@]}"
run "${since}" shell_paths "${shell_args[@]}"
