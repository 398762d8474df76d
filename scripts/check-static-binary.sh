#!/usr/bin/env bash
# Builds the release binary as the Dockerfile does (musl, symbols stripped, link-time optimised)
# and checks that it is fully static and runs. Installs the musl target and musl-gcc (for ring) when missing. Prints the
# binary's absolute path (under $CARGO_TARGET_DIR when set) as the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-musl
if ! rustup target list --installed | grep -qx "${target}"; then
  rustup target add "${target}" >&2
fi
if ! command -v musl-gcc >/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends musl-tools; } >&2
  else
    echo "check-static-binary: musl-gcc is missing: apt-get install musl-tools" >&2
    exit 1
  fi
fi
started=${SECONDS}
CARGO_PROFILE_RELEASE_STRIP=symbols CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
  cargo build --release --locked --target "${target}" --bin node-csr-approver >&2
binary="$(realpath "${CARGO_TARGET_DIR:-target}/${target}/release/node-csr-approver")"
if ! ldd "${binary}" 2>&1 | grep -qE 'statically linked|not a dynamic executable'; then
  echo "check-static-binary: ${binary} is dynamically linked:" >&2
  ldd "${binary}" >&2
  exit 1
fi
# The allocator's configuration (.cargo/config.toml) is compiled in: without it, memory freed after
# a burst of large CSRs would stay resident.
if ! LC_ALL=C grep -aq 'narenas:1,dirty_decay_ms:0,muzzy_decay_ms:0' "${binary}"; then
  echo "check-static-binary: ${binary} lacks jemalloc's configuration from .cargo/config.toml" >&2
  exit 1
fi
"${binary}" --version >&2
printf 'check-static-binary: static, runs, %s bytes, built in %ss\n' "$(stat -c %s "${binary}")" "$((SECONDS - started))" >&2
echo "${binary}"
