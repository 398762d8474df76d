//! An apiserver shedding the leader's upkeep during a burst: for [`THROTTLED`], every watch start,
//! restart and list of the leader, every request of its Lease (reads and renewals) and every Event
//! it creates is answered `429 Too Many Requests` with `Retry-After` (its reconcile's requests
//! pass); its watches are cut a moment in, so each must start again through the 429s. Every CSR is
//! decided once within [`RECOVERY`] of the end; no watch, Lease or Event request comes back
//! sooner than the `Retry-After` its kind got; the requests stay bounded (no hot loop); the leader
//! stays ready and keeps its Lease: never expired, never another holder, though a standby, whose
//! requests pass, would take it as soon as it expired.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use testenv::Seen;

use crate::harness::{RECOVERY, Scenario, burst, logs};
use crate::support::cluster::SERIAL;
use crate::verdict::{decided, lease_kept, writes};

/// The `Retry-After` of every 429, in seconds.
const RETRY_AFTER: u32 = 2;
/// How long the upkeep's requests are answered 429: longer than `--renew-deadline` (3 s), shorter
/// than `--lease-duration` (10 s).
const THROTTLED: Duration = Duration::from_secs(5);
/// The latest the leader's watches are cut, from the start of the 429s. They are cut as soon as an
/// Event has met a 429: the burst's first CSRs are seen on the live watch and decided, so their
/// Events meet the 429s too, however slowly the CSRs come.
const CUT: Duration = Duration::from_secs(3);
/// CSRs in the burst, created over its first 2 s.
const CSRS: usize = 24;
/// 429s allowed of one kind of request: one per `Retry-After` while throttled, one more straddling
/// its end.
const PER_KIND: usize = (THROTTLED.as_secs() / RETRY_AFTER as u64) as usize + 2;
/// The Events the approver creates at once (its publisher's concurrency): each may meet a 429
/// before the first 429 reaches it.
const EVENTS_AT_ONCE: usize = 4;
/// A request that arrives this soon after a 429 of its kind was sent before that 429 reached the
/// client (Events are created a few at once).
const IN_FLIGHT: Duration = Duration::from_millis(100);

#[tokio::test]
async fn watches_the_lease_and_events_answered_429_wait_their_retry_after_and_the_leader_keeps_its_lease() {
    let _serial = SERIAL.lock().await;
    let Scenario { cp: _cp, admin, lease_name: _, lease, replicas, leader, nodes } =
        Scenario::start_with(2, &["--events=all"]).await;
    let replica = &replicas[leader];
    let before = replica.proxy.requests().len();
    replica.proxy.throttle_upkeep(Some(RETRY_AFTER));
    let (throttling, from) = (Instant::now(), SystemTime::now());
    let unready = async {
        while replica.approver.ready().await {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let run = async {
        let cut = async {
            let event_throttled = || {
                let seen = replica.proxy.requests();
                seen[before..]
                    .iter()
                    .any(|r| r.throttled.is_some() && (r.verb(), r.resource().as_str()) == ("create", "events"))
            };
            while !event_throttled() && throttling.elapsed() < CUT {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            replica.proxy.cut_watches();
        };
        let (created, ()) = tokio::join!(burst(&nodes, "upkeep", CSRS, 12), cut);
        tokio::time::sleep_until((throttling + THROTTLED).into()).await;
        replica.proxy.throttle_upkeep(None);
        let passing = Instant::now();
        let scenario = "watches, the Lease and Events answered 429 with Retry-After";
        let report = decided(&admin, scenario, &created, passing, "the 429s ended", RECOVERY).await;
        (created, report)
    };
    let (created, report) = tokio::select! {
        () = unready => panic!("/readyz failed during the 429s:\n{}", logs(&replicas)),
        done = run => done,
    };
    let kept = lease_kept(&lease, &replica.name, from, SystemTime::now());
    let writes = writes(&replicas, &lease);
    let seen = &replica.proxy.requests()[before..];
    let kinds = by_kind(seen);
    let throttled: BTreeMap<&str, usize> = kinds
        .iter()
        .map(|(kind, requests)| (kind.as_str(), requests.iter().filter(|request| request.throttled.is_some()).count()))
        .collect();
    println!("{} requests of the leader for {} CSRs, 429s by kind: {throttled:?}", seen.len(), created.len());
    report.assert_within(RECOVERY, || logs(&replicas));
    writes.assert(report.decided());
    for kind in ["watch certificatesigningrequests", "lease", "create events"] {
        assert!(throttled.get(kind).is_some_and(|count| *count > 0), "no 429 answered to {kind}: {throttled:?}");
    }
    for (kind, count) in &throttled {
        let allowed = if *kind == "create events" { EVENTS_AT_ONCE * PER_KIND } else { PER_KIND };
        assert!(*count <= allowed, "{count} requests of {kind} answered 429, more than {allowed}: a hot loop");
    }
    let early = sooner_than_told(&kinds);
    assert!(
        early.is_empty(),
        "{} requests sooner than Retry-After, e.g. {:?}",
        early.len(),
        &early[..early.len().min(5)]
    );
    if let Err(lapse) = kept {
        panic!("the leader did not keep its Lease through the 429s: {lapse}\n{}", logs(&replicas));
    }
}

/// The upkeep's requests of `seen` by kind, in order of arrival: the Lease's (`lease`), the
/// Events' creates (`create events`), and each watched resource's watches and lists together
/// (`watch <resource>`: a list is a watch's start too; the approver watches each resource once);
/// the other requests are left out.
fn by_kind(seen: &[Seen]) -> BTreeMap<String, Vec<&Seen>> {
    let mut kinds: BTreeMap<String, Vec<&Seen>> = BTreeMap::new();
    for request in seen {
        let kind = match (request.verb(), request.resource().as_str()) {
            (_, "leases") if !request.watch => "lease".to_owned(),
            ("create", "events") => "create events".to_owned(),
            ("watch" | "list", resource) => format!("watch {resource}"),
            _ => continue,
        };
        kinds.entry(kind).or_default().push(request);
    }
    kinds
}

/// Every request that came after a 429 of its kind sooner than that 429's `Retry-After`, but for
/// those sent while the 429 was on its way ([`IN_FLIGHT`]): the kind, the wait told and the wait
/// seen.
fn sooner_than_told(kinds: &BTreeMap<String, Vec<&Seen>>) -> Vec<(String, u32, Duration)> {
    let mut early = Vec::new();
    for (kind, requests) in kinds {
        for (i, first) in requests.iter().enumerate() {
            let Some(told) = first.throttled else { continue };
            for later in &requests[i + 1..] {
                let waited = later.at.duration_since(first.at).unwrap_or_default();
                if waited > IN_FLIGHT && waited < Duration::from_secs(told.into()) {
                    early.push((kind.clone(), told, waited));
                }
            }
        }
    }
    early
}
