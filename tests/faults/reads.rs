//! Reads of one CSR by name failing for 10 s (503, or a reset connection) during a burst: a pending
//! serving CSR is read from the apiserver before it is decided, and a read that fails is retried
//! like a failed write, never taken for a decision.

use std::time::{Duration, Instant, SystemTime};

use testenv::WriteFault;

use crate::harness::{RECOVERY, Scenario, burst, logs};
use crate::support::cluster::SERIAL;
use crate::verdict::{decided, writes};

/// How long reads fail.
const FAILING: Duration = Duration::from_secs(10);
/// Failed reads allowed per CSR while reads fail: a retry at most every 0.5 s … 8 s, and a few more.
const ATTEMPTS_PER_CSR: u64 = 8;

/// Fails every read of one CSR as `fault` says for [`FAILING`] while CSRs are created, then lets
/// them pass.
async fn failing_reads(fault: WriteFault) {
    let _serial = SERIAL.lock().await;
    let Scenario { cp: _cp, admin, lease_name: _, lease, replicas, leader: _, nodes } = Scenario::start(1).await;
    let proxy = &replicas[0].proxy;
    let scenario = format!("CSR reads failing ({fault:?})");

    let mut created = burst(&nodes, "passing", 4, 4).await;
    decided(&admin, "warm-up", &created, Instant::now(), "creation", RECOVERY)
        .await
        .assert_within(RECOVERY, || logs(&replicas));
    let (warm_up_reads, _) = proxy.csr_reads();
    assert!(warm_up_reads > 0, "the warm-up's serving CSRs were read before they were decided");

    proxy.fail_csr_reads(fault);
    let failing = Instant::now();
    let during = burst(&nodes, "failing", 24, 3).await;
    tokio::time::sleep_until((failing + FAILING).into()).await;
    proxy.fail_csr_reads(WriteFault::Pass);
    let (passing, passing_at) = (Instant::now(), SystemTime::now());
    let failed = during.len() as u64;
    created.extend(during);

    let report = decided(&admin, &scenario, &created, passing, "the reads passed again", RECOVERY).await;
    let writes = writes(&replicas, &lease);
    report.assert_within(RECOVERY, || logs(&replicas));
    writes.assert(report.decided());
    let (_, injected) = proxy.csr_reads();
    println!("CSR reads failed by the proxy: {injected} for {failed} CSRs");
    assert!(injected > 0, "no CSR was read while reads failed");
    assert!(injected <= ATTEMPTS_PER_CSR * failed, "{injected} failed reads for {failed} CSRs");
    let decided_unread: Vec<String> = proxy
        .approval_writes()
        .into_iter()
        .filter(|write| write.at < passing_at && write.target.contains("/failing-"))
        .map(|write| write.target)
        .collect();
    assert!(decided_unread.is_empty(), "decided while their reads failed: {decided_unread:?}");
}

#[tokio::test]
async fn serving_csrs_whose_reads_fail_with_503_are_decided_once_reads_pass() {
    failing_reads(WriteFault::Unavailable).await;
}

#[tokio::test]
async fn serving_csrs_whose_reads_are_reset_are_decided_once_reads_pass() {
    failing_reads(WriteFault::Reset).await;
}
