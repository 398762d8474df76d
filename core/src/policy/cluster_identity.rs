//! Identities no node may claim, whatever the flags: the names and addresses under which pods
//! reach the apiserver, and addresses that are nobody's own.
//!
//! A kubelet-serving certificate is signed by a CA that, in most clusters, every pod trusts for
//! `kubernetes.default.svc`; a node holding one for the apiserver's names or addresses could
//! impersonate the apiserver to pods. [`reserved_sans`] needs no evidence and runs before every
//! check a flag can weaken; [`apiserver_addresses`] reads the addresses of the `default/kubernetes`
//! Service and its EndpointSlices, gathered through the `ClusterView` port.

use std::net::IpAddr;

use super::Reason;
use super::ports::ClusterError;
use super::report::Failure;

/// The Service names of the apiserver that resolve inside every pod, whatever the cluster domain.
const APISERVER_NAMES: [&str; 3] = ["kubernetes", "kubernetes.default", "kubernetes.default.svc"];
/// RFC 6761 reserves the whole `localhost.` domain for loopback: every name under it too.
const LOCALHOST: &str = "localhost";

/// Why `name` (as written in the request) names the apiserver or loopback, or `None`. The name is
/// compared in lowercase and without trailing dots, as resolvers treat it.
fn reserved_name(name: &str, cluster_domain: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    let name = lower.trim_end_matches('.');
    let services = format!("svc.{cluster_domain}");
    if APISERVER_NAMES.contains(&name) {
        Some(format!("DNS SAN {name:?} is the apiserver's Service name"))
    } else if within(name, &services) {
        Some(format!("DNS SAN {name:?} lies in the cluster's Service domain {services:?} (--cluster-domain)"))
    } else if within(name, LOCALHOST) {
        Some(format!("DNS SAN {name:?} lies in the reserved loopback domain {LOCALHOST:?} (RFC 6761)"))
    } else {
        None
    }
}

/// `name` is `domain` or a name under it.
fn within(name: &str, domain: &str) -> bool {
    name == domain || name.strip_suffix(domain).is_some_and(|head| head.ends_with('.'))
}

/// What kind of address no node may hold `ip` is, or `None`. An IPv4-mapped IPv6 address is read
/// as the IPv4 address it maps, as the signer would write it.
fn reserved_ip(ip: IpAddr) -> Option<&'static str> {
    match ip.to_canonical() {
        IpAddr::V4(v4) if v4.is_loopback() => Some("loopback (127.0.0.0/8)"),
        IpAddr::V4(v4) if v4.is_unspecified() => Some("unspecified (0.0.0.0)"),
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local (169.254.0.0/16)"),
        IpAddr::V4(v4) if v4.is_multicast() => Some("multicast (224.0.0.0/4)"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address (255.255.255.255)"),
        IpAddr::V6(v6) if v6.is_loopback() => Some("loopback (::1)"),
        IpAddr::V6(v6) if v6.is_unspecified() => Some("unspecified (::)"),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some("link-local (fe80::/10)"),
        IpAddr::V6(v6) if v6.is_multicast() => Some("multicast (ff00::/8)"),
        _ => None,
    }
}

/// No DNS SAN is a name of the apiserver or under `svc.<cluster domain>` or `localhost`, and no IP
/// SAN is loopback, unspecified, link-local, multicast or broadcast.
pub(crate) fn reserved_sans(dns_names: &[String], ips: &[IpAddr], cluster_domain: &str) -> Result<String, Failure> {
    if let Some(message) = dns_names.iter().find_map(|name| reserved_name(name, cluster_domain)) {
        return Err(Failure::deny(Reason::ClusterIdentity, message));
    }
    if let Some((ip, kind)) = ips.iter().find_map(|ip| reserved_ip(*ip).map(|kind| (ip, kind))) {
        return Err(Failure::deny(Reason::ClusterIdentity, format!("IP SAN {ip} is {kind}")));
    }
    Ok(format!("no SAN names the apiserver, svc.{cluster_domain}, localhost or a reserved address"))
}

/// No IP SAN is a ClusterIP of the `default/kubernetes` Service or an address of its
/// EndpointSlices. `addresses` is what was gathered: `None` when it was not looked up, `Err` when
/// the cluster could not be read (both retried, never approved).
pub(crate) fn apiserver_addresses(
    ips: &[IpAddr],
    addresses: Option<&Result<Vec<IpAddr>, ClusterError>>,
) -> Result<String, Failure> {
    if ips.is_empty() {
        return Ok("no IP SANs".into());
    }
    let addresses = match addresses {
        Some(Ok(addresses)) => addresses,
        Some(Err(error)) => {
            return Err(Failure::retry(
                Reason::ClusterUnavailable,
                format!("the apiserver's addresses (default/kubernetes) are unknown: {error}"),
            ));
        }
        None => {
            return Err(Failure::retry(
                Reason::ClusterUnavailable,
                "the apiserver's addresses (default/kubernetes) were not looked up",
            ));
        }
    };
    let apiserver = |ip: &IpAddr| addresses.iter().any(|a| a.to_canonical() == ip.to_canonical());
    match ips.iter().find(|ip| apiserver(ip)) {
        Some(ip) => Err(Failure::deny(
            Reason::ClusterIdentity,
            format!(
                "IP SAN {ip} is an address of the apiserver (the default/kubernetes Service or its EndpointSlices)"
            ),
        )),
        None => Ok(format!("no IP SAN among the apiserver's {} addresses", addresses.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_reserved_by_whole_labels() {
        let reserved = |name| reserved_name(name, "cluster.local").is_some();
        assert!(reserved("svc.cluster.local"));
        assert!(reserved("a.svc.cluster.local."));
        assert!(!reserved("asvc.cluster.local"));
        assert!(!reserved("svc.cluster.local.example.com"));
        assert!(reserved("LOCALHOST.."));
        assert!(!reserved("mylocalhost"));
        assert!(!reserved("kubernetes.default.svc.example.com"));
    }

    #[test]
    fn an_unreadable_cluster_is_a_retry_naming_why() {
        let ips = ["10.0.0.1".parse().unwrap()];
        let failure = apiserver_addresses(&ips, Some(&Err(ClusterError::Request("forbidden".into())))).unwrap_err();
        assert_eq!((failure.reason, failure.message.contains("forbidden")), (Reason::ClusterUnavailable, true));
    }
}
