#!/usr/bin/env bash
# Builds the release binary as the Dockerfile does (musl, symbols stripped, link-time optimised, one
# codegen unit; for arm64, jemalloc built for pages of up to 64 KiB) with `cargo auditable`, so the
# binary carries its dependency list (section .dep-v0), and checks that it is fully static, for the
# target's machine, carries jemalloc's configuration and runs: natively for x86_64, under QEMU user
# emulation (qemu-aarch64-static) for aarch64. Prints the binary's absolute path (under
# $CARGO_TARGET_DIR when set) as the last line of stdout.
#
# Usage: scripts/check-static-binary.sh [--target x86_64-unknown-linux-musl|aarch64-unknown-linux-musl]
#
# Installs what is missing when run as root, else says which command would: the Rust target
# (rustup), musl-gcc (musl-tools) for x86_64; for aarch64 the cross compiler (gcc-aarch64-linux-gnu),
# musl's arm64 headers and aarch64-linux-musl-gcc (musl-dev:arm64, after `dpkg --add-architecture
# arm64`) and qemu-user-static; and cargo-auditable (scripts/cargo-tool.sh, cached).
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "check-static-binary: $*" >&2
  exit 1
}

target=x86_64-unknown-linux-musl
while (($#)); do
  [[ $# -ge 2 ]] || die "$1 needs a value"
  case $1 in
    --target) target=$2 ;;
    *) die "unknown option '$1' (see the header of $0)" ;;
  esac
  shift 2
done

# Per target: the ELF machine readelf names, the commands that must exist and the Debian packages
# that bring them, how the binary runs here, and the build's environment.
build_env=()
run=()
case ${target} in
  x86_64-unknown-linux-musl)
    machine="Advanced Micro Devices X86-64"
    needs=(musl-gcc:musl-tools)
    ;;
  aarch64-unknown-linux-musl)
    machine="AArch64"
    needs=(aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu aarch64-linux-musl-gcc:musl-dev:arm64 qemu-aarch64-static:qemu-user-static)
    run=(qemu-aarch64-static)
    # ring's and jemalloc's C code compiled against musl's arm64 headers (Debian's wrapper of the
    # cross gcc with musl's specs); Rust links with its own musl (self-contained) through the cross
    # gcc. jemalloc refuses to start on pages larger than it was built for, and arm64 kernels may
    # use 64 KiB pages (the Dockerfile builds the same way). -mno-outline-atomics: the cross gcc's
    # libgcc picks its atomics at run time through glibc's __getauxval, which musl has not.
    build_env=(
      CC_aarch64_unknown_linux_musl=aarch64-linux-musl-gcc
      CFLAGS_aarch64_unknown_linux_musl=-mno-outline-atomics
      AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar
      CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
      JEMALLOC_SYS_WITH_LG_PAGE=16
    )
    ;;
  *) die "--target is x86_64-unknown-linux-musl or aarch64-unknown-linux-musl, not '${target}'" ;;
esac

if ! rustup target list --installed | grep -qx "${target}"; then
  rustup target add "${target}" >&2
fi
missing=()
for need in "${needs[@]}"; do
  command -v "${need%%:*}" >/dev/null || missing+=("${need#*:}")
done
if ((${#missing[@]})); then
  foreign=()
  [[ " ${missing[*]} " != *":arm64 "* ]] || dpkg --print-foreign-architectures | grep -qx arm64 || foreign=(arm64)
  if [[ $(id -u) -ne 0 ]]; then
    die "missing ${missing[*]}: ${foreign:+dpkg --add-architecture arm64 && }apt-get update && apt-get install --no-install-recommends ${missing[*]}"
  fi
  {
    ((${#foreign[@]} == 0)) || dpkg --add-architecture arm64
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"
  } >&2
fi
auditable=$(scripts/cargo-tool.sh cargo-auditable)

started=${SECONDS}
env "${build_env[@]}" \
  CARGO_PROFILE_RELEASE_STRIP=symbols CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
  "${auditable}" auditable build --release --locked --target "${target}" --bin node-csr-approver >&2
binary="$(realpath "${CARGO_TARGET_DIR:-target}/${target}/release/node-csr-approver")"
# Static: no program interpreter (ld.so) and no shared library needed, whatever the host's ldd says
# of a foreign binary.
if LC_ALL=C readelf --program-headers --dynamic "${binary}" | grep -qE 'INTERP|\(NEEDED\)'; then
  readelf --program-headers --dynamic "${binary}" >&2
  die "${binary} is dynamically linked"
fi
if ! LC_ALL=C readelf --file-header "${binary}" | grep -qE "Machine: +${machine}\$"; then
  die "${binary} is not a binary for ${machine}: $(LC_ALL=C readelf --file-header "${binary}" | grep Machine)"
fi
# The dependency list cargo-auditable embeds (the image's SBOM scanners read it).
if ! LC_ALL=C readelf --section-headers "${binary}" | grep -q '\.dep-v0'; then
  die "${binary} has no .dep-v0 section: it was not built with cargo auditable"
fi
# The allocator's configuration (.cargo/config.toml) is compiled in: without it, memory freed after
# a burst of large CSRs would stay resident.
if ! LC_ALL=C grep -aq 'narenas:1,dirty_decay_ms:0,muzzy_decay_ms:0' "${binary}"; then
  die "${binary} lacks jemalloc's configuration from .cargo/config.toml"
fi
version=$("${run[@]}" "${binary}" --version)
echo "${version}" >&2
[[ ${version} == *", ${target})" ]] || die "${binary} --version does not name ${target}: ${version}"
printf 'check-static-binary: %s, static, runs, %s bytes, built in %ss\n' "${target}" "$(stat -c %s "${binary}")" "$((SECONDS - started))" >&2
echo "${binary}"
