//! An apiserver shedding load during a burst: for [`THROTTLED`], the reconcile's requests (CSR
//! reads by name, approval writes) answered `429 Too Many Requests` with `Retry-After`, as
//! kube-apiserver's priority-and-fairness and inflight filters answer (watches, the Lease and
//! Events pass: `upkeep.rs` sheds those). Every CSR is decided once
//! within [`RECOVERY`] of its end, no request comes back sooner than the `Retry-After` its path
//! got, the requests stay bounded (no hot loop), and the replica stays ready and keeps the Lease
//! (never expired, never another holder).

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use testenv::Reconciling;

use crate::harness::{RECOVERY, Scenario, burst, logs};
use crate::support::cluster::SERIAL;
use crate::verdict::{decided, lease_kept, writes};

/// The `Retry-After` of every 429, in seconds.
const RETRY_AFTER: u32 = 2;
/// How long the reconcile's requests are answered 429.
const THROTTLED: Duration = Duration::from_secs(8);
/// CSRs in the burst, created over its first 2 s.
const CSRS: usize = 24;
/// Requests of one path allowed: one per `Retry-After` while throttled, one more straddling its
/// end, and the one that passes.
const PER_PATH: usize = (THROTTLED.as_secs() / RETRY_AFTER as u64) as usize + 2;

/// Which of the reconcile's requests meet the 429s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shed {
    /// The approval writes (the cache keeps every request: nothing is read by name).
    Writes,
    /// The reads by name (`--cache-requests-below=0`: every serving CSR is read before it is
    /// decided, and its read passes only once the 429s end).
    Reads,
}

#[tokio::test]
async fn approval_writes_answered_429_are_sent_again_only_after_retry_after_and_decide_every_csr_once() {
    shed(Shed::Writes).await;
}

#[tokio::test]
async fn reads_answered_429_are_sent_again_only_after_retry_after_and_decide_every_csr_once() {
    shed(Shed::Reads).await;
}

/// Answers the reconcile's requests 429 for [`THROTTLED`] while a burst of CSRs is created, then
/// checks the decisions, the requests' times and count, readiness and the Lease.
async fn shed(shed: Shed) {
    let _serial = SERIAL.lock().await;
    let extra: &[&str] = if shed == Shed::Reads { &["--cache-requests-below=0"] } else { &[] };
    let Scenario { cp: _cp, admin, lease_name: _, lease, replicas, leader, nodes } =
        Scenario::start_with(1, extra).await;
    let replica = &replicas[leader];
    replica.proxy.throttle(Some(RETRY_AFTER));
    let (throttling, from) = (Instant::now(), SystemTime::now());
    let unready = async {
        while replica.approver.ready().await {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let run = async {
        let created = burst(&nodes, "throttled", CSRS, 12).await;
        tokio::time::sleep_until((throttling + THROTTLED).into()).await;
        replica.proxy.throttle(None);
        let passing = Instant::now();
        let scenario = format!("{shed:?} answered 429 with Retry-After");
        let report = decided(&admin, &scenario, &created, passing, "the 429s ended", RECOVERY).await;
        (created, report)
    };
    let (created, report) = tokio::select! {
        () = unready => panic!("/readyz failed during the burst:\n{}", logs(&replicas)),
        done = run => done,
    };
    let kept = lease_kept(&lease, &replica.name, from, SystemTime::now());
    let writes = writes(&replicas, &lease);
    let seen = replica.proxy.reconciling();
    let by_path = by_path(&seen);
    let throttled = seen.iter().filter(|request| request.throttled.is_some()).count();
    println!(
        "reconcile requests: {} for {} CSRs on {} paths, {throttled} answered 429; most on one path: {}",
        seen.len(),
        created.len(),
        by_path.len(),
        by_path.values().map(Vec::len).max().unwrap_or(0)
    );
    report.assert_within(RECOVERY, || logs(&replicas));
    writes.assert(report.decided());
    assert!(throttled >= created.len(), "{throttled} requests answered 429 for {} CSRs", created.len());
    if shed == Shed::Writes {
        assert!(writes.injected >= created.len(), "{} approval writes answered 429", writes.injected);
    }
    let busiest = by_path.iter().max_by_key(|(_, requests)| requests.len());
    if let Some((path, requests)) = busiest {
        assert!(requests.len() <= PER_PATH, "{} requests of {path}: a hot loop", requests.len());
    }
    let reads = by_path.keys().filter(|path| !path.ends_with("/approval")).count();
    let expected = if shed == Shed::Reads { created.len() } else { 0 };
    assert_eq!(reads, expected, "CSRs read by name before they were decided");
    assert!(seen.len() <= 2 * PER_PATH * created.len(), "{} requests for {} CSRs", seen.len(), created.len());
    let early = sooner_than_told(&by_path);
    assert!(
        early.is_empty(),
        "{} retries sooner than Retry-After, e.g. {:?}",
        early.len(),
        &early[..early.len().min(5)]
    );
    if let Err(lapse) = kept {
        panic!("{} did not keep its Lease through the 429s: {lapse}\n{}", replica.name, logs(&replicas));
    }
}

/// The requests of each path, in order of arrival.
fn by_path(seen: &[Reconciling]) -> BTreeMap<&str, Vec<&Reconciling>> {
    let mut by_path: BTreeMap<&str, Vec<&Reconciling>> = BTreeMap::new();
    for request in seen {
        by_path.entry(&request.path).or_default().push(request);
    }
    by_path
}

/// Every request that came sooner after a 429 of its path than that 429's `Retry-After`: the path,
/// the wait told and the wait seen.
fn sooner_than_told(by_path: &BTreeMap<&str, Vec<&Reconciling>>) -> Vec<(String, u32, Duration)> {
    let mut early = Vec::new();
    for (path, requests) in by_path {
        for pair in requests.windows(2) {
            let Some(told) = pair[0].throttled else { continue };
            let waited = pair[1].at.duration_since(pair[0].at).unwrap_or_default();
            if waited < Duration::from_secs(told.into()) {
                early.push(((*path).to_owned(), told, waited));
            }
        }
    }
    early
}
