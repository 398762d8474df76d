//! The rules of `--rules` in the controller: the real binary against a real kube-apiserver reads
//! the requester's Node and decides by a label the node cannot set, failing closed without it,
//! every assertion read back from the apiserver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use support::cluster::{Approver, Csrs, SERIAL, control_plane, create_serving_csr, unique, wait_decided, wait_event};
use support::nodes::{dns_for, legit};

const DECIDE: Duration = Duration::from_secs(20);

/// The GPU pool's addresses are 10.0.0.16/28, chosen by a label NodeRestriction keeps from nodes.
const RULES: &str = "rules:\n  - name: gpu-pool-prefix\n    expression: >-\n      node.metadata.labels['node-restriction.kubernetes.io/pool'] == 'gpu' ?\n      request.ipAddresses.all(a, cidr('10.0.0.16/28').containsIP(a)) : true\n    message: GPU nodes must use addresses in 10.0.0.16/28\n";

/// A Node labelled `node-restriction.kubernetes.io/pool: <pool>`, or only `pool: <pool>` (a label
/// the node may write) when `restricted` is false.
fn labelled(name: &str, pool: &str, restricted: bool) -> Node {
    let key = if restricted { "node-restriction.kubernetes.io/pool" } else { "pool" };
    let labels = BTreeMap::from([(key.to_owned(), pool.to_owned())]);
    Node {
        metadata: ObjectMeta { name: Some(name.into()), labels: Some(labels), ..Default::default() },
        ..Default::default()
    }
}

#[tokio::test]
async fn a_rule_on_a_restricted_label_approves_one_pool_denies_another_and_a_node_without_it() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let (cpu, gpu, gpu_outside, unlabelled) = (unique("cpu"), unique("gpu"), unique("gpu"), unique("gpu"));
    let nodes = Api::<Node>::all(admin.clone());
    for (name, pool, restricted) in
        [(&cpu, "cpu", true), (&gpu, "gpu", true), (&gpu_outside, "gpu", true), (&unlabelled, "cpu", false)]
    {
        nodes.create(&PostParams::default(), &labelled(name, pool, restricted)).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, RULES).unwrap();
    let dns = dns_for(&[(&cpu, 41), (&gpu, 21), (&gpu_outside, 42), (&unlabelled, 43)]);
    let extra = [format!("--dns-server={}", dns.addr()), format!("--rules={}", rules.display())];
    let mut approver = Approver::start(cp.kubeconfig_path(), &[&extra[0], &extra[1]], &[]);
    approver.wait_ready().await;

    let csrs = Csrs::new(cp.kubeconfig_path());
    let (on_cpu, on_gpu, off_gpu) = (csrs.name("cpu"), csrs.name("gpu"), csrs.name("gpu-outside"));
    let no_label = csrs.name("unlabelled");
    create_serving_csr(cp, &on_cpu, &cpu, &legit(&cpu, 41)).await;
    create_serving_csr(cp, &on_gpu, &gpu, &legit(&gpu, 21)).await;
    // The node outside its pool tries to leave it by the labels it may write, as itself: that
    // changes nothing. (NodeRestriction, which this apiserver does not run, would also refuse its
    // change of the restricted label; docs/rules.md.)
    let as_node = cp.impersonated_client(&format!("system:node:{gpu_outside}"), &["system:nodes"]).await.unwrap();
    let own = Api::<Node>::all(as_node);
    let relabel = serde_json::json!({"metadata": {"labels": {"pool": "cpu"}}});
    own.patch(&gpu_outside, &PatchParams::default(), &Patch::Merge(&relabel)).await.unwrap();
    create_serving_csr(cp, &off_gpu, &gpu_outside, &legit(&gpu_outside, 42)).await;
    create_serving_csr(cp, &no_label, &unlabelled, &legit(&unlabelled, 43)).await;

    for approved in [&on_cpu, &on_gpu] {
        let conditions = wait_decided(&admin, approved, DECIDE).await;
        let condition = conditions.first().unwrap_or_else(|| panic!("{approved} undecided\n{}", approver.logs()));
        assert_eq!((condition.type_.as_str(), condition.reason.as_deref()), ("Approved", Some("AutoApproved")));
    }
    let denied = wait_decided(&admin, &off_gpu, DECIDE).await;
    assert_eq!((denied[0].type_.as_str(), denied[0].reason.as_deref()), ("Denied", Some("RuleFailed")));
    let message = "rule \"gpu-pool-prefix\" failed: GPU nodes must use addresses in 10.0.0.16/28";
    assert_eq!(denied[0].message.as_deref(), Some(message));
    let event = wait_event(&admin, &off_gpu, "RuleFailed", DECIDE).await.expect("a denial event");
    assert!(event.note.as_deref().unwrap().contains(message), "{event:?}");
    // A node without the restricted label (its own `pool` label says cpu) is denied, not approved.
    let denied = wait_decided(&admin, &no_label, DECIDE).await;
    assert_eq!((denied[0].type_.as_str(), denied[0].reason.as_deref()), ("Denied", Some("RuleFailed")));
    let text = denied[0].message.as_deref().unwrap();
    assert!(text.starts_with("rule \"gpu-pool-prefix\" could not be evaluated: No such key"), "{text}");

    for name in [&cpu, &gpu, &gpu_outside, &unlabelled] {
        nodes.delete(name, &DeleteParams::default()).await.unwrap();
    }
}
