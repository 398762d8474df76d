//! Duplicates are not signed twice: three kubelet-serving CSRs of one node, pending before the
//! approver starts, decided by the real binary against a real kube-apiserver, signed by
//! kube-controller-manager's signer. Only the newest is approved and issued; the older two are
//! denied `Superseded`, naming it. Another node's CSR is approved all the same: one per node.
//! And the newest that passes is the one signed: a newer forged CSR is denied for its own reason
//! and the node's older legitimate one approved and issued.
//! A superseded denial is no problem: an Event only under `--events=all`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::{Api, Client};
use support::Request;
use support::cluster::{Approver, Csrs, SERIAL, create_serving_csr, events_for, unique, wait_decided, wait_event};
use testenv::ControlPlane;

const DECIDE: Duration = Duration::from_secs(20);
/// How long a denied CSR is watched for a certificate the signer should never issue.
const SIGNER_GRACE: Duration = Duration::from_secs(2);

/// A serving request of `node` for one DNS name under the provider domain and `ip`.
fn asks(node: &str, ip: &str) -> Request {
    Request::node(node).dns(&format!("{node}.nodes.example.com")).ip(ip)
}

/// Whether the signer has issued the certificate of CSR `name`.
async fn issued(admin: &Client, name: &str) -> bool {
    let csr = Api::<CertificateSigningRequest>::all(admin.clone()).get(name).await.unwrap();
    csr.status.and_then(|s| s.certificate).is_some_and(|certificate| !certificate.0.is_empty())
}

/// Waits at most `limit` for the certificate of CSR `name`.
async fn wait_issued(admin: &Client, name: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if issued(admin, name).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// `check -o json NAMES` against the cluster: one JSON report per name.
fn check(cp: &ControlPlane, names: &[&str]) -> Vec<serde_json::Value> {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_node-csr-approver"));
    command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command.args(["check", "-o", "json", "--bypass-dns-resolution", "--kubeconfig"]).arg(cp.kubeconfig_path());
    command.args(["--provider-regex", testkit::policy::REGEX, "--provider-ip-prefixes", testkit::policy::PREFIXES]);
    let output = command.args(names).output().unwrap();
    let reports: Vec<serde_json::Value> = output
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(reports.len(), names.len(), "{}", String::from_utf8_lossy(&output.stderr));
    reports
}

#[tokio::test]
async fn of_three_serving_csrs_of_one_node_only_the_newest_is_approved_and_issued() {
    let _serial = SERIAL.lock().await;
    // The signer is this process's own, so whatever it issues is seen.
    let cp = ControlPlane::shared_with_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let (node, other_node) = (unique("n"), unique("n"));
    // Created a second apart (creationTimestamp has a second's resolution), before the approver
    // starts, as a kubelet leaves them behind while no approver runs.
    let names = csrs.names("dup", 3);
    for (index, name) in names.iter().enumerate() {
        if index > 0 {
            tokio::time::sleep(Duration::from_millis(1050)).await;
        }
        create_serving_csr(cp, name, &node, &asks(&node, "10.0.0.81")).await;
    }
    let other = csrs.name("dup-other");
    create_serving_csr(cp, &other, &other_node, &asks(&other_node, "10.0.0.82")).await;
    let (oldest, middle, newest) = (&names[0], &names[1], &names[2]);

    // `check NAME` reads the cluster's CSRs and gives the verdict the controller will: the older
    // ones wait while the newest is pending.
    let reports = check(cp, &[oldest, newest]);
    assert_eq!(verdict(&reports[0]), ("retry".into(), "NewerServingCSRPending".into()), "{}", reports[0]);
    assert!(reports[0]["message"].as_str().unwrap().contains(&format!("{newest:?}")), "{}", reports[0]);
    assert_eq!(verdict(&reports[1]), ("approve".into(), "AutoApproved".into()), "{}", reports[1]);

    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    let decided = wait_decided(&admin, newest, DECIDE).await;
    let got: Vec<_> = decided.iter().map(|c| (c.type_.as_str(), c.reason.as_deref())).collect();
    assert_eq!(got, [("Approved", Some("AutoApproved"))], "{}", approver.logs());
    for older in [oldest, middle] {
        let decided = wait_decided(&admin, older, DECIDE).await;
        let got: Vec<_> = decided.iter().map(|c| (c.type_.as_str(), c.reason.as_deref())).collect();
        assert_eq!(got, [("Denied", Some("Superseded"))], "{older}: {decided:?}\n{}", approver.logs());
        let message = decided[0].message.as_deref().unwrap_or_default();
        assert!(message.contains(&format!("{newest:?}")), "{older}: {message}");
    }
    let decided = wait_decided(&admin, &other, DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "another node: {decided:?}");

    // One certificate for the node, one for the other node.
    assert!(wait_issued(&admin, newest, DECIDE).await, "the signer issued nothing for the newest");
    assert!(wait_issued(&admin, &other, DECIDE).await, "the signer issued nothing for the other node");
    tokio::time::sleep(SIGNER_GRACE).await;
    for older in [oldest, middle] {
        assert!(!issued(&admin, older).await, "a certificate was issued for the superseded {older}");
    }
    let denied = approver.metric(r#"node_csr_approver_decisions_total{decision="deny",reason="Superseded"}"#).await;
    assert_eq!(denied, Some(2.0), "{}", approver.metrics().await);
    // Under the default --events=problems a superseded duplicate is no problem: no Event.
    for older in [oldest, middle] {
        let reasons: Vec<_> = events_for(&admin, older).await.into_iter().filter_map(|e| e.reason).collect();
        assert!(reasons.is_empty(), "{older}: {reasons:?}");
    }
}

/// `report`'s decision and reason.
fn verdict(report: &serde_json::Value) -> (serde_json::Value, serde_json::Value) {
    (report["decision"].clone(), report["reason"].clone())
}

#[tokio::test]
async fn a_newer_forged_csr_is_denied_for_its_own_reason_and_the_older_legitimate_one_is_signed() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared_with_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let (legitimate, forged) = (csrs.name("dup-legit"), csrs.name("dup-forged"));
    create_serving_csr(cp, &legitimate, &node, &asks(&node, "10.0.0.83")).await;
    // A second later, so the forgery is the node's newest: an IP SAN outside the prefixes.
    tokio::time::sleep(Duration::from_millis(1050)).await;
    create_serving_csr(cp, &forged, &node, &asks(&node, "192.0.2.83")).await;

    let reports = check(cp, &[&legitimate, &forged]);
    assert_eq!(verdict(&reports[0]), ("retry".into(), "NewerServingCSRPending".into()), "{}", reports[0]);
    assert!(reports[0]["message"].as_str().unwrap().contains(&format!("{forged:?}")), "{}", reports[0]);
    assert_eq!(verdict(&reports[1]), ("deny".into(), "IPNotInPrefixes".into()), "{}", reports[1]);

    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    let decided = wait_decided(&admin, &forged, DECIDE).await;
    let got: Vec<_> = decided.iter().map(|c| (c.type_.as_str(), c.reason.as_deref())).collect();
    assert_eq!(got, [("Denied", Some("IPNotInPrefixes"))], "{}", approver.logs());
    let decided = wait_decided(&admin, &legitimate, DECIDE).await;
    let got: Vec<_> = decided.iter().map(|c| (c.type_.as_str(), c.reason.as_deref())).collect();
    assert_eq!(got, [("Approved", Some("AutoApproved"))], "{}", approver.logs());
    assert!(wait_issued(&admin, &legitimate, DECIDE).await, "the signer issued nothing for the legitimate CSR");
    tokio::time::sleep(SIGNER_GRACE).await;
    assert!(!issued(&admin, &forged).await, "a certificate was issued for the forgery");
    // The forgery is a problem (an Event); the legitimate one's wait, if it waited, is not.
    assert!(wait_event(&admin, &forged, "IPNotInPrefixes", DECIDE).await.is_some(), "no event for the forgery");
    let reasons: Vec<_> = events_for(&admin, &legitimate).await.into_iter().filter_map(|e| e.reason).collect();
    assert!(reasons.is_empty(), "{legitimate}: {reasons:?}");
    let superseded = approver.metric(r#"node_csr_approver_decisions_total{decision="deny",reason="Superseded"}"#).await;
    assert_eq!(superseded.unwrap_or(0.0), 0.0, "{}", approver.metrics().await);
}

#[tokio::test]
async fn with_events_all_a_superseded_denial_is_published() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared_with_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let (older, newer) = (csrs.name("dup-older"), csrs.name("dup-newer"));
    create_serving_csr(cp, &older, &node, &asks(&node, "10.0.0.84")).await;
    tokio::time::sleep(Duration::from_millis(1050)).await;
    create_serving_csr(cp, &newer, &node, &asks(&node, "10.0.0.84")).await;
    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution", "--events=all"], &[]);
    approver.wait_ready().await;
    let decided = wait_decided(&admin, &older, DECIDE).await;
    assert_eq!(decided.first().and_then(|c| c.reason.as_deref()), Some("Superseded"), "{}", approver.logs());
    let event = wait_event(&admin, &older, "Superseded", DECIDE).await;
    assert!(event.is_some_and(|e| e.note.unwrap_or_default().contains(&format!("{newer:?}"))), "no Superseded event");
}
