# syntax=docker/dockerfile:1
# node-csr-approver as a fully static (musl) binary in distroless static, run as user 65532.
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg NODE_CSR_APPROVER_COMMIT="$(git rev-parse HEAD)" \
#     -t REGISTRY/node-csr-approver:TAG --push .
#
# Each platform's binary is built by that platform's Rust image (under QEMU for a foreign one), so
# the C parts (ring, jemalloc) are compiled by the native musl-gcc. scripts/build-image.sh builds the
# same image without Docker (cross-compiling the arm64 binary); tests/image/ keeps the two in step:
# the platforms, each one's Rust target and jemalloc page size, cargo-auditable, the final stage.
ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
ARG TARGETARCH
# The commit `--version` names: the build context holds no .git (.dockerignore).
ARG NODE_CSR_APPROVER_COMMIT
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools=1.2.3-1 \
    && rm -rf /var/lib/apt/lists/*
RUN case "${TARGETARCH}" in \
      amd64) echo x86_64-unknown-linux-musl ;; \
      arm64) echo aarch64-unknown-linux-musl ;; \
      *) echo "unsupported TARGETARCH '${TARGETARCH}'" >&2; exit 1 ;; \
    esac > /rust-target \
    && rustup target add "$(cat /rust-target)"
# cargo-auditable embeds the dependency list in the binary (section .dep-v0), for scanners of the image.
RUN cargo install --locked cargo-auditable@0.7.7
WORKDIR /src
COPY . .
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
# One codegen unit, optimised across crates at link time: a binary a fifth smaller, whose code is
# most of the idle resident memory (BENCHMARKS.md, "Link-time optimisation").
ENV CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
# jemalloc refuses to start on pages larger than it was built for, and arm64 kernels may use 64 KiB
# pages: the arm64 binary is built for pages of up to 64 KiB. Debian's arm64 libgcc picks its
# atomics at run time through glibc's __getauxval, which musl has not: C code is compiled without
# those outline atomics (as scripts/check-static-binary.sh does).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    if [ "${TARGETARCH}" = arm64 ]; then export JEMALLOC_SYS_WITH_LG_PAGE=16; fi \
    && if [ "${TARGETARCH}" = arm64 ]; then export CFLAGS_aarch64_unknown_linux_musl=-mno-outline-atomics; fi \
    && cargo auditable build --release --locked --target "$(cat /rust-target)" --bin node-csr-approver \
    && cp "target/$(cat /rust-target)/release/node-csr-approver" /node-csr-approver \
    && /node-csr-approver --version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /node-csr-approver /node-csr-approver
USER 65532:65532
ENTRYPOINT ["/node-csr-approver"]
