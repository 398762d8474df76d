//! The leader stalled (SIGSTOP past the renew deadline, within the Lease) or killed mid-burst.

use std::time::{Duration, Instant};

use crate::harness::{Creator, LEASE_DURATION, RECOVERY, Scenario, burst, logs};
use crate::support::cluster::SERIAL;
use crate::support::lease::wait_holder;
use crate::verdict::{decided, writes};

/// How long the leader is stopped: longer than `--renew-deadline` (3 s), shorter than
/// `--lease-duration` (10 s), so no standby may take over.
const STALL: Duration = Duration::from_millis(5500);

/// How many times the leader is stalled in a row: what a stall loses depends on which the
/// resumed process does first, renew or handle the events it missed.
const STALLS: usize = 2;

/// Stalls the leader of `count` replicas [`STALLS`] times while CSRs are created, each time
/// resuming it and checking that every CSR is decided within [`RECOVERY`] of its resumption.
async fn stalled_leader(count: usize) {
    let _serial = SERIAL.lock().await;
    let Scenario { cp, admin, lease_name, lease, replicas, mut leader, nodes } = Scenario::start(count).await;
    let _signer = cp.start_signer().await.unwrap();

    let warm = burst(&nodes, "leading", 6, 6).await;
    let mut reports = vec![decided(&admin, "warm-up", &warm, Instant::now(), "creation", RECOVERY).await];
    for stall in 1..=STALLS {
        let stopped = replicas[leader].approver.signal("STOP");
        let creator = Creator::start(&nodes, &format!("stalled{stall}"), 3, None);
        tokio::time::sleep_until((stopped + STALL).into()).await;
        let mut created = creator.stop().await;
        let resumed = replicas[leader].approver.signal("CONT");
        println!("leader replica-{leader} stopped for {:.1} s", (resumed - stopped).as_secs_f64());
        created.extend(burst(&nodes, &format!("resumed{stall}"), 6, 6).await);
        let scenario = format!("leader stalled ({stall} of {STALLS}), {count} replica(s)");
        reports.push(decided(&admin, &scenario, &created, resumed, "SIGCONT", RECOVERY).await);
        leader = wait_holder(&admin, &lease_name, None, Instant::now() + RECOVERY).await.expect("a holder");
    }
    let writes = writes(&replicas, &lease);
    for report in &reports {
        report.assert_within(RECOVERY, || logs(&replicas));
    }
    writes.assert(reports.iter().map(|report| report.decided()).sum());
}

#[tokio::test]
async fn a_lone_leader_stalled_past_its_renew_deadline_decides_every_csr_once_after_it_resumes() {
    stalled_leader(1).await;
}

#[tokio::test]
async fn a_leader_of_three_stalled_past_its_renew_deadline_leaves_every_csr_decided_once() {
    stalled_leader(3).await;
}

#[tokio::test]
async fn a_leader_killed_mid_burst_leaves_every_csr_decided_once() {
    let reads = killed_leader(&[]).await;
    assert_eq!(reads, 0, "CSRs read from the apiserver with room for every request in the cache");
}

/// The same with every serving CSR read from the apiserver before it is decided
/// (`--cache-requests-below=0`): reads in flight die with the leader; the next one reads again.
#[tokio::test]
async fn a_leader_killed_mid_burst_reading_every_csr_leaves_every_csr_decided_once() {
    let reads = killed_leader(&["--cache-requests-below=0"]).await;
    assert!(reads > 0, "no serving CSR was read before it was decided");
}

/// Kills the leader of three replicas (with `extra` arguments each) while CSRs are created;
/// checks that every CSR is decided once within a Lease and [`RECOVERY`] of the kill; returns how
/// many CSRs the replicas read from the apiserver.
async fn killed_leader(extra: &[&str]) -> u64 {
    let _serial = SERIAL.lock().await;
    let Scenario { cp, admin, lease_name, lease, replicas, leader, nodes } = Scenario::start_with(3, extra).await;
    let _signer = cp.start_signer().await.unwrap();

    let creator = Creator::start(&nodes, "burst", 4, None);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let killed = replicas[leader].approver.signal("KILL");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let created = creator.stop().await;
    let takeover = killed + LEASE_DURATION + RECOVERY;
    let next = wait_holder(&admin, &lease_name, Some(leader), takeover).await;
    let next = next.unwrap_or_else(|| panic!("no replica took over from replica-{leader}:\n{}", logs(&replicas)));
    println!("replica-{next} took over {:.1} s after replica-{leader} was killed", killed.elapsed().as_secs_f64());

    // A standby may take the Lease only once it expired: the bound counts from then.
    let bound = LEASE_DURATION + RECOVERY;
    let report = decided(&admin, "leader killed, 3 replicas", &created, killed, "SIGKILL", bound).await;
    let writes = writes(&replicas, &lease);
    report.assert_within(bound, || logs(&replicas));
    writes.assert(report.decided());
    let reads = replicas.iter().map(|replica| replica.proxy.csr_reads().0).sum();
    println!("CSR reads: {reads}");
    reads
}
