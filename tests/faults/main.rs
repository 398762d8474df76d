//! Fault scenarios: the real binary against a real kube-apiserver of each test's own, each replica
//! reaching it through a fault proxy of its own (`testenv::FaultProxy`): an apiserver outage, a
//! watch expired with 410, a stalled or killed leader, failing approval writes, failing reads of a
//! CSR, an apiserver shedding load with 429 and `Retry-After` (the reconcile's requests, or the
//! watches, the Lease and Events), a client request budget, hostile CSR names, an advertise address
//! claimed among thousands of Nodes.
//! Each creates CSRs concurrently through node impersonation, legitimate ones and forged ones, and
//! asserts that every CSR ends with exactly one Approved or Denied condition as it must, within a
//! bound once the fault is over (printed), by few approval writes, all made through the approval
//! subresource while the Lease named their replica. One more, without a proxy, stalls etcd under a
//! write, which must be given up before the Lease it was sent under can have expired.
//!
//! `NODE_CSR_APPROVER_BIN` runs another build of the binary (for example an older one). The tests
//! take turns (one control plane at a time); run with `--nocapture` to see the measurements.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod harness;
mod verdict;

mod advertise;
mod apiserver;
mod budget;
mod fence;
mod leader;
mod names;
mod node_reads;
mod poisoned;
mod reads;
mod throttled;
mod upkeep;
mod watches;
mod writes;
