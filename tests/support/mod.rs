//! Shared test helpers, and (from `testkit`) CSR submissions for the decision core, real PKCS#10
//! requests made with rcgen and a policy configuration with the documented defaults.

#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

pub mod chart;
pub mod cluster;
pub mod installed;
pub mod json;
pub mod kubelet_flow;
pub mod lease;
pub mod nodes;
pub mod process;
pub mod release;
pub mod schemas;

pub use testkit::csr::SERVING_USAGES;
pub use testkit::policy::{config, minutes_after_creation, serving};
pub use testkit::request::{Key, Request, extra_common_name, extra_organization, pem_block};
