//! Every watch of the approver (CSRs, the Lease, Machines, Nodes, the `default/kubernetes`
//! Service and its EndpointSlices) as one kind of stream: kube-runtime's watcher with a short
//! retry backoff, so every watch is back within seconds of the apiserver's return.
//! kube-runtime's default backoff grows to 30 s during an outage, and the expected 410 after it
//! counts as one more failure. A watch's start, restart or list answered with a wait to come back
//! after (a 429's `Retry-After`) is not tried again sooner than that wait.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::utils::{Backoff, StreamBackoff};
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::kubernetes::retry_after;

/// The watch of `api` with `config`, retried after [`WatchBackoff`]'s delays.
pub fn stream<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let backoff = WatchBackoff::default();
    let told = backoff.told.clone();
    // The backoff is asked for its delay right after an error passes here.
    let watch = watcher::watcher(api, config).inspect(move |item| note(&told, item));
    StreamBackoff::new(watch, backoff)
}

/// Keeps in `told` the wait an error `item` names, in milliseconds (0 for none), for the delay
/// [`WatchBackoff`] gives next.
fn note<T>(told: &AtomicU64, item: &watcher::Result<T>) {
    if let Err(error) = item {
        let millis = wait_named(error).map_or(0, |wait| wait.as_millis().try_into().unwrap_or(u64::MAX));
        told.store(millis, Ordering::Release);
    }
}

/// The wait the apiserver named with a watch's `error` ([`retry_after::told`]), if any.
fn wait_named(error: &watcher::Error) -> Option<Duration> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => retry_after::told(status),
        _ => None,
    }
}

/// A capped doubling backoff: `first` for the first attempt, doubled for each further one, at
/// most `cap`. The shape of the watches' retries and of the controller's retries of an evaluation,
/// a failed write or read, and a conflict, each with its own `first` and `cap` (the Lease is retried
/// every `--retry-period`, a reconcile that panicked after a fixed delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Doubling {
    /// The delay before the first retry.
    pub first: Duration,
    /// The longest delay.
    pub cap: Duration,
}

impl Doubling {
    /// The delay before attempt number `attempt` (from 1; 0 counts as 1): at most 15 doublings.
    pub(crate) fn delay(self, attempt: u32) -> Duration {
        self.first.saturating_mul(1 << (attempt.clamp(1, 16) - 1)).min(self.cap)
    }
}

/// The watches' backoff: from 100 ms up to 2 s, so a relist starts within two seconds of the
/// apiserver answering again (a 410 after an outage costs one short delay, not a grown one).
const WATCH_RETRY: Doubling = Doubling { first: Duration::from_millis(100), cap: Duration::from_secs(2) };

/// The backoff of every watch of the approver: [`WATCH_RETRY`], reset by every event that
/// arrives, or the wait the last error named when that is longer.
#[derive(Debug, Default)]
pub struct WatchBackoff {
    failures: u32,
    /// The wait the last error named, in milliseconds (0 for none), taken by the next delay.
    told: Arc<AtomicU64>,
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        let told = Duration::from_millis(self.told.swap(0, Ordering::AcqRel));
        Some(WATCH_RETRY.delay(self.failures).max(told))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_backoff_doubles_from_100_ms_to_2_s_and_resets_on_an_event() {
        let mut backoff = WatchBackoff::default();
        let delays: Vec<u128> = backoff.by_ref().take(7).map(|d| d.as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 2000, 2000]);
        backoff.failures = u32::MAX;
        assert_eq!(backoff.next(), Some(WATCH_RETRY.cap));
        backoff.reset();
        assert_eq!(backoff.next(), Some(WATCH_RETRY.first));
    }

    /// A watch error carrying a Status of `code` naming `seconds` to wait.
    fn named(code: u16, seconds: i32) -> watcher::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": seconds},
        }))
        .unwrap();
        watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn a_watch_answered_429_is_not_restarted_before_its_retry_after() {
        let mut backoff = WatchBackoff::default();
        let told = backoff.told.clone();
        let mut delays = Vec::new();
        for error in [named(429, 3), named(429, 0), named(500, 0)] {
            note::<()>(&told, &Err(error));
            delays.push(backoff.next().unwrap().as_millis());
        }
        assert_eq!(delays, [3000, 1000, 400], "a 429's wait, the shortest for a 429 naming none, then the backoff");
        assert_eq!(backoff.next().unwrap().as_millis(), 800, "a wait is taken once");
    }

    #[test]
    fn a_doubling_backoff_doubles_from_its_first_delay_up_to_its_cap() {
        let backoff = Doubling { first: Duration::from_secs(2), cap: Duration::from_secs(60) };
        let delays: Vec<u64> = (1..=8).map(|attempt| backoff.delay(attempt).as_secs()).collect();
        assert_eq!(delays, [2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff.delay(0), backoff.first);
        assert_eq!(backoff.delay(u32::MAX), backoff.cap);
        let long = Doubling { first: Duration::from_nanos(1), cap: Duration::MAX };
        assert_eq!(long.delay(u32::MAX), Duration::from_nanos(1 << 15), "at most 15 doublings");
    }
}
