//! The approver as operators run it: the image built from this repository, the chart installed by
//! `helm` (README, "Install") into a cluster whose node runs containers (containerd, runc, a CNI
//! bridge, kube-proxy, a scheduler, cluster DNS: `testenv::ContainerCluster`), with the chart's
//! defaults and the two required values. Needs root, containerd, runc and the CNI plugins
//! (`scripts/install-node-runtime.sh`); skipped without root. The tests take turns (one cluster at
//! a time); run with `--nocapture` to see the measurements.
//!
//! `NODE_CSR_APPROVER_BIN` is the static binary the image is built from (scripts/test.sh sets it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod control_plane_node;
mod host_network;
mod install;
mod leader;
mod limits;
mod rolling;
