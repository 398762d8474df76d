//! The CSR watch down while CSRs are created, then told its resourceVersion expired (410), and its
//! relist (a streaming list) slow to complete: its objects arrive at once, the bookmark ending them
//! only [`RELIST_DELAY`] later, as when a relist of many CSRs takes a while. Once with room for
//! every request in the cache, once with the relist passing `--cache-requests-below`.

use std::time::{Duration, Instant};

use testenv::Block;

use crate::harness::{RECOVERY, Scenario, burst, logs};
use crate::support::cluster::SERIAL;
use crate::verdict::{decided, writes};

/// How long the bookmark ending the relist's initial events is held back: long enough for the
/// objects that came before it to be reconciled, were they handed to the controller as they came
/// (before the cache holds them).
const RELIST_DELAY: Duration = Duration::from_secs(3);

#[tokio::test]
async fn csrs_created_while_the_watch_is_down_are_decided_after_a_410_relist() {
    let reads = relist_after_410(&[]).await;
    assert_eq!(reads, 0, "CSRs read from the apiserver with room for every request in the cache");
}

/// The same with room for 10 requests in the cache (`--cache-requests-below=10`): the relist
/// passes it, so the CSRs it lists first keep their requests and the others are read when decided.
#[tokio::test]
async fn csrs_a_410_relist_lists_past_the_cache_of_requests_are_read_and_decided() {
    let reads = relist_after_410(&["--cache-requests-below=10"]).await;
    assert!(reads > 0, "no CSR listed past the cache of requests was read");
}

/// Cuts the watches of one replica (with `extra` arguments) while CSRs are created, answers its
/// next watches 410 and slows the relist; checks that every CSR is decided once after it; returns
/// how many CSRs the replica read from the apiserver.
async fn relist_after_410(extra: &[&str]) -> u64 {
    let _serial = SERIAL.lock().await;
    let Scenario { cp: _cp, admin, lease_name: _, lease, replicas, leader: _, nodes } =
        Scenario::start_with(1, extra).await;
    let proxy = &replicas[0].proxy;

    let mut created = burst(&nodes, "watched", 4, 4).await;
    decided(&admin, "warm-up", &created, Instant::now(), "creation", RECOVERY)
        .await
        .assert_within(RECOVERY, || logs(&replicas));

    // The watches break, and their new requests (from the last resourceVersion seen) are held.
    let before = proxy.watch_requests();
    proxy.block(Block::HangWatches);
    proxy.cut_watches();
    created.extend(burst(&nodes, "unwatched", 20, 4).await);
    let held = proxy.watch_requests() - before;
    assert!(held > 0, "the replica did not watch again after its watches were cut");

    // They go on, and each is told its resourceVersion is too old: the replica must list again,
    // and the CSR watch's relist (a streaming list) completes only RELIST_DELAY after its objects.
    proxy.expire_watches(true);
    proxy.slow_initial_events(Some(RELIST_DELAY));
    proxy.block(Block::Off);
    let released = Instant::now();
    while proxy.expired_watches() < held && released.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.expire_watches(false);
    let expired = proxy.expired_watches();
    while proxy.held_initial_events_ends() == 0 && released.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.slow_initial_events(None);
    let slowed = proxy.held_initial_events_ends();
    println!("{held} watch requests held, {expired} answered 410, {slowed} relists completed {RELIST_DELAY:?} late");
    assert!(expired > 0, "no watch was expired");
    assert!(slowed > 0, "the CSR watch did not relist with a streaming list after the 410");

    let report = decided(&admin, "watch expired (410)", &created, released, "the 410", RECOVERY).await;
    let writes = writes(&replicas, &lease);
    report.assert_within(RECOVERY, || logs(&replicas));
    writes.assert(report.decided());
    let (reads, _) = proxy.csr_reads();
    println!("CSR reads: {reads}");
    reads
}
