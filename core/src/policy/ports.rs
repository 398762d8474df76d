//! The ports of the decision core: the traits through which evidence arrives ([`Resolver`] for
//! DNS, [`ClusterView`] for Nodes, Machines, the pending brake's counts, the apiserver's
//! addresses and the Nodes that claim its advertise addresses, the approved client CSRs, a node's
//! kubelet-serving CSRs and the certificate a kubelet serves) and the types they return. The
//! shell crate implements them; nothing here does I/O.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;

use jiff::Timestamp;

/// Why a lookup could not give a definitive answer; always transient, never grounds for a denial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsFailure {
    /// No answer within the per-lookup timeout.
    Timeout,
    /// The server answered SERVFAIL.
    ServFail,
    /// The server refused the query.
    Refused,
    /// Any other failure (network error, malformed answer, other response code).
    Other(String),
}

impl std::fmt::Display for DnsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DnsFailure::Timeout => f.write_str("timeout"),
            DnsFailure::ServFail => f.write_str("SERVFAIL"),
            DnsFailure::Refused => f.write_str("REFUSED"),
            DnsFailure::Other(detail) => f.write_str(detail),
        }
    }
}

/// The outcome of resolving one DNS name (A and AAAA together).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The name has these addresses (non-empty, A and AAAA combined).
    Addresses(Vec<IpAddr>),
    /// NXDOMAIN, or neither A nor AAAA records exist.
    NotFound,
    /// No definitive answer; try again later.
    Unavailable(DnsFailure),
}

/// Resolves DNS names to addresses as absolute names.
pub trait Resolver: Send + Sync {
    /// Looks up A and AAAA records for `name`, treated as an absolute name.
    fn resolve(&self, name: &str) -> impl Future<Output = Resolution> + Send;
}

/// A cluster read that failed; always transient for the policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// A watched cache has not completed its first list.
    #[error("{what} not read yet: {why}")]
    NotListed {
        /// What is not listed, e.g. `the default/kubernetes Service`.
        what: &'static str,
        /// Why.
        why: Unlisted,
    },
    /// A request to the apiserver failed.
    #[error("cluster read failed: {0}")]
    Request(RequestError),
}

/// Why a watched cache has not listed what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unlisted {
    /// The first list, named (e.g. `the first list of Nodes`), has not completed.
    #[error("{0} has not completed")]
    FirstList(&'static str),
    /// The watch's last error, or why an object it listed could not be decoded.
    #[error("{0}")]
    Failed(RequestError),
}

/// The client's error of a failed request, kept whole with its sources; two are equal when they
/// read the same.
#[derive(Debug, Clone)]
pub struct RequestError(Arc<dyn std::error::Error + Send + Sync>);

impl RequestError {
    /// Keeps `error`.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> RequestError {
        RequestError(Arc::new(error))
    }
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for RequestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for RequestError {
    fn eq(&self, other: &RequestError) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for RequestError {}

/// A request error that is only a message, as a test or a fixed cluster gives it.
impl From<&str> for RequestError {
    fn from(message: &str) -> RequestError {
        RequestError(Arc::from(Box::<dyn std::error::Error + Send + Sync>::from(message)))
    }
}

/// One entry of a Node's `status.addresses`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    /// The address type, e.g. `InternalIP` or `Hostname`.
    pub kind: String,
    /// The address as written.
    pub address: String,
}

impl NodeAddress {
    /// Whether this entry is the address `ip`, compared canonically (an IPv4-mapped IPv6 address
    /// is the IPv4 address it maps) and ignoring surrounding spaces.
    pub fn is_ip(&self, ip: &IpAddr) -> bool {
        self.address.trim().parse::<IpAddr>().is_ok_and(|parsed| parsed.to_canonical() == ip.to_canonical())
    }
}

/// A Node reduced to what decisions need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// metadata.name.
    pub name: String,
    /// status.addresses.
    pub addresses: Vec<NodeAddress>,
    /// The object as the apiserver returns it (or the parts of it the rules may see), of which
    /// the rules of `--rules` see a bounded projection.
    pub object: Option<Arc<serde_json::Value>>,
}

/// A Machine (OpenShift or Cluster API) reduced to what decisions need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineInfo {
    /// `namespace/name`, for messages.
    pub id: String,
    /// metadata.creationTimestamp.
    pub created: Option<Timestamp>,
    /// status.nodeRef.name.
    pub node_ref: Option<String>,
    /// status.addresses.
    pub addresses: Vec<NodeAddress>,
    /// The whole object, kept only when a rule of `--rules` reads `machine`.
    pub object: Option<Arc<serde_json::Value>>,
}

/// How busy machine mode is: the inputs of the pending brake.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrakeInputs {
    /// Pending node CSRs younger than an hour.
    pub pending: usize,
    /// How many Machines exist.
    pub machines: usize,
    /// How many Nodes exist.
    pub nodes: usize,
}

/// What the requesting node's kubelet presented on its serving port: the evidence of a renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeletCertificate {
    /// The leaf (DER) of a chain that verified, for server auth and now, against the
    /// kubelet-serving CA bundle, presented by a kubelet that proved it holds the key.
    Verified(Vec<u8>),
    /// Nothing that can stand as evidence (the Node is missing or has no InternalIP, places its
    /// kubelet where it is not dialled, or the chain did not verify); the text says why.
    Unusable(String),
    /// The kubelet could not be reached, or did not finish the handshake, in time; the text says why.
    Unreachable(String),
}

/// The apiserver's addresses, by where they are published.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiserverAddresses {
    /// The ClusterIPs of the `default/kubernetes` Service: every pod dials them and trusts the
    /// cluster CA there, so no node may ever hold them.
    pub service: Vec<IpAddr>,
    /// The addresses of its EndpointSlices: each apiserver's advertise address, on kubeadm-style
    /// clusters the control-plane node's own InternalIP.
    pub endpoints: Vec<IpAddr>,
}

impl ApiserverAddresses {
    /// Those of `ips` that are EndpointSlice addresses and no ClusterIP, compared canonically (an
    /// IPv4-mapped IPv6 address is the IPv4 address it maps).
    pub fn advertised(&self, ips: &[IpAddr]) -> Vec<IpAddr> {
        let among = |list: &[IpAddr], ip: &IpAddr| list.iter().any(|a| a.to_canonical() == ip.to_canonical());
        ips.iter().filter(|ip| among(&self.endpoints, ip) && !among(&self.service, ip)).copied().collect()
    }
}

/// A kubelet-serving CSR of one requester, as the superseded rule compares it with another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingCsr {
    /// metadata.name.
    pub name: String,
    /// metadata.creationTimestamp, if known.
    pub created: Option<Timestamp>,
    /// Whether it is decided, and how.
    pub state: ServingCsrState,
}

/// Where a kubelet-serving CSR stands, as the superseded rule reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingCsrState {
    /// Undecided: an older CSR of the same requester waits for it.
    Pending,
    /// Approved (or its certificate issued), neither denied nor failed: it supersedes every older one.
    Approved,
    /// A Denied or Failed condition is present: it supersedes nothing.
    Refused,
}

/// Who claims an address: the names of the Nodes whose `status.addresses` carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressClaim {
    /// The address asked about.
    pub ip: IpAddr,
    /// The names of the Nodes that list it, of any address type, compared canonically.
    pub nodes: Vec<String>,
    /// Those of `nodes` whose Node carries the control-plane role label
    /// ([`CONTROL_PLANE_LABEL`]), which the NodeRestriction admission plugin keeps kubelets from
    /// setting: what breaks a tie between claimants.
    pub control_plane: Vec<String>,
}

/// The label of a control-plane Node (`node-role.kubernetes.io/control-plane`): set by kubeadm or
/// an administrator; a kubelet may not set a label under `node-role.kubernetes.io/` on its own
/// Node (NodeRestriction), so it tells the control-plane node apart from a worker that lists the
/// same address in its status.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// Read access to the cluster objects decisions depend on.
pub trait ClusterView: Send + Sync {
    /// The Node named `name`, or `None` when it does not exist.
    fn node(&self, name: &str) -> impl Future<Output = Result<Option<NodeInfo>, ClusterError>> + Send;

    /// Every Machine of the configured APIs (none outside machine mode).
    fn machines(&self) -> impl Future<Output = Result<Vec<Arc<MachineInfo>>, ClusterError>> + Send;

    /// The inputs of the pending brake.
    fn load(&self) -> impl Future<Output = Result<BrakeInputs, ClusterError>> + Send;

    /// The apiserver's addresses: the ClusterIPs of the `default/kubernetes` Service and the
    /// addresses of its EndpointSlices. An error (not yet synced, unreadable) is retried.
    fn apiserver_addresses(&self) -> impl Future<Output = Result<ApiserverAddresses, ClusterError>> + Send;

    /// For each of `ips`, every Node whose `status.addresses` carries it. Read only for an IP SAN
    /// that is an apiserver's advertise address; an error is retried.
    fn nodes_claiming(&self, ips: &[IpAddr]) -> impl Future<Output = Result<Vec<AddressClaim>, ClusterError>> + Send;

    /// The names of the approved client CSRs whose certificate is for node `node`
    /// ([`super::issued_client_node`]).
    fn client_certificates(&self, node: &str) -> impl Future<Output = Result<Vec<String>, ClusterError>> + Send;

    /// The kubelet-serving CSRs whose `spec.username` is `requester`, decided or not. All the
    /// superseded rule reads is the newest approved one and the newest pending one: an
    /// implementation may answer those two alone (refused ones are never read).
    fn serving_csrs(&self, requester: &str) -> impl Future<Output = Result<Vec<ServingCsr>, ClusterError>> + Send;

    /// The serving certificate the kubelet of Node `node` presents, dialled at that Node's
    /// InternalIP and `status.daemonEndpoints.kubeletEndpoint.Port` only, and only where
    /// [`super::KubeletDialRules`] allow.
    fn kubelet_certificate(&self, node: &str) -> impl Future<Output = Result<KubeletCertificate, ClusterError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dns_failure_reads_as_the_answer_it_stands_for() {
        let shown = [DnsFailure::Timeout, DnsFailure::ServFail, DnsFailure::Refused, DnsFailure::Other("reset".into())]
            .map(|failure| failure.to_string());
        assert_eq!(shown, ["timeout", "SERVFAIL", "REFUSED", "reset"]);
    }

    /// An error with a cause, as a client's failed request has one.
    #[derive(Debug, thiserror::Error)]
    #[error("request failed")]
    struct Failed(#[source] std::io::Error);

    #[test]
    fn a_request_error_keeps_the_causes_and_compares_by_what_it_reads() {
        let error = RequestError::new(Failed(std::io::Error::other("connection reset")));
        let cause = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("connection reset"));
        assert_eq!(error.to_string(), "request failed");
        assert_eq!(error, RequestError::from("request failed"), "the same text");
        assert_ne!(error, RequestError::from("forbidden"), "another text");
    }
}
