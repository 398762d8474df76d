//! The `kubernetes.io/kubelet-serving` checks, each a small function that
//! passes with a detail or fails with a [`Failure`].

use std::net::IpAddr;
use std::time::Duration;

use jiff::Timestamp;

use crate::csr::CsrFacts;

use super::cluster_identity;
use super::evidence::{Evidence, EvidenceNeeded};
use super::identity::{self, NODE_USER_PREFIX, NODES_GROUP};
use super::report::{CheckId, Failure, Report};
use super::reserved;
use super::rules::{HostnameMatch, PolicyConfig};
use super::{Reason, Submission};

mod evidence_checks;
mod machine_serving;

use evidence_checks::{dns_checks, node_addresses};

/// The group the apiserver adds to every authenticated identity (impersonated ones too).
const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The groups a serving CSR's `spec.groups` must contain, as cluster-machine-approver requires.
const REQUIRED_GROUPS: [&str; 2] = [NODES_GROUP, AUTHENTICATED_GROUP];
const REQUIRED_USAGES: [&str; 2] = ["digital signature", "server auth"];
const OPTIONAL_USAGES: [&str; 1] = ["key encipherment"];
/// The checks on the request that need no evidence, in order.
const STATIC_REQUEST_CHECKS: [CheckId; 12] = [
    CheckId::Subject,
    CheckId::Usages,
    CheckId::SanTypes,
    CheckId::SanPresent,
    CheckId::DnsNameCount,
    CheckId::IpAddressCount,
    CheckId::ClusterIdentity,
    CheckId::DnsNameSyntax,
    CheckId::IpAddressSyntax,
    CheckId::Hostname,
    CheckId::ProviderRegex,
    CheckId::IpPrefixes,
];

/// A serving CSR whose static checks have all run; evidence decides the rest.
#[derive(Debug)]
pub(crate) struct ServingChecks {
    report: Report,
    request: Option<Parsed>,
    expiration: Result<String, Failure>,
}

/// What the evidence checks need from a request that parsed.
#[derive(Debug)]
struct Parsed {
    node: String,
    facts: CsrFacts,
    dns_names: Vec<String>,
}

/// Runs every check that needs no evidence, in order, recording each; on `names` instead of the
/// request when given (a served certificate's subject and SANs).
pub(crate) fn stage(sub: &Submission, names: Option<&CsrFacts>, cfg: &PolicyConfig) -> ServingChecks {
    let mut report = Report::default();
    let node = node_name(&sub.username, cfg);
    report.record(CheckId::Username, node.clone().map(|n| format!("node {n:?}")));
    report.record(CheckId::Groups, groups(&sub.groups));
    let facts = match names {
        Some(names) => Ok(names.clone()),
        None => CsrFacts::from_pem(&sub.request).map_err(|e| Failure::deny(Reason::MalformedRequest, e.to_string())),
    };
    let read = if names.is_some() { "the names of a served certificate" } else { "parsed, signature verified" };
    report.record(CheckId::Request, facts.as_ref().map(|_| read.to_owned()).map_err(Clone::clone));
    let expiration = expiration(sub.expiration_seconds, cfg);
    let (Ok(node), Ok(facts)) = (node, facts) else {
        for check in STATIC_REQUEST_CHECKS {
            report.skip(check, "needs a node username and a parsed request");
        }
        return ServingChecks { report, request: None, expiration };
    };
    report.record(CheckId::Subject, subject(&facts, &sub.username));
    report.record(CheckId::Usages, usages(&sub.usages));
    report.record(CheckId::SanTypes, san_types(&facts));
    report.record(CheckId::SanPresent, san_present(&facts));
    report.record(CheckId::DnsNameCount, dns_name_count(&facts, cfg.allowed_dns_names));
    report.record(CheckId::IpAddressCount, ip_address_count(&facts, cfg.allowed_ip_addresses));
    // Before every check a flag can weaken, and before the syntax checks so a trailing dot is no
    // way around it.
    report.record(
        CheckId::ClusterIdentity,
        cluster_identity::reserved_sans(&facts.dns_names, &facts.ip_addresses, &cfg.cluster_domain),
    );
    let dns_names: Vec<String> = facts.dns_names.iter().map(|n| n.to_ascii_lowercase()).collect();
    report.record(CheckId::DnsNameSyntax, dns_name_syntax(&dns_names));
    report.record(CheckId::IpAddressSyntax, ip_address_syntax(&facts.ip_addresses));
    if cfg.bypass_hostname_check {
        report.skip(CheckId::Hostname, "--bypass-hostname-check is set");
    } else {
        report.record(CheckId::Hostname, hostname(&dns_names, &node, cfg.hostname_match));
    }
    report.record(CheckId::ProviderRegex, provider_regex(&dns_names, cfg));
    report.record(CheckId::IpPrefixes, ip_prefixes(&facts.ip_addresses, cfg));
    ServingChecks { report, request: Some(Parsed { node, facts, dns_names }), expiration }
}

impl ServingChecks {
    /// What the request asks for, when it was read.
    pub(crate) fn facts(&self) -> Option<&CsrFacts> {
        self.request.as_ref().map(|parsed| &parsed.facts)
    }

    /// The evidence still needed, or `None` when a check has already failed or none is needed.
    pub(crate) fn needs(&self, cfg: &PolicyConfig) -> Option<EvidenceNeeded> {
        let parsed = self.request.as_ref()?;
        if self.report.first_failure().is_some() || self.expiration.is_err() {
            return None;
        }
        let needs = EvidenceNeeded {
            dns_names: if cfg.bypass_dns_resolution { Vec::new() } else { parsed.dns_names.clone() },
            node: (cfg.verify_node_addresses || cfg.user_rules.read_node()).then(|| parsed.node.clone()),
            machines: cfg.machine.is_some(),
            apiserver: parsed.facts.ip_addresses.clone(),
            client_certificates: None,
            kubelet_certificate: cfg.machine.as_ref().filter(|m| m.serving_renewal).map(|_| parsed.node.clone()),
            serving_csrs: Some(format!("{NODE_USER_PREFIX}{}", parsed.node)),
        };
        Some(needs)
    }

    /// Runs the evidence checks (skipped when `evidence` is `None`) and returns the full report.
    pub(crate) fn finish(
        self,
        cfg: &PolicyConfig,
        evidence: Option<&Evidence>,
        age: Option<Duration>,
        now: Timestamp,
    ) -> Report {
        let ServingChecks { mut report, request, expiration } = self;
        let usable = request.as_ref().zip(evidence);
        match usable {
            Some((parsed, evidence)) => report.record(
                CheckId::ApiserverAddresses,
                cluster_identity::apiserver_addresses(&parsed.node, &parsed.facts.ip_addresses, evidence),
            ),
            None => report.skip(CheckId::ApiserverAddresses, "not looked up: an earlier check failed"),
        }
        match usable {
            Some(_) if cfg.bypass_dns_resolution => {
                for check in [CheckId::DnsResolves, CheckId::ResolvedIpPrefixes, CheckId::IpResolved] {
                    report.skip(check, "--bypass-dns-resolution is set");
                }
            }
            Some((parsed, evidence)) => dns_checks(&mut report, parsed, evidence, cfg, age),
            None => {
                for check in [CheckId::DnsResolves, CheckId::ResolvedIpPrefixes, CheckId::IpResolved] {
                    report.skip(check, "not looked up: an earlier check failed");
                }
            }
        }
        report.record(CheckId::Expiration, expiration);
        match usable.map(|(parsed, evidence)| (parsed, &evidence.node)) {
            _ if !cfg.verify_node_addresses => {
                report.skip(CheckId::NodeAddresses, "--verify-node-addresses is not set")
            }
            Some((parsed, Some(node))) => report.record(CheckId::NodeAddresses, node_addresses(parsed, node)),
            Some((parsed, None)) => report.record(
                CheckId::NodeAddresses,
                Err(Failure::retry(Reason::ClusterUnavailable, format!("Node {:?} was not looked up", parsed.node))),
            ),
            _ => report.skip(CheckId::NodeAddresses, "not looked up: an earlier check failed"),
        }
        match (&cfg.machine, usable) {
            (None, _) => {}
            (Some(machine_cfg), Some((parsed, evidence))) => {
                machine_serving::record(&mut report, machine_cfg, parsed, evidence, now);
            }
            (Some(_), None) => {
                report.skip(CheckId::MachineAddresses, "not looked up: an earlier check failed");
                report.skip(CheckId::KubeletRenewal, "not looked up: an earlier check failed");
                report.skip(CheckId::PendingBrake, "not looked up: an earlier check failed");
            }
        }
        report
    }
}

pub(crate) fn node_name(username: &str, cfg: &PolicyConfig) -> Result<String, Failure> {
    match username.strip_prefix(NODE_USER_PREFIX) {
        Some(name) if !name.is_empty() => match identity::problem(name) {
            None => Ok(name.to_owned()),
            Some(problem) => Err(Failure::deny(Reason::InvalidNodeName, format!("username {username:?}: {problem}"))),
        },
        _ if cfg.ignore_non_system_node => Err(Failure::ignore(
            Reason::NotANode,
            format!("username {username:?} is not system:node:<name> and --ignore-non-system-node is set"),
        )),
        _ => Err(Failure::deny(
            Reason::UsernameNotNode,
            format!("username {username:?} is not system:node:<name> with a non-empty name"),
        )),
    }
}

/// `spec.groups` holds both [`REQUIRED_GROUPS`]; a denial names the groups that are missing.
fn groups(groups: &[String]) -> Result<String, Failure> {
    let missing: Vec<&str> =
        REQUIRED_GROUPS.into_iter().filter(|required| !groups.iter().any(|g| g == required)).collect();
    if missing.is_empty() {
        Ok(format!("{NODES_GROUP} and {AUTHENTICATED_GROUP} present"))
    } else {
        Err(Failure::deny(Reason::NotInNodesGroup, format!("groups {groups:?} do not contain {missing:?}")))
    }
}

fn subject(facts: &CsrFacts, username: &str) -> Result<String, Failure> {
    if facts.common_names != [username] {
        return Err(Failure::deny(
            Reason::SubjectMismatch,
            format!("subject CN {:?} is not exactly the username {username:?}", facts.common_names),
        ));
    }
    if facts.organizations != [NODES_GROUP] {
        return Err(Failure::deny(
            Reason::SubjectMismatch,
            format!("subject O {:?} is not exactly [{NODES_GROUP:?}]", facts.organizations),
        ));
    }
    Ok(format!("CN={username}, O={NODES_GROUP}"))
}

fn usages(usages: &[String]) -> Result<String, Failure> {
    let extra: Vec<&String> = usages
        .iter()
        .filter(|u| !REQUIRED_USAGES.contains(&u.as_str()) && !OPTIONAL_USAGES.contains(&u.as_str()))
        .collect();
    let missing: Vec<&str> = REQUIRED_USAGES.into_iter().filter(|r| !usages.iter().any(|u| u == r)).collect();
    if !extra.is_empty() {
        return Err(Failure::deny(Reason::UsagesNotAllowed, format!("usages {extra:?} are not allowed for serving")));
    }
    if !missing.is_empty() {
        return Err(Failure::deny(Reason::UsagesNotAllowed, format!("required usages {missing:?} are missing")));
    }
    Ok(format!("{usages:?}"))
}

fn san_types(facts: &CsrFacts) -> Result<String, Failure> {
    let forbidden: Vec<String> = (facts.emails.iter().map(|e| format!("email {e}")))
        .chain(facts.uris.iter().map(|u| format!("URI {u}")))
        .chain(facts.other_sans.iter().cloned())
        .collect();
    if forbidden.is_empty() {
        Ok("only DNS and IP SANs".into())
    } else {
        Err(Failure::deny(Reason::ForbiddenSANType, format!("forbidden SANs: {}", forbidden.join(", "))))
    }
}

fn san_present(facts: &CsrFacts) -> Result<String, Failure> {
    if facts.dns_names.is_empty() && facts.ip_addresses.is_empty() {
        Err(Failure::deny(Reason::NoSubjectAltNames, "the request has no DNS or IP SAN"))
    } else {
        Ok(format!("{} DNS, {} IP", facts.dns_names.len(), facts.ip_addresses.len()))
    }
}

fn dns_name_count(facts: &CsrFacts, allowed: usize) -> Result<String, Failure> {
    let count = facts.dns_names.len();
    if count > allowed {
        Err(Failure::deny(
            Reason::TooManyDNSNames,
            format!("{count} DNS SANs {:?}, at most {allowed} allowed (--allowed-dns-names)", facts.dns_names),
        ))
    } else {
        Ok(format!("{count} of at most {allowed}"))
    }
}

fn ip_address_count(facts: &CsrFacts, allowed: usize) -> Result<String, Failure> {
    let count = facts.ip_addresses.len();
    if count > allowed {
        Err(Failure::deny(
            Reason::TooManyIPAddresses,
            format!("{count} IP SANs, at most {allowed} allowed (--allowed-ip-addresses)"),
        ))
    } else {
        Ok(format!("{count} of at most {allowed}"))
    }
}

/// IPv6 addresses in `::/96` (unspecified, loopback, IPv4-compatible) or `::ffff:0:0/96`
/// (IPv4-mapped) are refused: Go writes a mapped address into the certificate as IPv4, so the
/// certificate would name another address than the one checked.
fn ip_address_syntax(ips: &[IpAddr]) -> Result<String, Failure> {
    let refused = ips.iter().find_map(|ip| match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => Some(format!(
            "IP SAN {v6} is an IPv4-mapped IPv6 address; the certificate would name {}",
            ip.to_canonical()
        )),
        IpAddr::V6(v6) if v6.octets()[..12].iter().all(|b| *b == 0) => {
            Some(format!("IP SAN {v6} lies in ::/96 (unspecified, loopback or IPv4-compatible)"))
        }
        _ => None,
    });
    match refused {
        Some(message) => Err(Failure::deny(Reason::InvalidIPAddress, message)),
        None => Ok(format!("{} plain IPv4/IPv6 addresses", ips.len())),
    }
}

fn dns_name_syntax(names: &[String]) -> Result<String, Failure> {
    if let Some(numeric) = names.iter().find(|name| reserved::reads_as_ipv4(name)) {
        return Err(Failure::deny(
            Reason::InvalidDNSName,
            format!("DNS SAN {numeric:?} ends in a number: C resolvers (inet_aton) dial it as an IPv4 address"),
        ));
    }
    match names.iter().find(|name| !is_hostname(name)) {
        Some(bad) => Err(Failure::deny(
            Reason::InvalidDNSName,
            format!("DNS SAN {bad:?} is not a valid hostname (no wildcards, IP addresses or trailing dots)"),
        )),
        None => Ok(format!("{names:?}")),
    }
}

/// An RFC 1123 hostname: dot-separated labels of letters, digits and inner hyphens, 1–63
/// characters each, 253 in all; not an IP address.
fn is_hostname(name: &str) -> bool {
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    !name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok) && name.parse::<IpAddr>().is_err()
}

fn hostname(names: &[String], node: &str, mode: HostnameMatch) -> Result<String, Failure> {
    let node = node.to_ascii_lowercase();
    let bound = |name: &&String| match mode {
        HostnameMatch::Strict => {
            name.as_str() == node || name.strip_prefix(node.as_str()).is_some_and(|rest| rest.starts_with('.'))
        }
        HostnameMatch::Prefix => name.starts_with(node.as_str()),
    };
    match names.iter().find(|name| !bound(name)) {
        Some(bad) => Err(Failure::deny(
            Reason::HostnameMismatch,
            match mode {
                HostnameMatch::Strict => {
                    format!("DNS SAN {bad:?} is neither node {node:?} nor {node:?} followed by '.'")
                }
                HostnameMatch::Prefix => format!("DNS SAN {bad:?} does not start with node name {node:?}"),
            },
        )),
        None => Ok(format!("bound to node {node:?}")),
    }
}

fn provider_regex(names: &[String], cfg: &PolicyConfig) -> Result<String, Failure> {
    match names.iter().find(|name| !cfg.provider_regex.is_match(name)) {
        Some(bad) => Err(Failure::deny(
            Reason::RegexMismatch,
            format!("DNS SAN {bad:?} does not match --provider-regex {:?}", cfg.provider_regex.as_str()),
        )),
        None => Ok(format!("{} DNS SANs match", names.len())),
    }
}

fn in_prefixes(ip: &IpAddr, cfg: &PolicyConfig) -> bool {
    cfg.ip_prefixes.iter().any(|net| net.contains(ip))
}

fn ip_prefixes(ips: &[IpAddr], cfg: &PolicyConfig) -> Result<String, Failure> {
    match ips.iter().find(|ip| !in_prefixes(ip, cfg)) {
        Some(bad) => Err(Failure::deny(
            Reason::IPNotInPrefixes,
            format!("IP SAN {bad} is outside --provider-ip-prefixes {}", prefixes_text(cfg)),
        )),
        None => Ok(format!("{} IP SANs inside the prefixes", ips.len())),
    }
}

fn prefixes_text(cfg: &PolicyConfig) -> String {
    cfg.ip_prefixes.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

fn expiration(seconds: Option<i32>, cfg: &PolicyConfig) -> Result<String, Failure> {
    match seconds {
        None => Ok("not set: the signer's default applies".into()),
        Some(s) if i64::from(s) > cfg.max_expiration_secs => Err(Failure::deny(
            Reason::ExpirationTooLong,
            format!("expirationSeconds {s} exceeds --max-expiration-sec {}", cfg.max_expiration_secs),
        )),
        Some(s) => Ok(format!("{s}s, at most {}s", cfg.max_expiration_secs)),
    }
}
