//! The approval write end to end: a write from a stale view conflicts and is decided again once,
//! the write changes only the conditions, and a CSR deleted while it is evaluated is forgotten.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use support::Request;
use support::cluster::{Approver, Csrs, SERIAL, control_plane, create_serving_csr, unique, wait_decided};
use support::nodes::{dns_for, legit, wait_asked};
use testdns::DnsServer;

const DECIDE: Duration = Duration::from_secs(20);
/// How long the slow DNS server holds every answer back, so an evaluation is in flight.
const SLOW_DNS: Duration = Duration::from_secs(2);

/// A DNS server for `node` that answers after [`SLOW_DNS`], and an approver asking it.
async fn slow_approver(node: &str, n: u8) -> (DnsServer, Approver) {
    let dns = dns_for(&[(node, n)]);
    dns.set_delay(SLOW_DNS);
    let cp = control_plane().await;
    let mut approver =
        Approver::start(cp.kubeconfig_path(), &[&format!("--dns-server={}", dns.addr()), "--dns-timeout=30s"], &[]);
    approver.wait_ready().await;
    (dns, approver)
}

/// Waits until the series reaches `want`; returns its last value.
async fn wait_metric(approver: &Approver, series: &str, want: f64) -> Option<f64> {
    let deadline = Instant::now() + DECIDE;
    loop {
        let value = approver.metric(series).await;
        if value.is_some_and(|v| v >= want) || Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const CONFLICTS: &str = r#"node_csr_approver_writes_total{result="conflict"}"#;
const NOT_FOUND: &str = r#"node_csr_approver_writes_total{result="not_found"}"#;
const ERRORS: &str = r#"node_csr_approver_writes_total{result="error"}"#;

#[tokio::test]
async fn a_write_from_a_stale_view_conflicts_and_the_csr_is_decided_again_once() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let (dns, approver) = slow_approver(&node, 26).await;
    let name = csrs.name("stale");
    create_serving_csr(cp, &name, &node, &legit(&node, 26)).await;
    wait_asked(&dns, &[&node], 1).await;
    // Changed while it is evaluated: the write carries the resourceVersion it started from.
    let label = serde_json::json!({"metadata": {"labels": {"touched": "yes"}}});
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    let decided = wait_decided(&admin, &name, SLOW_DNS + DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{}", approver.logs());
    assert_eq!(wait_metric(&approver, CONFLICTS, 1.0).await, Some(1.0), "{}", approver.metrics().await);
    assert!(approver.logged(&name, "conflict: re-reading and deciding again"), "{}", approver.logs());
    assert_eq!(approver.wait_decisions(&name, "written").await.len(), 1, "{}", approver.logs());
    assert_eq!(approver.metric(ERRORS).await, Some(0.0));
}

#[tokio::test]
async fn the_decision_write_changes_only_the_conditions() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let dns = dns_for(&[(&node, 29)]);
    let (good, forged) = (csrs.name("kept-good"), csrs.name("kept-forged"));
    // The forgery first: of a node's serving CSRs pending together only the newest is approved.
    create_serving_csr(cp, &forged, &node, &Request::node(&node).dns("auth.evil.io")).await;
    create_serving_csr(cp, &good, &node, &legit(&node, 29)).await;
    // What others keep on a CSR: the approval subresource takes metadata from the body.
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    let metadata = serde_json::json!({"metadata": {
        "labels": {"team": "infra"},
        "annotations": {"example.com/ticket": "T-1"},
        "finalizers": ["example.com/audit"],
    }});
    let mut before = Vec::new();
    for name in [&good, &forged] {
        before.push(api.patch(name, &PatchParams::default(), &Patch::Merge(&metadata)).await.unwrap());
    }
    let mut approver = Approver::start(cp.kubeconfig_path(), &[&format!("--dns-server={}", dns.addr())], &[]);
    approver.wait_ready().await;
    for ((name, type_), before) in [(&good, "Approved"), (&forged, "Denied")].into_iter().zip(before) {
        let decided = wait_decided(&admin, name, DECIDE).await;
        assert_eq!(decided.first().map(|c| c.type_.as_str()), Some(type_), "{}", approver.logs());
        let after = api.get(name).await.unwrap();
        let unfinalized = serde_json::json!({"metadata": {"finalizers": null}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&unfinalized)).await.unwrap();
        let (was, is) = (&before.metadata, &after.metadata);
        assert_eq!((&is.labels, &is.annotations, &is.finalizers), (&was.labels, &was.annotations, &was.finalizers));
        assert_eq!((&is.uid, &is.creation_timestamp), (&was.uid, &was.creation_timestamp));
        assert_eq!(after.spec, before.spec);
    }
}

#[tokio::test]
async fn a_csr_deleted_while_it_is_evaluated_is_forgotten() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let (dns, approver) = slow_approver(&node, 27).await;
    let name = csrs.name("deleted");
    create_serving_csr(cp, &name, &node, &legit(&node, 27)).await;
    wait_asked(&dns, &[&node], 1).await;
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    assert_eq!(wait_metric(&approver, NOT_FOUND, 1.0).await, Some(1.0), "{}", approver.logs());
    assert!(approver.logged(&name, "gone before the decision was written: forgotten"), "{}", approver.logs());
    assert_eq!(approver.metric(ERRORS).await, Some(0.0), "{}", approver.logs());
    assert!(!approver.logs().contains("reconcile failed"), "{}", approver.logs());
    assert!(approver.decisions(&name, "written").is_empty());
}
