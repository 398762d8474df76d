//! Dev-only: what the tests, the bench, the demo and the differential share, so each is written
//! once.
//!
//! - [`request`]: real PKCS#10 requests of a node, built with rcgen.
//! - [`csr`]: the CertificateSigningRequest object that carries one.
//! - [`policy`]: the provider regex and prefixes everything runs the approver with, and the policy
//!   configuration with the documented defaults.
//! - [`approver`]: the `node-csr-approver` binary as a child process: building it, its command line,
//!   the ports it reports listening on, running it (readiness, signals, its log, stopping it).
//! - [`http`]: a plain HTTP GET on loopback, for `/readyz` and `/metrics`.

#![forbid(unsafe_code)]

pub mod approver;
pub mod csr;
pub mod http;
pub mod policy;
pub mod request;

pub use request::{Key, Request};
