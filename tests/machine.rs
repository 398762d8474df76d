//! Machine mode end to end: Machine CRDs of both groups on a real kube-apiserver, the bootstrapper
//! identity impersonated, and the real binary deciding.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::Request;
use support::cluster::{
    Approver, SERIAL, conditions, create_csr, create_serving_csr, events_for, wait_decided, wait_event,
};
use testenv::ControlPlane;

const BOOTSTRAPPER: &str = "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
const GROUPS: [&str; 3] =
    ["system:serviceaccounts:openshift-machine-config-operator", "system:serviceaccounts", "system:authenticated"];
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const DECIDE: Duration = Duration::from_secs(20);
const NAMESPACE: &str = "machines";

async fn install(cp: &ControlPlane) -> Client {
    let mut crds = Vec::new();
    for group in ["machine.openshift.io", "cluster.x-k8s.io"] {
        let path = format!("{}/tests/fixtures/crds/machines.{group}.yaml", env!("CARGO_MANIFEST_DIR"));
        crds.push(serde_saphyr::from_str::<CustomResourceDefinition>(&std::fs::read_to_string(path).unwrap()).unwrap());
    }
    cp.install_crds(crds).await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let namespace = Namespace {
        metadata: kube::api::ObjectMeta { name: Some(NAMESPACE.into()), ..Default::default() },
        ..Default::default()
    };
    Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    // As on a real cluster, the bootstrapper may create CSRs (the built-in system:node-bootstrapper role).
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "node-bootstrapper"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": BOOTSTRAPPER}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &binding).await.unwrap();
    admin
}

fn machines(admin: &Client, group: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1beta1", "Machine"));
    Api::namespaced_with(admin.clone(), NAMESPACE, &resource)
}

/// Creates Machine `name` of `group` with `addresses` (and `node_ref`) in its status.
async fn machine(admin: &Client, group: &str, name: &str, addresses: &[(&str, &str)], node_ref: Option<&str>) {
    let api = machines(admin, group);
    let object = DynamicObject::new(name, &ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1beta1", "Machine")))
        .data(json!({"spec": {}}));
    api.create(&PostParams::default(), &object).await.unwrap();
    set_status(admin, group, name, addresses, node_ref).await;
}

async fn set_status(admin: &Client, group: &str, name: &str, addresses: &[(&str, &str)], node_ref: Option<&str>) {
    let addresses: Vec<_> = addresses.iter().map(|(t, a)| json!({"type": t, "address": a})).collect();
    let mut status = json!({"addresses": addresses});
    if let Some(node) = node_ref {
        status["nodeRef"] = json!({"kind": "Node", "name": node});
    }
    machines(admin, group)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
        .await
        .unwrap();
}

/// A bootstrap client CSR for `node`, created as the bootstrapper.
async fn bootstrap_csr(cp: &ControlPlane, name: &str, node: &str) {
    let client = cp.impersonated_client(BOOTSTRAPPER, &GROUPS).await.unwrap();
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "request": k8s_openapi::ByteString(Request::node(node).pem().into_bytes()),
            "signerName": CLIENT_SIGNER,
            "usages": ["digital signature", "client auth"],
        }
    }))
    .unwrap();
    Api::<CertificateSigningRequest>::all(client).create(&PostParams::default(), &csr).await.unwrap();
}

/// `check NAME -o json` in machine mode: the (decision, reason) of each report.
fn check(cp: &ControlPlane, name: &str) -> Vec<(String, String)> {
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_node-csr-approver"))
        .env_clear()
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args(["check", name, "-o", "json", "--provider-regex", support::cluster::REGEX])
        .args(machine_mode(&[]))
        .output()
        .unwrap();
    let text = |field: &serde_json::Value| field.as_str().unwrap_or_default().to_owned();
    let reports = String::from_utf8_lossy(&check.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .map(|report| (text(&report["decision"]), text(&report["reason"])))
        .collect::<Vec<_>>();
    assert!(!reports.is_empty(), "{}", String::from_utf8_lossy(&check.stderr));
    reports
}

fn machine_mode(extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![
        "--bypass-dns-resolution",
        "--machine-api=machine.openshift.io/v1beta1",
        "--machine-api=cluster.x-k8s.io/v1beta1",
    ];
    args.extend_from_slice(extra);
    args
}

#[tokio::test]
async fn machine_mode_end_to_end() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::start().await.unwrap();
    let admin = install(&cp).await;
    // Held CSRs are looked at again every second, as every undecided CSR is each resync period.
    let mut approver = Approver::start(cp.kubeconfig_path(), &machine_mode(&["--resync-period=1s"]), &[]);
    approver.wait_ready().await;
    let csrs = Api::<CertificateSigningRequest>::all(admin.clone());

    // A new node's bootstrap client CSR is approved when an unclaimed Machine carries its name.
    let n1_addresses = [("InternalDNS", "n1"), ("Hostname", "n1.nodes.example.com"), ("InternalIP", "10.0.0.41")];
    machine(&admin, "machine.openshift.io", "m1", &n1_addresses, None).await;
    bootstrap_csr(&cp, "boot-n1", "n1").await;
    let decided = wait_decided(&admin, "boot-n1", DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());

    // One client certificate per Machine: a second bootstrap CSR for n1 is held while the approved
    // one exists, with an event naming it; once it is gone (the CSR cleaner removes it an hour
    // after issue) the second is approved.
    bootstrap_csr(&cp, "boot-n1-second", "n1").await;
    let held = wait_event(&admin, "boot-n1-second", "ClientCertificateIssued", DECIDE).await;
    let note = held.and_then(|event| event.note).unwrap_or_default();
    assert!(note.contains(r#"approved client CSR "boot-n1""#), "{note:?}\n{}", approver.logs());
    assert!(note.contains(r#"kubectl certificate approve "boot-n1-second""#), "{note:?}");
    assert!(conditions(&admin, "boot-n1-second").await.is_empty());
    let held = [("hold".to_owned(), "ClientCertificateIssued".to_owned())];
    assert_eq!(check(&cp, "boot-n1-second"), held, "check reads the approved CSRs as the controller does");
    csrs.delete("boot-n1", &DeleteParams::default()).await.unwrap();
    let decided = wait_decided(&admin, "boot-n1-second", DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());

    // The node joins: Node created, Machine claimed. Its serving SANs must be Machine addresses.
    let node = Node {
        metadata: kube::api::ObjectMeta { name: Some("n1".into()), ..Default::default() },
        ..Default::default()
    };
    Api::<Node>::all(admin.clone()).create(&PostParams::default(), &node).await.unwrap();
    set_status(&admin, "machine.openshift.io", "m1", &n1_addresses, Some("n1")).await;
    create_serving_csr(&cp, "serve-n1", "n1", &Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.41")).await;
    create_serving_csr(&cp, "serve-n1-bad", "n1", &Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.42"))
        .await;
    let approved = wait_decided(&admin, "serve-n1", DECIDE).await;
    assert_eq!(approved.first().map(|c| c.type_.as_str()), Some("Approved"), "{approved:?}\n{}", approver.logs());
    let denied = wait_decided(&admin, "serve-n1-bad", DECIDE).await;
    assert_eq!(denied.first().and_then(|c| c.reason.as_deref()), Some("MachineAddressMismatch"));

    // A client CSR for an existing Node stays pending, with an event saying why.
    bootstrap_csr(&cp, "boot-n1-again", "n1").await;
    assert!(wait_event(&admin, "boot-n1-again", "NodeAlreadyExists", DECIDE).await.is_some(), "{}", approver.logs());
    assert!(conditions(&admin, "boot-n1-again").await.is_empty());
    assert_eq!(check(&cp, "boot-n1-again"), [("hold".to_owned(), "NodeAlreadyExists".to_owned())]);

    // A Machine (Cluster API this time) created after the CSR gets it approved.
    bootstrap_csr(&cp, "boot-n2", "n2").await;
    assert!(wait_event(&admin, "boot-n2", "MachineNotFound", DECIDE).await.is_some());
    machine(&admin, "cluster.x-k8s.io", "m2", &[("InternalDNS", "n2")], None).await;
    let decided = wait_decided(&admin, "boot-n2", DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}");

    // A client CSR from another identity is not ours.
    create_csr(
        &cp,
        "client-renewal",
        "n1",
        CLIENT_SIGNER,
        &["digital signature", "client auth"],
        &Request::node("n1").pem(),
    )
    .await;
    let deadline = Instant::now() + DECIDE;
    while !approver.logged("client-renewal", "ignored") {
        assert!(Instant::now() < deadline, "client-renewal never evaluated:\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(conditions(&admin, "client-renewal").await.is_empty());
    drop(approver);

    // The brake: Machines 3 (m1, m2, m3), Nodes 1, delta 0: limit 3. Pending: client-renewal (n1's
    // own), four serving CSRs of node x1 of which one node name counts at most three, and boot-n3
    // make 5; boot-n1-again does not count (its Machine has its node: it can never be approved).
    let mut approver = Approver::start(cp.kubeconfig_path(), &machine_mode(&["--max-pending-delta=0"]), &[]);
    approver.wait_ready().await;
    machine(&admin, "cluster.x-k8s.io", "m3", &[("InternalDNS", "n3")], None).await;
    let junk = ["serve-x1-a", "serve-x1-b", "serve-x1-c", "serve-x1-d"];
    for name in junk {
        create_serving_csr(&cp, name, "x1", &Request::node("x1").dns("x1.nodes.example.com")).await;
    }
    bootstrap_csr(&cp, "boot-n3", "n3").await;
    assert!(wait_event(&admin, "boot-n3", "TooManyPending", DECIDE).await.is_some(), "{}", approver.logs());
    assert!(conditions(&admin, "boot-n3").await.is_empty());
    let mut metrics = String::new();
    for _ in 0..50 {
        metrics = approver.metrics().await;
        if metrics.contains("node_csr_approver_pending_node_csrs 5") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(metrics.contains("node_csr_approver_pending_node_csrs 5"), "{metrics}");
    assert!(metrics.contains("node_csr_approver_pending_node_csrs_limit 3"), "{metrics}");
    for name in junk.into_iter().chain(["boot-n1-again"]) {
        csrs.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let decided = wait_decided(&admin, "boot-n3", Duration::from_secs(60)).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());
}

/// Waits until the approver counted `count` retries with `reason`.
async fn wait_retries(approver: &Approver, reason: &str, count: f64) {
    let series = format!(r#"node_csr_approver_decisions_total{{decision="retry",reason="{reason}"}}"#);
    // 2 + 4 + 8 s of backoff before the fourth evaluation.
    let deadline = Instant::now() + Duration::from_secs(14) + DECIDE;
    while approver.metric(&series).await.unwrap_or(0.0) < count {
        assert!(Instant::now() < deadline, "{reason}: fewer than {count} retries:\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates Node `name` with `addresses` in its status.
async fn node_with(admin: &Client, name: &str, addresses: &[(&str, &str)]) {
    let node = Node {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        ..Default::default()
    };
    Api::<Node>::all(admin.clone()).create(&PostParams::default(), &node).await.unwrap();
    let addresses: Vec<_> = addresses.iter().map(|(t, a)| json!({"type": t, "address": a})).collect();
    let status = json!({"status": {"addresses": addresses}});
    Api::<Node>::all(admin.clone()).patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
}

#[tokio::test]
async fn a_machine_or_node_that_appears_re_triggers_a_csr_in_a_long_backoff() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::start().await.unwrap();
    let admin = install(&cp).await;
    let mut approver = Approver::start(cp.kubeconfig_path(), &machine_mode(&["--verify-node-addresses"]), &[]);
    approver.wait_ready().await;

    // Serving CSRs: n7's waits for its Machine, n8's for its Node.
    let n7 = [("InternalIP", "10.0.0.47"), ("Hostname", "n7.nodes.example.com")];
    let n8 = [("InternalIP", "10.0.0.48"), ("Hostname", "n8.nodes.example.com")];
    node_with(&admin, "n7", &n7).await;
    machine(&admin, "machine.openshift.io", "m8", &n8, Some("n8")).await;
    create_serving_csr(&cp, "serve-n7", "n7", &Request::node("n7").dns("n7.nodes.example.com").ip("10.0.0.47")).await;
    create_serving_csr(&cp, "serve-n8", "n8", &Request::node("n8").dns("n8.nodes.example.com").ip("10.0.0.48")).await;
    // After the fourth evaluation the next one is 16 s away.
    wait_retries(&approver, "MachineNotFound", 4.0).await;
    wait_retries(&approver, "NodeNotFound", 4.0).await;

    let appeared = Instant::now();
    machine(&admin, "cluster.x-k8s.io", "m7", &n7, Some("n7")).await;
    node_with(&admin, "n8", &n8).await;
    for name in ["serve-n7", "serve-n8"] {
        let limit = (appeared + Duration::from_secs(8)).saturating_duration_since(Instant::now());
        let decided = wait_decided(&admin, name, limit).await;
        assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{name}:\n{}", approver.logs());
    }

    // The brake counts the watched Nodes: with more Nodes (4) than Machines (2) its limit is the
    // Nodes' count plus the default delta of 100.
    for name in ["n9", "n10"] {
        node_with(&admin, name, &[]).await;
    }
    let series = "node_csr_approver_pending_node_csrs_limit";
    let deadline = Instant::now() + DECIDE;
    while approver.metric(series).await != Some(104.0) {
        assert!(Instant::now() < deadline, "{series}: {:?}, not 104", approver.metric(series).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One client certificate per Machine under concurrency: bootstrap CSRs for one pending Machine's
/// node name, created at once and decided by up to 32 reconciles at once, get exactly one
/// approval; every other is held with the event naming it. Several rounds, each with a Machine of
/// its own.
#[tokio::test]
async fn simultaneous_bootstrap_csrs_for_one_machine_get_one_approval() {
    const ROUNDS: usize = 6;
    const AT_ONCE: usize = 8;
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::start().await.unwrap();
    let admin = install(&cp).await;
    let mut approver = Approver::start(cp.kubeconfig_path(), &machine_mode(&["--concurrency=32"]), &[]);
    approver.wait_ready().await;
    let bootstrapper =
        Api::<CertificateSigningRequest>::all(cp.impersonated_client(BOOTSTRAPPER, &GROUPS).await.unwrap());
    for round in 0..ROUNDS {
        let node = format!("race{round}");
        machine(&admin, "machine.openshift.io", &format!("m-{node}"), &[("InternalDNS", &node)], None).await;
        // The approver's Machine cache sees it before the CSRs arrive.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let names: Vec<String> = (0..AT_ONCE).map(|i| format!("boot-{node}-{i}")).collect();
        let pem = Request::node(&node).pem();
        let create = names.iter().map(|name| {
            let csr = testkit::csr::object(name, CLIENT_SIGNER, &["digital signature", "client auth"], &pem);
            let api = bootstrapper.clone();
            async move { api.create(&PostParams::default(), &csr).await.map(drop) }
        });
        futures::future::join_all(create).await.into_iter().collect::<Result<(), _>>().unwrap();
        let deadline = Instant::now() + DECIDE;
        let mut approved = Vec::new();
        for name in &names {
            let held = async { wait_event(&admin, name, "ClientCertificateIssued", DECIDE).await.is_some() };
            let decided = async { !wait_decided(&admin, name, DECIDE).await.is_empty() };
            tokio::select! {
                true = held => {}
                true = decided => approved.push(name.clone()),
                () = tokio::time::sleep_until(deadline.into()) => panic!("{name} neither approved nor held:\n{}", approver.logs()),
            }
        }
        // Any later approval would be a second certificate too.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut approved_now = Vec::new();
        for name in &names {
            let conditions = conditions(&admin, name).await;
            if conditions.iter().any(|c| c.type_ == "Approved") {
                approved_now.push(name.clone());
            } else {
                assert!(conditions.is_empty(), "{name}: {conditions:?}");
                let event = wait_event(&admin, name, "ClientCertificateIssued", DECIDE).await;
                assert!(event.is_some(), "{name} held without the event:\n{}", approver.logs());
            }
        }
        assert_eq!(approved_now.len(), 1, "round {round}: approved {approved_now:?} (first seen {approved:?})");
    }
}

/// The pending brake counts a bootstrap CSR only when a Machine awaits the node it names: CSRs with
/// made-up names, however many, do not hold a new Machine's real CSR.
#[tokio::test]
async fn bootstrap_csrs_with_made_up_names_do_not_pull_the_brake() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::start().await.unwrap();
    let admin = install(&cp).await;
    let mut approver = Approver::start(cp.kubeconfig_path(), &machine_mode(&["--max-pending-delta=0"]), &[]);
    approver.wait_ready().await;
    // One Machine, no Node, delta 0: the brake's limit is 1.
    machine(&admin, "machine.openshift.io", "m-real", &[("InternalDNS", "real")], None).await;
    for i in 0..10 {
        bootstrap_csr(&cp, &format!("boot-made-up-{i}"), &format!("made-up-{i}")).await;
    }
    for i in 0..10 {
        assert!(wait_event(&admin, &format!("boot-made-up-{i}"), "MachineNotFound", DECIDE).await.is_some());
    }
    bootstrap_csr(&cp, "boot-real", "real").await;
    let decided = wait_decided(&admin, "boot-real", DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());
    assert!(events_for(&admin, "boot-real").await.iter().all(|e| e.reason.as_deref() != Some("TooManyPending")));
    // The gauge follows within a second: nothing left counts.
    let series = "node_csr_approver_pending_node_csrs";
    let deadline = Instant::now() + Duration::from_secs(5);
    while approver.metric(series).await != Some(0.0) {
        assert!(Instant::now() < deadline, "{}", approver.metrics().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
