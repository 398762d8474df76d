//! Evidence cases: DNS answers and the Node's addresses.

use node_csr_approver_core::policy::{ClusterError, DecisionKind, DnsFailure, Lookup, Reason, Resolution};

use super::{addrs, case, good_csr, node_n1};
use crate::support::minutes_after_creation;
use crate::support::table::Case;
use crate::support::{Request, serving};

use DecisionKind::{Approve, Deny, Hold, Retry};

/// The DNS and Node-address cases.
pub fn cases() -> Vec<Case> {
    vec![
        // DNS evidence.
        case("dns resolves inside the prefixes", good_csr(), (Approve, Reason::AutoApproved))
            .dns(&[("n1.nodes.example.com", addrs(&["10.0.0.11", "fd00::11"]))]),
        case("dns resolves outside the prefixes", good_csr(), (Deny, Reason::ResolvedIPNotInPrefixes))
            .dns(&[("n1.nodes.example.com", addrs(&["10.0.0.11", "192.168.0.11"]))]),
        case("mapped aaaa answer is the ipv4 address", good_csr(), (Approve, Reason::AutoApproved))
            .dns(&[("n1.nodes.example.com", addrs(&["::ffff:10.0.0.11"]))]),
        case("mapped aaaa answer outside the prefixes", good_csr(), (Deny, Reason::ResolvedIPNotInPrefixes))
            .dns(&[("n1.nodes.example.com", addrs(&["10.0.0.11", "::ffff:10.9.9.9"]))])
            .cfg(|c| c.ip_prefixes.push("::ffff:0:0/96".parse().unwrap())),
        case("ip san not resolved", good_csr(), (Deny, Reason::IPNotResolved))
            .dns(&[("n1.nodes.example.com", addrs(&["10.0.0.12"]))]),
        case(
            "ip only with dns on",
            serving("n1", &Request::node("n1").ip("10.0.0.11").pem()),
            (Deny, Reason::IPNotResolved),
        )
        .dns(&[]),
        case("nxdomain inside grace", good_csr(), (Retry, Reason::DNSNotYetResolvable))
            .dns(&[("n1.nodes.example.com", Resolution::NotFound)])
            .at(minutes_after_creation(4)),
        case("nxdomain after grace", good_csr(), (Deny, Reason::DNSNotResolved))
            .dns(&[("n1.nodes.example.com", Resolution::NotFound)])
            .at(minutes_after_creation(6)),
        case("nxdomain as the grace period ends", good_csr(), (Deny, Reason::DNSNotResolved))
            .dns(&[("n1.nodes.example.com", Resolution::NotFound)])
            .at(minutes_after_creation(5)),
        case("nxdomain without creation time", good_csr(), (Deny, Reason::DNSNotResolved))
            .dns(&[("n1.nodes.example.com", Resolution::NotFound)])
            .sub(|s| s.created = None),
        case("dns timeout after grace is never a deny", good_csr(), (Retry, Reason::DNSUnavailable))
            .dns(&[("n1.nodes.example.com", Resolution::Unavailable(DnsFailure::Timeout))])
            .at(minutes_after_creation(600)),
        case("servfail retries", good_csr(), (Retry, Reason::DNSUnavailable))
            .dns(&[("n1.nodes.example.com", Resolution::Unavailable(DnsFailure::ServFail))]),
        case("skip deny holds an unresolvable name", good_csr(), (Hold, Reason::DNSNotResolved))
            .dns(&[("n1.nodes.example.com", Resolution::NotFound)])
            .cfg(|c| c.skip_deny_step = true)
            .at(minutes_after_creation(6)),
        case("static failure wins over dns", good_csr(), (Deny, Reason::ExpirationTooLong))
            .dns(&[("n1.nodes.example.com", Resolution::Unavailable(DnsFailure::Timeout))])
            .sub(|s| s.expiration_seconds = Some(31_708_801)),
        // Node addresses.
        case("node owns every san", good_csr(), (Approve, Reason::AutoApproved))
            .node(Lookup::Found(node_n1(&[("InternalIP", "10.0.0.11"), ("Hostname", "N1.nodes.example.com.")]))),
        case("node does not exist yet", good_csr(), (Retry, Reason::NodeNotFound)).node(Lookup::Missing),
        case("node not looked up is never an approval", good_csr(), (Retry, Reason::ClusterUnavailable))
            .cfg(|c| c.verify_node_addresses = true),
        case("node address written as mapped ipv6", good_csr(), (Approve, Reason::AutoApproved))
            .node(Lookup::Found(node_n1(&[("InternalIP", "::ffff:10.0.0.11"), ("Hostname", "n1.nodes.example.com")]))),
        case("cluster unreadable", good_csr(), (Retry, Reason::ClusterUnavailable))
            .node(Lookup::Failed(ClusterError::Request("connection refused".into()))),
        case("ip not among the node's addresses", good_csr(), (Deny, Reason::NodeAddressMismatch))
            .node(Lookup::Found(node_n1(&[("InternalIP", "10.0.0.12"), ("Hostname", "n1.nodes.example.com")]))),
        case("dns not among the node's addresses", good_csr(), (Deny, Reason::NodeAddressMismatch))
            .node(Lookup::Found(node_n1(&[("InternalIP", "10.0.0.11")]))),
    ]
}
