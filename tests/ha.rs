//! Several replicas, leader election, the fence, graceful shutdown and apiserver restarts: the real
//! binary against a real kube-apiserver, write attempts counted from each replica's `/metrics`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "ha/go_lease.rs"]
mod go_lease;
mod support;

use std::time::{Duration, Instant};

use kube::Client;
use support::cluster::{
    Approver, Csrs, SERIAL, conditions, control_plane, create_serving_csr, events_for, metric, unique, wait_decided,
    wait_event,
};
use support::lease::{holder, wait_holder};
use support::nodes::{dns_for, legit, wait_asked};
use testdns::DnsServer;
use testenv::ControlPlane;

const DECIDE: Duration = Duration::from_secs(20);
const FAST_LEASE: [&str; 3] = ["--lease-duration=6s", "--renew-deadline=4s", "--retry-period=1s"];
/// How long the test DNS servers hold every answer back, so evaluations are in flight.
const SLOW_DNS: Duration = Duration::from_secs(3);

/// The address every node of these tests has.
const ADDRESS: u8 = 31;

/// A DNS server resolving `<node>.nodes.example.com` to 10.0.0.31 for each node, answering after
/// [`SLOW_DNS`].
fn slow_dns(nodes: &[String]) -> DnsServer {
    let records: Vec<(&str, u8)> = nodes.iter().map(|node| (node.as_str(), ADDRESS)).collect();
    let dns = dns_for(&records);
    dns.set_delay(SLOW_DNS);
    dns
}

/// Arguments that make a replica ask `dns` and wait up to `timeout` for each answer.
fn asking(dns: &DnsServer, timeout: &str) -> Vec<String> {
    vec![format!("--dns-server={}", dns.addr()), format!("--dns-timeout={timeout}")]
}

/// Starts one replica per entry of `extra` with leader election on Lease `lease` in `default`
/// with `timing`, replica `i` named replica-<i> and given `extra[i]` (bypassing DNS when that is
/// empty).
async fn replicas(kubeconfig: &std::path::Path, lease: &str, timing: &[&str], extra: &[Vec<String>]) -> Vec<Approver> {
    let mut started = Vec::new();
    for (i, own) in extra.iter().enumerate() {
        let mut args = vec!["--leader-election".to_owned(), "--leader-election-namespace=default".to_owned()];
        args.push(format!("--leader-election-id={lease}"));
        args.extend(timing.iter().map(|a| (*a).to_owned()));
        if own.is_empty() {
            args.push("--bypass-dns-resolution".into());
        }
        args.extend(own.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let name = format!("replica-{i}");
        started.push(Approver::start(kubeconfig, &args, &[("POD_NAME", &name)]));
    }
    for approver in &mut started {
        approver.wait_ready().await;
    }
    started
}

/// Waits until `approver`'s successful writes reach `want` (a write is counted just after the
/// apiserver answered it, so a moment after the condition can be read); returns its write
/// attempts by result.
async fn settled_writes(approver: &Approver, want: f64) -> [f64; 4] {
    let deadline = Instant::now() + DECIDE;
    loop {
        let text = approver.metrics().await;
        let writes = ["success", "conflict", "not_found", "error"]
            .map(|r| metric(&text, &format!("node_csr_approver_writes_total{{result=\"{r}\"}}")).unwrap());
        if writes[0] >= want || Instant::now() >= deadline {
            return writes;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `approver` logged, for every CSR of `names`, one of `messages` (its evaluation of
/// that CSR is over).
async fn wait_evaluated(approver: &Approver, names: &[String], messages: &[&str], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let lines = approver.log_lines();
        let missing: Vec<&String> = names
            .iter()
            .filter(|name| {
                !lines.iter().any(|l| l["csr"] == name.as_str() && messages.iter().any(|m| l["message"] == *m))
            })
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "never logged {messages:?} for {missing:?}:\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_all(cp: &ControlPlane, names: &[String], nodes: &[String]) {
    for (name, node) in names.iter().zip(nodes) {
        create_serving_csr(cp, name, node, &legit(node, ADDRESS)).await;
    }
}

async fn assert_approved(admin: &Client, names: &[String], deadline: Instant, logs: impl Fn() -> String) {
    for name in names {
        let limit = deadline.saturating_duration_since(Instant::now());
        let decided = wait_decided(admin, name, limit).await;
        assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{name}: {decided:?}\n{}", logs());
    }
}

/// A standby's reconcile: it does not evaluate.
const NOT_EVALUATED: &str = "not the leader: not evaluated";
/// A reconcile of a CSR the cache already holds decided (a standby that took it from its queue
/// only after the leader's decision was watched).
const ALREADY_DECIDED: &str = "decided: nothing to do";
/// An evaluation that ended after this replica stopped leading: it does not write.
const NOT_LEADER: &str = "not the leader: waiting";
/// Evaluations a replica made, from its `/metrics`.
const EVALUATIONS: &str = "node_csr_approver_evaluation_duration_seconds_count";
const WRITTEN: &str = "written";
/// What the drain logs when it is cut short with events still queued.
const NOT_PUBLISHED: &str = "queued events were not published";
const CONFLICT: &str = "conflict: re-reading and deciding again";

#[tokio::test]
async fn only_the_holder_writes_before_and_after_a_killed_holder_is_replaced() {
    let _serial = SERIAL.lock().await;
    // A control plane of its own: the write counts cover every CSR of the cluster.
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let lease = unique("ha");
    let approvers = replicas(cp.kubeconfig_path(), &lease, &FAST_LEASE, &[vec![], vec![], vec![]]).await;
    let leader = wait_holder(&admin, &lease, None, Instant::now() + DECIDE).await.expect("a holder");

    // A node each: of one node's serving CSRs only the newest would be approved.
    let first: Vec<String> = (0..6).map(|_| unique("ha-a")).collect();
    create_all(&cp, &first, &first.iter().map(|_| unique("n")).collect::<Vec<_>>()).await;
    assert_approved(&admin, &first, Instant::now() + DECIDE, || approvers[leader].logs()).await;
    assert_eq!(settled_writes(&approvers[leader], 6.0).await, [6.0, 0.0, 0.0, 0.0], "the holder wrote each once");
    for (i, standby) in approvers.iter().enumerate().filter(|(i, _)| *i != leader) {
        wait_evaluated(standby, &first, &[NOT_EVALUATED, ALREADY_DECIDED], DECIDE).await;
        assert_eq!(standby.write_attempts().await, Some(0.0), "standby replica-{i}:\n{}", standby.logs());
        assert_eq!(standby.metric(EVALUATIONS).await, Some(0.0), "standby replica-{i} evaluated:\n{}", standby.logs());
    }

    let killed = approvers[leader].signal("KILL");
    let second: Vec<String> = (0..4).map(|_| unique("ha-b")).collect();
    create_all(&cp, &second, &second.iter().map(|_| unique("n")).collect::<Vec<_>>()).await;
    // A standby acquires the Lease once it expires (6 s after the last renewal), then decides.
    let takeover = killed + Duration::from_secs(6) + DECIDE;
    assert_approved(&admin, &second, takeover, || approvers.iter().map(Approver::logs).collect()).await;
    let new_leader = wait_holder(&admin, &lease, Some(leader), takeover).await.expect("a new holder");
    assert_eq!(settled_writes(&approvers[new_leader], 4.0).await, [4.0, 0.0, 0.0, 0.0], "the new holder");
    for (i, standby) in approvers.iter().enumerate().filter(|(i, _)| *i != leader && *i != new_leader) {
        wait_evaluated(standby, &second, &[NOT_EVALUATED, ALREADY_DECIDED], DECIDE).await;
        assert_eq!(standby.write_attempts().await, Some(0.0), "standby replica-{i}:\n{}", standby.logs());
        assert_eq!(standby.metric(EVALUATIONS).await, Some(0.0), "standby replica-{i} evaluated:\n{}", standby.logs());
    }
}

#[tokio::test]
async fn a_stalled_leader_stops_writing_before_a_standby_takes_over() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let nodes: Vec<String> = (0..7).map(|_| unique("n")).collect();
    // One DNS server per replica: what each one asked is known.
    let dns = [slow_dns(&nodes), slow_dns(&nodes)];
    let lease = unique("fence");
    let approvers =
        replicas(cp.kubeconfig_path(), &lease, &FAST_LEASE, &[asking(&dns[0], "30s"), asking(&dns[1], "30s")]).await;
    let leader = wait_holder(&admin, &lease, None, Instant::now() + DECIDE).await.expect("a holder");
    let (old, new) = (&approvers[leader], &approvers[1 - leader]);
    let logs = || format!("old leader:\n{}\nnew leader:\n{}", old.logs(), new.logs());

    // Decided by the leader while it renews.
    let before: Vec<String> = (0..2).map(|_| unique("fence-a")).collect();
    create_all(&cp, &before, &nodes[0..2]).await;
    assert_approved(&admin, &before, Instant::now() + DECIDE, logs).await;
    assert_eq!(settled_writes(old, 2.0).await, [2.0, 0.0, 0.0, 0.0]);

    // In flight when the leader stalls: it resumes with their answers in hand.
    let stalled: Vec<String> = (0..3).map(|_| unique("fence-b")).collect();
    create_all(&cp, &stalled, &nodes[2..5]).await;
    wait_asked(&dns[leader], &nodes[2..5], 2).await;
    let stopped = old.signal("STOP");
    let deadline = stopped + Duration::from_secs(6) + DECIDE;
    assert_eq!(wait_holder(&admin, &lease, Some(leader), deadline).await, Some(1 - leader), "{}", logs());
    assert_approved(&admin, &stalled, deadline, logs).await;

    let resumed = old.signal("CONT");
    let after: Vec<String> = (0..2).map(|_| unique("fence-c")).collect();
    create_all(&cp, &after, &nodes[5..7]).await;
    assert_approved(&admin, &after, resumed + DECIDE, logs).await;
    // The old leader's evaluations end: at the gate, or (were it not fenced) in a write.
    wait_evaluated(old, &stalled, &[NOT_LEADER, WRITTEN, CONFLICT], DECIDE).await;
    wait_evaluated(old, &after, &[NOT_EVALUATED, NOT_LEADER, "ignored", WRITTEN, CONFLICT], DECIDE).await;
    let text = old.metrics().await;
    assert_eq!(support::cluster::write_attempts(&text), Some(2.0), "the old leader wrote after the stall:\n{text}");
    for name in &stalled {
        assert!(old.logged(name, NOT_LEADER), "{name}: the old leader did not reach the gate:\n{}", old.logs());
    }
    assert_eq!(settled_writes(new, 5.0).await, [5.0, 0.0, 0.0, 0.0], "the new leader decided the rest");
    let gauge_deadline = resumed + DECIDE;
    while old.metric("node_csr_approver_leader").await != Some(0.0) {
        assert!(Instant::now() < gauge_deadline, "the old leader's gauge stayed at 1:\n{}", old.metrics().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(new.metric("node_csr_approver_leader").await, Some(1.0));
}

#[tokio::test]
async fn sigterm_finishes_in_flight_writes_stops_taking_work_and_releases_the_lease() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let nodes: Vec<String> = (0..8).map(|_| unique("n")).collect();
    let dns = slow_dns(&nodes);
    let lease = unique("drain");
    let mut extra = asking(&dns, "30s");
    extra.push("--events=all".to_owned());
    let mut approvers = replicas(cp.kubeconfig_path(), &lease, &FAST_LEASE, &[extra]).await;
    let approver = &mut approvers[0];
    assert_eq!(wait_holder(&admin, &lease, None, Instant::now() + DECIDE).await, Some(0));

    let burst = csrs.names("drain", nodes.len());
    create_all(cp, &burst, &nodes).await;
    wait_asked(&dns, &nodes, 2).await;
    let signalled = approver.signal("TERM");
    let shutting_down = signalled + DECIDE;
    while !approver.logs().contains("shutting down") {
        assert!(Instant::now() < shutting_down, "{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let late = csrs.name("drain-late");
    let late_node = unique("n");
    create_serving_csr(cp, &late, &late_node, &legit(&late_node, ADDRESS)).await;

    // The default --drain-timeout is 20 s; each in-flight evaluation needs SLOW_DNS more.
    let status = approver.exit_by(signalled + SLOW_DNS + DECIDE).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", approver.logs());
    for name in &burst {
        let found = conditions(&admin, name).await;
        assert_eq!(found.first().map(|c| c.type_.as_str()), Some("Approved"), "{name}:\n{}", approver.logs());
        assert_eq!(
            approver.wait_decisions(name, "written").await.len(),
            1,
            "{name} written once:\n{}",
            approver.logs()
        );
        // Queued after the signal, published by the drain before the process exits.
        let events = events_for(&admin, name).await;
        let approved = events.iter().filter(|e| e.reason.as_deref() == Some("AutoApproved")).count();
        assert_eq!(approved, 1, "{name}: {events:?}\n{}", approver.logs());
    }
    assert!(!approver.logs().contains(NOT_PUBLISHED), "{}", approver.logs());
    assert!(conditions(&admin, &late).await.is_empty(), "a CSR created after SIGTERM was decided");
    assert!(!approver.log_lines().iter().any(|l| l["csr"] == late.as_str()), "{}", approver.logs());
    assert_eq!(holder(&admin, &lease).await, None, "the Lease was not released");
}

#[tokio::test]
async fn sigterm_when_idle_exits_within_a_second_without_a_false_warning() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let lease = unique("idle");
    let extra = vec!["--bypass-dns-resolution".to_owned(), "--events=all".to_owned()];
    let mut approvers = replicas(cp.kubeconfig_path(), &lease, &FAST_LEASE, &[extra]).await;
    let approver = &mut approvers[0];
    assert_eq!(wait_holder(&admin, &lease, None, Instant::now() + DECIDE).await, Some(0));
    // Work done and its event published: nothing is in flight or queued any more.
    let node = unique("n");
    let name = csrs.name("idle");
    create_serving_csr(cp, &name, &node, &legit(&node, ADDRESS)).await;
    assert_eq!(wait_decided(&admin, &name, DECIDE).await.len(), 1, "{}", approver.logs());
    assert!(wait_event(&admin, &name, "AutoApproved", DECIDE).await.is_some(), "{}", approver.logs());

    let signalled = approver.signal("TERM");
    let status = approver.exit_by(signalled + Duration::from_secs(1)).await;
    let exited = approver.exit_by(signalled + DECIDE).await.map(|_| signalled.elapsed());
    assert_eq!(status.and_then(|s| s.code()), Some(0), "exited after {exited:?}:\n{}", approver.logs());
    println!("exited {exited:.2?} after SIGTERM");
    assert!(!approver.logs().contains(NOT_PUBLISHED), "{}", approver.logs());
    assert_eq!(holder(&admin, &lease).await, None, "the Lease was not released");
}

#[tokio::test]
async fn a_drain_longer_than_the_drain_timeout_is_cut_short_and_exits_1() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let dns = slow_dns(std::slice::from_ref(&node));
    dns.set_delay(Duration::from_secs(40));
    let lease = unique("drain");
    let mut extra = asking(&dns, "60s");
    extra.push("--drain-timeout=2s".to_owned());
    let mut approvers = replicas(cp.kubeconfig_path(), &lease, &FAST_LEASE, &[extra]).await;
    let approver = &mut approvers[0];
    assert_eq!(wait_holder(&admin, &lease, None, Instant::now() + DECIDE).await, Some(0));

    let name = csrs.name("drain-slow");
    create_serving_csr(cp, &name, &node, &legit(&node, ADDRESS)).await;
    wait_asked(&dns, &[&node], 2).await;
    let signalled = approver.signal("TERM");
    let status = approver.exit_by(signalled + Duration::from_secs(2) + DECIDE).await;
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{}", approver.logs());
    assert!(approver.logs().contains("did not finish within --drain-timeout 2s"), "{}", approver.logs());
    assert!(conditions(&admin, &name).await.is_empty(), "the cancelled evaluation wrote");
    assert_eq!(holder(&admin, &lease).await, None, "the Lease was not released");
}

#[tokio::test]
async fn sigterm_releases_the_lease_so_a_standby_takes_over_at_once() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let csrs = Csrs::new(cp.kubeconfig_path());
    let lease = unique("term");
    // The default timings: a 15 s Lease that nobody renews would keep the standby waiting 15 s.
    let mut approvers = replicas(cp.kubeconfig_path(), &lease, &[], &[vec![], vec![]]).await;
    let leader = wait_holder(&admin, &lease, None, Instant::now() + DECIDE).await.expect("a holder");
    let signalled = approvers[leader].signal("TERM");
    let status = approvers[leader].exit_by(signalled + DECIDE).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", approvers[leader].logs());
    let next = wait_holder(&admin, &lease, Some(leader), signalled + Duration::from_secs(10)).await;
    assert_eq!(next, Some(1 - leader), "no takeover within 10 s of SIGTERM; the Lease lasts 15 s");
    let node = unique("n");
    let name = csrs.name("term-csr");
    create_serving_csr(cp, &name, &node, &legit(&node, ADDRESS)).await;
    assert_eq!(wait_decided(&admin, &name, DECIDE).await.len(), 1);
    assert_eq!(approvers[1 - leader].wait_decisions(&name, "written").await.len(), 1);
}

#[tokio::test]
async fn csrs_around_an_apiserver_restart_are_all_decided() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    // A node each: of one node's serving CSRs only the newest would be approved.
    let mut names = Vec::new();
    let before = unique("before");
    let node = unique("n");
    create_serving_csr(&cp, &before, &node, &legit(&node, ADDRESS)).await;
    names.push(before);
    cp.restart_apiserver().await.unwrap();
    for _ in 0..3 {
        let after = unique("after");
        let node = unique("n");
        create_serving_csr(&cp, &after, &node, &legit(&node, ADDRESS)).await;
        names.push(after);
    }
    for name in &names {
        let decided = wait_decided(&admin, name, Duration::from_secs(40)).await;
        assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{name}:\n{}", approver.logs());
        assert_eq!(approver.wait_decisions(name, "written").await.len(), 1, "{name}:\n{}", approver.logs());
    }
}
