//! `--kube-api-qps` and `--kube-api-burst`: a burst of CSRs decided by a replica whose client may
//! send 2 requests a second, 2 at once; its approval writes, a share of everything it sends, come
//! no faster than the budget allows.

use std::time::{Duration, Instant};

use crate::harness::{Scenario, burst, logs};
use crate::support::cluster::SERIAL;
use crate::verdict::{decided, writes};

/// `--kube-api-qps`.
const QPS: f64 = 2.0;
/// `--kube-api-burst`.
const BURST: usize = 2;
/// CSRs in the burst.
const CSRS: usize = 10;

#[tokio::test]
async fn a_client_with_a_request_budget_sends_no_faster_than_it_allows() {
    let _serial = SERIAL.lock().await;
    let budget = [format!("--kube-api-qps={QPS}"), format!("--kube-api-burst={BURST}")];
    let budget: Vec<&str> = budget.iter().map(String::as_str).collect();
    let Scenario { cp: _cp, admin, lease_name: _, lease, replicas, leader: _, nodes } =
        Scenario::start_with(1, &budget).await;
    let created = burst(&nodes, "budget", CSRS, 20).await;
    let bound = Duration::from_secs_f64(2.0 * CSRS as f64 / QPS) + Duration::from_secs(10);
    let report = decided(&admin, "a request budget", &created, Instant::now(), "the burst", bound).await;
    let writes = writes(&replicas, &lease);
    report.assert_within(bound, || logs(&replicas));
    writes.assert(report.decided());
    let mut approvals: Vec<_> = replicas[0].proxy.approval_writes().into_iter().map(|write| write.at).collect();
    approvals.sort();
    let (Some(first), Some(last)) = (approvals.first(), approvals.last()) else { panic!("no approval write") };
    let span = last.duration_since(*first).unwrap_or_default();
    // A bucket of BURST tokens refilled at QPS lets n requests through no faster than (n - BURST) / QPS.
    let least = Duration::from_secs_f64((approvals.len() - BURST) as f64 / QPS * 0.95);
    println!(
        "{} approval writes over {:.2} s (at least {:.2} s)",
        approvals.len(),
        span.as_secs_f64(),
        least.as_secs_f64()
    );
    assert!(span >= least, "{} approval writes within {span:?}: faster than {QPS}/s", approvals.len());
}
