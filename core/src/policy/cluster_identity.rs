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
use super::reserved::{reserved_address, reserved_name};

/// No DNS SAN and no IP SAN is in the table of reserved identities (`reserved.rs`).
pub(crate) fn reserved_sans(dns_names: &[String], ips: &[IpAddr], cluster_domain: &str) -> Result<String, Failure> {
    if let Some(message) = dns_names.iter().find_map(|name| reserved_name(name, cluster_domain)) {
        return Err(Failure::deny(Reason::ClusterIdentity, message));
    }
    if let Some((ip, kind)) = ips.iter().find_map(|ip| reserved_address(*ip).map(|kind| (ip, kind))) {
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
    fn an_unreadable_cluster_is_a_retry_naming_why() {
        let ips = ["10.0.0.1".parse().unwrap()];
        let failure = apiserver_addresses(&ips, Some(&Err(ClusterError::Request("forbidden".into())))).unwrap_err();
        assert_eq!((failure.reason, failure.message.contains("forbidden")), (Reason::ClusterUnavailable, true));
    }
}
