//! [`ContainerCluster`]: a whole cluster whose node runs containers, as operators run theirs:
//! control plane, controller manager, scheduler, cluster DNS and one [`ContainerNode`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

use crate::cluster_dns::ClusterDns;
use crate::container_node::config::CONTROL_PLANE_ROLE;
use crate::container_node::{ContainerNode, ContainerNodeOptions};
use crate::kube_controller_manager::Signer;
use crate::kube_scheduler::Scheduler;
use crate::node_network::{AddressFamilies, NodeNetwork};
use crate::{ControlPlane, Error};

/// What [`ContainerCluster::start`] starts.
#[derive(Debug, Clone)]
pub struct ContainerClusterOptions {
    /// The node's name.
    pub node_name: String,
    /// OCI image archives the node imports before its kubelet starts.
    pub images: Vec<PathBuf>,
    /// Whether the node is shaped as kubeadm makes a control-plane node: the apiserver advertised
    /// on the node's own address (and reached there by pods), the node labelled
    /// `node-role.kubernetes.io/control-plane` and tainted `NoSchedule` for that role. Otherwise
    /// a worker, the apiserver advertised on the host end of the node's link.
    pub control_plane_node: bool,
    /// An OCI registry on this machine's loopback the node pulls images from
    /// ([`ContainerNodeOptions::registry`]).
    pub registry: Option<std::net::SocketAddr>,
}

impl ContainerClusterOptions {
    /// A worker node named `node_name` importing `images`, pulling from no registry.
    pub fn new(node_name: &str, images: Vec<PathBuf>) -> ContainerClusterOptions {
        ContainerClusterOptions { node_name: node_name.to_owned(), images, control_plane_node: false, registry: None }
    }
}

/// A cluster of one node that runs containers, in a [`NodeNetwork`] of its own: etcd and
/// kube-apiserver (with ServiceAccount admission, advertised where pods reach it),
/// kube-controller-manager with its default controllers, kube-scheduler, a [`ClusterDns`] on the
/// host end of the node's link, and the [`ContainerNode`]. Dropped in reverse: node first.
#[derive(Debug)]
pub struct ContainerCluster {
    node: ContainerNode,
    _dns: ClusterDns,
    _scheduler: Scheduler,
    controller_manager: Signer,
    control_plane: ControlPlane,
    network: Arc<NodeNetwork>,
}

impl ContainerCluster {
    /// Starts it all and waits until the node's kubelet is healthy (not until its Node is Ready:
    /// see [`ContainerCluster::wait_node_ready`]). Needs root, the tools of
    /// `scripts/build-tools.sh` and the programs of `scripts/install-node-runtime.sh`.
    pub async fn start(options: ContainerClusterOptions) -> Result<ContainerCluster, Error> {
        let network = Arc::new(
            tokio::task::spawn_blocking(|| NodeNetwork::create(AddressFamilies::Ipv4))
                .await
                .map_err(|error| Error::Unexpected(format!("creating the node network: {error}")))??,
        );
        let (Some(&node_ip), Some(&host_ip)) = (network.addresses().first(), network.host_addresses().first()) else {
            return Err(Error::Network("the node network has no addresses".to_owned()));
        };
        let advertised = if options.control_plane_node { node_ip } else { host_ip };
        let control_plane = ControlPlane::start_for_containers(advertised).await?;
        let controller_manager = control_plane.start_controller_manager().await?;
        let scheduler = control_plane.start_scheduler().await?;
        let dns = ClusterDns::start(host_ip, control_plane.admin_client().await?)?;
        let node_options = ContainerNodeOptions {
            node_name: options.node_name.clone(),
            network: Arc::clone(&network),
            images: options.images.clone(),
            cluster_dns: host_ip,
            control_plane_role: options.control_plane_node,
            registry: options.registry,
        };
        let node = control_plane.start_container_node(&node_options).await?;
        if options.control_plane_node {
            label_control_plane(&control_plane, &options.node_name).await?;
        }
        Ok(ContainerCluster { node, _dns: dns, _scheduler: scheduler, controller_manager, control_plane, network })
    }

    /// The control plane (its admin kubeconfig is what `helm` and `kubectl` use).
    pub fn control_plane(&self) -> &ControlPlane {
        &self.control_plane
    }

    /// The node.
    pub fn node(&self) -> &ContainerNode {
        &self.node
    }

    /// The node's network namespace.
    pub fn network(&self) -> &Arc<NodeNetwork> {
        &self.network
    }

    /// kube-controller-manager (its log tells what the signer and the workload controllers did).
    pub fn controller_manager(&self) -> &Signer {
        &self.controller_manager
    }

    /// Waits until the node's Node is `Ready` (the runtime's network is up: the CNI configuration
    /// is read), at most [`READY_TIMEOUT`].
    pub async fn wait_node_ready(&self) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(self.control_plane.admin_client().await?);
        let ready = |node: Option<&Node>| {
            node.and_then(|node| node.status.as_ref())
                .and_then(|status| status.conditions.as_ref())
                .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        };
        tokio::time::timeout(READY_TIMEOUT, await_condition(nodes, self.node.node_name(), ready))
            .await
            .map_err(|_| Error::Timeout(format!("node {} not Ready after {READY_TIMEOUT:?}", self.node.node_name())))?
            .map_err(|error| Error::Unexpected(format!("watching node {}: {error}", self.node.node_name())))?;
        Ok(())
    }
}

/// How long a node may take to become Ready once its kubelet is healthy.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Labels the Node `name` with the control-plane role once it has registered, as `kubeadm init`
/// does (a kubelet may not set that label itself).
async fn label_control_plane(control_plane: &ControlPlane, name: &str) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(control_plane.admin_client().await?);
    let registered = |node: Option<&Node>| node.is_some();
    tokio::time::timeout(READY_TIMEOUT, await_condition(nodes.clone(), name, registered))
        .await
        .map_err(|_| Error::Timeout(format!("node {name} not registered after {READY_TIMEOUT:?}")))?
        .map_err(|error| Error::Unexpected(format!("watching node {name}: {error}")))?;
    let patch = json!({"metadata": {"labels": {CONTROL_PLANE_ROLE: ""}}});
    nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}
