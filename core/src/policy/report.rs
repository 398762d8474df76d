//! The per-check record of an evaluation: which check ran, whether it passed, and why.

use super::Reason;

/// A named check, in the order the policy runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckId {
    /// The signer is one this approver handles.
    Signer,
    /// No decision or certificate is present yet.
    Pending,
    /// spec.username is system:node:<name>.
    Username,
    /// spec.groups contains system:nodes and system:authenticated.
    Groups,
    /// spec.request parses and its signature verifies.
    Request,
    /// Subject CN and O.
    Subject,
    /// spec.usages.
    Usages,
    /// Only DNS and IP SANs.
    SanTypes,
    /// At least one DNS or IP SAN.
    SanPresent,
    /// No more DNS SANs than allowed.
    DnsNameCount,
    /// No more IP SANs than allowed.
    IpAddressCount,
    /// No SAN names the apiserver, svc.<cluster domain>, localhost or a reserved address.
    ClusterIdentity,
    /// Every DNS SAN is a valid hostname.
    DnsNameSyntax,
    /// Every IP SAN is a plain IPv4 or IPv6 address.
    IpAddressSyntax,
    /// Every DNS SAN is bound to the node name.
    Hostname,
    /// Every DNS SAN matches the provider regex.
    ProviderRegex,
    /// Every IP SAN lies in the allowed prefixes.
    IpPrefixes,
    /// No IP SAN is an address of the apiserver (the default/kubernetes Service, its EndpointSlices).
    ApiserverAddresses,
    /// Every DNS SAN resolves.
    DnsResolves,
    /// Every resolved address lies in the allowed prefixes.
    ResolvedIpPrefixes,
    /// Every IP SAN is among the resolved addresses.
    IpResolved,
    /// spec.expirationSeconds is within the maximum.
    Expiration,
    /// Every SAN belongs to the Node.
    NodeAddresses,
    /// Every SAN is an address of the node's Machine.
    MachineAddresses,
    /// No Machine claims the node: the request renews the certificate its kubelet serves.
    KubeletRenewal,
    /// The pending brake is not engaged.
    PendingBrake,
    /// A node-client CSR comes from the bootstrapper with its exact groups.
    Bootstrapper,
    /// A node-client CSR carries no SANs.
    NoSans,
    /// No Node of the requested name exists.
    NodeAbsent,
    /// A Machine carries the requested name as InternalDNS.
    MachineMatch,
    /// That Machine has no nodeRef yet.
    MachineUnclaimed,
    /// The CSR was created within the Machine's window.
    CreationWindow,
    /// No approved client CSR for the same node name still exists.
    OneClientCertificate,
    /// A rule of `--rules` holds (one row per rule, its name in the detail).
    Rule,
    /// No newer kubelet-serving CSR of the same node is approved (else denied) or pending (else retried).
    Superseded,
}

impl CheckId {
    /// The kebab-case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckId::Signer => "signer",
            CheckId::Pending => "pending",
            CheckId::Username => "username",
            CheckId::Groups => "groups",
            CheckId::Request => "request",
            CheckId::Subject => "subject",
            CheckId::Usages => "usages",
            CheckId::SanTypes => "san-types",
            CheckId::SanPresent => "san-present",
            CheckId::DnsNameCount => "dns-name-count",
            CheckId::IpAddressCount => "ip-address-count",
            CheckId::ClusterIdentity => "cluster-identity",
            CheckId::DnsNameSyntax => "dns-name-syntax",
            CheckId::IpAddressSyntax => "ip-address-syntax",
            CheckId::Hostname => "hostname",
            CheckId::ProviderRegex => "provider-regex",
            CheckId::IpPrefixes => "ip-prefixes",
            CheckId::ApiserverAddresses => "apiserver-addresses",
            CheckId::DnsResolves => "dns-resolves",
            CheckId::ResolvedIpPrefixes => "resolved-ip-prefixes",
            CheckId::IpResolved => "ip-resolved",
            CheckId::Expiration => "expiration",
            CheckId::NodeAddresses => "node-addresses",
            CheckId::MachineAddresses => "machine-addresses",
            CheckId::KubeletRenewal => "kubelet-renewal",
            CheckId::PendingBrake => "pending-brake",
            CheckId::Bootstrapper => "bootstrapper",
            CheckId::NoSans => "no-sans",
            CheckId::NodeAbsent => "node-absent",
            CheckId::MachineMatch => "machine-match",
            CheckId::MachineUnclaimed => "machine-unclaimed",
            CheckId::CreationWindow => "creation-window",
            CheckId::OneClientCertificate => "one-client-certificate",
            CheckId::Rule => "rule",
            CheckId::Superseded => "superseded",
        }
    }
}

/// What happens to a CSR when a check fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consequence {
    /// The request is refused (held instead under --skip-deny-step).
    Deny,
    /// The evaluation cannot finish yet; try again later.
    Retry,
    /// The request is not ours to decide.
    Ignore,
}

/// A failed check: its reason code, consequence and a message naming the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The reason code.
    pub reason: Reason,
    /// What follows from the failure.
    pub consequence: Consequence,
    /// A human message naming the offending value.
    pub message: String,
}

impl Failure {
    /// A failure that denies the CSR.
    pub fn deny(reason: Reason, message: impl Into<String>) -> Failure {
        Failure { reason, consequence: Consequence::Deny, message: message.into() }
    }

    /// A failure that asks for a later re-evaluation.
    pub fn retry(reason: Reason, message: impl Into<String>) -> Failure {
        Failure { reason, consequence: Consequence::Retry, message: message.into() }
    }

    /// A failure that makes the CSR none of our business.
    pub fn ignore(reason: Reason, message: impl Into<String>) -> Failure {
        Failure { reason, consequence: Consequence::Ignore, message: message.into() }
    }
}

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The check passed; the text says what was verified.
    Pass(String),
    /// The check failed.
    Fail(Failure),
    /// The check did not run; the text says why.
    Skip(String),
}

/// One row of an evaluation report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Which check.
    pub check: CheckId,
    /// How it went.
    pub outcome: Outcome,
}

/// The checks run so far, in order; the first failure decides.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) rows: Vec<CheckResult>,
}

impl Report {
    /// Records a check's result.
    pub(crate) fn record(&mut self, check: CheckId, result: Result<String, Failure>) {
        let outcome = match result {
            Ok(detail) => Outcome::Pass(detail),
            Err(failure) => Outcome::Fail(failure),
        };
        self.rows.push(CheckResult { check, outcome });
    }

    /// Records a check that did not run.
    pub(crate) fn skip(&mut self, check: CheckId, why: impl Into<String>) {
        self.rows.push(CheckResult { check, outcome: Outcome::Skip(why.into()) });
    }

    /// The first failure recorded, if any.
    pub(crate) fn first_failure(&self) -> Option<&Failure> {
        self.rows.iter().find_map(|row| match &row.outcome {
            Outcome::Fail(failure) => Some(failure),
            _ => None,
        })
    }
}
