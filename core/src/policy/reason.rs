//! Reason codes: a public interface (events, metric labels, `check -o json`), so stable and TitleCase.

macro_rules! reasons {
    ($($(#[doc = $doc:literal])+ $name:ident,)+) => {
        /// Why a CSR was decided the way it was.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason {
            $($(#[doc = $doc])+ $name,)+
        }

        impl Reason {
            /// Every reason code, in documentation order.
            pub const ALL: &'static [Reason] = &[$(Reason::$name,)+];

            /// The TitleCase code written to conditions, events, metrics and reports.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$name => stringify!($name),)+
                }
            }

            /// True for the retried codes a Machine or Node that appears or changes can resolve
            /// (no Machine or Node yet, the pending brake), so such a change re-evaluates them.
            pub fn resolved_by_cluster_change(self) -> bool {
                matches!(self, Reason::MachineNotFound | Reason::NodeNotFound | Reason::TooManyPending)
            }

            /// A one-line explanation of the code, as listed in docs/reason-codes.md.
            pub fn meaning(self) -> &'static str {
                match self {
                    $(Reason::$name => concat!($($doc),+).trim_ascii(),)+
                }
            }
        }
    };
}

reasons! {
    /// Every check passed; the CSR was approved.
    AutoApproved,
    /// The CSR's signer is not one this approver handles.
    SignerNotHandled,
    /// The CSR already has an Approved or Denied condition or an issued certificate.
    AlreadyDecided,
    /// spec.username is not system:node:<name> with a non-empty name.
    UsernameNotNode,
    /// spec.username is not a node and --ignore-non-system-node is set.
    NotANode,
    /// The node name in spec.username or the subject CN is not a lowercase RFC 1123 subdomain, as Node names must be.
    InvalidNodeName,
    /// spec.groups does not contain both system:nodes and system:authenticated (the message names the missing group).
    NotInNodesGroup,
    /// spec.request is not one canonical CERTIFICATE REQUEST PEM block (at most 16 KiB) of strict DER with one reading and a verifying signature.
    MalformedRequest,
    /// The subject CN is not spec.username, or O is not exactly [system:nodes].
    SubjectMismatch,
    /// spec.usages is not digital signature + server auth (+ optionally key encipherment).
    UsagesNotAllowed,
    /// The request carries an email, URI or other non-DNS, non-IP SAN.
    ForbiddenSANType,
    /// The request carries no DNS or IP SAN.
    NoSubjectAltNames,
    /// The request carries more DNS SANs than --allowed-dns-names.
    TooManyDNSNames,
    /// The request carries more IP SANs than --allowed-ip-addresses.
    TooManyIPAddresses,
    /// A SAN names the apiserver or an address no node owns, whatever the flags: kubernetes, kubernetes.default, kubernetes.default.svc, svc.<--cluster-domain> and under it, localhost and under it; a loopback, unspecified, link-local, multicast or broadcast IP; a ClusterIP of the default/kubernetes Service; an address of its EndpointSlices (an apiserver's advertise address) unless the requesting node is its one claimant, the only node whose Node or Machine lists it.
    ClusterIdentity,
    /// An IP SAN is an apiserver's advertise address that the requesting node and other nodes claim, and neither the control-plane role label (which no kubelet can set) nor a Machine tells whose it is; retried with an Event, never denied for it.
    AdvertiseAddressContested,
    /// A DNS SAN is not a valid hostname (or is a wildcard or an IP address).
    InvalidDNSName,
    /// An IP SAN is an IPv4-mapped or IPv4-compatible IPv6 address (::/96, ::ffff:0:0/96), which the signer would not write as requested.
    InvalidIPAddress,
    /// A DNS SAN is not bound to the node name (--hostname-match).
    HostnameMismatch,
    /// A DNS SAN does not match --provider-regex.
    RegexMismatch,
    /// An IP SAN is outside --provider-ip-prefixes.
    IPNotInPrefixes,
    /// A DNS SAN resolves to an address outside --provider-ip-prefixes.
    ResolvedIPNotInPrefixes,
    /// An IP SAN is not among the addresses the DNS SANs resolve to.
    IPNotResolved,
    /// A DNS SAN does not resolve yet; retried while the CSR is younger than --dns-grace-period.
    DNSNotYetResolvable,
    /// A DNS SAN still does not resolve after --dns-grace-period.
    DNSNotResolved,
    /// DNS gave no definitive answer (timeout, SERVFAIL, refused, network error); retried, never denied.
    DNSUnavailable,
    /// spec.expirationSeconds exceeds --max-expiration-sec.
    ExpirationTooLong,
    /// --verify-node-addresses: the Node does not exist (yet); retried.
    NodeNotFound,
    /// --verify-node-addresses: a SAN is neither the Node's name nor one of its status.addresses.
    NodeAddressMismatch,
    /// The cluster could not be read; retried, never denied.
    ClusterUnavailable,
    /// Machine mode: no Machine matches the node yet (by nodeRef for serving, InternalDNS for client CSRs); retried.
    MachineNotFound,
    /// Machine mode: a serving SAN is not an address of the node's Machine.
    MachineAddressMismatch,
    /// Machine mode: no Machine claims the node and its kubelet could not be reached in time to read the certificate it serves (--kubelet-serving-ca-file); retried, never denied.
    KubeletUnreachable,
    /// Machine mode: approvals are paused while pending node CSRs exceed max(Machines, Nodes) + --max-pending-delta; retried.
    TooManyPending,
    /// Machine mode: a node-client CSR from neither the bootstrapper nor a node; not ours.
    NotBootstrapper,
    /// Machine mode: a node-client renewal by system:node:*, left to kube-controller-manager.
    NodeClientRenewal,
    /// Machine mode: a node-client CSR from the bootstrapper username with other groups; held.
    BootstrapperGroupsMismatch,
    /// Machine mode: a node-client CSR carries SANs; held.
    ClientSANsPresent,
    /// Machine mode: a Node with the requested name already exists; held.
    NodeAlreadyExists,
    /// Machine mode: the matching Machine already has a nodeRef; held.
    MachineAlreadyHasNode,
    /// Machine mode: the CSR was not created between 10 s before and 2 h after its Machine; held.
    CreatedOutsideMachineWindow,
    /// Machine mode: an approved node-client CSR for the same node name still exists (removed an hour after issue): one client certificate per Machine; held.
    ClientCertificateIssued,
    /// A newer kubelet-serving CSR of the same node (later creationTimestamp, then greater name) is approved; the message names the newest approved one. Only a node's newest serving CSR that passes is signed.
    Superseded,
    /// A newer kubelet-serving CSR of the same node is still undecided: this one, which passes every other check, is retried until that one is decided (denied Superseded once it is approved, approved once it is denied or failed); never denied for it.
    NewerServingCSRPending,
    /// A rule of --rules evaluated to false or could not be evaluated (the message names the rule and says why); denied, or held for node-client CSRs and under --skip-deny-step.
    RuleFailed,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    #[test]
    fn only_waits_on_a_machine_a_node_or_the_brake_are_resolved_by_a_cluster_change() {
        let resolved: Vec<Reason> = Reason::ALL.iter().copied().filter(|r| r.resolved_by_cluster_change()).collect();
        assert_eq!(resolved, [Reason::NodeNotFound, Reason::MachineNotFound, Reason::TooManyPending]);
    }
}
