//! Every watch of the approver (CSRs, the Lease, Machines, Nodes, the `default/kubernetes`
//! Service and its EndpointSlices) as one kind of stream: kube-runtime's watcher with a short
//! retry backoff, so every watch is back within seconds of the apiserver's return.
//! kube-runtime's default backoff grows to 30 s during an outage, and the expected 410 after it
//! counts as one more failure.

use std::fmt::Debug;
use std::time::Duration;

use futures::Stream;
use kube::runtime::utils::{Backoff, StreamBackoff};
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// The watch of `api` with `config`, retried after [`WatchBackoff`]'s delays.
pub fn stream<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    StreamBackoff::new(watcher::watcher(api, config), WatchBackoff::default())
}

/// The first delay after the watch failed; each further failure doubles it...
const WATCH_RETRY_BASE: Duration = Duration::from_millis(100);
/// ... up to this: a relist starts within two seconds of the apiserver answering again (a 410
/// after an outage costs one short delay, not a grown one).
const WATCH_RETRY_CAP: Duration = Duration::from_secs(2);

/// The backoff of every watch of the approver: doubling from [`WATCH_RETRY_BASE`] to [`WATCH_RETRY_CAP`], reset by every
/// event that arrives.
#[derive(Debug, Default)]
pub struct WatchBackoff {
    failures: u32,
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = WATCH_RETRY_BASE.saturating_mul(1 << self.failures.min(16)).min(WATCH_RETRY_CAP);
        self.failures = self.failures.saturating_add(1);
        Some(delay)
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
        assert_eq!(backoff.next(), Some(WATCH_RETRY_CAP));
        backoff.reset();
        assert_eq!(backoff.next(), Some(WATCH_RETRY_BASE));
    }
}
