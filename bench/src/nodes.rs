//! The storm's Nodes (`--storm-nodes N`): N Node objects of a real cluster's size, created
//! concurrently before the storm's CSRs, the first [`CONTROL_PLANES`] of them control-plane nodes
//! whose addresses an EndpointSlice of Service `default/kubernetes` lists; and the rules file the
//! approver then runs with, whose rule reads `node`.
//!
//! Node `i` is `node-<i>` with the address of its CSRs ([`node_ip`]) as InternalIP and its DNS
//! name as Hostname, as a cloud provider's node controller writes them; ten labels as kubeadm and
//! a cloud provider set; and a status of about 4 KiB: capacity and allocatable, five conditions,
//! nodeInfo, the kubelet's endpoint and twelve images.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use node_csr_approver::policy::CONTROL_PLANE_LABEL;
use serde_json::json;

use crate::csrs::{MAX_NODES, node_ip};

/// Control-plane nodes: the first three.
pub const CONTROL_PLANES: usize = 3;

/// The label every bench Node carries (outside what a kubelet may set on its own Node), which the
/// rule requires.
const POOL_LABEL: &str = "node-restriction.kubernetes.io/pool";

/// The rules file: one rule, reading the Node.
const RULES: &str = "rules:
  - name: bench-pool
    expression: node != null && node.metadata.labels['node-restriction.kubernetes.io/pool'] == 'bench'
    message: a bench node carries the bench pool label
";

/// Creating the Nodes: how many, how long, the size of one.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Created {
    /// Nodes created.
    pub nodes: usize,
    /// Creating them (and the EndpointSlice), s.
    pub seconds: f64,
    /// Nodes per second.
    pub per_second: f64,
    /// The JSON of one worker Node as created, bytes.
    pub node_json_bytes: usize,
    /// Ours ran with a rule that reads `node` (else `--verify-node-addresses` alone).
    pub node_rule: bool,
}

/// Node `i` as a cloud-provisioned kubeadm cluster's Node looks.
pub fn node(i: usize) -> Result<Node> {
    let name = format!("node-{i}");
    let zone = ["a", "b", "c"][i % 3];
    let mut labels = json!({
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": "m6i.2xlarge",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "m6i.2xlarge",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": format!("eu-west-1{zone}"),
        POOL_LABEL: "bench",
    });
    if i < CONTROL_PLANES {
        labels[CONTROL_PLANE_LABEL] = json!("");
    }
    let time = "2026-01-01T00:00:00Z";
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "lastHeartbeatTime": time, "lastTransitionTime": time,
               "reason": reason, "message": message})
    };
    let resources = json!({"cpu": "8", "ephemeral-storage": "101430960Ki", "hugepages-1Gi": "0",
                           "hugepages-2Mi": "0", "memory": "32408512Ki", "pods": "110"});
    let images: Vec<_> = (0..12)
        .map(|k| {
            json!({"names": [format!("registry.example.com/platform/component-{k}@sha256:{:064x}", k + 1),
                             format!("registry.example.com/platform/component-{k}:v1.{k}.0")],
                   "sizeBytes": 10_000_000 + k * 1_234_567})
        })
        .collect();
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock",
            },
        },
        "spec": {
            "podCIDR": format!("{}/28", Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + 16 * i as u32)),
            "providerID": format!("aws:///eu-west-1{zone}/i-{i:017x}"),
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": node_ip(i).to_string()},
                {"type": "Hostname", "address": format!("{name}.nodes.example.com")},
            ],
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                condition("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"),
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": format!("{i:08x}-0000-4000-8000-000000000000"),
                "containerRuntimeVersion": "containerd://2.1.4",
                "kernelVersion": "6.12.0-1012-aws",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.37.2",
                "machineID": format!("{i:032x}"),
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04.3 LTS",
                "systemUUID": format!("ec2{i:05x}-0000-4000-8000-000000000000"),
            },
            "images": images,
        },
    });
    serde_json::from_value(node).context("building a Node")
}

/// Creates Nodes `0..nodes`, `concurrency` at a time, then the EndpointSlice of
/// `default/kubernetes` listing the control-plane nodes' addresses.
pub async fn create(admin: &Client, nodes: usize, concurrency: usize) -> Result<Created> {
    anyhow::ensure!(nodes <= MAX_NODES, "at most {MAX_NODES} nodes fit the address plan");
    let api = Api::<Node>::all(admin.clone());
    let started = Instant::now();
    futures::stream::iter(0..nodes)
        .map(|i| {
            let api = &api;
            async move {
                api.create(&PostParams::default(), &node(i)?).await.with_context(|| format!("creating Node node-{i}"))
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await?;
    Api::<EndpointSlice>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &endpoint_slice(nodes.min(CONTROL_PLANES)))
        .await
        .context("creating the EndpointSlice of default/kubernetes")?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(Created {
        nodes,
        seconds,
        per_second: nodes as f64 / seconds.max(1e-9),
        node_json_bytes: serde_json::to_vec(&node(CONTROL_PLANES)?)?.len(),
        node_rule: true,
    })
}

/// An EndpointSlice of Service `default/kubernetes` listing the first `control_planes` nodes'
/// addresses: the apiservers they run.
fn endpoint_slice(control_planes: usize) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some("kubernetes-bench".into()),
            labels: Some([("kubernetes.io/service-name".to_owned(), "kubernetes".to_owned())].into()),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: (0..control_planes)
            .map(|i| Endpoint { addresses: vec![node_ip(i).to_string()], ..Endpoint::default() })
            .collect(),
        ports: None,
    }
}

/// Writes the rules file into `dir` and returns its path.
pub fn write_rules(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("rules.yaml");
    std::fs::write(&path, RULES).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_lists_its_csrs_addresses_and_weighs_a_few_kib() {
        let worker = node(1234).unwrap();
        let addresses = worker.status.as_ref().and_then(|s| s.addresses.clone()).unwrap_or_default();
        let listed: Vec<_> = addresses.iter().map(|a| (a.type_.as_str(), a.address.as_str())).collect();
        assert_eq!(
            listed,
            [("InternalIP", node_ip(1234).to_string().as_str()), ("Hostname", "node-1234.nodes.example.com")]
        );
        let labels = worker.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.len(), 10);
        assert_eq!(labels.get(POOL_LABEL).map(String::as_str), Some("bench"));
        assert!(!labels.contains_key(CONTROL_PLANE_LABEL));
        let bytes = serde_json::to_vec(&worker).unwrap().len();
        assert!((3_000..8_000).contains(&bytes), "{bytes} bytes");
        assert!(node(2).unwrap().metadata.labels.unwrap_or_default().contains_key(CONTROL_PLANE_LABEL));
        assert!(!node(3).unwrap().metadata.labels.unwrap_or_default().contains_key(CONTROL_PLANE_LABEL));
        let slice = endpoint_slice(CONTROL_PLANES);
        let listed: Vec<_> = slice.endpoints.iter().flat_map(|e| e.addresses.clone()).collect();
        assert_eq!(listed, ["10.0.1.1", "10.0.1.2", "10.0.1.3"]);
        assert!(RULES.contains(POOL_LABEL));
    }
}
