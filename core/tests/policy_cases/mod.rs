//! The decision table of the serving policy, one case per check and reason code, split by what the
//! cases exercise: identity and the request here, the SANs in [`sans`], the identities no node may
//! claim in [`identity`] and their other spellings in [`spellings`], an apiserver's advertise
//! address in [`advertise`], the evidence in [`evidence`].

mod advertise;
mod evidence;
mod identity;
pub mod rules;
mod sans;
mod spellings;
mod superseded;

use std::net::IpAddr;

use node_csr_approver_core::policy::{
    ApiserverAddresses, DecisionKind, Evidence, NodeAddress, NodeInfo, Reason, Resolution, Submission,
};
use rcgen::DnType;

use crate::support::table::Case;
use crate::support::{
    Key, Request, config, extra_common_name, extra_organization, minutes_after_creation, pem_block, serving,
};

use DecisionKind::{Approve, Deny, Ignore};

/// A case with the default configuration and no evidence but the apiserver's addresses (none) and
/// the node's serving CSRs (none), evaluated a minute after creation.
pub fn case(name: &'static str, sub: Submission, expect: (DecisionKind, Reason)) -> Case {
    let evidence = Evidence {
        apiserver: Some(Ok(ApiserverAddresses::default())),
        serving_csrs: Some(Ok(Vec::new())),
        ..Evidence::default()
    };
    Case::new(name, sub, config(), evidence, minutes_after_creation(1), expect)
}

/// DNS answers with these addresses.
pub fn addrs(ips: &[&str]) -> Resolution {
    Resolution::Addresses(ips.iter().map(|ip| ip.parse::<IpAddr>().unwrap()).collect())
}

/// A SubjectAltName extension value naming the DNS name `auth.evil.io`.
const SAN_AUTH_EVIL_IO: &[u8] = b"\x30\x0e\x82\x0cauth.evil.io";

/// The legitimate request of node `n1`.
pub fn good() -> Request {
    Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.11")
}

/// The legitimate serving CSR of node `n1`.
pub fn good_csr() -> Submission {
    serving("n1", &good().pem())
}

/// Node `n1` with these `(type, address)` pairs as its addresses.
pub fn node_n1(addresses: &[(&str, &str)]) -> NodeInfo {
    NodeInfo {
        name: "n1".into(),
        addresses: addresses
            .iter()
            .map(|(kind, address)| NodeAddress { kind: (*kind).into(), address: (*address).into() })
            .collect(),
        object: None,
    }
}

/// A request of node `n1` with `count` IP SANs inside the prefixes and no DNS SAN.
pub fn many_ips(count: u8) -> String {
    (0..count).fold(Request::node("n1"), |request, i| request.ip(&format!("10.0.1.{i}"))).pem()
}

/// The legitimate request with one bit of its signature flipped.
fn bad_signature() -> String {
    let mut der = good().der();
    let last = der.len() - 1;
    der[last] ^= 0x01;
    pem_block("CERTIFICATE REQUEST", &der)
}

/// Every case of the table.
pub fn cases() -> Vec<Case> {
    [
        identity_and_request(),
        sans::cases(),
        identity::cases(),
        spellings::cases(),
        advertise::cases(),
        evidence::cases(),
        rules::cases(),
        superseded::cases(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Approvals, triage, identity, the request, the subject and the usages.
fn identity_and_request() -> Vec<Case> {
    let good_pem = good().pem();
    vec![
        // Approvals, with every key type.
        case("rsa", serving("n1", &good().key(Key::Rsa).pem()), (Approve, Reason::AutoApproved)),
        case("ecdsa p-256", serving("n1", &good().key(Key::P256).pem()), (Approve, Reason::AutoApproved)),
        case("ecdsa p-384", serving("n1", &good().key(Key::P384).pem()), (Approve, Reason::AutoApproved)),
        case("ed25519", serving("n1", &good().key(Key::Ed25519).pem()), (Approve, Reason::AutoApproved)),
        case(
            "ipv6 in prefix",
            serving("n1", &Request::node("n1").dns("n1.nodes.example.com").ip("fd00::11").pem()),
            (Approve, Reason::AutoApproved),
        ),
        case(
            "dns names compare case-insensitively",
            serving("n1", &Request::node("n1").dns("N1.Nodes.Example.COM").pem()),
            (Approve, Reason::AutoApproved),
        ),
        case("ip only", serving("n1", &Request::node("n1").ip("10.0.0.11").pem()), (Approve, Reason::AutoApproved)),
        case("without key encipherment", good_csr(), (Approve, Reason::AutoApproved))
            .sub(|s| s.usages = vec!["digital signature".into(), "server auth".into()]),
        case(
            "two dns names when two allowed",
            serving("n1", &good().dns("n1.nodes.example.com").pem()),
            (Approve, Reason::AutoApproved),
        )
        .cfg(|c| c.allowed_dns_names = 2),
        case("expiration at the maximum", good_csr(), (Approve, Reason::AutoApproved))
            .sub(|s| s.expiration_seconds = Some(3600))
            .cfg(|c| c.max_expiration_secs = 3600),
        // Triage.
        case("other signer", good_csr(), (Ignore, Reason::SignerNotHandled))
            .sub(|s| s.signer_name = "kubernetes.io/kube-apiserver-client".into()),
        case("already decided", good_csr(), (Ignore, Reason::AlreadyDecided))
            .sub(|s| s.decided = Some("condition Approved is present".into())),
        // Identity.
        case("user is not a node", good_csr(), (Deny, Reason::UsernameNotNode)).sub(|s| s.username = "alice".into()),
        case("empty node name", good_csr(), (Deny, Reason::UsernameNotNode))
            .sub(|s| s.username = "system:node:".into()),
        case("not a node, ignored", good_csr(), (Ignore, Reason::NotANode))
            .sub(|s| s.username = "system:serviceaccount:kube-system:x".into())
            .cfg(|c| c.ignore_non_system_node = true),
        case(
            "upper-case node name",
            serving("N1", &Request::node("N1").dns("n1.nodes.example.com").pem()),
            (Deny, Reason::InvalidNodeName),
        ),
        case(
            "node name with a trailing dot",
            serving("n1.", &Request::node("n1.").dns("n1.nodes.example.com").pem()),
            (Deny, Reason::InvalidNodeName),
        ),
        case(
            "node name with empty labels",
            serving("n1...", &Request::node("n1...").dns("n1.nodes.example.com").pem()),
            (Deny, Reason::InvalidNodeName),
        )
        .cfg(|c| c.ignore_non_system_node = true),
        case("not in system:nodes", good_csr(), (Deny, Reason::NotInNodesGroup))
            .sub(|s| s.groups = vec!["system:authenticated".into()]),
        // cluster-machine-approver's rule: a node's identity is authenticated as well.
        case("in system:nodes but not system:authenticated", good_csr(), (Deny, Reason::NotInNodesGroup))
            .sub(|s| s.groups = vec!["system:nodes".into()]),
        case("no groups", good_csr(), (Deny, Reason::NotInNodesGroup)).sub(|s| s.groups = Vec::new()),
        case("group names compare exactly", good_csr(), (Deny, Reason::NotInNodesGroup))
            .sub(|s| s.groups = vec!["system:nodes".into(), "System:Authenticated".into()]),
        case("both groups among others", good_csr(), (Approve, Reason::AutoApproved)).sub(|s| {
            s.groups = vec!["system:authenticated".into(), "example:ops".into(), "system:nodes".into()];
        }),
        // The request itself.
        case("garbage pem", serving("n1", "not a pem block at all"), (Deny, Reason::MalformedRequest)),
        case(
            "garbage der",
            serving("n1", &pem_block("CERTIFICATE REQUEST", b"garbage")),
            (Deny, Reason::MalformedRequest),
        ),
        case("bad signature", serving("n1", &bad_signature()), (Deny, Reason::MalformedRequest)),
        case("two pem blocks", serving("n1", &format!("{good_pem}{}", good().pem())), (Deny, Reason::MalformedRequest)),
        case(
            "wrong pem label",
            serving("n1", &pem_block("CERTIFICATE", &good().der())),
            (Deny, Reason::MalformedRequest),
        ),
        case(
            "trailing der bytes",
            serving("n1", &pem_block("CERTIFICATE REQUEST", &[good().der(), vec![0]].concat())),
            (Deny, Reason::MalformedRequest),
        ),
        case(
            "second san extension",
            serving("n1", &good().extension(&[2, 5, 29, 17], SAN_AUTH_EVIL_IO).pem()),
            (Deny, Reason::MalformedRequest),
        ),
        // Subject.
        case(
            "cn of another node",
            serving("n1", &Request::node("n2").dns("n1.nodes.example.com").pem()),
            (Deny, Reason::SubjectMismatch),
        ),
        case(
            "extra o",
            serving(
                "n1",
                &good()
                    .subject(&[
                        (DnType::CommonName, "system:node:n1"),
                        (DnType::OrganizationName, "system:nodes"),
                        (extra_organization(), "system:masters"),
                    ])
                    .pem(),
            ),
            (Deny, Reason::SubjectMismatch),
        ),
        case(
            "missing o",
            serving("n1", &good().subject(&[(DnType::CommonName, "system:node:n1")]).pem()),
            (Deny, Reason::SubjectMismatch),
        ),
        case(
            "two cns",
            serving(
                "n1",
                &good()
                    .subject(&[
                        (DnType::CommonName, "system:node:n1"),
                        (extra_common_name(), "system:node:n1"),
                        (DnType::OrganizationName, "system:nodes"),
                    ])
                    .pem(),
            ),
            (Deny, Reason::SubjectMismatch),
        ),
        // Usages.
        case("client usages on a serving csr", good_csr(), (Deny, Reason::UsagesNotAllowed))
            .sub(|s| s.usages = vec!["digital signature".into(), "client auth".into()]),
        case("client auth added", good_csr(), (Deny, Reason::UsagesNotAllowed))
            .sub(|s| s.usages.push("client auth".into())),
        case("missing digital signature", good_csr(), (Deny, Reason::UsagesNotAllowed))
            .sub(|s| s.usages = vec!["server auth".into()]),
        case("missing server auth, only allowed usages", good_csr(), (Deny, Reason::UsagesNotAllowed))
            .sub(|s| s.usages = vec!["digital signature".into(), "key encipherment".into()]),
    ]
}
