//! Table-driven tests of the serving policy: real PKCS#10 requests made with rcgen, one case per
//! check and reason code, plus known attack shapes (forged names, smuggled SANs, look-alike addresses).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;

use node_csr_approver::policy::{
    DecisionKind, DnsFailure, Evidence, HostnameMatch, Lookup, NodeAddress, NodeInfo, Outcome, PolicyConfig, Reason,
    Resolution, Submission, decide,
};
use rcgen::DnType;
use support::table::{Case, assert_all};
use support::{
    Key, Request, config, extra_common_name, extra_organization, minutes_after_creation, pem_block, serving,
};

use DecisionKind::{Approve, Deny, Hold, Ignore, Retry};

fn case(name: &'static str, sub: Submission, expect: (DecisionKind, Reason)) -> Case {
    Case::new(name, sub, config(), Evidence::default(), minutes_after_creation(1), expect)
}

fn addrs(ips: &[&str]) -> Resolution {
    Resolution::Addresses(ips.iter().map(|ip| ip.parse::<IpAddr>().unwrap()).collect())
}

/// A SubjectAltName extension value naming the DNS name `auth.evil.io`.
const SAN_AUTH_EVIL_IO: &[u8] = b"\x30\x0e\x82\x0cauth.evil.io";

/// The legitimate request of node `n1`.
fn good() -> Request {
    Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.11")
}

fn good_csr() -> Submission {
    serving("n1", &good().pem())
}

fn node_n1(addresses: &[(&str, &str)]) -> NodeInfo {
    NodeInfo {
        name: "n1".into(),
        addresses: addresses
            .iter()
            .map(|(kind, address)| NodeAddress { kind: (*kind).into(), address: (*address).into() })
            .collect(),
    }
}

/// A request of node `n1` with `count` IP SANs inside the prefixes and no DNS SAN.
fn many_ips(count: u8) -> String {
    (0..count).fold(Request::node("n1"), |request, i| request.ip(&format!("10.0.1.{i}"))).pem()
}

fn bad_signature() -> String {
    let mut der = good().der();
    let last = der.len() - 1;
    der[last] ^= 0x01;
    pem_block("CERTIFICATE REQUEST", &der)
}

fn cases() -> Vec<Case> {
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
        // SANs.
        case(
            "email san",
            serving("n1", &good().email("root@n1.nodes.example.com").pem()),
            (Deny, Reason::ForbiddenSANType),
        ),
        case(
            "uri san",
            serving("n1", &good().uri("spiffe://cluster/ns/kube-system").pem()),
            (Deny, Reason::ForbiddenSANType),
        ),
        case("no sans", serving("n1", &Request::node("n1").pem()), (Deny, Reason::NoSubjectAltNames)),
        case(
            "too many dns names",
            serving("n1", &good().dns("n1.nodes.example.com").pem()),
            (Deny, Reason::TooManyDNSNames),
        ),
        case(
            "wildcard",
            serving("n1", &Request::node("n1").dns("*.nodes.example.com").pem()),
            (Deny, Reason::InvalidDNSName),
        ),
        case(
            "ip written as dns name",
            serving("n1", &Request::node("n1").dns("10.0.0.11").pem()),
            (Deny, Reason::InvalidDNSName),
        )
        .cfg(|c| c.bypass_hostname_check = true),
        case(
            "trailing dot",
            serving("n1", &Request::node("n1").dns("n1.nodes.example.com.").pem()),
            (Deny, Reason::InvalidDNSName),
        ),
        case(
            "node a asks for auth.evil.io",
            serving("a", &Request::node("a").dns("auth.evil.io").pem()),
            (Deny, Reason::HostnameMismatch),
        ),
        case(
            "prefix of another node's name",
            serving("n1", &Request::node("n1").dns("n10.nodes.example.com").pem()),
            (Deny, Reason::HostnameMismatch),
        ),
        case(
            "prefix mode keeps the go rule",
            serving("n1", &Request::node("n1").dns("n10.nodes.example.com").pem()),
            (Approve, Reason::AutoApproved),
        )
        .cfg(|c| c.hostname_match = HostnameMatch::Prefix),
        case(
            "prefix mode still binds",
            serving("n1", &Request::node("n1").dns("m1.nodes.example.com").pem()),
            (Deny, Reason::HostnameMismatch),
        )
        .cfg(|c| c.hostname_match = HostnameMatch::Prefix),
        case(
            "bypassed hostname still needs the regex",
            serving("a", &Request::node("a").dns("auth.evil.io").pem()),
            (Deny, Reason::RegexMismatch),
        )
        .cfg(|c| c.bypass_hostname_check = true),
        case(
            "outside the provider domain",
            serving("n1", &Request::node("n1").dns("n1.evil.io").pem()),
            (Deny, Reason::RegexMismatch),
        ),
        case("ip not owned", serving("n1", &good().ip("192.168.1.10").pem()), (Deny, Reason::IPNotInPrefixes)),
        case(
            "ipv4-mapped ip san",
            serving("n1", &Request::node("n1").dns("n1.nodes.example.com").ip("::ffff:10.9.9.9").pem()),
            (Deny, Reason::InvalidIPAddress),
        )
        .cfg(|c| c.ip_prefixes.push("::/0".parse().unwrap())),
        case(
            "ipv4-mapped metadata address",
            serving("n1", &Request::node("n1").dns("n1.nodes.example.com").ip("::ffff:169.254.169.254").pem()),
            (Deny, Reason::InvalidIPAddress),
        )
        .cfg(|c| c.ip_prefixes.push("::/0".parse().unwrap())),
        case(
            "ipv4-compatible ip san",
            serving("n1", &Request::node("n1").dns("n1.nodes.example.com").ip("::10.9.9.9").pem()),
            (Deny, Reason::InvalidIPAddress),
        )
        .cfg(|c| c.ip_prefixes.push("::/0".parse().unwrap())),
        case(
            "ipv6 loopback ip san",
            serving("n1", &Request::node("n1").dns("n1.nodes.example.com").ip("::1").pem()),
            (Deny, Reason::InvalidIPAddress),
        )
        .cfg(|c| c.ip_prefixes.push("::/0".parse().unwrap())),
        case("too many ip sans", serving("n1", &many_ips(3)), (Deny, Reason::TooManyIPAddresses))
            .cfg(|c| c.allowed_ip_addresses = 2),
        case("ip sans at the limit", serving("n1", &many_ips(2)), (Approve, Reason::AutoApproved))
            .cfg(|c| c.allowed_ip_addresses = 2),
        case("no ip sans allowed", good_csr(), (Deny, Reason::TooManyIPAddresses)).cfg(|c| c.allowed_ip_addresses = 0),
        case("ipv6 not owned", serving("n1", &good().ip("fd01::11").pem()), (Deny, Reason::IPNotInPrefixes)),
        case("expiration too long", good_csr(), (Deny, Reason::ExpirationTooLong))
            .sub(|s| s.expiration_seconds = Some(3601))
            .cfg(|c| c.max_expiration_secs = 3600),
        // Skip-deny turns denials into holds.
        case(
            "skip deny holds a forgery",
            serving("a", &Request::node("a").dns("auth.evil.io").pem()),
            (Hold, Reason::HostnameMismatch),
        )
        .cfg(|c| c.skip_deny_step = true),
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
            .node(Lookup::Failed("connection refused".into())),
        case("ip not among the node's addresses", good_csr(), (Deny, Reason::NodeAddressMismatch))
            .node(Lookup::Found(node_n1(&[("InternalIP", "10.0.0.12"), ("Hostname", "n1.nodes.example.com")]))),
        case("dns not among the node's addresses", good_csr(), (Deny, Reason::NodeAddressMismatch))
            .node(Lookup::Found(node_n1(&[("InternalIP", "10.0.0.11")]))),
    ]
}

#[test]
fn every_case_decides_as_expected() {
    assert_all(&cases());
}

#[test]
fn every_reason_code_is_produced() {
    let produced: BTreeSet<Reason> = cases().iter().map(|case| case.evaluate().decision.reason).collect();
    let missing: Vec<&str> =
        Reason::ALL.iter().filter(|r| !produced.contains(r) && !r.machine_mode()).map(|r| r.as_str()).collect();
    assert!(missing.is_empty(), "no case produces {missing:?}");
}

#[test]
fn a_denial_names_the_offending_value() {
    let sub = serving("a", &Request::node("a").dns("auth.evil.io").pem());
    let evaluation = decide(&sub, &config(), &Evidence::default(), minutes_after_creation(1));
    assert_eq!(evaluation.decision.kind, Deny);
    assert!(evaluation.decision.message.contains("auth.evil.io"), "{}", evaluation.decision.message);
    // An address outside the prefixes is named together with the prefixes it missed.
    let outside = decide(
        &serving("n1", &good().ip("192.168.1.10").pem()),
        &config(),
        &Evidence::default(),
        minutes_after_creation(1),
    );
    let message = &outside.decision.message;
    assert!(message.contains("192.168.1.10") && message.contains("10.0.0.0/16,fd00::/64"), "{message}");
}

#[test]
fn an_approval_reports_every_check_passed_or_deliberately_skipped() {
    let evaluation = decide(&good_csr(), &config(), &Evidence::default(), minutes_after_creation(1));
    assert_eq!(evaluation.decision.kind, Approve);
    for row in &evaluation.checks {
        match &row.outcome {
            Outcome::Pass(_) => {}
            Outcome::Skip(why) => assert!(why.contains("--"), "{:?} skipped without a flag: {why}", row.check),
            Outcome::Fail(failure) => panic!("{:?} failed in an approval: {}", row.check, failure.message),
        }
    }
}

#[test]
fn forged_requests_are_not_looked_up_in_dns() {
    let cfg = PolicyConfig { bypass_dns_resolution: false, ..config() };
    let sub = serving("a", &Request::node("a").dns("auth.evil.io").pem());
    let evaluation = decide(&sub, &cfg, &Evidence::default(), minutes_after_creation(1));
    let dns_row = evaluation.checks.iter().find(|r| r.check.as_str() == "dns-resolves").unwrap();
    assert!(matches!(dns_row.outcome, Outcome::Skip(_)), "{:?}", dns_row.outcome);
}

#[test]
fn the_ip_san_check_waits_for_every_dns_san_to_resolve() {
    // Unavailable, or not found yet: either leaves the resolved set incomplete, so the IP SAN check
    // is skipped rather than judged against part of the answers.
    let unanswered = [Resolution::Unavailable(DnsFailure::Timeout), Resolution::NotFound];
    for answer in unanswered {
        let evaluation = case("incomplete answers", good_csr(), (Retry, Reason::DNSUnavailable))
            .dns(&[("n1.nodes.example.com", answer.clone())])
            .evaluate();
        let row = evaluation.checks.iter().find(|r| r.check.as_str() == "ip-resolved").unwrap();
        match &row.outcome {
            Outcome::Skip(why) => assert!(why.contains("every DNS SAN resolved"), "{answer:?}: {why}"),
            other => panic!("{answer:?}: ip-resolved was evaluated: {other:?}"),
        }
    }
}

#[test]
fn readme_lists_every_reason_code_and_no_other() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let table = readme.split("<!-- reasons -->").nth(1).unwrap().split("<!-- end -->").next().unwrap();
    let listed: BTreeSet<&str> =
        table.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).collect();
    let codes: BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(listed, codes);
}
