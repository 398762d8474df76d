//! Shared helpers of the core's decision tables: the case ([`table`]), and from `testkit` real
//! PKCS#10 requests made with rcgen, a node's serving CSR and a policy configuration with the
//! documented defaults.

#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

pub mod table;

pub use testkit::policy::{config, minutes_after_creation, serving};
pub use testkit::request::{Key, Request, extra_common_name, extra_organization, pem_block};
