//! node-csr-approver: decides on the certificate signing requests kubelets create.
//!
//! The decision core ([`policy`], reading requests with [`csr`]) lives in the
//! `node-csr-approver-core` crate, which does no I/O, and is re-exported here. It is a pure
//! function of the request, the rules and the evidence that arrives through its ports,
//! implemented by [`dns`] and [`kubernetes::cluster`]. [`kubernetes`] holds every adapter to the
//! apiserver (watches and the CSR cache, the cluster view, leader election, the read of a CSR by
//! name and the approval write); the application around it is the controller (`controller`, its
//! Events in `events`), [`cli`] and [`config`] (flags), [`runner`] (`run`), [`check`],
//! [`audit`] (the serving certificates kubelets present, judged), [`admin`] (health and metrics endpoints), [`metrics`], [`logging`] and [`display`].
//! The public modules are what the binary, the tests and the benchmark use; see ARCHITECTURE.md.

pub mod admin;
pub mod audit;
pub mod check;
pub mod cli;
pub mod config;
pub(crate) mod controller;
pub mod display;
pub mod dns;
pub(crate) mod events;
pub mod kubelet_tls;
pub mod kubernetes;
pub mod logging;
pub mod metrics;
pub mod runner;
pub mod values;

mod object_files;
mod shutdown;

pub use node_csr_approver_core::{csr, policy};
