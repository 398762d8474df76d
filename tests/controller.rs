//! The controller end to end: the real binary against a real kube-apiserver and a real DNS server,
//! every assertion read back from the apiserver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use rcgen::DnType;
use support::Request;
use support::cluster::{
    Approver, Csrs, PREFIXES, REGEX, SERIAL, conditions, control_plane, create_csr, create_serving_csr,
    create_serving_csrs, events_for, json_keys, unique, wait_decided, wait_event,
};
use support::nodes::{dns_for, legit};

const DECIDE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn approves_and_denies_end_to_end_with_conditions_and_events() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    // The forgeries are another node's: of one node's serving CSRs only the newest is approved.
    let (node, rival) = (unique("n"), unique("n"));
    // Each approver below approves a node of its own: two serving CSRs of one node created within
    // the same second would be ordered by name, not by when they were created.
    let (node_all, node_none) = (unique("n"), unique("n"));
    let dns = dns_for(&[(&node, 21), (&node_all, 22), (&node_none, 23)]);
    let mut approver = Approver::start(cp.kubeconfig_path(), &[&format!("--dns-server={}", dns.addr())], &[]);
    approver.wait_ready().await;

    let csrs = Csrs::new(cp.kubeconfig_path());
    let (good, forged, outside, other_signer) =
        (csrs.name("good"), csrs.name("forged"), csrs.name("outside"), csrs.name("client"));
    create_serving_csr(cp, &good, &node, &legit(&node, 21)).await;
    create_serving_csr(cp, &forged, &rival, &Request::node(&rival).dns("auth.evil.io")).await;
    create_serving_csr(cp, &outside, &rival, &legit(&rival, 21).ip("192.168.0.9")).await;
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

    // --events defaults to problems: denials get an event, approvals only their condition.
    assert!(wait_event(&admin, &forged, "HostnameMismatch", DECIDE).await.is_some(), "denial event");
    assert!(wait_event(&admin, &outside, "IPNotInPrefixes", DECIDE).await.is_some(), "denial event");
    assert!(conditions(&admin, &other_signer).await.is_empty(), "a CSR of another signer is untouched");
    assert!(events_for(&admin, &other_signer).await.is_empty());
    let metrics = approver.metrics().await;
    assert!(
        metrics.contains(r#"node_csr_approver_decisions_total{decision="approve",reason="AutoApproved"}"#),
        "{metrics}"
    );

    // One JSON line per decision, each key once: the CSR, node, decision, reason and why.
    let logs = approver.logs();
    let line = logs.lines().find(|l| l.contains(&format!(r#""csr":"{good}""#)) && l.contains("written")).unwrap();
    let keys = json_keys(line);
    for key in ["message", "csr", "node", "decision", "reason", "detail"] {
        assert_eq!(keys.iter().filter(|k| *k == key).count(), 1, "{key} in {line}");
    }
    let line: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!((line["message"].as_str(), line["node"].as_str()), (Some("written"), Some(node.as_str())));
    assert_eq!((line["decision"].as_str(), line["reason"].as_str()), (Some("approve"), Some("AutoApproved")));
    assert_eq!(line["detail"], approved[0].message.as_deref().unwrap());
    // The good CSR was decided before the denials whose events are there by now.
    assert!(events_for(&admin, &good).await.is_empty(), "no approval event by default");
    drop(approver);

    // --events=all adds the approvals' events; --events=none publishes nothing.
    for (level, with_events, node, n) in [("all", true, &node_all, 22), ("none", false, &node_none, 23)] {
        let flags = [format!("--dns-server={}", dns.addr()), format!("--events={level}")];
        let mut approver = Approver::start(cp.kubeconfig_path(), &[&flags[0], &flags[1]], &[]);
        approver.wait_ready().await;
        let (good, forged) = (csrs.name("good"), csrs.name("forged"));
        create_serving_csr(cp, &good, node, &legit(node, n)).await;
        create_serving_csr(cp, &forged, &rival, &Request::node(&rival).dns("auth.evil.io")).await;
        assert_eq!(wait_decided(&admin, &good, DECIDE).await[0].type_, "Approved");
        assert_eq!(wait_decided(&admin, &forged, DECIDE).await[0].type_, "Denied");
        if with_events {
            assert!(wait_event(&admin, &good, "AutoApproved", DECIDE).await.is_some(), "--events=all: approval event");
        } else {
            // Events follow their write within milliseconds; give them a second.
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(events_for(&admin, &good).await.is_empty(), "--events=none: no approval event");
            assert!(events_for(&admin, &forged).await.is_empty(), "--events=none: no denial event");
        }
    }
}

#[tokio::test]
async fn skip_deny_and_dry_run_write_nothing() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let dns = dns_for(&[(&node, 22)]);
    for (flag, note) in [("--skip-deny-step", "held for a human"), ("--dry-run", "dry run: not written")] {
        // --events=all: the would-be approval's event too.
        let flags = [flag, &format!("--dns-server={}", dns.addr()), "--events=all"];
        let mut approver = Approver::start(cp.kubeconfig_path(), &flags, &[]);
        approver.wait_ready().await;
        let (good, forged) = (csrs.name("good"), csrs.name("forged"));
        create_serving_csr(cp, &forged, &node, &Request::node(&node).dns("auth.evil.io")).await;
        if flag == "--dry-run" {
            create_serving_csr(cp, &good, &node, &legit(&node, 22)).await;
            assert!(wait_event(&admin, &good, "AutoApproved", DECIDE).await.is_some(), "{flag}: would-approve event");
            // The event is queued after the decision: had anything been written, it would be by now.
            assert!(conditions(&admin, &good).await.is_empty(), "{flag}: no approval written");
            assert_eq!(approver.wait_decisions(&good, note).await.len(), 1, "{flag}:\n{}", approver.logs());
        }
        let event = wait_event(&admin, &forged, "HostnameMismatch", DECIDE).await;
        assert!(event.is_some(), "{flag}: would-deny event\n{}", approver.logs());
        assert!(conditions(&admin, &forged).await.is_empty(), "{flag}: no condition written");
        assert_eq!(approver.wait_decisions(&forged, note).await.len(), 1, "{flag}:\n{}", approver.logs());
        assert!(approver.decisions(&forged, "written").is_empty(), "{flag}:\n{}", approver.logs());
    }
}

#[tokio::test]
async fn csrs_created_while_the_controller_is_down_are_decided_after_it_starts() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let node = unique("n");
    let dns = dns_for(&[(&node, 23)]);
    let csrs = Csrs::new(cp.kubeconfig_path());
    let names = csrs.names("early", 5);
    for name in &names {
        create_serving_csr(cp, name, &node, &legit(&node, 23)).await;
    }
    let mut approver = Approver::start(cp.kubeconfig_path(), &[&format!("--dns-server={}", dns.addr())], &[]);
    approver.wait_ready().await;
    // Every one is decided: the node's newest approved, the older ones superseded by it.
    let mut decisions = Vec::new();
    for name in &names {
        let decided = wait_decided(&admin, name, DECIDE).await;
        decisions.push(decided.first().map(|c| (c.type_.clone(), c.reason.clone())));
    }
    let approved = decisions.iter().filter(|d| matches!(d, Some((t, _)) if t == "Approved")).count();
    let superseded = decisions.iter().filter(|d| matches!(d, Some((t, Some(r))) if t == "Denied" && r == "Superseded"));
    assert_eq!((approved, superseded.count()), (1, names.len() - 1), "{decisions:?}");
}

/// Turns are shared between requesting nodes: with one reconcile at a time, a CSR another node
/// creates while 400 of one node's CSRs wait is decided while most of those still wait, and then
/// the flood is decided too.
#[tokio::test]
async fn another_nodes_csr_is_decided_before_a_flooding_nodes_backlog_drains() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let (flooder, other) = (unique("flooder"), unique("n"));
    let dns = dns_for(&[(&flooder, 24), (&other, 25)]);
    let csrs = Csrs::new(cp.kubeconfig_path());
    let flood = csrs.names("flood", 400);
    create_serving_csrs(cp, &flood, &flooder, &legit(&flooder, 24)).await;
    let dns_server = format!("--dns-server={}", dns.addr());
    let mut approver = Approver::start(cp.kubeconfig_path(), &[&dns_server, "--concurrency=1"], &[]);
    approver.wait_ready().await;
    let late = csrs.name("other");
    create_serving_csr(cp, &late, &other, &legit(&other, 25)).await;

    let decided = wait_decided(&admin, &late, DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}");
    let waiting = undecided(&admin, &flood).await;
    assert!(waiting >= 200, "only {waiting} of the flood's 400 CSRs still waited\n{}", approver.logs());
    let deadline = Instant::now() + DECIDE;
    while undecided(&admin, &flood).await > 0 {
        assert!(Instant::now() < deadline, "the flood was not decided\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How many of the CSRs `names` have no condition.
async fn undecided(admin: &kube::Client, names: &[String]) -> usize {
    let all = kube::Api::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>::all(admin.clone());
    let listed = all.list(&kube::api::ListParams::default()).await.unwrap();
    let names: std::collections::HashSet<_> = names.iter().map(String::as_str).collect();
    listed
        .items
        .iter()
        .filter(|csr| csr.metadata.name.as_deref().is_some_and(|name| names.contains(name)))
        .filter(|csr| csr.status.as_ref().and_then(|s| s.conditions.as_ref()).is_none_or(Vec::is_empty))
        .count()
}

#[tokio::test]
async fn dns_outage_leaves_csrs_pending_with_one_event_then_approves_them() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let dns = dns_for(&[(&node, 24)]);
    dns.pause();
    let mut approver = Approver::start(
        cp.kubeconfig_path(),
        &[&format!("--dns-server={}", dns.addr()), "--dns-timeout=300ms", "--dns-grace-period=0s"],
        &[],
    );
    approver.wait_ready().await;
    let name = csrs.name("outage");
    create_serving_csr(cp, &name, &node, &legit(&node, 24)).await;
    assert!(wait_event(&admin, &name, "DNSUnavailable", DECIDE).await.is_some(), "{}", approver.logs());
    // Three evaluations (2 s, then 4 s of backoff apart), each a retry, never a denial.
    let retries = r#"node_csr_approver_decisions_total{decision="retry",reason="DNSUnavailable"}"#;
    let deadline = Instant::now() + Duration::from_secs(2 + 4) + DECIDE;
    while approver.metric(retries).await.unwrap_or(0.0) < 3.0 {
        assert!(Instant::now() < deadline, "{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(conditions(&admin, &name).await.is_empty(), "never denied while DNS is down");
    let events: Vec<_> = events_for(&admin, &name).await;
    assert_eq!(events.len(), 1, "one event per reason and CSR across retries: {events:#?}");
    dns.resume();
    // The next retry comes after 8 s of backoff.
    let decided = wait_decided(&admin, &name, Duration::from_secs(8) + DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}");
}

#[tokio::test]
async fn sigterm_exits_zero_within_seconds() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    let signalled = approver.signal("TERM");
    let status = approver.exit_by(signalled + DECIDE).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", approver.logs());
}

#[tokio::test]
async fn check_fetches_named_csrs_from_the_cluster() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let node = unique("n");
    let csrs = Csrs::new(cp.kubeconfig_path());
    let (good, forged) = (csrs.name("check-good"), csrs.name("check-forged"));
    // The forgery first: the good CSR is the node's newest, so it is not superseded.
    create_serving_csr(cp, &forged, &node, &Request::node(&node).dns("auth.evil.io")).await;
    create_serving_csr(cp, &good, &node, &legit(&node, 25)).await;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_node-csr-approver"))
        .env_clear()
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args(["check", &good, &forged, "-o", "json", "--bypass-dns-resolution"])
        .args(["--provider-regex", REGEX])
        .args(["--provider-ip-prefixes", PREFIXES])
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
        .args(["check", "no-such-csr", "--provider-regex", REGEX])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no-such-csr"));
}

#[tokio::test]
async fn events_about_csrs_with_long_or_odd_names_are_accepted_and_overlong_ones_left_alone() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution", "--resync-period=1s"], &[]);
    approver.wait_ready().await;
    // CSR names are path segments: any length, any case, most characters.
    let long = unique("long");
    let long = format!("{long}-{}", "x".repeat(253 - long.len() - 1));
    let odd = format!("{}_Ünï:Node", unique("Odd"));
    for name in [&long, &odd] {
        csrs.adopt(name);
        create_serving_csr(cp, name, &node, &Request::node(&node).dns("auth.evil.io")).await;
        let decided = wait_decided(&admin, name, DECIDE).await;
        assert_eq!(decided.first().and_then(|c| c.reason.as_deref()), Some("HostnameMismatch"), "{name}");
        let event = wait_event(&admin, name, "HostnameMismatch", DECIDE).await;
        assert!(event.is_some(), "no denial event for {name:?}:\n{}", approver.logs());
    }
    // A name longer than a DNS subdomain is kept only as a bounded stand-in: the CSR is left
    // undecided, and the log says so once.
    let overlong_prefix = unique("overlong");
    let overlong = format!("{overlong_prefix}-{}", "y".repeat(300));
    csrs.adopt(&overlong);
    create_serving_csr(cp, &overlong, &node, &Request::node(&node).dns("auth.evil.io")).await;
    let told = |logs: &str| {
        logs.lines().filter(|l| l.contains("cannot decide this CSR") && l.contains(&overlong_prefix)).count()
    };
    let deadline = Instant::now() + DECIDE;
    while told(&approver.logs()) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Passes over every undecided CSR (the resync, every second here) come and go meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(told(&approver.logs()), 1, "the overlong name told once:\n{}", approver.logs());
    assert!(conditions(&admin, &overlong).await.is_empty(), "the overlong name was decided");
}

#[tokio::test]
async fn a_deny_event_with_a_long_non_ascii_subject_is_accepted() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    let name = csrs.name("non-ascii");
    let cn = format!("system:node:{}", "é".repeat(600));
    let request = legit(&node, 28).subject(&[(DnType::CommonName, &cn), (DnType::OrganizationName, "system:nodes")]);
    create_serving_csr(cp, &name, &node, &request).await;
    let decided = wait_decided(&admin, &name, DECIDE).await;
    let (reason, message) = (decided[0].reason.clone().unwrap(), decided[0].message.clone().unwrap());
    assert_eq!((decided[0].type_.as_str(), reason.as_str()), ("Denied", "SubjectMismatch"));
    // The message ran over 1024 bytes of mostly two-byte characters, so it was cut.
    assert!(message.contains("ééé") && message.ends_with('…') && message.len() <= 1024, "{} bytes", message.len());
    let event = wait_event(&admin, &name, &reason, DECIDE).await;
    let note = event.and_then(|e| e.note).unwrap_or_else(|| panic!("no denial event:\n{}", approver.logs()));
    assert!(note.len() <= 1024 && note.ends_with('…'), "{} bytes", note.len());
    assert_eq!(note, message, "the same text cut the same way");
}

#[tokio::test]
async fn a_deployment_written_for_the_go_tool_starts_unchanged() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let node = unique("n");
    let dns = dns_for(&[(&node, 28)]);
    // The container arguments and env vars the Go tool's chart renders (its ports on loopback
    // here), the flag controller-runtime adds for the kubeconfig, and this test's DNS server.
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_node-csr-approver"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["-metrics-bind-address", "127.0.0.1:0", "-health-probe-bind-address", "127.0.0.1:0", "-level", "1"])
        .arg("-kubeconfig")
        .arg(cp.kubeconfig_path())
        .envs([("PROVIDER_REGEX", REGEX), ("PROVIDER_IP_PREFIXES", PREFIXES), ("IGNORE_NON_SYSTEM_NODE", "False")])
        .env("DNS_SERVERS", dns.addr().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let mut approver = Approver::spawn(command);
    approver.wait_ready().await;
    let csrs = Csrs::new(cp.kubeconfig_path());
    let (good, forged) = (csrs.name("go-good"), csrs.name("go-forged"));
    create_serving_csr(cp, &good, &node, &legit(&node, 28)).await;
    create_serving_csr(cp, &forged, &node, &Request::node(&node).dns("auth.evil.io")).await;
    for (name, reason) in [(&good, "AutoApproved"), (&forged, "HostnameMismatch")] {
        let decided = wait_decided(&admin, name, DECIDE).await;
        assert_eq!(decided.first().and_then(|c| c.reason.as_deref()), Some(reason), "{}", approver.logs());
    }
    // -level 1 is debug: the decision core's debug lines are logged.
    assert!(approver.log_lines().iter().any(|l| l["level"] == "DEBUG"), "{}", approver.logs());
}
