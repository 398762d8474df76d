//! Dev-only: the differential between the approver's reading of `spec.request` and Go's, which is
//! what kube-apiserver validates and the kube-controller-manager signer signs.
//!
//! [`Seeds`] are valid kubelet-serving requests made with rcgen; [`mutate`] derives inputs from them
//! by PEM-byte and ASN.1-structure mutations (re-signed when the signed part changed); [`Judge`]
//! reads each input both ways and reports a [`Disagreement`] whenever the approver accepts bytes
//! that Go reads differently, or approves a request whose certificate would name anything other
//! than what the approver's report lists. `tests/differential.rs` runs a bounded, seeded campaign in
//! CI; `fuzz/` drives the same code from cargo-fuzz for long runs.

mod corpus;
mod der_tree;
mod judge;
mod mutate;
mod rng;
mod seeds;

pub use corpus::{Entry, Expect, corpus};
pub use judge::{Disagreement, Judge, Tally, Verdict};
pub use mutate::{Input, mutate};
pub use rng::Rng;
pub use seeds::{NODE, Seed, Seeds};
