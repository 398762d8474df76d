//! Identities no node may claim, whatever the flags: the names and addresses under which pods
//! reach the apiserver, and addresses that are nobody's own.
//!
//! A kubelet-serving certificate is signed by a CA that, in most clusters, every pod trusts for
//! `kubernetes.default.svc`; a node holding one for the apiserver's names or addresses could
//! impersonate the apiserver to pods. [`reserved_sans`] needs no evidence and runs before every
//! check a flag can weaken; [`apiserver_addresses`] reads the addresses of the `default/kubernetes`
//! Service and its EndpointSlices, gathered through the `ClusterView` port: a ClusterIP is refused
//! always, an EndpointSlice address (an apiserver's advertise address, on kubeadm-style clusters
//! the control-plane node's own InternalIP) to every node but its one claimant.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use super::Reason;
use super::evidence::Evidence;
use super::ports::{AddressClaim, CONTROL_PLANE_LABEL, MachineInfo};
use super::report::Failure;
use super::reserved::{host, reserved_address, reserved_name};

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

/// No IP SAN is a ClusterIP of the `default/kubernetes` Service, in any spelling of it (an IPv6
/// address embedding it: IPv4-mapped, translated, compatible, 6to4); an address of its EndpointSlices
/// (an apiserver's advertise address) only when `node` is the one claimant of it: the only Node
/// whose `status.addresses` carry it and, in machine mode, the only node whose Machine does. What
/// is not gathered, or could not be read, is retried, never approved.
pub(crate) fn apiserver_addresses(node: &str, ips: &[IpAddr], evidence: &Evidence) -> Result<String, Failure> {
    if ips.is_empty() {
        return Ok("no IP SANs".into());
    }
    let unknown = |why: String| Err(Failure::retry(Reason::ClusterUnavailable, why));
    let addresses = match &evidence.apiserver {
        Some(Ok(addresses)) => addresses,
        Some(Err(error)) => {
            return unknown(format!("the apiserver's addresses (default/kubernetes) are unknown: {error}"));
        }
        None => return unknown("the apiserver's addresses (default/kubernetes) were not looked up".into()),
    };
    if let Some(ip) = ips.iter().find(|ip| addresses.service.iter().any(|a| host(*a) == host(**ip))) {
        return Err(Failure::deny(
            Reason::ClusterIdentity,
            format!("IP SAN {ip} is a ClusterIP of the apiserver's Service default/kubernetes"),
        ));
    }
    let advertised = addresses.advertised(ips);
    if advertised.is_empty() {
        let (service, endpoints) = (addresses.service.len(), addresses.endpoints.len());
        return Ok(format!("no IP SAN among the apiserver's {service} ClusterIPs and {endpoints} advertise addresses"));
    }
    let claims = match &evidence.address_claims {
        Some(Ok(claims)) => claims,
        Some(Err(error)) => return unknown(format!("the Nodes claiming {advertised:?} are unknown: {error}")),
        None => return unknown(format!("the Nodes claiming {advertised:?} were not looked up")),
    };
    let machines = match &evidence.machines {
        None => &[][..],
        Some(Ok(machines)) => machines.as_slice(),
        Some(Err(error)) => return unknown(format!("the Machines claiming {advertised:?} are unknown: {error}")),
    };
    for ip in &advertised {
        match ownership(node, ip, claims, machines) {
            Ownership::Own => {}
            Ownership::Other(claimants) => {
                return Err(Failure::deny(
                    Reason::ClusterIdentity,
                    format!(
                        "IP SAN {ip} is an advertise address of the apiserver (an EndpointSlice of default/kubernetes) \
                         and not node {node:?}'s own: claimed by {claimants:?}"
                    ),
                ));
            }
            Ownership::Contested(claimants) => {
                return Err(Failure::retry(
                    Reason::AdvertiseAddressContested,
                    format!(
                        "IP SAN {ip} is an advertise address of the apiserver (an EndpointSlice of default/kubernetes) \
                         claimed by more than node {node:?}: {claimants:?}, and neither the label {CONTROL_PLANE_LABEL} \
                         nor a Machine tells whose it is"
                    ),
                ));
            }
        }
    }
    Ok(format!("IP SANs {advertised:?} advertise the apiserver and are node {node:?}'s alone"))
}

/// Whose an advertise address is, as far as node `node` is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// The node's own: its one claimant, or of several the one that what no kubelet writes (the
    /// control-plane role label, a Machine) singles out.
    Own,
    /// Not the node's: it does not claim it, or another claimant is singled out. The claimants.
    Other(BTreeSet<String>),
    /// Claimed by the node and others, and nothing a kubelet cannot write tells whose it is. The
    /// claimants.
    Contested(BTreeSet<String>),
}

/// Whose `ip` is for node `node`: its claimants are the Nodes that list it in their status and
/// the nodes of the Machines that list it (a Machine with no Node yet by its own id). A node's
/// status is its kubelet's to write, so of several claimants only one that carries the
/// control-plane role label or whose Machine lists it (neither of which a kubelet can write)
/// owns it, and then alone.
pub(crate) fn ownership(node: &str, ip: &IpAddr, claims: &[AddressClaim], machines: &[Arc<MachineInfo>]) -> Ownership {
    let listed: Vec<&AddressClaim> =
        claims.iter().filter(|claim| claim.ip.to_canonical() == ip.to_canonical()).collect();
    let by_machine: BTreeSet<String> = machines
        .iter()
        .filter(|machine| machine.addresses.iter().any(|address| address.is_ip(ip)))
        .map(|machine| machine.node_ref.clone().unwrap_or_else(|| format!("Machine {} (no Node yet)", machine.id)))
        .collect();
    let claimants: BTreeSet<String> =
        listed.iter().flat_map(|claim| claim.nodes.iter().cloned()).chain(by_machine.iter().cloned()).collect();
    if !claimants.contains(node) {
        return Ownership::Other(claimants);
    }
    if claimants.len() == 1 {
        return Ownership::Own;
    }
    let labelled = listed.iter().flat_map(|claim| claim.control_plane.iter().filter(|name| claim.nodes.contains(name)));
    let trusted: BTreeSet<&str> = labelled.map(String::as_str).chain(by_machine.iter().map(String::as_str)).collect();
    match (trusted.len(), trusted.contains(node)) {
        (1, true) => Ownership::Own,
        (0, _) | (_, true) => Ownership::Contested(claimants),
        (_, false) => Ownership::Other(claimants),
    }
}

#[cfg(test)]
mod tests {
    use super::super::ports::{ApiserverAddresses, ClusterError};
    use super::*;

    #[test]
    fn a_cluster_ip_is_refused_in_every_ipv6_spelling_that_embeds_it() {
        let evidence = |service: &str| Evidence {
            apiserver: Some(Ok(ApiserverAddresses { service: vec![service.parse().unwrap()], endpoints: Vec::new() })),
            ..Evidence::default()
        };
        let decide = |san: &str, service: &str| apiserver_addresses("n", &[san.parse().unwrap()], &evidence(service));
        for san in ["10.96.0.1", "::ffff:10.96.0.1", "2002:a60:1::", "2002:a60:1:ffff::7", "::ffff:0:a60:1", "::a60:1"]
        {
            let failure = decide(san, "10.96.0.1").unwrap_err();
            assert_eq!(failure.reason, Reason::ClusterIdentity, "{san}");
            assert!(failure.message.contains("is a ClusterIP"), "{san}: {}", failure.message);
        }
        assert!(decide("2002:a60:1::", "2002:a60:1::").is_err());
        for san in ["10.96.0.2", "2002:a60:2::", "::ffff:0:a60:2", "2003:a60:1::", "fd00::a60:1"] {
            assert!(decide(san, "10.96.0.1").is_ok(), "{san}");
        }
    }

    #[test]
    fn an_unreadable_cluster_is_a_retry_naming_why() {
        let ips = ["10.0.0.1".parse().unwrap()];
        let evidence =
            Evidence { apiserver: Some(Err(ClusterError::Request("forbidden".into()))), ..Evidence::default() };
        let failure = apiserver_addresses("n", &ips, &evidence).unwrap_err();
        assert_eq!((failure.reason, failure.message.contains("forbidden")), (Reason::ClusterUnavailable, true));
    }
}
