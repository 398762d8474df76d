//! A CSR's Node read from the watched Nodes: under `--verify-node-addresses` and a rule that
//! reads `node`, CSRs of many nodes are decided with one GET of a Node (the first, while the
//! watch it starts lists them), not one each, and a Node's change (an address moved, a label
//! removed) reaches the decisions through the watch; a Node over the rules' bound is read by
//! name and refused as too large; once the watches break, CSRs of Nodes created
//! meanwhile are still decided.

use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

use crate::harness::{Expect, RECOVERY, Scenario, create_serving, logs};
use crate::support::cluster::{SERIAL, unique};
use crate::verdict::decided;

/// Nodes whose CSRs are decided in the first round.
const NODES: usize = 24;
/// Nodes created, and their CSRs decided, after the watches were cut.
const AFTER_CUT: usize = 8;
/// The label the rule requires, which a kubelet cannot set on its own Node.
const POOL_LABEL: &str = "node-restriction.kubernetes.io/pool";

#[tokio::test]
async fn csrs_of_many_nodes_are_decided_on_their_watched_nodes_without_a_get_of_each() {
    let _serial = SERIAL.lock().await;
    let rules = tempfile::NamedTempFile::new().unwrap();
    let rule = format!(
        "rules:\n  - name: pool\n    expression: \"node.metadata.labels['{POOL_LABEL}'] == 'general'\"\n    message: \
         not a general node\n"
    );
    std::fs::write(rules.path(), rule).unwrap();
    let rules_arg = format!("--rules={}", rules.path().display());
    let Scenario { cp, admin, replicas, .. } = Scenario::start_with(1, &["--verify-node-addresses", &rules_arg]).await;
    let base = unique("r");
    let name = |i: usize| format!("{base}-{i:02}");
    for i in 0..NODES {
        create_node(&admin, &name(i), &address(i), "").await;
    }
    // The watch delivers them within moments; the CSRs come after it.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The first read of a Node starts the watch, and is a GET while its first list runs.
    let first = vec![create_serving(&cp, &format!("{base}-csr-00"), &name(0), &address(0), Expect::Approved).await];
    decided(&admin, "the first Node read", &first, Instant::now(), "its creation", RECOVERY)
        .await
        .assert_within(RECOVERY, || logs(&replicas));
    let mut created = first;
    for i in 1..NODES - 1 {
        created.push(create_serving(&cp, &format!("{base}-csr-{i:02}"), &name(i), &address(i), Expect::Approved).await);
    }
    // A node asking for its neighbour's address.
    let last = NODES - 1;
    created.push(create_serving(&cp, &format!("{base}-csr-{last:02}"), &name(last), &address(0), Expect::Denied).await);
    let report =
        decided(&admin, "nodes read from the watch", &created, Instant::now(), "their creation", RECOVERY).await;
    let gets = |replicas: &[crate::harness::Replica]| -> u64 {
        (0..NODES).map(|i| replicas[0].proxy.gets_of(&format!("/api/v1/nodes/{}", name(i)))).sum()
    };
    println!("GETs of a Node for {} CSRs of {NODES} Nodes: {}", created.len(), gets(&replicas));
    report.assert_within(RECOVERY, || logs(&replicas));
    assert!(gets(&replicas) <= 1, "{} GETs of a Node: one per CSR, not read from the watched Nodes", gets(&replicas));

    // Node 0 moves to a new address and node 1 loses the label: the next CSRs see both.
    let nodes = Api::<Node>::all(admin.clone());
    let moved = serde_json::json!({"status": {"addresses": addresses(&name(0), "10.0.9.9")}});
    let params = PatchParams::default();
    nodes.patch_status(&name(0), &params, &Patch::Merge(&moved)).await.unwrap();
    let unlabel = serde_json::json!({"metadata": {"labels": {POOL_LABEL: null}}});
    nodes.patch(&name(1), &params, &Patch::Merge(&unlabel)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let changed = vec![
        create_serving(&cp, &format!("{base}-moved-new"), &name(0), "10.0.9.9", Expect::Approved).await,
        create_serving(&cp, &format!("{base}-moved-old"), &name(0), &address(0), Expect::Denied).await,
        create_serving(&cp, &format!("{base}-unlabelled"), &name(1), &address(1), Expect::Denied).await,
    ];
    let report = decided(&admin, "a Node's change seen", &changed, Instant::now(), "their creation", RECOVERY).await;
    report.assert_within(RECOVERY, || logs(&replicas));
    assert!(gets(&replicas) <= 1, "the changes came by the watch, not by a GET");

    // A Node whose projection is over the rules' bound is not kept: read by name when asked, the
    // rules refuse it as too large, as they refuse one read.
    let big = NODES + AFTER_CUT;
    create_node(&admin, &name(big), &address(big), &"x".repeat(70_000)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let csr = format!("{base}-too-large");
    let over = vec![create_serving(&cp, &csr, &name(big), &address(big), Expect::Denied).await];
    let report = decided(&admin, "a Node over the bound", &over, Instant::now(), "its creation", RECOVERY).await;
    report.assert_within(RECOVERY, || logs(&replicas));
    let denied = Api::<CertificateSigningRequest>::all(admin.clone()).get(&csr).await.unwrap();
    let conditions = denied.status.and_then(|status| status.conditions).unwrap_or_default();
    let message = conditions.iter().find(|c| c.type_ == "Denied").and_then(|c| c.message.clone()).unwrap_or_default();
    assert!(message.contains("too large for the rules"), "{message}");

    // The watches break, and new Nodes come while they are watched again: every CSR of theirs is
    // still decided, on its Node read by name until the watch of Nodes is live again, or on the
    // watched Node.
    replicas[0].proxy.cut_watches();
    let new = NODES..NODES + AFTER_CUT;
    for i in new.clone() {
        create_node(&admin, &name(i), &address(i), "").await;
    }
    let mut after_cut = Vec::new();
    for i in new {
        let csr = format!("{base}-after-cut-{i:02}");
        after_cut.push(create_serving(&cp, &csr, &name(i), &address(i), Expect::Approved).await);
    }
    let report = decided(&admin, "the watches cut", &after_cut, Instant::now(), "their creation", RECOVERY).await;
    report.assert_within(RECOVERY, || logs(&replicas));
}

/// The address of node number `i`, inside the tests' provider prefixes.
fn address(i: usize) -> String {
    format!("10.0.8.{}", 1 + i)
}

/// The addresses of Node `name` at `address`, as its kubelet lists them.
fn addresses(name: &str, address: &str) -> serde_json::Value {
    serde_json::json!([
        {"type": "InternalIP", "address": address},
        {"type": "InternalDNS", "address": format!("{name}.nodes.example.com")},
        {"type": "Hostname", "address": name},
    ])
}

/// Creates Node `name` of the general pool, listing `address` as its InternalIP and its DNS name
/// and name, with `note` as an annotation.
async fn create_node(admin: &Client, name: &str, address: &str, note: &str) {
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {POOL_LABEL: "general"}, "annotations": {"note": note}},
        "status": {"addresses": addresses(name, address)},
    }))
    .unwrap();
    let nodes = Api::<Node>::all(admin.clone());
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    // The apiserver drops status on create: written as the kubelet writes it.
    let status = serde_json::json!({"status": node.status});
    let name = created.metadata.name.unwrap_or_default();
    nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
}
