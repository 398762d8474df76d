//! The controller end to end: the real binary against a real kube-apiserver and a real DNS server,
//! every assertion read back from the apiserver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::Request;
use support::cluster::{
    Approver, SERIAL, conditions, control_plane, create_csr, create_serving_csr, events_for, unique, wait_decided,
    wait_event,
};
use testdns::{DnsServer, Records};

const DECIDE: Duration = Duration::from_secs(20);
/// How long "stays pending" is watched for.
const QUIET: Duration = Duration::from_secs(4);

/// A DNS server holding `<node>.nodes.example.com -> 10.0.0.<n>` for each node.
fn dns_for(nodes: &[(&str, u8)]) -> DnsServer {
    let records = nodes
        .iter()
        .fold(Records::new(), |r, (node, n)| r.a(&format!("{node}.nodes.example.com"), format!("10.0.0.{n}")));
    DnsServer::start_on_thread(records).unwrap()
}

fn legit(node: &str, n: u8) -> Request {
    Request::node(node).dns(&format!("{node}.nodes.example.com")).ip(&format!("10.0.0.{n}"))
}

#[tokio::test]
async fn approves_and_denies_end_to_end_with_conditions_and_events() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let node = unique("n");
    let dns = dns_for(&[(&node, 21)]);
    let mut approver = Approver::start(cp.kubeconfig_path(), &[&format!("--dns-server={}", dns.addr())], &[]);
    approver.wait_ready().await;

    let (good, forged, outside, other_signer) = (unique("good"), unique("forged"), unique("outside"), unique("client"));
    create_serving_csr(cp, &good, &node, &legit(&node, 21)).await;
    create_serving_csr(cp, &forged, &node, &Request::node(&node).dns("auth.evil.io")).await;
    create_serving_csr(cp, &outside, &node, &legit(&node, 21).ip("192.168.0.9")).await;
    let client_pem = Request::node(&node).pem();
    create_csr(
        cp,
        &other_signer,
        &node,
        "kubernetes.io/kube-apiserver-client-kubelet",
        &["digital signature", "client auth"],
        &client_pem,
    )
    .await;

    let approved = wait_decided(&admin, &good, DECIDE).await;
    assert_eq!(approved.len(), 1, "{approved:?}\n{}", approver.logs());
    assert_eq!((approved[0].type_.as_str(), approved[0].status.as_str()), ("Approved", "True"));
    assert_eq!(approved[0].reason.as_deref(), Some("AutoApproved"));
    assert!(approved[0].message.as_deref().unwrap().contains(&node));

    let denied = wait_decided(&admin, &forged, DECIDE).await;
    assert_eq!((denied[0].type_.as_str(), denied[0].reason.as_deref()), ("Denied", Some("HostnameMismatch")));
    assert!(denied[0].message.as_deref().unwrap().contains("auth.evil.io"));
    let denied = wait_decided(&admin, &outside, DECIDE).await;
    assert_eq!(denied[0].reason.as_deref(), Some("IPNotInPrefixes"));

    assert!(wait_event(&admin, &good, "AutoApproved", DECIDE).await.is_some(), "approval event");
    assert!(wait_event(&admin, &forged, "HostnameMismatch", DECIDE).await.is_some(), "denial event");
    assert!(conditions(&admin, &other_signer).await.is_empty(), "a CSR of another signer is untouched");
    assert!(events_for(&admin, &other_signer).await.is_empty());
    let metrics = approver.metrics().await;
    assert!(
        metrics.contains(r#"node_csr_approver_decisions_total{decision="approve",reason="AutoApproved"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn skip_deny_and_dry_run_write_nothing() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let node = unique("n");
    let dns = dns_for(&[(&node, 22)]);
    for (flag, forged_event) in [("--skip-deny-step", "HostnameMismatch"), ("--dry-run", "HostnameMismatch")] {
        let mut approver = Approver::start(cp.kubeconfig_path(), &[flag, &format!("--dns-server={}", dns.addr())], &[]);
        approver.wait_ready().await;
        let (good, forged) = (unique("good"), unique("forged"));
        create_serving_csr(cp, &forged, &node, &Request::node(&node).dns("auth.evil.io")).await;
        if flag == "--dry-run" {
            create_serving_csr(cp, &good, &node, &legit(&node, 22)).await;
            assert!(wait_event(&admin, &good, "AutoApproved", DECIDE).await.is_some(), "{flag}: would-approve event");
            assert!(conditions(&admin, &good).await.is_empty(), "{flag}: no approval written");
        }
        let event = wait_event(&admin, &forged, forged_event, DECIDE).await;
        assert!(event.is_some(), "{flag}: would-deny event\n{}", approver.logs());
        tokio::time::sleep(QUIET).await;
        assert!(conditions(&admin, &forged).await.is_empty(), "{flag}: no condition written");
    }
}

#[tokio::test]
async fn csrs_created_while_the_controller_is_down_are_decided_after_it_starts() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let node = unique("n");
    let dns = dns_for(&[(&node, 23)]);
    let names: Vec<String> = (0..5).map(|_| unique("early")).collect();
    for name in &names {
        create_serving_csr(cp, name, &node, &legit(&node, 23)).await;
    }
    let mut approver = Approver::start(cp.kubeconfig_path(), &[&format!("--dns-server={}", dns.addr())], &[]);
    approver.wait_ready().await;
    for name in &names {
        let decided = wait_decided(&admin, name, DECIDE).await;
        assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{name}: {decided:?}");
    }
}

#[tokio::test]
async fn dns_outage_leaves_csrs_pending_then_approves_them() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let node = unique("n");
    let dns = dns_for(&[(&node, 24)]);
    dns.pause();
    let mut approver = Approver::start(
        cp.kubeconfig_path(),
        &[&format!("--dns-server={}", dns.addr()), "--dns-timeout=300ms", "--dns-grace-period=0s"],
        &[],
    );
    approver.wait_ready().await;
    let name = unique("outage");
    create_serving_csr(cp, &name, &node, &legit(&node, 24)).await;
    assert!(wait_event(&admin, &name, "DNSUnavailable", DECIDE).await.is_some(), "{}", approver.logs());
    tokio::time::sleep(QUIET).await;
    assert!(conditions(&admin, &name).await.is_empty(), "never denied while DNS is down");
    dns.resume();
    let decided = wait_decided(&admin, &name, Duration::from_secs(70)).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}");
}

#[tokio::test]
async fn sigterm_exits_zero_within_seconds() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    approver.signal("TERM");
    let status = approver.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", approver.logs());
}

#[tokio::test]
async fn check_fetches_named_csrs_from_the_cluster() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let node = unique("n");
    let (good, forged) = (unique("check-good"), unique("check-forged"));
    create_serving_csr(cp, &good, &node, &legit(&node, 25)).await;
    create_serving_csr(cp, &forged, &node, &Request::node(&node).dns("auth.evil.io")).await;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_node-csr-approver"))
        .env_clear()
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args(["check", &good, &forged, "-o", "json", "--bypass-dns-resolution"])
        .args(["--provider-regex", support::cluster::REGEX])
        .args(["--provider-ip-prefixes", support::cluster::PREFIXES])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let reports: Vec<serde_json::Value> =
        String::from_utf8_lossy(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let decisions: Vec<(&str, &str)> =
        reports.iter().map(|r| (r["decision"].as_str().unwrap(), r["reason"].as_str().unwrap())).collect();
    assert_eq!(decisions, [("approve", "AutoApproved"), ("deny", "HostnameMismatch")]);

    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_node-csr-approver"))
        .env_clear()
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args(["check", "no-such-csr", "--provider-regex", support::cluster::REGEX])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no-such-csr"));
}

#[tokio::test]
async fn a_denial_of_the_longest_name_with_a_long_non_ascii_message_still_gets_its_event() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    let node = unique("n");
    let head = unique("long-name");
    let name = format!("{head}-{}", "x".repeat(253 - head.len() - 1));
    let wide_cn = format!("system:node:{node}{}", "\u{e4}".repeat(600));
    let request = Request::node(&node)
        .subject(&[(rcgen::DnType::CommonName, wide_cn.as_str()), (rcgen::DnType::OrganizationName, "system:nodes")])
        .dns(&format!("{node}.nodes.example.com"));
    create_serving_csr(cp, &name, &node, &request).await;

    let denied = wait_decided(&admin, &name, DECIDE).await;
    assert_eq!(denied[0].reason.as_deref(), Some("SubjectMismatch"), "{denied:?}");
    let message = denied[0].message.clone().unwrap_or_default();
    assert!(message.len() <= 1024 && message.ends_with('\u{2026}'), "{} bytes", message.len());
    let event = wait_event(&admin, &name, "SubjectMismatch", DECIDE).await;
    let event = event.unwrap_or_else(|| panic!("no deny event\n{}", approver.logs()));
    assert!(event.note.unwrap_or_default().len() <= 1024);
    assert!(event.metadata.name.unwrap_or_default().len() <= 253);
}
