//! An apiserver's advertise address (an address of the `default/kubernetes` EndpointSlices) that a
//! worker writes into its own status beside the control-plane node: the control-plane node, the
//! one claimant carrying the role label no kubelet can set, still gets its certificate; the worker
//! and every other node are denied; without the label the tie is retried with an Event, never
//! denied. However many CSRs name the address, the Nodes are listed once (the approver watches
//! them), not once per CSR.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use node_csr_approver::policy::CONTROL_PLANE_LABEL;
use testkit::request::Request;

use crate::harness::{Created, Expect, RECOVERY, Scenario, create_object, logs};
use crate::support::cluster::{SERIAL, events_for, unique};
use crate::verdict::{decided, decisions};

/// The advertise address, inside the tests' provider prefixes.
const ADVERTISED: &str = "10.0.0.72";
/// Nodes that list other addresses: a list per CSR would read all of them each time.
const OTHER_NODES: usize = 150;
/// Nodes asking for the advertise address, each denied.
const HOSTILE: usize = 20;

#[tokio::test]
async fn the_control_plane_label_breaks_a_tie_over_an_advertise_address_and_nodes_are_listed_once() {
    let _serial = SERIAL.lock().await;
    let Scenario { cp, admin, lease_name: _, lease: _, replicas, leader: _, nodes: _ } = Scenario::start(1).await;
    let proxy = &replicas[0].proxy;
    let base = unique("a");
    let slices = Api::<EndpointSlice>::namespaced(admin.clone(), "default");
    let slice = EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{base}-kubernetes")),
            labels: Some([("kubernetes.io/service-name".to_owned(), "kubernetes".to_owned())].into()),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: vec![Endpoint { addresses: vec![ADVERTISED.into()], ..Endpoint::default() }],
        ports: None,
    };
    slices.create(&PostParams::default(), &slice).await.unwrap();
    let (control_plane, worker) = (format!("{base}-cp"), format!("{base}-worker"));
    create_node(&admin, &control_plane, ADVERTISED, true).await;
    create_node(&admin, &worker, ADVERTISED, false).await;
    for i in 0..OTHER_NODES {
        create_node(&admin, &format!("{base}-other-{i:03}"), &format!("10.0.{}.{}", 10 + i / 200, 1 + i % 200), false)
            .await;
    }
    // The watch of the slice delivers it within moments; the CSRs come after it.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut denied = Vec::new();
    for i in 0..HOSTILE {
        let node = format!("{base}-h{i:02}");
        denied.push(create(&cp, &format!("{base}-hostile-{i:02}"), &node, Expect::Denied).await);
    }
    denied.push(create(&cp, &format!("{base}-worker-csr"), &worker, Expect::Denied).await);
    let own = create(&cp, &format!("{base}-cp-csr"), &control_plane, Expect::Approved).await;
    let done = Instant::now();
    let mut all = denied.clone();
    all.push(own);
    let report = decided(&admin, "an advertise address claimed twice", &all, done, "their creation", RECOVERY).await;
    let lists = proxy.gets_of("/api/v1/nodes");
    println!("Node lists for {} CSRs naming the advertise address among {} Nodes: {lists}", all.len(), OTHER_NODES + 2);
    report.assert_within(RECOVERY, || logs(&replicas));
    assert!(lists <= 2, "{lists} lists of every Node for {} CSRs: not one per CSR", all.len());

    // Without the label nothing a kubelet cannot write tells the two apart: retried, with an Event.
    let unlabel = serde_json::json!({"metadata": {"labels": {CONTROL_PLANE_LABEL: null}}});
    let nodes = Api::<Node>::all(admin.clone());
    nodes.patch(&control_plane, &PatchParams::default(), &Patch::Merge(&unlabel)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let contested = create(&cp, &format!("{base}-cp-csr-2"), &control_plane, Expect::Approved).await;
    let deadline = Instant::now() + RECOVERY;
    let event = loop {
        let events = events_for(&admin, &contested.name).await;
        if let Some(event) = events.into_iter().find(|e| e.reason.as_deref() == Some("AdvertiseAddressContested")) {
            break event;
        }
        assert!(Instant::now() < deadline, "no AdvertiseAddressContested event:\n{}", logs(&replicas));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let note = event.note.unwrap_or_default();
    assert!(note.contains(ADVERTISED) && note.contains(&worker) && note.contains(CONTROL_PLANE_LABEL), "{note}");
    let found = decisions(&admin).await;
    assert_eq!(found.get(&contested.name), Some(&Vec::new()), "a contested advertise address is retried, never denied");
    assert!(proxy.gets_of("/api/v1/nodes") <= 2, "the label's removal came by the watch, not by a list");
}

/// Creates Node `name` listing `address` as its InternalIP, labelled control-plane or not.
async fn create_node(admin: &Client, name: &str, address: &str, control_plane: bool) {
    let labels: Option<std::collections::BTreeMap<String, String>> =
        control_plane.then(|| [(CONTROL_PLANE_LABEL.to_owned(), String::new())].into());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"addresses": [{"type": "InternalIP", "address": address}]},
    }))
    .unwrap();
    Api::<Node>::all(admin.clone()).create(&PostParams::default(), &node).await.unwrap();
}

/// Creates CSR `name` of `node` asking for its own name and the advertise address.
async fn create(cp: &testenv::ControlPlane, name: &str, node: &str, expect: Expect) -> Created {
    let client = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    let request = Request::node(node).dns(&format!("{node}.nodes.example.com")).ip(ADVERTISED);
    let usages = &crate::support::SERVING_USAGES;
    let csr = testkit::csr::object(name, testkit::csr::SERVING_SIGNER, usages, &request.pem());
    create_object(&client, &csr).await;
    Created { name: name.to_owned(), expect }
}
