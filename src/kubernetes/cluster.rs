//! The [`ClusterView`] port implemented twice: by the live cluster ([`KubeCluster`]) and by a fixed
//! set of objects read from files ([`StaticCluster`], for `check --objects`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;

use crate::kubelet_tls::KubeletServingCa;
use crate::kubernetes::apiserver::ApiserverWatch;
use crate::kubernetes::csr_ledger::CsrLedger;
use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::kubelet_endpoint::{served_by, served_offline, undialled_apiserver_addresses};
use crate::kubernetes::machines::MachineCache;
use crate::kubernetes::node_index::{Known, NodeIndex};
use crate::kubernetes::node_object::{NodeFacts, NodeObject};
use crate::kubernetes::object_fields::ObjectKind;
use crate::policy::{
    AddressClaim, ApiserverAddresses, BrakeInputs, CONTROL_PLANE_LABEL, ClusterError, ClusterView, KubeletCertificate,
    KubeletDialRules, MachineInfo, NodeInfo, RequestError, ServingCsr, brake_limit, same_ip,
};

/// The live cluster: a Node, and who claims an address, from the watched Nodes ([`NodeIndex`];
/// a Node by a GET while that watch is not live); Machines and Nodes from the watched caches of
/// machine mode; a node's serving CSRs, and in machine mode the pending CSRs and approved client
/// CSRs, from the CSR cache ([`CsrLedger`]); the apiserver's addresses from their own watch
/// ([`ApiserverWatch`]); a kubelet's certificate from a dial of the address its Node gives, where
/// the rules allow it.
#[derive(Clone)]
pub struct KubeCluster {
    nodes: kube::Api<Decoded<NodeObject>>,
    node_index: NodeIndex,
    nodes_for_rules: bool,
    watch_nodes: bool,
    skipped: Skipped,
    machines: Option<MachineCache>,
    ledger: CsrLedger,
    apiserver: ApiserverWatch,
    kubelet_dial: Option<(KubeletServingCa, KubeletDialRules)>,
}

impl KubeCluster {
    /// Reads Nodes from `node_index` while its watch is live, else through `client` (keeping of
    /// each what the rules see of it when `nodes_for_rules`, as the index does), in machine mode
    /// Machines from their caches, and CSRs from the ledger; starts watching the apiserver's
    /// Service and EndpointSlices (so it must be called on a Tokio runtime). Objects that cannot be
    /// decoded are reported to `skipped`.
    pub fn new(
        client: kube::Client,
        node_index: NodeIndex,
        machines: Option<MachineCache>,
        ledger: CsrLedger,
        skipped: Skipped,
        nodes_for_rules: bool,
    ) -> KubeCluster {
        let apiserver = ApiserverWatch::start(client.clone(), skipped.clone());
        KubeCluster {
            nodes: kube::Api::all(client),
            node_index,
            nodes_for_rules,
            watch_nodes: false,
            skipped,
            machines,
            ledger,
            apiserver,
            kubelet_dial: None,
        }
    }

    /// What is read of Node `name`, or none: from the watched Nodes while their watch is live,
    /// else (and for a Node whose projection is over the rules' bound, or that the watch has not
    /// seen: machine mode approves a client CSR only for a Node that does not exist) by a GET. One
    /// that cannot be decoded is reported and an error, so what needs it is retried, never decided
    /// without it.
    async fn node_facts(&self, name: &str) -> Result<Option<Arc<NodeFacts>>, ClusterError> {
        if self.watch_nodes {
            self.node_index.watch();
        }
        match self.node_index.known(name) {
            Known::Live(Some(facts)) if !facts.over_rules_bound => return Ok(Some(facts)),
            Known::Undecodable(why) => return Err(ClusterError::Request(RequestError::new(why))),
            Known::Live(_) | Known::Unknown => {}
        }
        match self.nodes.get_opt(name).await.map_err(failed)? {
            None => Ok(None),
            Some(Decoded::Object(node)) => Ok(Some(Arc::new(NodeFacts::read(&node, self.nodes_for_rules)))),
            Some(Decoded::Undecodable(undecodable)) => {
                Err(ClusterError::Request(RequestError::new(self.skipped.report(ObjectKind::Node, &undecodable))))
            }
        }
    }

    /// The same view, watching every Node from its first read of one, so a CSR's Node and its
    /// kubelet are read from the watched Nodes rather than by a GET each (the controller's: a
    /// one-shot command reads a Node by a GET, and a standby reads none).
    pub fn watching_nodes(self) -> KubeCluster {
        KubeCluster { watch_nodes: true, ..self }
    }

    /// The same view, dialling kubelets only where the rules allow and verifying the certificates
    /// they serve against the bundle (renewals are evidenced only with one).
    pub fn with_kubelet_dial(self, dial: Option<(KubeletServingCa, KubeletDialRules)>) -> KubeCluster {
        KubeCluster { kubelet_dial: dial, ..self }
    }

    /// Resolves once the apiserver's addresses have been listed (or their watch failed), at
    /// most after `limit`: every evaluation waits so, for [`APISERVER_FIRST_ANSWER`]; `check`,
    /// which starts the watches just before it evaluates, waits longer.
    pub async fn apiserver_first_answer(&self, limit: std::time::Duration) {
        self.apiserver.first_answer(limit).await;
    }

    /// Keeps the pending-brake gauges current (machine mode), every second: `report` is given the
    /// pending count and the brake's limit.
    pub async fn report_pending_brake(self, delta: u32, report: impl Fn(usize, usize)) {
        loop {
            if let Ok(load) = self.load().await {
                report(load.pending, brake_limit(&load, delta));
            }
            tokio::time::sleep(BRAKE_REPORT_PERIOD).await;
        }
    }
}

/// A request of the view that failed, its error kept whole.
fn failed(error: kube::Error) -> ClusterError {
    ClusterError::Request(RequestError::new(error))
}

/// How long an evaluation waits for the apiserver's addresses to be first listed (right after
/// start) before the CSR is retried as `ClusterUnavailable`.
const APISERVER_FIRST_ANSWER: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the one-shot commands (`check NAME`, `audit`) wait for the apiserver's addresses to be
/// first listed before going on without them (a kubelet whose address cannot be told apart from
/// the apiserver's is then not dialled).
pub const COMMAND_APISERVER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How often the pending-brake gauges are brought up to date.
const BRAKE_REPORT_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

impl ClusterView for KubeCluster {
    async fn node(&self, name: &str) -> Result<Option<NodeInfo>, ClusterError> {
        let Some(facts) = self.node_facts(name).await? else { return Ok(None) };
        Ok(Some(facts.node_info().map_err(|error| ClusterError::Request(RequestError::new(error)))?))
    }

    async fn machines(&self) -> Result<Vec<Arc<MachineInfo>>, ClusterError> {
        Ok(self.machines.as_ref().map(MachineCache::machines).unwrap_or_default())
    }

    async fn load(&self) -> Result<BrakeInputs, ClusterError> {
        Ok(self.machines.as_ref().map_or(BrakeInputs::default(), |cache| BrakeInputs {
            pending: self.ledger.pending(jiff::Timestamp::now(), &cache.machines()),
            machines: cache.machine_count(),
            nodes: self.node_index.count(),
        }))
    }

    async fn apiserver_addresses(&self) -> Result<ApiserverAddresses, ClusterError> {
        self.apiserver.first_answer(APISERVER_FIRST_ANSWER).await;
        self.apiserver.addresses()
    }

    /// From the watched Nodes' addresses: a lookup, whatever the number of Nodes.
    async fn nodes_claiming(&self, ips: &[IpAddr]) -> Result<Vec<AddressClaim>, ClusterError> {
        self.node_index.claims(ips).await
    }

    async fn client_certificates(&self, node: &str) -> Result<Vec<String>, ClusterError> {
        Ok(self.machines.as_ref().map(|_| self.ledger.client_certificates(node)).unwrap_or_default())
    }

    async fn serving_csrs(&self, requester: &str) -> Result<Vec<ServingCsr>, ClusterError> {
        Ok(self.ledger.serving_csrs(requester))
    }

    async fn kubelet_certificate(&self, name: &str) -> Result<KubeletCertificate, ClusterError> {
        let Some((ca, rules)) = &self.kubelet_dial else {
            return Ok(KubeletCertificate::Unusable("--kubelet-serving-ca-file is not set".into()));
        };
        let Some(node) = self.node_facts(name).await? else {
            return Ok(KubeletCertificate::Unusable(format!("Node {name:?} does not exist")));
        };
        let addresses = &node.info.addresses;
        let undialled = undialled_apiserver_addresses(self, name, addresses).await?;
        Ok(served_by(node.kubelet_port, addresses, ca, rules, &undialled).await)
    }
}

/// A fixed set of objects standing in for the cluster (`check --objects`).
#[derive(Debug, Clone, Default)]
pub struct StaticCluster {
    nodes: HashMap<String, NodeInfo>,
    machines: Vec<Arc<MachineInfo>>,
    pending: usize,
    apiserver: ApiserverAddresses,
    /// `(node name, CSR name)` of each approved client CSR.
    client_certificates: Vec<(String, String)>,
    /// The certificate chain each node's kubelet serves, the bundle they are verified against
    /// and when.
    kubelets: Option<(HashMap<String, Vec<CertificateDer<'static>>>, KubeletServingCa, jiff::Timestamp)>,
}

impl StaticCluster {
    /// A cluster holding exactly these Nodes and Machines, with `pending` pending node CSRs.
    pub fn new(
        nodes: impl IntoIterator<Item = NodeInfo>,
        machines: impl IntoIterator<Item = MachineInfo>,
        pending: usize,
    ) -> StaticCluster {
        StaticCluster {
            nodes: nodes.into_iter().map(|n| (n.name.clone(), n)).collect(),
            machines: machines.into_iter().map(Arc::new).collect(),
            pending,
            apiserver: ApiserverAddresses::default(),
            client_certificates: Vec::new(),
            kubelets: None,
        }
    }

    /// The same cluster whose kubelets serve these chains (leaf first), by node name, verified
    /// against `ca` at `now`.
    pub fn with_kubelet_certificates(
        self,
        served: HashMap<String, Vec<CertificateDer<'static>>>,
        ca: KubeletServingCa,
        now: jiff::Timestamp,
    ) -> StaticCluster {
        StaticCluster { kubelets: Some((served, ca, now)), ..self }
    }

    /// The same cluster with these apiserver addresses (from the `default/kubernetes` Service and
    /// its EndpointSlices given; none when they were not).
    pub fn with_apiserver(self, apiserver: ApiserverAddresses) -> StaticCluster {
        StaticCluster { apiserver, ..self }
    }

    /// The same cluster with these approved client CSRs, as `(node name, CSR name)`.
    pub fn with_client_certificates(self, issued: impl IntoIterator<Item = (String, String)>) -> StaticCluster {
        StaticCluster { client_certificates: issued.into_iter().collect(), ..self }
    }
}

impl ClusterView for StaticCluster {
    async fn node(&self, name: &str) -> Result<Option<NodeInfo>, ClusterError> {
        Ok(self.nodes.get(name).cloned())
    }

    async fn machines(&self) -> Result<Vec<Arc<MachineInfo>>, ClusterError> {
        Ok(self.machines.clone())
    }

    async fn load(&self) -> Result<BrakeInputs, ClusterError> {
        Ok(BrakeInputs { pending: self.pending, machines: self.machines.len(), nodes: self.nodes.len() })
    }

    async fn apiserver_addresses(&self) -> Result<ApiserverAddresses, ClusterError> {
        Ok(self.apiserver.clone())
    }

    async fn nodes_claiming(&self, ips: &[IpAddr]) -> Result<Vec<AddressClaim>, ClusterError> {
        let mut claims = unclaimed(ips);
        for node in self.nodes.values() {
            let labels = node.object.as_deref().and_then(|object| object["metadata"]["labels"].as_object());
            let control_plane = labels.is_some_and(|labels| labels.contains_key(CONTROL_PLANE_LABEL));
            claim(&mut claims, &node.name, control_plane, node.addresses.iter().map(|a| a.address.as_str()));
        }
        Ok(claims)
    }

    async fn client_certificates(&self, node: &str) -> Result<Vec<String>, ClusterError> {
        Ok(self
            .client_certificates
            .iter()
            .filter(|(issued_for, _)| issued_for == node)
            .map(|(_, csr)| csr.clone())
            .collect())
    }

    /// None: `check --file` reads no cluster, so no CSR is superseded or waits for a newer one
    /// (docs/check.md).
    async fn serving_csrs(&self, _: &str) -> Result<Vec<ServingCsr>, ClusterError> {
        Ok(Vec::new())
    }

    async fn kubelet_certificate(&self, name: &str) -> Result<KubeletCertificate, ClusterError> {
        let Some((served, ca, now)) = &self.kubelets else {
            return Ok(KubeletCertificate::Unusable("--kubelet-serving-ca-file is not set".into()));
        };
        Ok(match (self.nodes.get(name), served.get(name)) {
            (None, _) => KubeletCertificate::Unusable(format!("Node {name:?} is not in --objects")),
            (Some(_), None) => KubeletCertificate::Unusable(format!("no --kubelet-certificate for node {name:?}")),
            (Some(node), Some(chain)) => served_offline(chain, &node.addresses, ca, *now),
        })
    }
}

/// One claim per address in `ips`, by no Node yet.
fn unclaimed(ips: &[IpAddr]) -> Vec<AddressClaim> {
    ips.iter().map(|ip| AddressClaim { ip: *ip, nodes: Vec::new(), control_plane: Vec::new() }).collect()
}

/// Adds Node `name` (carrying the control-plane role label or not) to the claim of every address
/// among `addresses` (as written in its status).
fn claim<'a>(
    claims: &mut [AddressClaim],
    name: &str,
    control_plane: bool,
    addresses: impl Iterator<Item = &'a str> + Clone,
) {
    for claim in claims.iter_mut() {
        if addresses.clone().any(|address| same_ip(address, &claim.ip)) {
            claim.nodes.push(name.to_owned());
            if control_plane {
                claim.control_plane.push(name.to_owned());
            }
        }
    }
}
