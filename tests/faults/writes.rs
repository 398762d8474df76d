//! Approval writes failing for 10 s (503, or a reset connection) during a burst.

use std::time::{Duration, Instant};

use testenv::WriteFault;

use crate::harness::{RECOVERY, Scenario, burst, logs};
use crate::support::cluster::SERIAL;
use crate::verdict::{decided, writes};

/// How long approval writes fail.
const FAILING: Duration = Duration::from_secs(10);
/// Failed attempts allowed per CSR while writes fail: a retry at most every 2 s, and a few more.
const ATTEMPTS_PER_CSR: usize = 8;

/// Fails every approval write as `fault` says for [`FAILING`] while CSRs are created, then lets
/// them pass.
async fn failing_writes(fault: WriteFault) {
    let _serial = SERIAL.lock().await;
    let Scenario { cp: _cp, admin, lease_name: _, lease, replicas, leader: _, nodes } = Scenario::start(1).await;
    let proxy = &replicas[0].proxy;
    let scenario = format!("approval writes failing ({fault:?})");

    let mut created = burst(&nodes, "passing", 4, 4).await;
    decided(&admin, "warm-up", &created, Instant::now(), "creation", RECOVERY)
        .await
        .assert_within(RECOVERY, || logs(&replicas));

    proxy.fail_writes(fault);
    let failing = Instant::now();
    let during = burst(&nodes, "failing", 24, 3).await;
    tokio::time::sleep_until((failing + FAILING).into()).await;
    proxy.fail_writes(WriteFault::Pass);
    let passing = Instant::now();
    let failed = during.len();
    created.extend(during);

    let report = decided(&admin, &scenario, &created, passing, "the writes passed again", RECOVERY).await;
    let writes = writes(&replicas, &lease);
    report.assert_within(RECOVERY, || logs(&replicas));
    writes.assert(report.decided());
    assert!(writes.injected > 0, "no write was attempted while they failed");
    assert!(writes.injected <= ATTEMPTS_PER_CSR * failed, "{} failed attempts for {failed} CSRs", writes.injected);
}

#[tokio::test]
async fn csrs_whose_writes_fail_with_503_are_decided_once_writes_pass() {
    failing_writes(WriteFault::Unavailable).await;
}

#[tokio::test]
async fn csrs_whose_writes_are_reset_are_decided_once_writes_pass() {
    failing_writes(WriteFault::Reset).await;
}
