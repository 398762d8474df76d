//! Reads of one CSR by name failing for 10 s (503, or a reset connection) during a burst: a pending
//! serving CSR is read from the apiserver before it is decided once the cache holds
//! `--cache-requests-below` CSRs (0 here: every one), and a read that fails is retried like a
//! failed write, never taken for a decision. Below that many, requests are kept and nothing is
//! read.

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
    let Scenario { cp: _cp, admin, lease_name: _, lease, replicas, leader: _, nodes } =
        Scenario::start_with(1, &["--cache-requests-below=0"]).await;
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

/// The cache keeps the requests of the CSRs that came while it held fewer than
/// `--cache-requests-below` (10 here), and reads the others, each once, when deciding them.
#[tokio::test]
async fn requests_are_kept_below_the_cache_size_and_read_from_it_on() {
    let _serial = SERIAL.lock().await;
    let Scenario { cp: _cp, admin, lease_name: _, lease, replicas, leader: _, nodes } =
        Scenario::start_with(1, &["--cache-requests-below=10"]).await;
    let proxy = &replicas[0].proxy;
    let mut created = burst(&nodes, "kept", 6, 6).await;
    decided(&admin, "kept", &created, Instant::now(), "creation", RECOVERY)
        .await
        .assert_within(RECOVERY, || logs(&replicas));
    assert_eq!(proxy.csr_reads(), (0, 0), "6 CSRs in a cache of room for 10: their requests were kept");
    let more = burst(&nodes, "read", 10, 10).await;
    let read = more.len() as u64;
    created.extend(more);
    let report = decided(&admin, "read", &created, Instant::now(), "creation", RECOVERY).await;
    let writes = writes(&replicas, &lease);
    report.assert_within(RECOVERY, || logs(&replicas));
    writes.assert(report.decided());
    let (reads, _) = proxy.csr_reads();
    // The CSRs that came once the cache held 10 are read: at least the 6 after the 10th, at most
    // all 10 of the second burst, each once (none of them retried).
    assert!((6..=read).contains(&reads), "{reads} CSRs read for {read} created, 6 of them beyond the cache's 10");
}
