//! What the audit can find of a Node's serving certificate, and which findings make `audit`
//! exit non-zero (`--fail-on`).

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

/// What the audit found of one Node's serving certificate; a Node has every finding that applies,
/// and its state is the first (most severe) of them, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Finding {
    /// Nothing completed a TLS handshake at the kubelet's address in time.
    Unreachable,
    /// The kubelet is not dialled: the Node has no InternalIP, no kubelet port, or one the dial
    /// rules refuse (outside `--provider-ip-prefixes`, reserved, the apiserver's, another port).
    NotDialled,
    /// The kubelet serves a certificate the audit cannot read, or did not prove it holds its key.
    Malformed,
    /// The chain carries its own root (the kubelet's self-signed certificate) and does not verify
    /// against `--kubelet-serving-ca-file`.
    SelfSigned,
    /// `--kubelet-serving-ca-file` is given and the chain does not verify against it (for server
    /// auth, now, naming the address dialled).
    Untrusted,
    /// Today's policy would deny (or hold) a serving CSR asking for the certificate's names.
    NonCompliant,
    /// Today's policy gave no verdict (DNS or the cluster did not answer); try again.
    Undetermined,
    /// notAfter has passed (or notBefore has not come).
    Expired,
    /// notAfter is within the expiring threshold.
    Expiring,
}

impl Finding {
    /// The name reports and `--fail-on` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Finding::Unreachable => "unreachable",
            Finding::NotDialled => "not-dialled",
            Finding::Malformed => "malformed",
            Finding::SelfSigned => "self-signed",
            Finding::Untrusted => "untrusted",
            Finding::NonCompliant => "non-compliant",
            Finding::Undetermined => "undetermined",
            Finding::Expired => "expired",
            Finding::Expiring => "expiring",
        }
    }
}

/// The state a report gives a Node: `compliant`, or its most severe [`Finding`].
pub fn state_name(findings: &BTreeSet<Finding>) -> &'static str {
    findings.first().map_or("compliant", |finding| finding.as_str())
}

/// Which findings make `audit` exit non-zero: `--fail-on expiring=7d,self-signed,...`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailOn {
    /// The findings named.
    pub findings: BTreeSet<Finding>,
    /// The threshold `expiring=DURATION` gave, if any.
    pub expiring_within: Option<Duration>,
}

impl FailOn {
    /// Whether `findings` hold one named (`expiring` also fails on `expired`).
    pub fn fails(&self, findings: &BTreeSet<Finding>) -> bool {
        findings.iter().any(|finding| {
            self.findings.contains(finding)
                || (*finding == Finding::Expired && self.findings.contains(&Finding::Expiring))
        })
    }
}
