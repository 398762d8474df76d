//! Shared test helpers: CSR submissions for the decision core, and (from `testkit`) real PKCS#10
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
pub mod table;

use node_csr_approver::policy::Submission;
pub use testkit::csr::SERVING_USAGES;
pub use testkit::policy::config;
pub use testkit::request::{Key, Request, extra_common_name, extra_organization, pem_block};

/// A pending kubelet-serving CSR from `system:node:<node>` carrying `request`.
pub fn serving(node: &str, request: &str) -> Submission {
    Submission {
        name: format!("csr-{node}"),
        created: Some("2026-01-01T00:00:00Z".parse().unwrap()),
        signer_name: testkit::csr::SERVING_SIGNER.into(),
        username: format!("system:node:{node}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        usages: SERVING_USAGES.iter().map(|u| (*u).to_owned()).collect(),
        expiration_seconds: None,
        request: request.as_bytes().to_vec(),
        decided: None,
        approved: false,
    }
}

/// The time the age-based rules are evaluated at: `minutes` after [`serving`]'s creation time.
pub fn minutes_after_creation(minutes: i64) -> jiff::Timestamp {
    let created: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    created + jiff::SignedDuration::from_mins(minutes)
}
