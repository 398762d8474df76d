//! The [`ClusterView`] port implemented twice: by the live cluster ([`KubeCluster`]) and by a fixed
//! set of objects read from files ([`StaticCluster`], for `check --objects`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use rustls::pki_types::CertificateDer;

use crate::kubelet_tls::KubeletServingCa;
use crate::kubernetes::apiserver::ApiserverWatch;
use crate::kubernetes::csr_ledger::CsrLedger;
use crate::kubernetes::kubelet_endpoint::{served_by, served_offline};
use crate::kubernetes::machines::MachineCache;
use crate::metrics::Metrics;
use crate::policy::{
    BrakeInputs, ClusterError, ClusterView, KubeletCertificate, MachineInfo, NodeAddress, NodeInfo, brake_limit,
    object_for_rules,
};

/// The live cluster: one GET per Node asked for; Machines and Nodes from the watched caches of
/// machine mode, the pending CSRs and approved client CSRs from the CSR cache ([`CsrLedger`]);
/// the apiserver's addresses from their own watch ([`ApiserverWatch`]); a kubelet's certificate
/// from a GET of its Node and a dial of the address that Node gives.
#[derive(Clone)]
pub struct KubeCluster {
    nodes: kube::Api<Node>,
    machines: Option<(MachineCache, CsrLedger)>,
    apiserver: ApiserverWatch,
    kubelet_ca: Option<KubeletServingCa>,
}

impl KubeCluster {
    /// Reads Nodes through `client`, and in machine mode Machines and Nodes from their caches and
    /// CSRs from the ledger; starts watching the apiserver's Service and EndpointSlices (so it must
    /// be called on a Tokio runtime).
    pub fn new(client: kube::Client, machines: Option<(MachineCache, CsrLedger)>) -> KubeCluster {
        let apiserver = ApiserverWatch::start(client.clone());
        KubeCluster { nodes: kube::Api::all(client), machines, apiserver, kubelet_ca: None }
    }

    /// The same view, verifying the certificates kubelets serve against `ca` (renewals are
    /// evidenced only with one).
    pub fn with_kubelet_ca(self, ca: Option<KubeletServingCa>) -> KubeCluster {
        KubeCluster { kubelet_ca: ca, ..self }
    }

    /// Resolves once the apiserver's addresses have been listed (or their watch failed), at
    /// most after `limit`: every evaluation waits so, for [`APISERVER_FIRST_ANSWER`]; `check`,
    /// which starts the watches just before it evaluates, waits longer.
    pub async fn apiserver_first_answer(&self, limit: std::time::Duration) {
        self.apiserver.first_answer(limit).await;
    }

    /// Keeps the pending-brake gauges current (machine mode), every second.
    pub async fn report_pending_brake(self, delta: u32, metrics: Metrics) {
        loop {
            if let Ok(load) = self.load().await {
                metrics.set_pending_brake(load.pending, brake_limit(&load, delta));
            }
            tokio::time::sleep(BRAKE_REPORT_PERIOD).await;
        }
    }
}

/// How long an evaluation waits for the apiserver's addresses to be first listed (right after
/// start) before the CSR is retried as `ClusterUnavailable`.
const APISERVER_FIRST_ANSWER: std::time::Duration = std::time::Duration::from_secs(2);

/// How often the pending-brake gauges are brought up to date.
const BRAKE_REPORT_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

impl ClusterView for KubeCluster {
    async fn node(&self, name: &str) -> Result<Option<NodeInfo>, ClusterError> {
        let node = self.nodes.get_opt(name).await.map_err(|e| ClusterError::Request(e.to_string()))?;
        Ok(node.as_ref().map(node_info))
    }

    async fn machines(&self) -> Result<Vec<Arc<MachineInfo>>, ClusterError> {
        Ok(self.machines.as_ref().map(|(cache, _)| cache.machines()).unwrap_or_default())
    }

    async fn load(&self) -> Result<BrakeInputs, ClusterError> {
        Ok(self.machines.as_ref().map_or(BrakeInputs::default(), |(cache, ledger)| BrakeInputs {
            pending: ledger.pending(jiff::Timestamp::now(), &cache.machines()),
            machines: cache.machine_count(),
            nodes: cache.node_count(),
        }))
    }

    async fn apiserver_addresses(&self) -> Result<Vec<IpAddr>, ClusterError> {
        self.apiserver.first_answer(APISERVER_FIRST_ANSWER).await;
        self.apiserver.addresses()
    }

    async fn client_certificates(&self, node: &str) -> Result<Vec<String>, ClusterError> {
        Ok(self.machines.as_ref().map(|(_, ledger)| ledger.client_certificates(node)).unwrap_or_default())
    }

    async fn kubelet_certificate(&self, name: &str) -> Result<KubeletCertificate, ClusterError> {
        let Some(ca) = &self.kubelet_ca else {
            return Ok(KubeletCertificate::Unusable("--kubelet-serving-ca-file is not set".into()));
        };
        let node = self.nodes.get_opt(name).await.map_err(|e| ClusterError::Request(e.to_string()))?;
        Ok(match node {
            Some(node) => served_by(&node, &node_info(&node).addresses, ca).await,
            None => KubeletCertificate::Unusable(format!("Node {name:?} does not exist")),
        })
    }
}

/// A fixed set of objects standing in for the cluster (`check --objects`).
#[derive(Debug, Clone, Default)]
pub struct StaticCluster {
    nodes: HashMap<String, NodeInfo>,
    machines: Vec<Arc<MachineInfo>>,
    pending: usize,
    apiserver: Vec<IpAddr>,
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
            apiserver: Vec::new(),
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
    pub fn with_apiserver(self, addresses: impl IntoIterator<Item = IpAddr>) -> StaticCluster {
        StaticCluster { apiserver: addresses.into_iter().collect(), ..self }
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

    async fn apiserver_addresses(&self) -> Result<Vec<IpAddr>, ClusterError> {
        Ok(self.apiserver.clone())
    }

    async fn client_certificates(&self, node: &str) -> Result<Vec<String>, ClusterError> {
        Ok(self
            .client_certificates
            .iter()
            .filter(|(issued_for, _)| issued_for == node)
            .map(|(_, csr)| csr.clone())
            .collect())
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

/// The parts of a Node that decisions read, and the whole object for the rules of `--rules`.
pub fn node_info(node: &Node) -> NodeInfo {
    let addresses = node
        .status
        .iter()
        .flat_map(|status| status.addresses.iter().flatten())
        .map(|a| NodeAddress { kind: a.type_.clone(), address: a.address.clone() })
        .collect();
    let object = serde_json::to_value(node).ok().map(object_for_rules);
    NodeInfo { name: node.metadata.name.clone().unwrap_or_default(), addresses, object }
}
