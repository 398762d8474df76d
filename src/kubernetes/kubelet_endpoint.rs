//! The certificate a node's kubelet serves, as renewal evidence: dialled at the Node's first
//! InternalIP and `status.daemonEndpoints.kubeletEndpoint.Port` (nothing else in the Node or the
//! CSR chooses the address), and only where [`KubeletDialRules`] allow (a node address, the kubelet
//! port); or for `check` read from a file and verified as the dial verifies it. The audit's
//! targets ([`NodeTarget`], [`dial_targets`]) are chosen by the same rules.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use kube::api::ListParams;
use rustls::pki_types::{CertificateDer, UnixTime};

use crate::kubelet_tls::dial::{Served, served_certificate};
use crate::kubelet_tls::{DIAL_LIMIT, KubeletServingCa};
use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::node_object::NodeObject;
use crate::kubernetes::node_target::{NodeTarget, NotDialled};
use crate::kubernetes::object_fields::ObjectKind;
use crate::policy::{
    ClusterError, ClusterView, KubeletCertificate, KubeletDialRules, NodeAddress, kubelet_dial_not_owned,
};

/// How many Nodes one list request of [`dial_targets`] reads: each page is reduced to the Nodes'
/// names and dial targets before the next is read.
const NODES_PAGE: u32 = 500;

/// Node `node` and where its kubelet is dialled, or why it is not.
pub async fn node_target<C: ClusterView>(cluster: &C, node: &NodeObject, rules: &KubeletDialRules) -> NodeTarget {
    let node_meta = &node.metadata.0;
    let name = node_meta.name.clone().unwrap_or_default();
    let target = kubelet_target(cluster, &name, node.kubelet_port(), &node.addresses(), rules).await;
    NodeTarget { node: name, uid: node_meta.uid.clone(), target }
}

/// Where the kubelet of Node `name`, listing `addresses` and `kubelet_port`, is dialled, or why
/// it is not.
pub async fn kubelet_target<C: ClusterView>(
    cluster: &C,
    name: &str,
    kubelet_port: Option<i32>,
    addresses: &[NodeAddress],
    rules: &KubeletDialRules,
) -> Result<SocketAddr, NotDialled> {
    match undialled_apiserver_addresses(cluster, name, addresses).await {
        Ok(apiserver) => dial_target(kubelet_port, addresses, rules, &apiserver),
        Err(error) => Err(NotDialled::ApiserverAddresses(error)),
    }
}

/// Node `node` as read from the apiserver and where its kubelet is dialled; one that cannot be
/// decoded is reported to `skipped` and not dialled, saying why.
pub async fn read_node_target<C: ClusterView>(
    cluster: &C,
    node: &Decoded<NodeObject>,
    rules: &KubeletDialRules,
    skipped: &Skipped,
) -> NodeTarget {
    match node {
        Decoded::Object(node) => node_target(cluster, node, rules).await,
        Decoded::Undecodable(undecodable) => NodeTarget {
            node: undecodable.metadata.name.clone().unwrap_or_default(),
            uid: undecodable.metadata.uid.clone(),
            target: Err(NotDialled::Undecodable(skipped.report(ObjectKind::Node, undecodable))),
        },
    }
}

/// Every Node of `nodes`, read [`NODES_PAGE`] at a time, and where its kubelet is dialled. A Node
/// that cannot be decoded is reported to `skipped` and listed as not dialled, saying why.
pub async fn dial_targets<C: ClusterView>(
    nodes: &kube::Api<Decoded<NodeObject>>,
    cluster: &C,
    rules: &KubeletDialRules,
    skipped: &Skipped,
) -> Result<Vec<NodeTarget>, kube::Error> {
    let mut targets = Vec::new();
    let mut page = ListParams::default().limit(NODES_PAGE);
    loop {
        let listed = nodes.list(&page).await?;
        for node in &listed.items {
            targets.push(read_node_target(cluster, node, rules, skipped).await);
        }
        match listed.metadata.continue_ {
            Some(token) if !token.is_empty() => page = page.continue_token(&token),
            _ => return Ok(targets),
        }
    }
}

/// The first InternalIP of a Node's addresses.
pub fn internal_ip(addresses: &[NodeAddress]) -> Result<IpAddr, NotDialled> {
    let address = addresses.iter().find(|a| a.kind == "InternalIP").ok_or(NotDialled::NoInternalIp)?;
    address.address.trim().parse().map_err(|_| NotDialled::InternalIpNotIp(address.address.clone()))
}

/// Where the kubelet of a Node listing `addresses` and `kubelet_port` is dialled, when `rules`
/// allow its address and port (`apiserver` holds the apiserver's addresses the node does not
/// own), or why it is not.
pub fn dial_target(
    kubelet_port: Option<i32>,
    addresses: &[NodeAddress],
    rules: &KubeletDialRules,
    apiserver: &[IpAddr],
) -> Result<SocketAddr, NotDialled> {
    let port = match kubelet_port.map(u16::try_from) {
        Some(Ok(port)) if port > 0 => port,
        _ => return Err(NotDialled::NoKubeletPort),
    };
    let ip = internal_ip(addresses)?;
    rules.target(ip, port, apiserver).map_err(NotDialled::Refused)
}

/// The apiserver's addresses the kubelet of Node `name` (listing `addresses`) may not be dialled
/// at ([`kubelet_dial_not_owned`]): who claims an advertise address is asked only when the Node
/// lists one.
pub async fn undialled_apiserver_addresses<C: ClusterView>(
    cluster: &C,
    name: &str,
    addresses: &[NodeAddress],
) -> Result<Vec<IpAddr>, ClusterError> {
    let apiserver = cluster.apiserver_addresses().await?;
    let listed: Vec<IpAddr> = addresses.iter().filter_map(|a| a.address.parse().ok()).collect();
    let advertised = apiserver.advertised(&listed);
    let claims = match advertised.is_empty() {
        true => Vec::new(),
        false => cluster.nodes_claiming(&advertised).await?,
    };
    Ok(kubelet_dial_not_owned(&apiserver, &claims, name))
}

/// Dials the kubelet of a Node listing `addresses` and `kubelet_port`, when `rules` allow its
/// address and port (`apiserver` holds the apiserver's addresses the node does not own), and
/// verifies what it presents against `ca`.
pub async fn served_by(
    kubelet_port: Option<i32>,
    addresses: &[NodeAddress],
    ca: &KubeletServingCa,
    rules: &KubeletDialRules,
    apiserver: &[IpAddr],
) -> KubeletCertificate {
    let target = match dial_target(kubelet_port, addresses, rules, apiserver) {
        Ok(target) => target,
        Err(why) => return KubeletCertificate::Unusable(why.to_string()),
    };
    match served_certificate(target, ca, DIAL_LIMIT).await {
        Served::Verified(leaf) => KubeletCertificate::Verified(leaf),
        Served::Untrusted(why) => KubeletCertificate::Unusable(why),
        Served::Unreachable(why) => KubeletCertificate::Unreachable(why),
    }
}

/// Verifies `chain` (from `check --kubelet-certificate`) at `now` as the dial verifies what the
/// kubelet of a Node with `addresses` presents.
pub fn served_offline(
    chain: &[CertificateDer<'static>],
    addresses: &[NodeAddress],
    ca: &KubeletServingCa,
    now: jiff::Timestamp,
) -> KubeletCertificate {
    let ip = match internal_ip(addresses) {
        Ok(ip) => ip,
        Err(why) => return KubeletCertificate::Unusable(why.to_string()),
    };
    let now = UnixTime::since_unix_epoch(Duration::from_secs(now.as_second().max(0).unsigned_abs()));
    match (ca.verify(chain, ip, now), chain.first()) {
        (Ok(()), Some(leaf)) => KubeletCertificate::Verified(leaf.to_vec()),
        (Ok(()), None) => KubeletCertificate::Unusable("no certificate".into()),
        (Err(error), _) => KubeletCertificate::Unusable(format!("the certificate given for the node: {error}")),
    }
}
