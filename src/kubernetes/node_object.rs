//! A Node as the approver reads it ([`NodeObject`]): its metadata as [`Meta`], its spec as plain
//! JSON (only the rules of `--rules` see it), and of its status only the addresses and the
//! kubelet's port; and what decisions, the kubelet's dial and the claims of addresses read of it
//! ([`NodeFacts`]), as a GET reads it or as the watched index keeps it. A node writes its own status and may write managedFields into its own Node;
//! none of what it writes elsewhere (heartbeat and condition times, images, volumes, …) is read,
//! so it cannot make its Node undecodable for the approver, and a Node that still cannot be read
//! is skipped alone ([`crate::kubernetes::decoded`]).

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeDaemonEndpoints};
use serde::Deserialize;

use crate::kubernetes::object_fields::{Meta, resource_of};
use crate::policy::{self, CONTROL_PLANE_LABEL, NodeInfo, node_projection};

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

impl NodeObject {
    /// The addresses of its status.
    pub fn addresses(&self) -> Vec<policy::NodeAddress> {
        let addresses = self.status.iter().flat_map(|status| status.addresses.iter().flatten());
        addresses.map(|a| policy::NodeAddress { kind: a.type_.clone(), address: a.address.clone() }).collect()
    }

    /// `status.daemonEndpoints.kubeletEndpoint.Port`, as written.
    pub fn kubelet_port(&self) -> Option<i32> {
        let endpoints = self.status.as_ref().and_then(|status| status.daemon_endpoints.as_ref());
        endpoints.and_then(|endpoints| endpoints.kubelet_endpoint.as_ref()).map(|endpoint| endpoint.port)
    }
}

/// The parts of a Node's status the approver reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// status.addresses.
    pub addresses: Option<Vec<NodeAddress>>,
    /// status.daemonEndpoints: the kubelet's port.
    pub daemon_endpoints: Option<NodeDaemonEndpoints>,
}

/// What is read of one Node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    /// Its name, its status's addresses and, when the rules read Nodes and it was read by a GET,
    /// what they may see of it.
    pub info: NodeInfo,
    /// Kept by the index when the rules read Nodes: their projection of it as compact JSON text,
    /// a fraction of the memory of the parsed object, parsed again when a CSR needs it.
    projection: Option<Box<str>>,
    /// Its uid, which the audit's Events about it name.
    pub uid: Option<Box<str>>,
    /// Whether it carries the control-plane role label (which no kubelet can set on itself).
    pub control_plane: bool,
    /// `status.daemonEndpoints.kubeletEndpoint.Port`, as written.
    pub kubelet_port: Option<i32>,
    /// The rules read Nodes and this one's projection is over their bound: it was not kept, and
    /// the Node is read whole when asked, so the rules refuse it as they refuse one read.
    pub over_rules_bound: bool,
}

impl NodeFacts {
    /// The facts of `node` as a GET read it: with the parts of its object the rules may see, as
    /// written (the core projects and bounds them), when `for_rules`.
    pub fn read(node: &NodeObject, for_rules: bool) -> NodeFacts {
        let mut info = node_info(node);
        if !for_rules {
            info.object = None;
        }
        NodeFacts {
            info,
            projection: None,
            uid: node.metadata.0.uid.as_deref().map(Box::from),
            control_plane: control_plane(node),
            kubelet_port: node.kubelet_port(),
            over_rules_bound: false,
        }
    }

    /// The facts of `node` as the index keeps them: when `for_rules`, only the rules' projection
    /// of its object ([`node_projection`], bounded) as text, or nothing when it is over that bound.
    pub fn kept(node: &NodeObject, for_rules: bool) -> NodeFacts {
        let mut facts = NodeFacts::read(node, for_rules);
        if let Some(object) = facts.info.object.take() {
            match node_projection(&object) {
                Some(projection) => facts.projection = Some(projection.to_string().into_boxed_str()),
                None => facts.over_rules_bound = true,
            }
        }
        facts
    }

    /// What decisions read of it, with the rules' projection parsed when it was kept.
    pub fn node_info(&self) -> Result<NodeInfo, serde_json::Error> {
        let mut info = self.info.clone();
        if let Some(projection) = &self.projection {
            info.object = Some(Arc::new(serde_json::from_str(projection)?));
        }
        Ok(info)
    }

    /// Its addresses that are IP addresses, canonical (an address with spaces around it counts,
    /// as the checks read it).
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let parsed = self.info.addresses.iter().filter_map(|a| a.address.trim().parse::<IpAddr>().ok());
        parsed.map(|ip| ip.to_canonical())
    }
}

/// Whether `node` carries the control-plane role label.
fn control_plane(node: &NodeObject) -> bool {
    node.metadata.0.labels.as_ref().is_some_and(|labels| labels.contains_key(CONTROL_PLANE_LABEL))
}

/// The parts of a Node that decisions read, and for the rules of `--rules` the parts of its object
/// they may see (its metadata's name, uid, creation time, labels and annotations, its spec and its
/// status's addresses: the core projects them further and bounds their size).
pub fn node_info(node: &NodeObject) -> NodeInfo {
    let addresses = node.addresses();
    let metadata = &node.metadata.0;
    let object = serde_json::json!({
        "metadata": {
            "name": metadata.name, "uid": metadata.uid, "creationTimestamp": metadata.creation_timestamp,
            "labels": metadata.labels, "annotations": metadata.annotations,
        },
        "spec": node.spec,
        "status": {"addresses": node.status.as_ref().and_then(|status| status.addresses.as_ref())},
    });
    NodeInfo { name: metadata.name.clone().unwrap_or_default(), addresses, object: Some(Arc::new(object)) }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::DaemonEndpoint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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

    fn node(annotation: &str) -> NodeObject {
        let labels = [(CONTROL_PLANE_LABEL.to_owned(), String::new()), ("zone".to_owned(), "a".to_owned())];
        NodeObject {
            metadata: Meta(ObjectMeta {
                name: Some("n1".into()),
                labels: Some(labels.into()),
                annotations: Some([("note".to_owned(), annotation.to_owned())].into()),
                ..ObjectMeta::default()
            }),
            spec: Some(serde_json::json!({"podCIDR": "10.244.0.0/24", "configSource": {"x": 1}})),
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress { type_: "InternalIP".into(), address: " ::ffff:10.0.0.1".into() },
                    NodeAddress { type_: "Hostname".into(), address: "n1".into() },
                ]),
                daemon_endpoints: Some(NodeDaemonEndpoints { kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }) }),
            }),
        }
    }

    #[test]
    fn a_node_read_keeps_its_object_for_the_rules_only_when_they_read_it() {
        let read = NodeFacts::read(&node("x"), true);
        assert_eq!(read.info, node_info(&node("x")));
        assert!(read.control_plane);
        assert_eq!(read.kubelet_port, Some(10250));
        assert_eq!(read.ips().collect::<Vec<_>>(), ["10.0.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(NodeFacts::read(&node("x"), false).info.object, None);
    }

    #[test]
    fn a_node_kept_holds_what_the_rules_see_of_it_and_they_see_the_same() {
        let (read, kept) = (NodeFacts::read(&node("x"), true), NodeFacts::kept(&node("x"), true));
        let seen = |facts: &NodeFacts| facts.node_info().unwrap().object.as_deref().and_then(node_projection);
        assert_eq!(seen(&kept), seen(&read));
        assert!(seen(&kept).is_some());
        assert_eq!(kept.info.object, None, "kept as text only");
        let object = kept.node_info().unwrap().object.unwrap();
        assert_eq!(object["spec"].get("configSource"), None, "only the projection is kept");
        assert_eq!(NodeFacts::kept(&node("x"), false).node_info().unwrap().object, None);
    }

    #[test]
    fn a_node_over_the_rules_bound_is_kept_without_its_object_and_marked() {
        let kept = NodeFacts::kept(&node(&"x".repeat(70_000)), true);
        assert!(kept.over_rules_bound);
        assert_eq!(kept.node_info().unwrap().object, None);
        assert_eq!(kept.info.addresses.len(), 2, "its addresses still claim");
        assert!(!NodeFacts::kept(&node("x"), true).over_rules_bound);
        assert!(!NodeFacts::kept(&node(&"x".repeat(70_000)), false).over_rules_bound, "not read: not over");
    }
}
