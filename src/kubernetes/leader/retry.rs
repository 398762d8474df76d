//! How long the election waits after the apiserver refused or failed a renewal or an acquisition:
//! the retry period, or the wait the apiserver named (a 429's `Retry-After`, under API Priority
//! and Fairness) when that is longer; but a holder never waits past the last retry period before
//! its Lease expires, so it tries once more while the Lease is still its own. The fence closes on
//! its own when a wait outlasts the renew deadline: writes stop, which is safe.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use kube_lease_manager::LeaseManagerError;

use super::fence::WriteFence;
use crate::kubernetes::retry_after;

/// The wait before the election tries again after `error`, with `retry_period` between its
/// attempts, a Lease of `lease_duration`, and `fence` telling whether and when this replica last
/// renewed it.
pub(super) fn wait_after(
    error: &LeaseManagerError,
    retry_period: Duration,
    lease_duration: Duration,
    fence: &WriteFence,
    now: SystemTime,
) -> Duration {
    let told = match error {
        LeaseManagerError::KubeError(kube::Error::Api(status)) => retry_after::told(status),
        _ => None,
    };
    let holding = fence.holding.load(Ordering::Acquire);
    let expires_in = (*fence.renewed()).filter(|_| holding).and_then(|renewed| {
        let expiry = renewed.checked_add(lease_duration)?;
        expiry.duration_since(now).ok()
    });
    bounded(told, retry_period, expires_in)
}

/// `told` when longer than `retry_period`, else `retry_period`; when the Lease held expires in
/// `expires_in`, at most until one retry period before then (never less than a retry period).
fn bounded(told: Option<Duration>, retry_period: Duration, expires_in: Option<Duration>) -> Duration {
    let wait = told.map_or(retry_period, |told| told.max(retry_period));
    match expires_in {
        Some(left) => wait.min(left.saturating_sub(retry_period).max(retry_period)),
        None => wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_wait_named_longer_than_the_retry_period_is_waited() {
        assert_eq!(bounded(None, SECOND, None), SECOND);
        assert_eq!(bounded(Some(SECOND / 2), SECOND, None), SECOND);
        assert_eq!(bounded(Some(5 * SECOND), SECOND, None), 5 * SECOND);
        assert_eq!(bounded(Some(5 * SECOND), SECOND, Some(9 * SECOND)), 5 * SECOND);
    }

    #[test]
    fn a_holder_tries_again_a_retry_period_before_its_lease_expires_whatever_it_was_told() {
        assert_eq!(bounded(Some(60 * SECOND), SECOND, Some(9 * SECOND)), 8 * SECOND);
        assert_eq!(bounded(Some(60 * SECOND), SECOND, Some(SECOND / 2)), SECOND);
        assert_eq!(bounded(None, 2 * SECOND, Some(SECOND)), 2 * SECOND, "never sooner than the retry period");
    }

    #[test]
    fn the_lease_left_counts_only_while_holding_it() {
        let fence = WriteFence::new("me".to_owned(), 3 * SECOND);
        let now = SystemTime::now();
        *fence.renewed() = Some(now);
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 429, "details": {"retryAfterSeconds": 60},
        }))
        .unwrap();
        let error = LeaseManagerError::KubeError(kube::Error::Api(Box::new(status)));
        assert_eq!(wait_after(&error, SECOND, 10 * SECOND, &fence, now), 60 * SECOND, "not holding: told");
        fence.holding.store(true, Ordering::Release);
        assert_eq!(wait_after(&error, SECOND, 10 * SECOND, &fence, now), 9 * SECOND, "holding: before it expires");
        let other = LeaseManagerError::InconsistentState(String::new());
        assert_eq!(wait_after(&other, SECOND, 10 * SECOND, &fence, now), SECOND, "nothing told: the retry period");
    }
}
