//! The audit of the serving certificates kubelets present: for each Node, the certificate its
//! kubelet serves where serving renewal would dial it, read without trusting it, and what it is
//! worth today (who issued it, how long it has left, whether today's policy would approve its
//! names). Read-only: nothing is approved, denied or written.
//!
//! [`scan`] scans Nodes (kube-free: the Nodes, where to dial them and the policy's ports come in
//! as values), [`NodeAudit`] is one Node's report, [`output`] prints reports and [`command`] is the
//! `audit` subcommand around them; [`flags`] are the controller's flags of its periodic audit,
//! [`periodic`] runs it, and [`states`] is what it remembers of each Node between scans.

pub mod args;
pub mod certificate;
pub mod command;
pub mod findings;
pub mod flags;
pub mod metrics;
pub mod output;
pub mod periodic;
pub mod scan;
pub mod states;
mod view;

pub use findings::{FailOn, Finding, state_name};

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde::Serialize;

use certificate::ServedCertificate;

/// Today's policy on the certificate's names: the decision a serving CSR asking for them gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyVerdict {
    /// `approve`, `deny`, `hold` or `retry`.
    pub decision: &'static str,
    /// The reason code (docs/reason-codes.md).
    pub reason: &'static str,
    /// The message.
    pub message: String,
    /// Each check that failed, as `check: detail`.
    pub failed: Vec<String>,
}

/// One Node's audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeAudit {
    /// The Node's name.
    pub node: String,
    /// `compliant`, or the first of `findings`.
    pub state: &'static str,
    /// Every finding, most severe first.
    pub findings: BTreeSet<Finding>,
    /// The address dialled, when one was.
    pub address: Option<SocketAddr>,
    /// Why the kubelet was not dialled, not reached, or its certificate not read.
    pub detail: Option<String>,
    /// The leaf served, when it was read.
    pub certificate: Option<ServedCertificate>,
    /// Whether the chain verifies against `--kubelet-serving-ca-file` (`None` when not given).
    pub verified: Option<bool>,
    /// Why it does not verify.
    pub verify_error: Option<String>,
    /// Seconds until notAfter (negative once expired).
    pub seconds_left: Option<i64>,
    /// Whether the subject is exactly CN `system:node:<node>` (KEP-4872).
    pub cn_is_node: Option<bool>,
    /// Today's policy on the certificate's names.
    pub policy: Option<PolicyVerdict>,
}

impl NodeAudit {
    /// A report with one finding, `detail` saying why, and no certificate read.
    fn without_certificate(node: &str, address: Option<SocketAddr>, finding: Finding, detail: String) -> NodeAudit {
        let findings = BTreeSet::from([finding]);
        NodeAudit {
            node: node.to_owned(),
            state: state_name(&findings),
            findings,
            address,
            detail: Some(detail),
            certificate: None,
            verified: None,
            verify_error: None,
            seconds_left: None,
            cn_is_node: None,
            policy: None,
        }
    }
}
