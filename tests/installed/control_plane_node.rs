//! A kubeadm-shaped control-plane node: the apiserver advertised on the kubelet's own address (the
//! `default/kubernetes` EndpointSlice lists it, and pods reach the apiserver there), the node
//! labelled and tainted for the control-plane role. The chart's default tolerations place the
//! approver on it, and its own serving CSR, whose IP SAN is that advertised address, is approved:
//! the node is the one Node that claims the address.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, ResourceExt};

use crate::support::installed::{
    self, can_run, decision, diagnose, install_or_panic, names, pods, running_and_ready, wait_issued_serving_csr,
};

/// kubeadm's label and taint of control-plane nodes.
const CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_nodes_serving_certificate_is_approved_by_the_pod_running_on_it() {
    let Some(_turn) = can_run().await else { return };
    let (cluster, release) = installed::cluster(true).await;
    let admin = cluster.control_plane().admin_client().await.unwrap();
    let node = Api::<Node>::all(admin.clone()).get(cluster.node().node_name()).await.unwrap();
    assert!(node.labels().contains_key(CONTROL_PLANE), "{:?}", node.labels());
    let taints = node.spec.and_then(|spec| spec.taints).unwrap_or_default();
    assert!(taints.iter().any(|t| t.key == CONTROL_PLANE && t.effect == "NoSchedule"), "{taints:?}");
    let slice = Api::<EndpointSlice>::namespaced(admin.clone(), "default").get("kubernetes").await.unwrap();
    let advertised: Vec<&String> = slice.endpoints.iter().flat_map(|endpoint| &endpoint.addresses).collect();
    assert_eq!(advertised, [&cluster.node().node_ip().to_string()], "the apiserver is not advertised on the node");
    let started = Instant::now();
    install_or_panic(&cluster, &release, &[]);
    let replicas = pods(&admin).await;
    assert!(replicas.iter().all(running_and_ready), "{:?}", names(&replicas));

    let csr = wait_issued_serving_csr(&admin, Duration::from_secs(60)).await;
    let csr =
        csr.unwrap_or_else(|| panic!("the control-plane node's serving CSR was not issued\n{}", diagnose(&cluster)));
    let (kind, reason) = decision(&csr).unwrap();
    assert_eq!(kind, "Approved", "{csr:?}");
    eprintln!("approved ({reason}) {:.1} s after the install", started.elapsed().as_secs_f64());
}
