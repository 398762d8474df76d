//! The [`ClusterView`]: the Nodes and Machines the policy needs, from a live cluster or from files.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use crate::config::MachineApi;
use crate::machines::MachineCache;

/// A cluster read that failed; always transient for the policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cluster read failed: {0}")]
pub struct ClusterError(pub String);

/// One entry of a Node's `status.addresses`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    /// The address type, e.g. `InternalIP` or `Hostname`.
    pub kind: String,
    /// The address as written.
    pub address: String,
}

/// A Node reduced to what decisions need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// metadata.name.
    pub name: String,
    /// status.addresses.
    pub addresses: Vec<NodeAddress>,
}

impl From<&Node> for NodeInfo {
    fn from(node: &Node) -> NodeInfo {
        let addresses = node
            .status
            .iter()
            .flat_map(|status| status.addresses.iter().flatten())
            .map(|a| NodeAddress { kind: a.type_.clone(), address: a.address.clone() })
            .collect();
        NodeInfo { name: node.metadata.name.clone().unwrap_or_default(), addresses }
    }
}

/// A Machine (OpenShift or Cluster API) reduced to what decisions need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineInfo {
    /// `namespace/name`, for messages.
    pub id: String,
    /// metadata.creationTimestamp.
    pub created: Option<Timestamp>,
    /// status.nodeRef.name.
    pub node_ref: Option<String>,
    /// status.addresses.
    pub addresses: Vec<NodeAddress>,
}

impl MachineInfo {
    /// Reads a Machine of either API from its JSON form; `None` when it is not a Machine of a
    /// supported API.
    pub fn from_value(value: &serde_json::Value) -> Option<MachineInfo> {
        let api_version = value.get("apiVersion")?.as_str()?;
        let group = api_version.split('/').next()?;
        if value.get("kind")?.as_str()? != "Machine" || !MachineApi::ALL.iter().any(|api| api.group() == group) {
            return None;
        }
        let metadata = value.get("metadata")?;
        let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
        let name = text(metadata.get("name"))?;
        let namespace = text(metadata.get("namespace")).unwrap_or_default();
        let created = text(metadata.get("creationTimestamp")).and_then(|t| t.parse().ok());
        Some(MachineInfo::from_status(format!("{namespace}/{name}"), created, value.get("status")))
    }

    /// A Machine from its identity, creation time and `status` object.
    pub fn from_status(id: String, created: Option<Timestamp>, status: Option<&serde_json::Value>) -> MachineInfo {
        let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
        let addresses = status
            .and_then(|s| s.get("addresses"))
            .and_then(|a| a.as_array())
            .into_iter()
            .flatten()
            .filter_map(|a| Some(NodeAddress { kind: text(a.get("type"))?, address: text(a.get("address"))? }))
            .collect();
        let node_ref = text(status.and_then(|s| s.get("nodeRef")).and_then(|r| r.get("name")));
        MachineInfo { id, created, node_ref, addresses }
    }
}

/// How busy machine mode is: the inputs of the pending brake.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Pending node CSRs younger than an hour.
    pub pending: usize,
    /// Machines.
    pub machines: usize,
    /// Nodes.
    pub nodes: usize,
}

/// Read access to the cluster objects decisions depend on.
pub trait ClusterView: Send + Sync {
    /// The Node named `name`, or `None` when it does not exist.
    fn node(&self, name: &str) -> impl Future<Output = Result<Option<NodeInfo>, ClusterError>> + Send;

    /// Every Machine of the configured APIs (none outside machine mode).
    fn machines(&self) -> impl Future<Output = Result<Vec<Arc<MachineInfo>>, ClusterError>> + Send;

    /// The inputs of the pending brake.
    fn load(&self) -> impl Future<Output = Result<Load, ClusterError>> + Send;
}

/// The live cluster: one GET per Node asked for; Machines and the brake's counts from the watched
/// caches of machine mode.
#[derive(Clone)]
pub struct KubeCluster {
    nodes: kube::Api<Node>,
    machines: Option<MachineCache>,
}

impl KubeCluster {
    /// Reads Nodes through `client`, and Machines from `machines` in machine mode.
    pub fn new(client: kube::Client, machines: Option<MachineCache>) -> KubeCluster {
        KubeCluster { nodes: kube::Api::all(client), machines }
    }
}

impl ClusterView for KubeCluster {
    async fn node(&self, name: &str) -> Result<Option<NodeInfo>, ClusterError> {
        let node = self.nodes.get_opt(name).await.map_err(|e| ClusterError(e.to_string()))?;
        Ok(node.as_ref().map(NodeInfo::from))
    }

    async fn machines(&self) -> Result<Vec<Arc<MachineInfo>>, ClusterError> {
        Ok(self.machines.as_ref().map(MachineCache::machines).unwrap_or_default())
    }

    async fn load(&self) -> Result<Load, ClusterError> {
        self.machines.as_ref().map_or(Ok(Load::default()), MachineCache::load)
    }
}

/// A fixed set of objects standing in for the cluster (`check --objects`).
#[derive(Debug, Clone, Default)]
pub struct StaticCluster {
    nodes: HashMap<String, NodeInfo>,
    machines: Vec<Arc<MachineInfo>>,
    pending: usize,
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
        }
    }
}

impl ClusterView for StaticCluster {
    async fn node(&self, name: &str) -> Result<Option<NodeInfo>, ClusterError> {
        Ok(self.nodes.get(name).cloned())
    }

    async fn machines(&self) -> Result<Vec<Arc<MachineInfo>>, ClusterError> {
        Ok(self.machines.clone())
    }

    async fn load(&self) -> Result<Load, ClusterError> {
        Ok(Load { pending: self.pending, machines: self.machines.len(), nodes: self.nodes.len() })
    }
}
