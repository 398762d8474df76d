//! The approver as operators run it: the image built from this repository and the chart, pushed to
//! a test registry, signed and with each platform's SBOM attested, verified with cosign, then
//! installed by `helm` from `oci://` with the image pinned by digest (README, "Install") into a
//! cluster whose node runs containers (containerd pulling from that registry, runc, a CNI bridge,
//! kube-proxy, a scheduler, cluster DNS: `testenv::ContainerCluster`), with the chart's defaults
//! and the two required values. Needs root, containerd, runc and the CNI plugins
//! (`scripts/install-node-runtime.sh`); skipped without root (but `release.rs`, which needs no
//! cluster). The tests take turns (one cluster at a time); run with `--nocapture` to see the
//! measurements.
//!
//! `NODE_CSR_APPROVER_IMAGE_LAYOUT` and `NODE_CSR_APPROVER_SBOM_DIR` are the image and its SBOMs
//! (scripts/test.sh sets them; see `support/release.rs`); `NODE_CSR_APPROVER_BIN` is the static
//! binary `scripts/build-image.sh` builds the image from when the first is unset.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod control_plane_node;
mod host_network;
mod install;
mod leader;
mod limits;
mod release;
mod rolling;
