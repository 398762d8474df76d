//! An apiserver's advertise address (an address of the `default/kubernetes` EndpointSlices) that a
//! worker writes into its own status beside the control-plane node, in a cluster of thousands of
//! Nodes: the control-plane node, the one claimant carrying the role label no kubelet can set,
//! still gets its certificate; the worker and every other node are denied; without the label the
//! tie is retried with an Event, never denied. What the approver asks the apiserver while the
//! hostile CSRs are decided does not grow with the Nodes: the Nodes are listed at most once in
//! the whole run (the start of their watch, for the first CSR naming the address, however many
//! pages), and each later CSR naming it costs at most [`PER_CSR`] requests, counted by verb and
//! resource at the replica's proxy. A list of the Nodes per CSR would make 22 lists, and cost each
//! CSR 41 more requests at 50 Nodes a page, 5 at 500.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use node_csr_approver::policy::CONTROL_PLANE_LABEL;
use testenv::Seen;

use crate::harness::{Expect, RECOVERY, Scenario, create_serving, logs};
use crate::support::cluster::{SERIAL, events_for, unique};
use crate::verdict::{decided, decisions};

/// The advertise address, inside the tests' provider prefixes.
const ADVERTISED: &str = "10.0.0.72";
/// Nodes that list other addresses: a list per CSR would read all of them each time.
const OTHER_NODES: usize = 2_000;
/// Node creations under way at once.
const CREATING: usize = 64;
/// Nodes asking for the advertise address, each denied.
const HOSTILE: usize = 20;
/// Requests a hostile CSR may cost, the Lease's aside (they come with time, not with CSRs): its
/// denial, its Event, and a retry of either.
const PER_CSR: usize = 4;
/// The Lease's requests: not counted per CSR.
const LEASES: &str = "leases";

#[tokio::test]
async fn an_advertise_address_claimed_among_thousands_of_nodes_costs_few_requests_per_csr_and_one_node_list() {
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
    let creating = Instant::now();
    futures::stream::iter(0..OTHER_NODES)
        .for_each_concurrent(CREATING, |i| {
            let (admin, name) = (&admin, format!("{base}-other-{i:04}"));
            async move { create_node(admin, &name, &format!("10.0.{}.{}", 10 + i / 200, 1 + i % 200), false).await }
        })
        .await;
    println!("{OTHER_NODES} Nodes created in {:.1} s, {CREATING} at once", creating.elapsed().as_secs_f64());
    // The watch of the slice delivers it within moments; the CSRs come after it.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The first CSR naming the address starts the Node watch (one list, however many pages): the
    // count begins once it is decided.
    let first = vec![create_serving(&cp, &format!("{base}-worker-csr"), &worker, ADVERTISED, Expect::Denied).await];
    let started = decided(&admin, "the first CSR naming it", &first, Instant::now(), "its creation", RECOVERY).await;
    let before = proxy.requests().len();
    let mut all = Vec::new();
    for i in 0..HOSTILE {
        let node = format!("{base}-h{i:02}");
        all.push(create_serving(&cp, &format!("{base}-hostile-{i:02}"), &node, ADVERTISED, Expect::Denied).await);
    }
    all.push(create_serving(&cp, &format!("{base}-cp-csr"), &control_plane, ADVERTISED, Expect::Approved).await);
    let done = Instant::now();
    let report = decided(&admin, "an advertise address claimed twice", &all, done, "their creation", RECOVERY).await;
    let requests = proxy.requests();
    let window = by_key(&requests[before..]);
    let per_csr: usize = window.iter().filter(|(key, _)| !key.ends_with(LEASES)).map(|(_, count)| count).sum();
    let (lists, pages) = node_lists(&requests);
    println!(
        "{} CSRs naming the advertise address among {} Nodes: {per_csr} requests but the Lease's while they were \
         decided ({:.1} a CSR); in the whole run {lists} list(s) of the Nodes, {pages} page(s); by verb and \
         resource: {window:?}",
        all.len(),
        OTHER_NODES + 2,
        per_csr as f64 / all.len() as f64,
    );
    assert!(lists <= 1, "the Nodes were listed {lists} times ({pages} pages) for {} CSRs: {window:?}", all.len() + 1);
    assert!(
        per_csr <= PER_CSR * all.len(),
        "{per_csr} requests for {} CSRs among {} Nodes, more than {PER_CSR} a CSR: {window:?}",
        all.len(),
        OTHER_NODES + 2
    );
    started.assert_within(RECOVERY, || logs(&replicas));
    report.assert_within(RECOVERY, || logs(&replicas));

    // Without the label nothing a kubelet cannot write tells the two apart: retried, with an Event.
    let unlabel = serde_json::json!({"metadata": {"labels": {CONTROL_PLANE_LABEL: null}}});
    let nodes = Api::<Node>::all(admin.clone());
    nodes.patch(&control_plane, &PatchParams::default(), &Patch::Merge(&unlabel)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let contested =
        create_serving(&cp, &format!("{base}-cp-csr-2"), &control_plane, ADVERTISED, Expect::Approved).await;
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
    let (lists, _) = node_lists(&proxy.requests());
    assert!(lists <= 1, "the label's removal came by the watch, not by a list: {lists} lists");
}

/// How many of `requests` there were of each verb and resource.
fn by_key(requests: &[Seen]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for request in requests {
        *counts.entry(request.key()).or_default() += 1;
    }
    counts
}

/// How many lists of the Nodes `requests` held, and how many pages they took (a request each).
fn node_lists(requests: &[Seen]) -> (usize, usize) {
    let pages: Vec<&Seen> = requests.iter().filter(|request| request.key() == "list nodes").collect();
    (pages.iter().filter(|page| !page.continued).count(), pages.len())
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
