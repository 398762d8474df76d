//! The serving checks that read evidence: DNS resolution of the DNS SANs, and (with
//! `--verify-node-addresses`) the Node's addresses.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use super::{Parsed, in_prefixes, prefixes_text};
use crate::policy::Reason;
use crate::policy::evidence::{Evidence, Lookup};
use crate::policy::ports::{NodeInfo, Resolution};
use crate::policy::report::{CheckId, Failure, Report};
use crate::policy::rules::PolicyConfig;

pub(super) fn dns_checks(
    report: &mut Report,
    parsed: &Parsed,
    evidence: &Evidence,
    cfg: &PolicyConfig,
    age: Option<Duration>,
) {
    let mut resolved: BTreeSet<IpAddr> = BTreeSet::new();
    let mut missing = Vec::new();
    let mut unavailable = Vec::new();
    let mut outside = None;
    for name in &parsed.dns_names {
        match evidence.dns.get(name) {
            Some(Resolution::Addresses(addresses)) => {
                // An AAAA answer ::ffff:a.b.c.d is the IPv4 address a.b.c.d.
                let canonical: Vec<IpAddr> = addresses.iter().map(IpAddr::to_canonical).collect();
                if let Some(ip) = canonical.iter().find(|ip| !in_prefixes(ip, cfg)) {
                    outside.get_or_insert((name, *ip));
                }
                resolved.extend(canonical);
            }
            Some(Resolution::NotFound) => missing.push(name.as_str()),
            Some(Resolution::Unavailable(failure)) => unavailable.push(format!("{name} ({failure})")),
            None => unavailable.push(format!("{name} (not looked up)")),
        }
    }
    let all_resolved = missing.is_empty() && unavailable.is_empty();
    report.record(CheckId::DnsResolves, dns_resolves(&missing, &unavailable, cfg, age, &resolved));
    report.record(
        CheckId::ResolvedIpPrefixes,
        match outside {
            Some((name, ip)) => Err(Failure::deny(
                Reason::ResolvedIPNotInPrefixes,
                format!("DNS SAN {name:?} resolves to {ip}, outside --provider-ip-prefixes {}", prefixes_text(cfg)),
            )),
            None => Ok(format!("{} resolved addresses inside the prefixes", resolved.len())),
        },
    );
    if !all_resolved {
        report.skip(CheckId::IpResolved, "needs every DNS SAN resolved");
        return;
    }
    report.record(
        CheckId::IpResolved,
        match parsed.facts.ip_addresses.iter().find(|ip| !resolved.contains(ip)) {
            Some(ip) => Err(Failure::deny(
                Reason::IPNotResolved,
                format!("IP SAN {ip} is not among the addresses the DNS SANs resolve to {resolved:?}"),
            )),
            None => Ok(format!("{} IP SANs resolved from the DNS SANs", parsed.facts.ip_addresses.len())),
        },
    );
}

fn dns_resolves(
    missing: &[&str],
    unavailable: &[String],
    cfg: &PolicyConfig,
    age: Option<Duration>,
    resolved: &BTreeSet<IpAddr>,
) -> Result<String, Failure> {
    if !unavailable.is_empty() {
        return Err(Failure::retry(
            Reason::DNSUnavailable,
            format!("no definitive DNS answer for {}; retrying", unavailable.join(", ")),
        ));
    }
    if missing.is_empty() {
        return Ok(format!("resolved to {resolved:?}"));
    }
    let grace = humantime::format_duration(cfg.dns_grace_period);
    match age {
        Some(age) if age < cfg.dns_grace_period => Err(Failure::retry(
            Reason::DNSNotYetResolvable,
            format!(
                "DNS SAN {missing:?} does not resolve yet; retrying until the CSR is {grace} old (it is {})",
                humantime::format_duration(Duration::from_secs(age.as_secs()))
            ),
        )),
        Some(_) => Err(Failure::deny(
            Reason::DNSNotResolved,
            format!("DNS SAN {missing:?} still does not resolve after --dns-grace-period {grace}"),
        )),
        None => Err(Failure::deny(
            Reason::DNSNotResolved,
            format!(
                "DNS SAN {missing:?} does not resolve and the CSR has no creationTimestamp to grant a grace period"
            ),
        )),
    }
}

pub(super) fn node_addresses(parsed: &Parsed, node: &Lookup<NodeInfo>) -> Result<String, Failure> {
    let node = match node {
        Lookup::Found(node) => node,
        Lookup::Missing => {
            return Err(Failure::retry(Reason::NodeNotFound, format!("Node {:?} does not exist yet", parsed.node)));
        }
        Lookup::Failed(error) => {
            return Err(Failure::retry(
                Reason::ClusterUnavailable,
                format!("cannot read Node {:?}: {error}", parsed.node),
            ));
        }
    };
    let names: BTreeSet<String> = node
        .addresses
        .iter()
        .map(|a| a.address.trim_end_matches('.').to_ascii_lowercase())
        .chain([node.name.to_ascii_lowercase()])
        .collect();
    let ips: BTreeSet<IpAddr> = node
        .addresses
        .iter()
        .filter_map(|a| a.address.trim().parse().ok())
        .map(|ip: IpAddr| ip.to_canonical())
        .collect();
    if let Some(name) = parsed.dns_names.iter().find(|n| !names.contains(*n)) {
        return Err(Failure::deny(
            Reason::NodeAddressMismatch,
            format!("DNS SAN {name:?} is neither Node {:?}'s name nor one of its addresses", node.name),
        ));
    }
    if let Some(ip) = parsed.facts.ip_addresses.iter().find(|ip| !ips.contains(ip)) {
        return Err(Failure::deny(
            Reason::NodeAddressMismatch,
            format!("IP SAN {ip} is not one of Node {:?}'s addresses", node.name),
        ));
    }
    Ok(format!("every SAN belongs to Node {:?}", node.name))
}
