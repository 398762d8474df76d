//! node-csr-approver: decides on the certificate signing requests kubelets create.
//!
//! The decision core ([`policy`]) is a pure function of the parsed request ([`csr`]), the
//! configuration ([`config`]) and the evidence gathered from DNS ([`dns`]) and the cluster
//! ([`cluster`]). [`check`] runs it on CSRs from files.

pub mod admin;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod connect;
pub mod controller;
pub mod csr;
pub mod dns;
pub mod leader;
pub mod machines;
pub mod manifest;
pub mod metrics;
pub mod policy;
pub mod runner;
