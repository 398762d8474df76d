//! A Node as the approver reads it ([`NodeObject`]): its metadata as [`Meta`], its spec as plain
//! JSON (only the rules of `--rules` see it), and of its status only the addresses and the
//! kubelet's port. A node writes its own status and may write managedFields into its own Node;
//! none of what it writes elsewhere (heartbeat and condition times, images, volumes, …) is read,
//! so it cannot make its Node undecodable for the approver, and a Node that still cannot be read
//! is skipped alone ([`crate::kubernetes::decoded`]).

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeDaemonEndpoints};
use serde::Deserialize;

use crate::kubernetes::object_fields::{Meta, resource_of};

/// A Node: what decisions, the kubelet's dial and the rules read of it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct NodeObject {
    /// Its metadata ([`Meta`]).
    pub metadata: Meta,
    /// spec, as the apiserver wrote it: only the rules see it.
    pub spec: Option<serde_json::Value>,
    /// The parts of status the approver reads.
    pub status: Option<NodeStatus>,
}

resource_of!(NodeObject, Node);

/// The parts of a Node's status the approver reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// status.addresses.
    pub addresses: Option<Vec<NodeAddress>>,
    /// status.daemonEndpoints: the kubelet's port.
    pub daemon_endpoints: Option<NodeDaemonEndpoints>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::decoded::Decoded;

    /// A Node whose kubelet wrote a time kube-apiserver serves with a five-digit year into its
    /// heartbeat, a condition and a managedFields entry.
    fn poisoned() -> serde_json::Value {
        let year_10000 = "10000-01-01T04:00:00Z";
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n1", "uid": "u1", "resourceVersion": "5", "creationTimestamp": "2026-11-29T04:00:00Z",
                "labels": {"kubernetes.io/hostname": "n1"},
                "managedFields": [{"manager": "kubelet", "operation": "Update", "time": year_10000}],
            },
            "spec": {"podCIDR": "10.244.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": year_10000}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": year_10000, "lastTransitionTime": year_10000}],
            },
        })
    }

    #[test]
    fn a_node_that_wrote_five_digit_years_into_its_own_object_is_read() {
        assert!(serde_json::from_value::<Node>(poisoned()).is_err(), "k8s-openapi's Node fails on it");
        let decoded: Decoded<NodeObject> = serde_json::from_value(poisoned()).unwrap();
        let Decoded::Object(node) = decoded else { panic!("not decoded: {decoded:?}") };
        assert_eq!(node.metadata.0.name.as_deref(), Some("n1"));
        let status = node.status.unwrap();
        let addresses: Vec<&str> = status.addresses.iter().flatten().map(|a| a.address.as_str()).collect();
        assert_eq!(addresses, ["10.0.0.1", "n1"]);
        assert_eq!(status.daemon_endpoints.and_then(|d| d.kubelet_endpoint).map(|e| e.port), Some(10250));
        assert_eq!(node.spec.unwrap()["taints"][0]["timeAdded"], "10000-01-01T04:00:00Z", "the rules see it as text");
    }
}
