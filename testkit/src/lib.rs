//! Dev-only: what the tests, the bench, the demo and the differential share, so each is written
//! once.
//!
//! - [`request`]: real PKCS#10 requests of a node, built with rcgen, and the legitimate one.
//! - [`csr`]: the CertificateSigningRequest object that carries one.
//! - [`policy`]: the provider regex and prefixes everything runs the approver with, the policy
//!   configuration with the documented defaults, and a node's serving CSR as the core reads it.
//! - [`machine`]: machine mode as the tests run it: the bootstrapper, the rules, a Machine.
//! - [`approver`]: the `node-csr-approver` binary as a child process: building it, its command line,
//!   the ports it reports listening on, running it (readiness, signals, its log, stopping it).
//! - [`http`]: a plain HTTP GET on loopback, for `/readyz` and `/metrics`.
//!
//! The feature `cluster` (on by default) holds what runs against a cluster: the CSR object,
//! [`approver`] and [`http`]. The decision core's tests use the rest without it.

#![forbid(unsafe_code)]

#[cfg(feature = "cluster")]
pub mod approver;
pub mod csr;
#[cfg(feature = "cluster")]
pub mod http;
pub mod machine;
pub mod policy;
pub mod request;

pub use request::{Key, Request};
