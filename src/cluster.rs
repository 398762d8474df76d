//! The [`ClusterView`]: Node lookups the policy needs, from a live cluster or from files.

use std::collections::HashMap;
use std::future::Future;

use k8s_openapi::api::core::v1::Node;

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

/// Read access to the cluster objects decisions depend on.
pub trait ClusterView: Send + Sync {
    /// The Node named `name`, or `None` when it does not exist.
    fn node(&self, name: &str) -> impl Future<Output = Result<Option<NodeInfo>, ClusterError>> + Send;
}

/// The live cluster: one GET per Node asked for.
#[derive(Clone)]
pub struct KubeCluster {
    nodes: kube::Api<Node>,
}

impl KubeCluster {
    /// Reads Nodes through `client`.
    pub fn new(client: kube::Client) -> KubeCluster {
        KubeCluster { nodes: kube::Api::all(client) }
    }
}

impl ClusterView for KubeCluster {
    async fn node(&self, name: &str) -> Result<Option<NodeInfo>, ClusterError> {
        let node = self.nodes.get_opt(name).await.map_err(|e| ClusterError(e.to_string()))?;
        Ok(node.as_ref().map(NodeInfo::from))
    }
}

/// A fixed set of objects standing in for the cluster (`check --objects`).
#[derive(Debug, Clone, Default)]
pub struct StaticCluster {
    nodes: HashMap<String, NodeInfo>,
}

impl StaticCluster {
    /// A cluster holding exactly these Nodes.
    pub fn new(nodes: impl IntoIterator<Item = NodeInfo>) -> StaticCluster {
        StaticCluster { nodes: nodes.into_iter().map(|n| (n.name.clone(), n)).collect() }
    }
}

impl ClusterView for StaticCluster {
    async fn node(&self, name: &str) -> Result<Option<NodeInfo>, ClusterError> {
        Ok(self.nodes.get(name).cloned())
    }
}
