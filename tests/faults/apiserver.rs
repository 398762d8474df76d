//! kube-apiserver stopped for 15 s while CSRs keep coming: with each request kept in the cache,
//! and with every serving CSR read from the apiserver before it is decided
//! (`--cache-requests-below=0`), so reads fail, and are retried, through the outage.

use std::time::{Duration, Instant};

use crate::harness::{Creator, RECOVERY, Scenario, logs};
use crate::support::cluster::SERIAL;
use crate::verdict::{decided, writes};

/// How long the apiserver stays down.
const OUTAGE: Duration = Duration::from_secs(15);

#[tokio::test]
async fn csrs_created_around_an_apiserver_outage_are_all_decided_after_it_returns() {
    outage(false).await;
}

#[tokio::test]
async fn csrs_read_before_their_decision_around_an_apiserver_outage_are_all_decided_after_it_returns() {
    outage(true).await;
}

/// Stops the apiserver for [`OUTAGE`] while CSRs keep coming to one replica, which reads every
/// serving CSR before deciding it when `read`; every CSR must be decided, each once, after it
/// returns.
async fn outage(read: bool) {
    let _serial = SERIAL.lock().await;
    let extra: &[&str] = if read { &["--cache-requests-below=0"] } else { &[] };
    let Scenario { cp, admin, lease_name: _, lease, replicas, leader: _, nodes } = Scenario::start_with(1, extra).await;

    // Created before the outage, and during it: those wait for the apiserver and are created the
    // moment it is back.
    let creator = Creator::start(&nodes, "outage", 3, None);
    tokio::time::sleep(Duration::from_secs(4)).await;
    cp.stop_apiserver().await.unwrap();
    let stopped = Instant::now();
    tokio::time::sleep(OUTAGE).await;
    cp.start_apiserver().await.unwrap();
    let back = Instant::now();
    println!("apiserver down for {:.1} s (start included)", (back - stopped).as_secs_f64());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let created = creator.stop().await;

    let report = decided(&admin, "apiserver outage", &created, back, "the apiserver's return", RECOVERY).await;
    let writes = writes(&replicas, &lease);
    report.assert_within(RECOVERY, || logs(&replicas));
    writes.assert(report.decided());
    let (reads, _) = replicas[0].proxy.csr_reads();
    assert_eq!(reads > 0, read, "{reads} CSRs read from the apiserver");
}
