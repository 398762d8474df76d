//! SAN cases: types, counts, syntax, the hostname binding, the provider regex and the prefixes.

use node_csr_approver_core::policy::{DecisionKind, HostnameMatch, Reason};
use regex::Regex;

use super::{case, good, good_csr, many_ips};
use crate::support::table::Case;
use crate::support::{Request, serving};

use DecisionKind::{Approve, Deny, Hold};

/// The SAN cases and skip-deny's holds.
pub fn cases() -> Vec<Case> {
    vec![
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
        // Strict binding binds a prefix of labels: node `a.b` may claim `a.b.<anything>`, which can be
        // another node's fully qualified name. Only a regex pinned to the node domain stops it.
        case(
            "dotted node name claims a longer name",
            serving("a.b", &Request::node("a.b").dns("a.b.example.com").pem()),
            (Approve, Reason::AutoApproved),
        )
        .cfg(|c| c.provider_regex = Regex::new(r"^[a-z0-9.-]+\.example\.com$").unwrap()),
        case(
            "dotted node name against a regex pinned to the node domain",
            serving("a.b", &Request::node("a.b").dns("a.b.example.com").pem()),
            (Deny, Reason::RegexMismatch),
        ),
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
        // Reserved addresses are refused by the earlier cluster-identity check (identity.rs).
        case(
            "ipv4-mapped metadata address",
            serving("n1", &Request::node("n1").dns("n1.nodes.example.com").ip("::ffff:169.254.169.254").pem()),
            (Deny, Reason::ClusterIdentity),
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
            (Deny, Reason::ClusterIdentity),
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
    ]
}
