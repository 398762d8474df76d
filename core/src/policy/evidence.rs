//! Evidence from outside the process (DNS answers, the Node, Machines, the brake's counts, the
//! apiserver's addresses and the Nodes claiming its advertise addresses, the certificate a kubelet
//! serves),
//! gathered concurrently once per evaluation, before the pure decision.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::ports::{
    AddressClaim, ApiserverAddresses, BrakeInputs, ClusterError, ClusterView, KubeletCertificate, MachineInfo,
    NodeInfo, Resolution, Resolver, ServingCsr,
};

/// What a cluster lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<T> {
    /// The object exists.
    Found(T),
    /// The object does not exist (yet).
    Missing,
    /// The cluster could not be asked.
    Failed(ClusterError),
}

/// Everything the evidence-based checks read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// The resolution of each DNS SAN, keyed by the lowercased name.
    pub dns: BTreeMap<String, Resolution>,
    /// The Node, when asked for.
    pub node: Option<Lookup<NodeInfo>>,
    /// Every Machine, in machine mode.
    pub machines: Option<Result<Vec<Arc<MachineInfo>>, ClusterError>>,
    /// The pending brake's counts, in machine mode.
    pub load: Option<Result<BrakeInputs, ClusterError>>,
    /// The apiserver's addresses (the `default/kubernetes` Service's ClusterIPs and its
    /// EndpointSlices' addresses), when asked for; `None` (not looked up) is retried, never
    /// read as "no addresses".
    pub apiserver: Option<Result<ApiserverAddresses, ClusterError>>,
    /// The Nodes claiming each IP SAN that is an advertise address of the apiserver (an
    /// EndpointSlice address), read only when there is one.
    pub address_claims: Option<Result<Vec<AddressClaim>, ClusterError>>,
    /// The approved client CSRs for the requested node name, when asked for.
    pub client_certificates: Option<Result<Vec<String>, ClusterError>>,
    /// The certificate the requester's kubelet serves, when asked for and no Machine claims the node.
    pub kubelet_certificate: Option<Result<KubeletCertificate, ClusterError>>,
    /// The kubelet-serving CSRs of the requester, when asked for.
    pub serving_csrs: Option<Result<Vec<ServingCsr>, ClusterError>>,
}

/// What must be gathered for one CSR.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvidenceNeeded {
    /// Lowercased DNS names to resolve.
    pub dns_names: Vec<String>,
    /// The Node to fetch.
    pub node: Option<String>,
    /// Whether Machines and the brake's counts are needed.
    pub machines: bool,
    /// The IP SANs to hold against the apiserver's addresses (and, for those it advertises, the
    /// Nodes claiming them); none: the apiserver's addresses are not read.
    pub apiserver: Vec<IpAddr>,
    /// The node name whose approved client CSRs are needed.
    pub client_certificates: Option<String>,
    /// The node whose kubelet's certificate is needed, should no Machine claim it.
    pub kubelet_certificate: Option<String>,
    /// The requester (`spec.username`) whose kubelet-serving CSRs are needed.
    pub serving_csrs: Option<String>,
}

/// Gathers `needs` concurrently: every DNS name, the Node, the Machines and the apiserver's
/// addresses (followed by the Nodes claiming the requested ones it advertises) at once; then, only when the Machines were read and none claims the node, the
/// certificate its kubelet serves (a dial no Machine-backed node pays for).
pub async fn gather<R: Resolver, C: ClusterView>(needs: &EvidenceNeeded, resolver: &R, cluster: &C) -> Evidence {
    let lookups = futures::future::join_all(
        needs.dns_names.iter().map(|name| async move { (name.clone(), resolver.resolve(name).await) }),
    );
    let node = async {
        let name = needs.node.as_ref()?;
        Some(match cluster.node(name).await {
            Ok(Some(node)) => Lookup::Found(node),
            Ok(None) => Lookup::Missing,
            Err(error) => Lookup::Failed(error),
        })
    };
    let machines = async {
        if !needs.machines {
            return (None, None);
        }
        let (machines, load) = futures::join!(cluster.machines(), cluster.load());
        (Some(machines), Some(load))
    };
    let apiserver = async {
        if needs.apiserver.is_empty() {
            return (None, None);
        }
        let addresses = cluster.apiserver_addresses().await;
        let advertised = addresses.as_ref().map(|a| a.advertised(&needs.apiserver)).unwrap_or_default();
        let claims = if advertised.is_empty() { None } else { Some(cluster.nodes_claiming(&advertised).await) };
        (Some(addresses), claims)
    };
    let client_certificates = async {
        let node = needs.client_certificates.as_ref()?;
        Some(cluster.client_certificates(node).await)
    };
    let serving_csrs = async {
        let requester = needs.serving_csrs.as_ref()?;
        Some(cluster.serving_csrs(requester).await)
    };
    let (dns, node, (machines, load), (apiserver, address_claims), client_certificates, serving_csrs) =
        futures::join!(lookups, node, machines, apiserver, client_certificates, serving_csrs);
    let unclaimed = needs.kubelet_certificate.as_ref().filter(|name| match &machines {
        Some(Ok(machines)) => !machines.iter().any(|machine| machine.node_ref.as_ref() == Some(name)),
        _ => false,
    });
    let kubelet_certificate = match unclaimed {
        Some(name) => Some(cluster.kubelet_certificate(name).await),
        None => None,
    };
    Evidence {
        dns: dns.into_iter().collect(),
        node,
        machines,
        load,
        apiserver,
        address_claims,
        client_certificates,
        kubelet_certificate,
        serving_csrs,
    }
}
