//! node-csr-approver: decides on the certificate signing requests kubelets create.
//!
//! The decision core ([`policy`]) is a pure function of the parsed request ([`csr`]), the rules
//! and the evidence that arrives through its ports, implemented by [`dns`] and [`cluster`]; both
//! live in the `node-csr-approver-core` crate, which does no I/O, and are re-exported here.
//! [`csr_object`] reads a CertificateSigningRequest object into the core's `Submission`.
//! [`runner`] runs the controller, [`check`] runs the policy on CSRs from files or the cluster.
//! The public modules are what the binary, the tests and the benchmark use; see ARCHITECTURE.md.

pub mod admin;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod csr_object;
pub mod display;
pub mod dns;
pub mod logging;
pub mod metrics;
pub mod runner;

mod apiserver;
mod connect;
mod csr_ledger;
mod kube_watch;
mod leader;
mod machines;
mod object_files;

pub use node_csr_approver_core::{csr, policy};
