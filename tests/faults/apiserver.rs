//! kube-apiserver stopped for 15 s while CSRs keep coming.

use std::time::{Duration, Instant};

use crate::harness::{Creator, RECOVERY, Scenario, logs};
use crate::support::cluster::SERIAL;
use crate::verdict::{decided, writes};

/// How long the apiserver stays down.
const OUTAGE: Duration = Duration::from_secs(15);

#[tokio::test]
async fn csrs_created_around_an_apiserver_outage_are_all_decided_after_it_returns() {
    let _serial = SERIAL.lock().await;
    let Scenario { cp, admin, lease_name: _, lease, replicas, leader: _, nodes } = Scenario::start(1).await;

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
}
