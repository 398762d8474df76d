//! Other spellings of the identities no node may claim: addresses that embed or stand for reserved
//! ones, metadata services of other clouds, names C resolvers dial as addresses, the apiserver's
//! name under any domain, pod and Service names, and the loopback aliases of `/etc/hosts`. Each is
//! refused under every flag that opens the name and address checks.

use node_csr_approver_core::policy::{DecisionKind, Reason};

use super::case;
use super::identity::{leak, permissive, refused_under_every_flag};
use crate::support::table::Case;
use crate::support::{Request, serving};

use DecisionKind::Approve;

/// IP SANs that embed a reserved IPv4 address or stand for one, site-local addresses and cloud
/// metadata addresses, each inside the permissive prefixes.
const ADDRESSES: [&str; 22] = [
    // NAT64 (RFC 6052, RFC 8215): an IPv4 host's address, here loopback and metadata.
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b::a00:1",
    "64:ff9b:1::a9fe:a9fe",
    "64:ff9b:1:7f00:1::",
    // 6to4 (RFC 3056): 2002:<IPv4>::/48.
    "2002:7f00:1::1",
    "2002:a9fe:a9fe::1",
    // Teredo (RFC 4380).
    "2001:0:a9fe:a9fe::1",
    // IPv4-translated (RFC 2765) and IPv4-compatible (RFC 4291) embeddings.
    "::ffff:0:7f00:1",
    "::ffff:0:a9fe:a9fe",
    "::7f00:1",
    "::a9fe:a9fe",
    // 0.0.0.0/8 "this network".
    "0.1.2.3",
    "::ffff:0.0.0.1",
    // Site-local (RFC 3879).
    "fec0::1",
    "feff::1",
    // Cloud metadata services.
    "169.254.170.2",
    "100.100.100.200",
    "168.63.129.16",
    "fd00:ec2::254",
    "fd00:ec2::253",
    "fd00:ec2::123",
];

/// DNS SANs that name the apiserver under any domain, a pod or Service of the cluster, loopback
/// or a metadata service.
const NAMES: [&str; 19] = [
    "kubernetes.default.svc.example.com",
    "KUBERNETES.DEFAULT.SVC.corp.example.",
    "kubernetes.default.svc.cluster.local.nodes.example.com",
    "10-0-0-1.default.pod.cluster.local",
    "10-0-0-1.kube-system.pod.corp.example",
    "pod.cluster.local",
    "x.pod.cluster.local.",
    "a.b.svc.cluster.local",
    "localhost.localdomain",
    "localhost4",
    "localhost4.localdomain4",
    "localhost6",
    "localhost6.localdomain6",
    "ip6-localhost",
    "IP6-LOOPBACK.",
    "ip6-allnodes",
    "a.localhost",
    "metadata.google.internal",
    "Metadata.Google.Internal.",
];

/// DNS SANs a C resolver (`inet_aton`) dials as an IPv4 address.
const NUMERIC_NAMES: [&str; 9] = [
    "127.1",
    "127.0.1",
    "0177.0.0.1",
    "2130706433",
    "0x7f000001",
    "0x7f.0.0.1",
    "0X7F.1",
    "169.254.43518",
    "n1.nodes.example.123",
];

/// Neighbours a node may hold.
const NEAR: [(&str, &str); 8] = [
    ("ip", "64:ff9a::a00:1"),
    ("ip", "2002:a00:1::1"),
    ("ip", "2003::1"),
    ("ip", "fd00:ec2::255"),
    ("ip", "100.100.100.201"),
    ("dns", "kubernetes.default.svcx.example.com"),
    ("dns", "pods.example.com"),
    ("dns", "n1.nodes.example.c0m"),
];

/// Every case of the other spellings.
pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for ip in ADDRESSES {
        let sub = serving("n1", &Request::node("n1").dns("n1.nodes.example.com").ip(ip).pem());
        cases.extend(refused_under_every_flag(leak(format!("ip san {ip}")), &sub, Reason::ClusterIdentity));
    }
    for name in NAMES {
        let sub = serving("kubernetes", &Request::node("kubernetes").dns(name).pem());
        cases.extend(refused_under_every_flag(leak(format!("dns san {name}")), &sub, Reason::ClusterIdentity));
    }
    for name in NUMERIC_NAMES {
        let sub = serving("n1", &Request::node("n1").dns(name).pem());
        cases.extend(refused_under_every_flag(leak(format!("numeric dns san {name}")), &sub, Reason::InvalidDNSName));
    }
    for (kind, value) in NEAR {
        let request = match kind {
            "ip" => Request::node("n1").ip(value),
            _ => Request::node("n1").dns(value),
        };
        let sub = serving("n1", &request.pem());
        cases.push(permissive(case(leak(format!("near {value}")), sub, (Approve, Reason::AutoApproved))));
    }
    cases
}
