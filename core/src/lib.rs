//! The decision core of node-csr-approver: reading a kubelet's certificate request as Go reads it
//! ([`csr`]) and deciding on it ([`policy`]), a pure function of the request, the rules and the
//! evidence that arrives through the policy's ports. This crate depends on no Kubernetes client,
//! no async runtime and no DNS library: the compiler keeps the core free of I/O.

pub mod csr;
pub mod policy;
