//! The controller's periodic audit (`run --audit-period`) against real kubelets, each in a network
//! namespace of its own: one serving the certificate the approver got issued (compliant), one with
//! `serverTLSBootstrap: false` (self-signed), audited by two replicas under leader election. The
//! leader's `/metrics` counts the Nodes by state (every state present) and the standby's nothing,
//! the per-Node series follow the Nodes (`--audit-node-metrics`), a Node with a finding gets one
//! Event when first audited, none on the scans that follow without a change, and one more when its
//! state changes (the compliant kubelet stopped: unreachable). When the leader goes, the standby
//! scans at once.
//!
//! Needs root (network namespaces, veth pairs), `ip`, `unshare`, `nsenter` and user namespaces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::Client;
use support::cluster::{Approver, REGEX, events_for, metric};
use support::kubelet_flow::{node_name, prefixes_of, start_kubelet_in, wait_approved_and_served};
use support::lease::wait_holder;
use testenv::{AddressFamilies, ControlPlane, NodeNetwork};

/// The one kubelet port: every kubelet listens on it in its own namespace.
const KUBELET_PORT: u16 = 10250;
/// How long one change may take to show: a scan every 2 s, each kubelet dialled within 3 s.
const SHOWN: Duration = Duration::from_secs(20);

/// The audit Events (action `Audit`) about Node `node`, as (type, reason).
async fn audit_events(admin: &Client, node: &str) -> Vec<(String, String)> {
    let audit = |event: &Event| event.action.as_deref() == Some("Audit");
    let told = events_for(admin, node).await.into_iter().filter(audit);
    told.map(|event| (event.type_.unwrap_or_default(), event.reason.unwrap_or_default())).collect()
}

/// `node_csr_approver_audit_nodes{state=…}` for each state, from one `/metrics` text.
fn counts(text: &str, states: &[&str]) -> Vec<Option<f64>> {
    states.iter().map(|state| metric(text, &format!("node_csr_approver_audit_nodes{{state=\"{state}\"}}"))).collect()
}

/// Waits until `/metrics` shows a scan completed after `after` (seconds since the epoch) whose
/// counts of `states` are `want`; returns the text.
async fn wait_scan(approver: &Approver, after: f64, states: &[&str], want: &[f64]) -> String {
    let deadline = Instant::now() + SHOWN;
    loop {
        let text = approver.metrics().await;
        let scanned = metric(&text, "node_csr_approver_audit_last_scan_timestamp_seconds").unwrap_or(0.0);
        let want: Vec<Option<f64>> = want.iter().copied().map(Some).collect();
        if scanned > after && counts(&text, states) == want {
            return text;
        }
        assert!(Instant::now() < deadline, "no scan counted {states:?} as {want:?}:\n{text}\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Seconds since the epoch.
fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_audits_on_a_period_counts_states_and_tells_a_node_once_per_change() {
    let network = || Arc::new(NodeNetwork::create(AddressFamilies::Ipv4).unwrap());
    let (compliant_net, self_signed_net) = (network(), network());
    let cp = ControlPlane::start().await.unwrap();
    let _signer = cp.start_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let (compliant, self_signed) = (node_name("compliant"), node_name("selfsigned"));
    let addresses: Vec<IpAddr> = [&compliant_net, &self_signed_net].iter().map(|n| n.addresses()[0]).collect();
    let prefixes = prefixes_of(&addresses);
    // An approver without the audit gets the compliant kubelet its certificate first, so that the
    // audit finds each Node in its final state from its first scan.
    let mut approver = Approver::start_with(cp.kubeconfig_path(), REGEX, &prefixes, &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    let (compliant_kubelet, _self_signed_kubelet) = tokio::join!(
        start_kubelet_in(&cp, &compliant, &compliant_net, KUBELET_PORT, true),
        start_kubelet_in(&cp, &self_signed, &self_signed_net, KUBELET_PORT, false),
    );
    wait_approved_and_served(&admin, &approver, &compliant_kubelet).await;
    drop(approver);

    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("kubelet-serving-ca.crt");
    std::fs::write(&ca_file, cp.ca_cert_pem().unwrap()).unwrap();
    let ca_flag = format!("--kubelet-serving-ca-file={}", ca_file.display());
    let lease = format!("--leader-election-id={}", support::cluster::unique("audit"));
    let flags = [
        "--bypass-dns-resolution",
        "--audit-period=2s",
        "--audit-node-metrics",
        "--events=all",
        &ca_flag,
        "--kubelet-port=10250",
        "--leader-election",
        "--leader-election-namespace=default",
        &lease,
        "--lease-duration=6s",
        "--renew-deadline=4s",
        "--retry-period=1s",
    ];
    let started = now();
    let mut replicas: Vec<Approver> = (0..2)
        .map(|i| {
            Approver::start_with(
                cp.kubeconfig_path(),
                REGEX,
                &prefixes,
                &flags,
                &[("POD_NAME", &format!("replica-{i}"))],
            )
        })
        .collect();
    for replica in &mut replicas {
        replica.wait_ready().await;
    }
    let lease_name = lease.trim_start_matches("--leader-election-id=");
    let leader =
        wait_holder(&admin, lease_name, None, Instant::now() + SHOWN).await.expect("a replica takes the Lease");
    let (approver, standby) = (&replicas[leader], &replicas[1 - leader]);
    let states = ["compliant", "self-signed", "unreachable", "expiring", "non-compliant", "not-dialled"];
    let text = wait_scan(approver, started, &states, &[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]).await;
    let every_state = text.lines().filter(|line| line.starts_with("node_csr_approver_audit_nodes{")).count();
    assert_eq!(every_state, 10, "every state has its series:\n{text}");
    // The self-signed certificate's names are non-compliant too (its CN is not system:node:…): it
    // counts once by state, under self-signed, and under both of its findings.
    let found = |finding: &str| metric(&text, &format!("node_csr_approver_audit_findings{{finding=\"{finding}\"}}"));
    let findings = ["self-signed", "non-compliant", "untrusted", "unreachable"].map(found);
    assert_eq!(findings, [Some(1.0), Some(1.0), Some(0.0), Some(0.0)], "{text}");
    let per_node =
        |node: &str, state: &str| format!("node_csr_approver_audit_node_state{{node=\"{node}\",state=\"{state}\"}}");
    assert_eq!(metric(&text, &per_node(&compliant, "compliant")), Some(1.0), "{text}");
    assert_eq!(metric(&text, &per_node(&self_signed, "self-signed")), Some(1.0), "{text}");
    let soonest = metric(&text, "node_csr_approver_audit_soonest_expiry_timestamp_seconds").unwrap();
    let days = (soonest - now()) / 86_400.0;
    assert!((300.0..=366.0).contains(&days), "both certificates are a year's: {days} days");
    let took = metric(&text, "node_csr_approver_audit_last_scan_duration_seconds").unwrap();
    eprintln!("a periodic scan of two kubelets took {took:.3} s");

    // Two more scans find nothing new: no Event repeats. The standby scans nothing.
    let scanned = wait_scan(approver, now() + 2.5, &states[..3], &[1.0, 1.0, 0.0]).await;
    let standby_text = standby.metrics().await;
    assert_eq!(counts(&standby_text, &states[..3]), [Some(0.0); 3], "the standby counts nothing");
    assert_eq!(metric(&standby_text, "node_csr_approver_audit_last_scan_timestamp_seconds"), Some(0.0));
    let cpu = |text: &str| metric(text, "process_cpu_seconds_total").unwrap();
    let (cpu_start, standby_cpu_start) = (cpu(&scanned), cpu(&standby_text));
    let last_scan = |text: &str| metric(text, "node_csr_approver_audit_last_scan_timestamp_seconds").unwrap();
    let scans_from = last_scan(&scanned);
    let selfsigned_told = [("Warning".to_owned(), "ServingCertificateSelfSigned".to_owned())];
    assert_eq!(audit_events(&admin, &self_signed).await, selfsigned_told, "told once, when first audited");
    assert_eq!(audit_events(&admin, &compliant).await, [], "a compliant Node first audited is not told");

    // CPU over about five scans of the two kubelets (a TLS handshake each), the leader's beside the
    // standby's, which scans nothing.
    let steady = wait_scan(approver, now() + 8.5, &states[..3], &[1.0, 1.0, 0.0]).await;
    let standby_steady = standby.metrics().await;
    let scans = ((last_scan(&steady) - scans_from) / 2.0).round().max(1.0);
    let (leader_cpu, standby_cpu) = (cpu(&steady) - cpu_start, cpu(&standby_steady) - standby_cpu_start);
    eprintln!(
        "over about {scans} scans of two Nodes: leader CPU {:.0} ms, standby {:.0} ms: {:.1} ms per Node per scan",
        leader_cpu * 1000.0,
        standby_cpu * 1000.0,
        (leader_cpu - standby_cpu) * 1000.0 / scans / 2.0
    );

    drop(compliant_kubelet);
    let changed = now();
    let text = wait_scan(approver, changed, &states[..3], &[0.0, 1.0, 1.0]).await;
    assert_eq!(metric(&text, &per_node(&compliant, "compliant")), None, "the series of the old state is gone");
    assert_eq!(metric(&text, &per_node(&compliant, "unreachable")), Some(1.0), "{text}");
    let expiry = format!("node_csr_approver_audit_node_expiry_timestamp_seconds{{node=\"{compliant}\"}}");
    assert_eq!(metric(&text, &expiry), None, "no certificate read");
    let deadline = Instant::now() + SHOWN;
    let unreachable_told = [("Warning".to_owned(), "KubeletUnreachable".to_owned())];
    while audit_events(&admin, &compliant).await != unreachable_told {
        assert!(Instant::now() < deadline, "{:?}\n{}", audit_events(&admin, &compliant).await, approver.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_scan(approver, now() + 2.5, &states[..3], &[0.0, 1.0, 1.0]).await;
    assert_eq!(audit_events(&admin, &compliant).await, unreachable_told, "told once per change");
    assert_eq!(audit_events(&admin, &self_signed).await, selfsigned_told, "no change, nothing told");

    // The leader goes (releasing the Lease): the standby takes it and scans at once, and, having
    // no memory of the Nodes, tells each Node with a finding once more.
    let handover = now();
    replicas[leader].signal("TERM");
    let successor = &replicas[1 - leader];
    wait_scan(successor, handover, &states[..3], &[0.0, 1.0, 1.0]).await;
    let deadline = Instant::now() + SHOWN;
    while audit_events(&admin, &self_signed).await.len() < 2 {
        assert!(Instant::now() < deadline, "{:?}\n{}", audit_events(&admin, &self_signed).await, successor.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(audit_events(&admin, &self_signed).await, [selfsigned_told[0].clone(), selfsigned_told[0].clone()]);
    eprintln!("the standby's first scan completed {:.1} s after the leader's SIGTERM", now() - handover);
}
