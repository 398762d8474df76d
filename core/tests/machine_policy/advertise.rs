//! Machine mode and an apiserver's advertise address: a Machine listing it is one more claimant,
//! by the node its `nodeRef` names (or by itself while it has none), beside the Nodes that list it.

use std::sync::Arc;

use node_csr_approver_core::policy::{
    AddressClaim, ApiserverAddresses, ClusterError, DecisionKind, Evidence, MachineInfo, Reason,
};

use super::{case, evidence, machine, n1_machine, serving_n1};
use crate::support::Request;
use crate::support::table::{Case, assert_all};

use DecisionKind::{Approve, Deny, Retry};

/// `machines`, 10.0.0.11 advertised in the slices, and these Nodes claiming it.
fn advertised(machines: Vec<Arc<MachineInfo>>, nodes: &[&str]) -> Evidence {
    let ip = "10.0.0.11".parse().unwrap();
    Evidence {
        apiserver: Some(Ok(ApiserverAddresses { service: vec!["10.0.0.1".parse().unwrap()], endpoints: vec![ip] })),
        address_claims: Some(Ok(vec![AddressClaim {
            ip,
            nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
            control_plane: Vec::new(),
        }])),
        ..evidence(machines)
    }
}

/// A Machine of node `node_ref` (or of none) at the advertise address.
fn at_advertise_address(node_ref: Option<&str>) -> Arc<MachineInfo> {
    machine(&[("InternalIP", "10.0.0.11")], node_ref)
}

fn cases() -> Vec<Case> {
    let request = || serving_n1(Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.11"));
    let deny = (Deny, Reason::ClusterIdentity);
    vec![
        case(
            "the node's Machine lists it, no Node does",
            request(),
            advertised(vec![n1_machine(Some("n1"))], &[]),
            (Approve, Reason::AutoApproved),
        ),
        case(
            "the node's Machine and Node list it",
            request(),
            advertised(vec![n1_machine(Some("n1"))], &["n1"]),
            (Approve, Reason::AutoApproved),
        ),
        case(
            "another node's Machine lists it too",
            request(),
            advertised(vec![n1_machine(Some("n1")), at_advertise_address(Some("n2"))], &["n1"]),
            (Retry, Reason::AdvertiseAddressContested),
        ),
        case(
            "a Machine without a Node lists it too",
            request(),
            advertised(vec![n1_machine(Some("n1")), at_advertise_address(None)], &[]),
            (Retry, Reason::AdvertiseAddressContested),
        ),
        case(
            "the node's Machine lists it, another Node too: the Machine tells",
            request(),
            advertised(vec![n1_machine(Some("n1"))], &["n1", "n2"]),
            (Approve, Reason::AutoApproved),
        ),
        case(
            "another node's Machine lists it, and the requester's Node",
            request(),
            advertised(
                vec![
                    n1_machine(Some("n1")),
                    machine(&[("InternalIP", "10.0.0.12")], Some("n2")),
                    at_advertise_address(Some("n2")),
                ],
                &["n1"],
            ),
            (Retry, Reason::AdvertiseAddressContested),
        ),
        case(
            "another node's Machine lists another address",
            request(),
            advertised(vec![n1_machine(Some("n1")), machine(&[("InternalIP", "10.0.0.12")], Some("n2"))], &["n1"]),
            (Approve, Reason::AutoApproved),
        ),
        case(
            "another Node lists it, the node's Machine tells",
            request(),
            advertised(vec![n1_machine(Some("n1"))], &["n2"]),
            (Approve, Reason::AutoApproved),
        ),
        case(
            "another node's Machine lists it as the node's does, no Node",
            request(),
            advertised(vec![n1_machine(Some("n1")), at_advertise_address(Some("n2"))], &[]),
            (Retry, Reason::AdvertiseAddressContested),
        ),
        case(
            "only another node's Machine lists it",
            request(),
            advertised(
                vec![machine(&[("InternalIP", "10.0.0.12")], Some("n1")), at_advertise_address(Some("n2"))],
                &[],
            ),
            deny,
        ),
        case(
            "the Machines cannot be read",
            request(),
            Evidence {
                machines: Some(Err(ClusterError::Request("forbidden".into()))),
                ..advertised(Vec::new(), &["n1"])
            },
            (Retry, Reason::ClusterUnavailable),
        ),
    ]
}

#[test]
fn an_advertise_address_is_the_one_claimant_s_whether_by_node_or_machine() {
    assert_all(&cases());
}
